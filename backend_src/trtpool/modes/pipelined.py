"""The pipelined mode: several batches in flight per instance, for every client.

execute() starts each batch on a free context and returns; a completion thread per context
waits for it and answers each request through its response sender, from ``response_threads``
threads. Every request is answered exactly once, whatever fails. Why and how:
docs/design/pipelined-mode.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from trtpool.engine.answer import Responder
from trtpool.engine.batching import BatchRunner, Item
from trtpool.instance import ModelInstance
from trtpool.runtimes.base import ExecutionContext
from trtpool.triton.metrics import PoolMetrics
from trtpool.triton.pb_api import InferenceRequest, PbUtils
from trtpool.triton.requests import kept, request_tensors, without_probes
from trtpool.triton.responders import SenderResponder

log = logging.getLogger("trtpool")


class Pipeline:
    def __init__(
        self, runner: BatchRunner, response_threads: int = 1, on_done: Callable[[], None] | None = None
    ) -> None:
        self.runner = runner
        self._on_done = on_done or (lambda: None)
        self._completions = ThreadPoolExecutor(max_workers=runner.pool.size, thread_name_prefix="trtpool-complete")
        self._senders = (
            ThreadPoolExecutor(max_workers=response_threads, thread_name_prefix="trtpool-send")
            if response_threads > 1
            else None
        )

    def submit(self, requests: Sequence[dict[str, Any]], responders: Sequence[Responder]) -> None:
        """Start every request's batch; returns before they complete."""
        try:
            for chunk in self.runner.planner.plan(self.runner.validate(requests, responders)):
                context = self.runner.start(chunk)
                if context is not None:
                    self._completions.submit(self._finish, context, chunk)
        except Exception as exc:  # answered-once: requests already started keep their answers
            log.exception("starting pipelined batches")
            for responder in responders:
                responder.fail(exc)

    def _finish(self, context: ExecutionContext, chunk: list[Item]) -> None:
        try:
            if self._senders is None:
                self.runner.finish(context, chunk, detach=True)
            else:
                sent: list[Future] = []
                queued = [
                    Item(_SentFrom(self._senders, sent, item.responder), item.tensors, item.shapes) for item in chunk
                ]
                self.runner.finish(context, queued, detach=True)
                wait(sent)
        except BaseException as exc:
            log.exception("completing a pipelined batch")
            for item in chunk:
                item.responder.fail(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
        finally:
            self._on_done()

    def close(self) -> None:
        self._completions.shutdown(wait=True)
        if self._senders is not None:
            self._senders.shutdown(wait=True)


class _SentFrom:
    """A responder whose outputs are sent from the `senders` threads (each send's future kept in
    `sent`, so that the completion thread waits for its batch's); failing and cancellation go
    straight to the request's own responder."""

    def __init__(self, senders: ThreadPoolExecutor, sent: list[Future], responder: Responder) -> None:
        self._senders = senders
        self._sent = sent
        self.responder = responder

    def send(self, outputs: dict[str, Any]) -> None:
        self._sent.append(self._senders.submit(self.responder.send, outputs))

    def fail(self, error: Exception) -> None:
        self.responder.fail(error)

    def cancelled(self) -> bool:
        return self.responder.cancelled()


class PipelinedHandler:
    def __init__(self, pb_utils: PbUtils, instance: ModelInstance, metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        self.stage = instance.stage
        self.pipeline = Pipeline(instance.runner, instance.cfg.response_threads, on_done=metrics.after_work)

    def __call__(self, requests: list[InferenceRequest]) -> None:
        """Start the batch and return None: the requests are answered through their
        response senders. Their tensors are copied into the contexts' own buffers
        before this returns (Triton reuses them afterwards), except with a process
        file: its preprocessing reads them after, as the decoupled workers do."""
        if self.stage is not None:
            requests = without_probes(self.pb, requests)
        responders = [SenderResponder(self.pb, request) for request in requests]
        tensors = [request_tensors(r) for r in requests]
        if self.stage is None:
            self.pipeline.submit(tensors, responders)
        else:  # preprocessed on the stage's workers, which then start the batch
            self.stage.before_then(kept(tensors), responders, self.pipeline.submit)

    def close(self) -> None:
        if self.stage is not None:  # the batches being preprocessed reach the pipeline first
            self.stage.close_pre()
        self.pipeline.close()  # its last batches' postprocessing ends when the instance closes the stage
