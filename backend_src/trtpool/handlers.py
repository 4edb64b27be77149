"""How each mode turns Triton requests into work and answers them.

    sync       execute() runs the batch on the pool and returns the responses
    pipelined  execute() starts the batch on a free context and returns; a completion
               thread answers through each request's response sender (any client)
    decoupled  execute() queues the requests for the scheduler and returns at once;
               workers answer through each request's response sender (streaming clients)
    forward    a unary front for a decoupled model: forwards each request with
               BLS and returns its single response (for HTTP /infer and unary gRPC)
    host       engine_host on: execute() checks the batch, hands it to the model's engine
               host (trtpool.host) and returns the host's answers

These classes take Triton's ``pb_utils`` module as an argument: it exists only
inside the Python backend's stub.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np

from trtpool.errors import InvalidInput
from trtpool.gpu.device_tensors import keep_after_execute
from trtpool.host.client import HostClient
from trtpool.instance import ModelInstance
from trtpool.model.validate import accept
from trtpool.pipeline import Pipeline
from trtpool.scheduler import Scheduler
from trtpool.triton.metrics import PoolMetrics
from trtpool.triton.probes import PROBE_MARK, is_probe
from trtpool.triton.requests import kept, request_tensors, without_probes
from trtpool.triton.responders import ListResponder, SenderResponder, error_response, response


class SyncHandler:
    def __init__(self, pb_utils: Any, instance: ModelInstance, metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        self.instance = instance
        self.metrics = metrics

    def __call__(self, requests: list[Any]) -> list[Any] | None:
        """A plain call: a coroutine would make the stub hand every execute to its
        event-loop thread and wait for it there, a thread hop per batch.

        The batch runs here and execute() returns the responses, except with a process file
        whose postprocess runs per request: its post workers answer through the response
        senders after execute() returns, overlapping the next batch."""
        stage = self.instance.stage
        responses: list[Any] = [None] * len(requests)
        if stage is None or stage.faces.batch_post:
            served = []
            for index, request in enumerate(requests):
                if stage is not None and is_probe(request):  # answered untouched by user code (trtpool.triton.probes)
                    responses[index] = response(self.pb, {})
                else:
                    served.append(index)
            # Nothing outlives execute(): the requests' tensors need no copies.
            tensors = [request_tensors(requests[index]) for index in served]
            responders = [ListResponder(self.pb, responses, index) for index in served]
            self.instance.serve(tensors, responders, inline=True)
            self.metrics.after_work()
            return responses
        requests = without_probes(self.pb, requests)
        self.instance.serve(kept([request_tensors(r) for r in requests]),
                            [SenderResponder(self.pb, request) for request in requests], inline=False)
        self.metrics.after_work()
        return None

    def close(self) -> None:
        pass


class HostHandler:
    """Forwards each batch to the model's engine host and returns its answers."""

    def __init__(self, pb_utils: Any, client: HostClient, metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        self.client = client
        self.metrics = metrics

    def __call__(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        forwarded, tensors, probes = [], [], []
        for index, request in enumerate(requests):
            try:
                # inputs Triton left on the GPU come to the host here (the slab is host memory)
                inputs = {name: t if isinstance(t, np.ndarray) else t.cpu().numpy()
                          for name, t in request_tensors(request).items()}
                if not self.client.process_file:   # the engine's own checks, before anything is sent
                    inputs, _ = accept(self.client.signature, inputs)
            except InvalidInput as exc:
                responses[index] = error_response(self.pb, exc)
                continue
            forwarded.append(index)
            tensors.append(inputs)
            probes.append(is_probe(request))
        for index, answer in zip(forwarded, self.client.run(tensors, probes)):
            responses[index] = (error_response(self.pb, answer) if isinstance(answer, Exception)
                                else response(self.pb, answer))
        return responses

    def close(self) -> None:
        pass   # the model closes the client after the metrics' last flush, which asks the host


class PipelinedHandler:
    def __init__(self, pb_utils: Any, instance: ModelInstance, metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        self.stage = instance.stage
        self.pipeline = Pipeline(instance.runner, instance.cfg.response_threads, on_done=metrics.after_work)

    def __call__(self, requests: list[Any]) -> None:
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


class DecoupledHandler:
    def __init__(self, pb_utils: Any, instance: ModelInstance, metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        self.stage = instance.stage
        cfg = instance.cfg
        self.scheduler = Scheduler(instance.runner, cfg.max_queue_size, cfg.batch_wait_us, cfg.cancel_check_after_us,
                                   on_wait=metrics.record_queue_wait,
                                   on_done=metrics.after_work,
                                   on_worker_lost=metrics.record_worker_lost)

    def __call__(self, requests: list[Any]) -> None:
        """A plain call, not a coroutine: it only queues, and the stub's coroutine
        path for decoupled models adds an event-loop hop per execute (and logs a
        KeyError when the coroutine finishes before the stub has filed its future)."""
        if self.stage is not None:
            requests = without_probes(self.pb, requests)
        tensors = keep_after_execute([request_tensors(r) for r in requests])
        for request, request_inputs in zip(requests, tensors):
            responder = SenderResponder(self.pb, request)
            if self.stage is None:
                self.scheduler.submit(request_inputs, responder)
            else:  # preprocessed on the stage's workers, then queued
                self.stage.before_each(request_inputs, responder, self.scheduler.submit)

    def close(self) -> None:
        self.scheduler.close()


class ForwardHandler:
    """Forwards unary requests to a decoupled trtpool model, all at once, each within
    `timeout_s` (trtpool.front.forward_timeout_s says why the front bounds them itself)."""

    def __init__(self, pb_utils: Any, target: str, output_names: list[str], timeout_s: float) -> None:
        self.pb = pb_utils
        self.target = target
        self.output_names = output_names
        self.timeout_s = timeout_s
        self.held = 0  # calls given up on and not yet returned: each holds a BLS thread of the Python backend

    async def _forward(self, request: Any) -> Any:
        probe = is_probe(request)
        forwarded = self.pb.InferenceRequest(
            model_name=self.target, inputs=request.inputs(),
            requested_output_names=self.output_names,
            parameters=PROBE_MARK if probe else {},   # a probe stays one (trtpool.triton.probes)
        )
        call = self._exchange(forwarded)
        try:
            replies = await asyncio.wait_for(asyncio.shield(call), self.timeout_s)
        except asyncio.TimeoutError:
            return self._gave_up(call)
        except self.pb.TritonModelException as exc:
            return self._failed(self.pb.TritonError(str(exc)))
        answer = None
        # trtpool's decoupled models send one final response per request.
        for reply in replies:
            if reply.has_error():
                return self._failed(reply.error())
            if reply.output_tensors():
                answer = self.pb.InferenceResponse(output_tensors=reply.output_tensors())
        if answer is None and probe:  # a target with a process file answers a probe with no outputs
            return self.pb.InferenceResponse(output_tensors=[])
        # No output and no error: the target went away with the request (an unload).
        return answer or self._unavailable("sent no output (it was unloading or stopped)")

    @staticmethod
    def _exchange(forwarded: Any) -> asyncio.Future:
        """Every reply to `forwarded`, from a daemon thread of its own. Not async_exec, which
        runs the call on the event loop's default executor: a call lost inside a dead target
        stub never returns, and a few of them (the executor has min(32, cores + 4) threads)
        would leave no thread for any later call, and Python joins an executor's threads when
        the stub's interpreter exits. Reading the replies blocks as well, so it happens on that
        thread too."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(replies: list[Any] | None, error: BaseException | None) -> None:
            if future.cancelled():  # the stub's loop is shutting down
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(replies)

        def run() -> None:
            try:
                replies, error = list(forwarded.exec(decoupled=True)), None
            except Exception as exc:  # TritonModelException: the call's own error, for the front to answer
                replies, error = None, exc
            try:
                loop.call_soon_threadsafe(settle, replies, error)
            except RuntimeError:  # the stub's loop closed meanwhile (it is finalizing): nobody waits
                pass

        threading.Thread(target=run, name="trtpool-forward", daemon=True).start()
        return future

    def _gave_up(self, call: asyncio.Future) -> Any:
        """UNAVAILABLE, saying why. The call goes on: Triton 2.51 cannot cancel a BLS call, and
        one lost inside a dead stub holds a thread of the Python backend's BLS pool for good (its
        thread-pool-size, default 32); once every thread is held, no call reaches the target."""
        self.held += 1
        call.add_done_callback(self._returned)
        return self._unavailable(
            f"sent no answer within {self.timeout_s:g} s (this front's forward_timeout_seconds): its stub may have "
            "died (docs/operations.md, 'Recovering from a dead stub') or it is overloaded; retry once it serves "
            f"again ({self.held} call(s) given up on hold BLS threads of the Python backend, 32 by default: "
            "once all are held, restart the server)")

    def _returned(self, call: asyncio.Future) -> None:
        """A call given up on came back after all (a slow target): its thread is free again."""
        self.held -= 1
        if not call.cancelled():
            call.exception()  # read: nobody else will, and asyncio would log it as never retrieved

    def _failed(self, error: Any) -> Any:
        """The target's error, or UNAVAILABLE naming the target when it is not loaded or not ready
        (the Python backend's BLS says so as an INTERNAL error, and Triton would answer 500)."""
        if f"Model '{self.target}' is not ready" in error.message():
            return self._unavailable("is not ready (not loaded, failed to load, or loading); retry later")
        return self.pb.InferenceResponse(error=error)

    def _unavailable(self, what: str) -> Any:
        return self.pb.InferenceResponse(error=self.pb.TritonError(
            f"model '{self.target}' (this front's forward_to target) {what}", self.pb.TritonError.UNAVAILABLE))

    async def __call__(self, requests: list[Any]) -> list[Any]:
        return list(await asyncio.gather(*(self._forward(r) for r in requests)))

    def close(self) -> None:
        pass
