"""How each mode turns Triton requests into work and answers them.

    sync       execute() runs the batch on the pool and returns the responses
    decoupled  execute() queues the requests for the scheduler and returns at once;
               workers answer through each request's response sender
    forward    a unary front for a decoupled model: forwards each request with
               BLS and returns its single response (for HTTP /infer and unary gRPC)

These classes take Triton's ``pb_utils`` module as an argument: it exists only
inside the Python backend's stub.
"""
from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from trtpool.device_tensors import from_dlpack, is_device, keep_after_execute, to_dlpack
from trtpool.instance import ModelInstance
from trtpool.metrics import PoolMetrics
from trtpool.scheduler import Scheduler


def request_tensors(request: Any) -> dict[str, Any]:
    """numpy arrays, or torch tensors for inputs Triton left on the GPU."""
    return {t.name(): t.as_numpy() if t.is_cpu() else from_dlpack(t) for t in request.inputs()}


def output_tensors(pb_utils: Any, outputs: dict[str, Any]) -> list[Any]:
    """Response tensors that own their memory. Host outputs are views of the
    context's pinned buffers, reused as soon as the context is released while
    Triton reads the response later: copied. Outputs of a batch that ran on the
    GPU are slices of tensors made for this batch: handed over by DLPack."""
    return [
        pb_utils.Tensor.from_dlpack(name, to_dlpack(array)) if is_device(array)
        else pb_utils.Tensor(name, array.copy())
        for name, array in outputs.items()
    ]


class SyncHandler:
    def __init__(self, pb_utils: Any, instance: ModelInstance, metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        self.instance = instance
        self.metrics = metrics

    def __call__(self, requests: list[Any]) -> list[Any]:
        """A plain call: a coroutine would make the stub hand every execute to its
        event-loop thread and wait for it there, a thread hop per batch."""
        responses: list[Any] = [None] * len(requests)

        def emit(index: int, outputs: dict[str, np.ndarray]) -> None:
            responses[index] = self.pb.InferenceResponse(output_tensors=output_tensors(self.pb, outputs))

        def fail(index: int, error: Exception) -> None:
            responses[index] = self.pb.InferenceResponse(error=self.pb.TritonError(str(error)))

        self.instance.runner.run([request_tensors(r) for r in requests], emit, fail)
        self.metrics.after_work()
        return responses

    def close(self) -> None:
        pass


class SenderResponder:
    """Answers one decoupled request once, with the final flag."""

    def __init__(self, pb_utils: Any, request: Any) -> None:
        self.pb = pb_utils
        self.request = request
        self.sender = request.get_response_sender()
        self._answered = False  # one worker answers a request; a failure after its send is ignored

    def _final(self, response: Any | None) -> None:
        if self._answered:
            return
        self._answered = True
        flags = self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if response is None:
            self.sender.send(flags=flags)
        else:
            self.sender.send(response, flags=flags)

    def send(self, outputs: dict[str, np.ndarray]) -> None:
        self._final(self.pb.InferenceResponse(output_tensors=output_tensors(self.pb, outputs)))

    def fail(self, error: Exception) -> None:
        code = self.pb.TritonError.UNAVAILABLE if "overloaded" in str(error) else self.pb.TritonError.INTERNAL
        self._final(self.pb.InferenceResponse(error=self.pb.TritonError(str(error), code)))

    def cancelled(self) -> bool:
        # In decoupled mode the response sender is what learns of a cancellation.
        return self.sender.is_cancelled()

    def drop(self) -> None:
        error = self.pb.TritonError("request cancelled before it ran", self.pb.TritonError.CANCELLED)
        self._final(self.pb.InferenceResponse(error=error))


class DecoupledHandler:
    def __init__(self, pb_utils: Any, instance: ModelInstance, metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        cfg = instance.cfg
        self.scheduler = Scheduler(instance.runner, cfg.max_queue_size, cfg.batch_wait_us, cfg.cancel_check_after_us,
                                   on_wait=metrics.record_queue_wait,
                                   on_done=metrics.after_work)

    def __call__(self, requests: list[Any]) -> None:
        """A plain call, not a coroutine: it only queues, and the stub's coroutine
        path for decoupled models adds an event-loop hop per execute (and logs a
        KeyError when the coroutine finishes before the stub has filed its future)."""
        tensors = keep_after_execute([request_tensors(r) for r in requests])
        for request, request_inputs in zip(requests, tensors):
            self.scheduler.submit(request_inputs, SenderResponder(self.pb, request))

    def close(self) -> None:
        self.scheduler.close()


class ForwardHandler:
    """Forwards unary requests to a decoupled trtpool model, all at once."""

    def __init__(self, pb_utils: Any, target: str, output_names: list[str]) -> None:
        self.pb = pb_utils
        self.target = target
        self.output_names = output_names

    async def _forward(self, request: Any) -> Any:
        forwarded = self.pb.InferenceRequest(
            model_name=self.target, inputs=request.inputs(),
            requested_output_names=self.output_names,
        )
        answer = None
        # trtpool's decoupled models send one final response per request.
        for response in await forwarded.async_exec(decoupled=True):
            if response.has_error():
                return self.pb.InferenceResponse(error=response.error())
            if response.output_tensors():
                answer = self.pb.InferenceResponse(output_tensors=response.output_tensors())
        return answer or self.pb.InferenceResponse(
            error=self.pb.TritonError(f"model '{self.target}' sent no output"))

    async def __call__(self, requests: list[Any]) -> list[Any]:
        return list(await asyncio.gather(*(self._forward(r) for r in requests)))

    def close(self) -> None:
        pass
