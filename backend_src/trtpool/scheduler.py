"""The decoupled mode's queue and workers: several batches in flight per instance.

A non-decoupled Python model runs one execute at a time per instance, so only
one batch would ever be in flight however many contexts the pool holds. In
decoupled mode execute() only enqueues; one worker thread per context takes
up to the engine's batch limit of waiting requests with the same shape
(waiting at most ``batch_wait_us`` to fill the batch), runs them, and answers
each request through its own responder.

Cancellation: asking whether a request was cancelled is a round trip from the
stub to the server (the Python backend's response sender), one per request,
serial with everything else the stub does; asking every request cost a small
model 3-11% of its decoupled throughput on the CPU (BENCHMARKS.md). So only
requests that waited in the queue at least ``cancel_check_after_us`` are asked
before they run: those sat in a backlog, where dropping cancelled work pays;
one taken at once is run, as it would be had the client cancelled a moment
later.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from trtpool.errors import InvalidInput, Overloaded
from trtpool.serving import BatchRunner, Item, shape_key
from trtpool.validate import check_request

log = logging.getLogger("trtpool")


class Responder(Protocol):
    """Answers one request exactly once (the final response)."""

    def send(self, outputs: dict[str, np.ndarray]) -> None: ...
    def fail(self, error: Exception) -> None: ...
    def cancelled(self) -> bool: ...
    def drop(self) -> None: ...


@dataclass
class Waiting:
    item: Item
    responder: Responder
    key: tuple
    enqueued_ns: int = field(default_factory=time.monotonic_ns)


class Scheduler:
    def __init__(self, runner: BatchRunner, max_queue: int, batch_wait_us: int, cancel_check_after_us: int,
                 on_wait: Callable[[int], None] | None = None,  # the batch's total queue wait, ns
                 on_done: Callable[[], None] | None = None) -> None:
        self.runner = runner
        self.max_queue = max_queue
        self.batch_wait_s = batch_wait_us / 1e6
        self.cancel_check_after_ns = cancel_check_after_us * 1000
        self._on_wait = on_wait or (lambda ns: None)
        self._on_done = on_done or (lambda: None)
        self._queue: deque[Waiting] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._workers = [
            threading.Thread(target=self._work, name=f"trtpool-worker-{i}", daemon=True)
            for i in range(runner.pool.size)
        ]
        for worker in self._workers:
            worker.start()

    def submit(self, tensors: dict[str, np.ndarray], responder: Responder) -> None:
        """Queue one request, or answer it at once with its error."""
        try:
            shapes = check_request(self.runner.signature, tensors)
        except InvalidInput as exc:
            responder.fail(exc)
            return
        key = shape_key(shapes, self.runner.signature.batched)
        with self._ready:
            if len(self._queue) >= self.max_queue:
                responder.fail(Overloaded(
                    f"overloaded: {len(self._queue)} requests are waiting (max_queue_size "
                    f"{self.max_queue}); retry later"))
                return
            self._queue.append(Waiting(Item(0, tensors, shapes), responder, key))
            self._ready.notify()

    def _take_batch(self) -> list[Waiting]:
        """The oldest request plus queued ones of its shape, up to the batch limit."""
        with self._ready:
            while not self._queue and not self._closed:
                self._ready.wait()
            if not self._queue:
                return []
            first = self._queue.popleft()
            batch = [first]
            if not self.runner.signature.batched:
                return batch
            limit = self.runner.chunk_limit(first.item)
            size = first.item.batch
            deadline = time.monotonic() + self.batch_wait_s
            while size < limit:
                for waiting in list(self._queue):
                    if waiting.key == first.key and size + waiting.item.batch <= limit:
                        self._queue.remove(waiting)
                        batch.append(waiting)
                        size += waiting.item.batch
                remaining = deadline - time.monotonic()
                if size >= limit or remaining <= 0 or self._closed:
                    break
                self._ready.wait(remaining)
            return batch

    def _work(self) -> None:
        while True:
            batch = self._take_batch()
            if not batch:
                return
            now = time.monotonic_ns()
            live = []
            for position, waiting in enumerate(batch):
                if now - waiting.enqueued_ns >= self.cancel_check_after_ns and waiting.responder.cancelled():
                    waiting.responder.drop()  # cancelled before it ran
                    continue
                waiting.item.index = position
                live.append(waiting)
            if not live:
                continue
            self._on_wait(sum(now - waiting.enqueued_ns for waiting in live))
            try:
                self.runner.run_chunk(
                    [w.item for w in live],
                    lambda i, outputs: batch[i].responder.send(outputs),
                    lambda i, error: batch[i].responder.fail(error),
                )
            except Exception as exc:  # keep the worker alive whatever happens
                log.exception("decoupled worker")
                for waiting in live:
                    waiting.responder.fail(exc)
            self._on_done()

    def close(self) -> None:
        with self._ready:
            self._closed = True
            pending = list(self._queue)
            self._queue.clear()
            self._ready.notify_all()
        for waiting in pending:
            waiting.responder.fail(Overloaded("the model is being unloaded"))
        for worker in self._workers:
            worker.join(timeout=30)
