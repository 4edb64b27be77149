"""engine_host on: execute() checks its batch, hands it to the model's engine host and returns its answers.

The instance is thin: the model, its pool and its process file live in the engine host
(trtpool.host), which merges the batches of every instance of the model on one device.
"""

from __future__ import annotations

from trtpool.errors import InvalidInput
from trtpool.host.client import HostClient
from trtpool.model.validate import accept
from trtpool.triton.metrics import PoolMetrics
from trtpool.triton.pb_api import InferenceRequest, InferenceResponse, PbUtils
from trtpool.triton.probes import is_probe
from trtpool.triton.requests import request_tensors
from trtpool.triton.responders import error_response, response


class HostHandler:
    """Forwards each batch to the model's engine host and returns its answers."""

    def __init__(self, pb_utils: PbUtils, client: HostClient, metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        self.client = client
        self.metrics = metrics

    def __call__(self, requests: list[InferenceRequest]) -> list[InferenceResponse | None]:
        responses: list[InferenceResponse | None] = [None] * len(requests)
        forwarded, tensors, probes = [], [], []
        for index, request in enumerate(requests):
            try:
                # inputs Triton left on the GPU stay there: the client copies them into the host's memory
                inputs = request_tensors(request)
                if not self.client.process_file:  # the engine's own checks, before anything is sent
                    assert self.client.signature is not None  # learnt by attach(), before this handler was made
                    inputs, _ = accept(self.client.signature, inputs)
            except InvalidInput as exc:
                responses[index] = error_response(self.pb, exc)
                continue
            forwarded.append(index)
            tensors.append(inputs)
            probes.append(is_probe(request))
        for index, answer in zip(forwarded, self.client.run(tensors, probes), strict=False):
            responses[index] = (
                error_response(self.pb, answer) if isinstance(answer, Exception) else response(self.pb, answer)
            )
        return responses

    def close(self) -> None:
        pass  # the model closes the client after the metrics' last flush, which asks the host
