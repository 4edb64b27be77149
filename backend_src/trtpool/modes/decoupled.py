"""The decoupled mode's queue and workers: several batches in flight per instance.

execute() only enqueues; one worker per context takes up to a batch of waiting requests of one
shape (waiting at most ``batch_wait_us``), runs it and answers each request through its
responder. No request is ever left unanswered; requests that waited ``cancel_check_after_us``
are asked whether they were cancelled. Why and how: docs/design/decoupled-mode.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trtpool.engine.answer import Responder
from trtpool.engine.batching import BatchRunner, Item, shape_key
from trtpool.errors import Cancelled, ContextFailure, InvalidInput, Overloaded
from trtpool.gpu.device_tensors import keep_after_execute
from trtpool.instance import ModelInstance
from trtpool.model.validate import accept
from trtpool.triton.metrics import PoolMetrics
from trtpool.triton.pb_api import InferenceRequest, PbUtils
from trtpool.triton.requests import request_tensors, without_probes
from trtpool.triton.responders import SenderResponder

log = logging.getLogger("trtpool")

WATCHDOG_INTERVAL_S = 0.5


@dataclass(eq=False)  # identity only: a request record is never compared
class Waiting:
    item: Item
    enqueued_ns: int = field(default_factory=time.monotonic_ns)

    @property
    def batch(self) -> int:
        return self.item.batch

    @property
    def responder(self) -> Responder:
        return self.item.responder


class Scheduler:
    def __init__(
        self,
        runner: BatchRunner,
        max_queue: int,
        batch_wait_us: int,
        cancel_check_after_us: int,
        on_wait: Callable[[int], None] | None = None,  # the batch's total queue wait, ns
        on_done: Callable[[], None] | None = None,
        on_worker_lost: Callable[[], None] | None = None,
    ) -> None:
        self.runner = runner
        self.max_queue = max_queue
        self.batch_wait_s = batch_wait_us / 1e6
        self.cancel_check_after_ns = cancel_check_after_us * 1000
        self._on_wait = on_wait or (lambda ns: None)
        self._on_done = on_done or (lambda: None)
        self._on_worker_lost = on_worker_lost or (lambda: None)
        self._queues: dict[tuple, deque[Waiting]] = {}  # per shape key, oldest first
        self._waiting = 0
        self._ready = threading.Condition()
        self._closed = False
        self.workers = [self._new_worker(slot) for slot in range(runner.pool.size)]
        for worker in self.workers:
            worker.start()
        self._stop_watchdog = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="trtpool-watchdog", daemon=True)
        self._watchdog.start()

    def submit(self, tensors: dict[str, Any], responder: Responder) -> None:
        """Queue one request, or answer it at once with its error."""
        signature = self.runner.signature
        try:
            tensors, shapes = accept(signature, tensors)
        except InvalidInput as exc:
            responder.fail(exc)
            return
        with self._ready:
            if self._closed:
                refusal: Exception | None = Overloaded("the model is being unloaded; retry on another instance")
            elif self._waiting >= self.max_queue:
                refusal = Overloaded(
                    f"overloaded: {self._waiting} requests are waiting (max_queue_size {self.max_queue}); retry later"
                )
            else:
                refusal = None
                key = shape_key(shapes, signature.batched)
                self._queues.setdefault(key, deque()).append(Waiting(Item(responder, tensors, shapes)))
                self._waiting += 1
                self._ready.notify()
        if refusal is not None:
            responder.fail(refusal)

    # --- taking a batch -----------------------------------------------------------

    def _take_batch(self) -> list[Waiting]:
        """The oldest request plus queued ones of its shape, as many as one profile admits."""
        batched = self.runner.signature.batched
        deadline: float | None = None
        with self._ready:
            while True:
                if not self._waiting:
                    if self._closed:
                        return []
                    self._ready.wait()
                    continue
                key = min(self._queues, key=lambda k: self._queues[k][0].enqueued_ns)
                queue = self._queues[key]
                if not batched:
                    return self._pop(key, 1)
                limit = self.runner.planner.largest_batch(queue[0].item)
                deadline = deadline if deadline is not None else time.monotonic() + self.batch_wait_s
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed or sum(w.batch for w in queue) >= limit:
                    return self._pop_batch(key, limit)
                self._ready.wait(remaining)

    def _pop(self, key: tuple, count: int) -> list[Waiting]:
        queue = self._queues[key]
        taken = [queue.popleft() for _ in range(count)]
        if not queue:
            del self._queues[key]
        self._waiting -= count
        return taken

    def _pop_batch(self, key: tuple, limit: int) -> list[Waiting]:
        queue = self._queues[key]
        count, size = 0, 0
        for waiting in queue:
            if count and size + waiting.batch > limit:
                break
            count, size = count + 1, size + waiting.batch
        candidates = [w.item for w in list(queue)[:count]]
        return self._pop(key, self.runner.planner.fitting_head(candidates))

    # --- workers ------------------------------------------------------------------

    def _new_worker(self, slot: int) -> threading.Thread:
        return threading.Thread(target=self._work, args=(slot,), name=f"trtpool-worker-{slot}", daemon=True)

    def _work(self, slot: int) -> None:
        while True:
            batch: list[Waiting] = []
            try:
                batch = self._take_batch()
                if not batch:
                    return
                self._run(batch)
            except Exception as exc:  # trtpool's own fault: fail the batch, keep the worker
                log.exception("decoupled worker %d; its batch of %d request(s) is failed", slot, len(batch))
                for waiting in batch:
                    waiting.responder.fail(ContextFailure(f"execution failed: {type(exc).__name__}: {exc}"))
            except BaseException:  # the thread is ending: answer what it holds first
                log.error("decoupled worker %d is ending; failing its batch of %d request(s)", slot, len(batch))
                for waiting in batch:
                    waiting.responder.fail(ContextFailure("execution failed: the worker running it stopped"))
                raise

    def _run(self, batch: list[Waiting]) -> None:
        now = time.monotonic_ns()
        live = []
        for waiting in batch:
            if now - waiting.enqueued_ns >= self.cancel_check_after_ns and waiting.responder.cancelled():
                waiting.responder.fail(Cancelled("request cancelled before it ran"))
            else:
                live.append(waiting)
        if not live:
            return
        self._on_wait(sum(now - waiting.enqueued_ns for waiting in live))
        # detached: another worker may take the context while this one answers
        self.runner.run_chunk([waiting.item for waiting in live], detach=True)
        self._on_done()

    def _watch(self) -> None:
        """Replace any worker thread that died while the model is loaded."""
        while not self._stop_watchdog.wait(WATCHDOG_INTERVAL_S):
            for slot, worker in enumerate(self.workers):
                if not worker.is_alive() and not self._closed:
                    log.error("decoupled worker %d died; starting a new one", slot)
                    self._on_worker_lost()
                    replacement = self._new_worker(slot)
                    self.workers[slot] = replacement  # in its slot before it can answer anything
                    replacement.start()

    def close(self) -> None:
        self._stop_watchdog.set()
        self._watchdog.join()
        with self._ready:
            self._closed = True
            pending = [waiting for queue in self._queues.values() for waiting in queue]
            self._queues.clear()
            self._waiting = 0
            self._ready.notify_all()
        for waiting in pending:
            waiting.responder.fail(Overloaded("the model is being unloaded; retry on another instance"))
        for worker in self.workers:
            worker.join(timeout=30)


class DecoupledHandler:
    def __init__(self, pb_utils: PbUtils, instance: ModelInstance, metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        self.stage = instance.stage
        cfg = instance.cfg
        self.scheduler = Scheduler(
            instance.runner,
            cfg.max_queue_size,
            cfg.batch_wait_us,
            cfg.cancel_check_after_us,
            on_wait=metrics.record_queue_wait,
            on_done=metrics.after_work,
            on_worker_lost=metrics.record_worker_lost,
        )

    def __call__(self, requests: list[InferenceRequest]) -> None:
        """A plain call, not a coroutine: it only queues, and the stub's coroutine
        path for decoupled models adds an event-loop hop per execute (and logs a
        KeyError when the coroutine finishes before the stub has filed its future)."""
        if self.stage is not None:
            requests = without_probes(self.pb, requests)
        tensors = keep_after_execute([request_tensors(r) for r in requests])
        for request, request_inputs in zip(requests, tensors, strict=True):
            responder = SenderResponder(self.pb, request)
            if self.stage is None:
                self.scheduler.submit(request_inputs, responder)
            else:  # preprocessed on the stage's workers, then queued
                self.stage.before_each(request_inputs, responder, self.scheduler.submit)

    def close(self) -> None:
        self.scheduler.close()
