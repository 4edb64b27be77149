"""The engine host's batching: requests from every instance merged into engine batches.

Each instance hands over the batch Triton's dynamic batcher made for it (a message).
With a worker free and nothing queued (and no wait asked for), the message is served at
once in the thread that received it: no hand-over at light load. Otherwise it queues,
and the host's workers take waiting messages first come, first served, as many as fit
the model's largest batch (and alike: the same inputs in GPU memory), waiting at most
``batch_wait_us`` for more while the batch is short, and serve them together on the
instance's pool (``ModelInstance.serve``: the process file's stages, the planner, the
contexts on their own streams). A message is never split: Triton already bounded it by
max_batch_size. With every worker busy, messages queue and the next free worker merges
them, so merging costs no wait under load.

Each message's answers are collected by a ``Reply`` and handed back in one piece once
every request has one (its outputs or its error).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trtpool.engine.answer import Responder
from trtpool.errors import ContextFailure, Overloaded
from trtpool.process.file import Tensors

log = logging.getLogger("trtpool")

Answer = dict[str, Any] | Exception
Serve = Callable[[list[Tensors], list[Responder]], None]


class Reply:
    """One message's answers: hands them to `deliver` once each request has one."""

    def __init__(self, count: int, deliver: Callable[[list[Answer]], None]) -> None:
        self._answers: list[Answer | None] = [None] * count
        self._missing = count
        self._lock = threading.Lock()
        self._deliver = deliver
        if count == 0:
            deliver([])

    def responders(self) -> list[Responder]:
        return [_Member(self, index) for index in range(len(self._answers))]

    def arrived(self, index: int, answer: Answer) -> None:
        with self._lock:
            if self._answers[index] is not None:
                return  # a responder answers once
            self._answers[index] = answer
            self._missing -= 1
            if self._missing:
                return
        self._deliver(self._answers)  # type: ignore[arg-type]


class _Member:
    def __init__(self, reply: Reply, index: int) -> None:
        self.reply = reply
        self.index = index

    def send(self, outputs: dict[str, Any]) -> None:
        self.reply.arrived(self.index, outputs)

    def fail(self, error: Exception) -> None:
        self.reply.arrived(self.index, error)

    def cancelled(self) -> bool:
        return False


@dataclass(eq=False)
class _Message:
    requests: list[Tensors]
    responders: list[Responder]
    rows: int
    on_gpu: frozenset[str]  # the inputs that came in GPU memory: only messages alike share a batch
    arrived_ns: int = field(default_factory=time.monotonic_ns)


class Merger:
    """Messages from every instance, merged into batches of at most `max_rows` rows."""

    def __init__(self, serve: Serve, workers: int, max_rows: int, batch_wait_us: int) -> None:
        self._serve = serve
        self.max_rows = max(1, max_rows)
        self._wait_ns = batch_wait_us * 1000
        self._limit = workers  # batches served at once, by the workers or inline
        self._queue: deque[_Message] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self.merged: Counter[int] = Counter()  # messages per merged batch -> batches
        self._active = 0
        self._busy_since = 0
        self.busy_ns = 0  # wall time with at least one batch being served
        self._workers = [
            threading.Thread(target=self._work, name=f"trtpool-host-{i}", daemon=True) for i in range(workers)
        ]
        for worker in self._workers:
            worker.start()

    def submit(
        self, requests: list[Tensors], responders: list[Responder], rows: int, on_gpu: frozenset[str] = frozenset()
    ) -> None:
        """Serve one instance's batch: here and now when a worker is free and none waits, else queued.
        `on_gpu`: the inputs it holds in GPU memory (a batch's input is all on one side)."""
        message = _Message(requests, responders, rows, on_gpu)
        with self._ready:
            if self._closed:
                closed = True
            elif not self._queue and not self._wait_ns and self._active < self._limit:
                closed = False
                self._start([message])
            else:
                self._queue.append(message)
                self._ready.notify()
                return
        if closed:
            for responder in responders:
                responder.fail(Overloaded("the model is being unloaded; retry"))
        else:
            self._serve_messages([message])

    @property
    def depth(self) -> int:
        """Requests waiting for a worker."""
        with self._ready:
            return sum(len(m.requests) for m in self._queue)

    def busy_ns_so_far(self) -> int:
        """busy_ns, counting the batches running now up to this moment."""
        with self._ready:
            running = time.monotonic_ns() - self._busy_since if self._active else 0
            return self.busy_ns + running

    def _take(self) -> list[_Message]:
        with self._ready:
            while True:
                if not self._queue:
                    if self._closed:
                        return []
                    self._ready.wait()
                    continue
                if self._active >= self._limit:  # as many batches run as may (some inline)
                    self._ready.wait()
                    continue
                waited = time.monotonic_ns() - self._queue[0].arrived_ns
                short = sum(m.rows for m in self._queue) < self.max_rows
                if short and waited < self._wait_ns and not self._closed:
                    self._ready.wait((self._wait_ns - waited) / 1e9)
                    continue
                taken = [self._queue.popleft()]
                rows = taken[0].rows
                for message in list(self._queue):
                    if rows + message.rows > self.max_rows:
                        break
                    if message.on_gpu == taken[0].on_gpu:
                        rows += message.rows
                        taken.append(message)
                        self._queue.remove(message)
                self._start(taken)
                return taken

    def _start(self, messages: list[_Message]) -> None:
        """Count a batch as started (with the lock held)."""
        self.merged[len(messages)] += 1
        if not self._active:
            self._busy_since = time.monotonic_ns()
        self._active += 1

    def _work(self) -> None:
        while messages := self._take():
            self._serve_messages(messages)

    def _serve_messages(self, messages: list[_Message]) -> None:
        requests = [r for m in messages for r in m.requests]
        responders = [r for m in messages for r in m.responders]
        try:
            self._serve(requests, responders)
        except Exception as exc:  # trtpool's own fault: answer the batch, keep the worker
            log.exception("engine host: serving a merged batch of %d request(s)", len(requests))
            for responder in responders:
                responder.fail(ContextFailure(f"execution failed: {type(exc).__name__}: {exc}"))
        finally:
            with self._ready:
                self._active -= 1
                if not self._active:
                    self.busy_ns += time.monotonic_ns() - self._busy_since
                if self._queue:  # a worker is woken only for work: one woken for none costs the GIL twice
                    self._ready.notify()

    def close(self) -> None:
        """Serve what waits, then stop the workers."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        for worker in self._workers:
            worker.join(timeout=30)
