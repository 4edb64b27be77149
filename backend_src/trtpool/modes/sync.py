"""Sync mode: execute() runs its batch on the pool and returns the responses.

With a process file whose postprocess runs per request, its post workers answer through
the response senders after execute() returns, overlapping the next batch.
"""

from __future__ import annotations

from trtpool.engine.answer import Responder
from trtpool.instance import ModelInstance
from trtpool.triton.metrics import PoolMetrics
from trtpool.triton.pb_api import InferenceRequest, InferenceResponse, PbUtils
from trtpool.triton.probes import is_probe
from trtpool.triton.requests import kept, request_tensors, without_probes
from trtpool.triton.responders import ListResponder, SenderResponder, response


class SyncHandler:
    def __init__(self, pb_utils: PbUtils, instance: ModelInstance, metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        self.instance = instance
        self.metrics = metrics

    def __call__(self, requests: list[InferenceRequest]) -> list[InferenceResponse | None] | None:
        """A plain call: a coroutine would make the stub hand every execute to its
        event-loop thread and wait for it there, a thread hop per batch.

        The batch runs here and execute() returns the responses, except with a process file
        whose postprocess runs per request: its post workers answer through the response
        senders after execute() returns, overlapping the next batch."""
        stage = self.instance.stage
        responses: list[InferenceResponse | None] = [None] * len(requests)
        if stage is None or stage.faces.batch_post:
            served = []
            for index, request in enumerate(requests):
                if stage is not None and is_probe(request):  # answered untouched by user code (trtpool.triton.probes)
                    responses[index] = response(self.pb, {})
                else:
                    served.append(index)
            # Nothing outlives execute(): the requests' tensors need no copies.
            tensors = [request_tensors(requests[index]) for index in served]
            responders: list[Responder] = [ListResponder(self.pb, responses, index) for index in served]
            self.instance.serve(tensors, responders, inline=True)
            self.metrics.after_work()
            return responses
        requests = without_probes(self.pb, requests)
        self.instance.serve(
            kept([request_tensors(r) for r in requests]),
            [SenderResponder(self.pb, request) for request in requests],
            inline=False,
        )
        self.metrics.after_work()
        return None

    def close(self) -> None:
        pass
