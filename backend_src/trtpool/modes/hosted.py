"""engine_host on: execute() checks its batch and hands it to the model's engine host.

The instance is thin: the model, its pool and its process file live in the engine host
(trtpool.host), which merges the batches of every instance of the model on one device.

    sync       execute() waits for the host's answers and returns them: one batch of this
               instance in the host at a time
    pipelined  execute() writes the batch into a free connection's slab and returns; that
               connection's thread waits for the answers and sends each through its request's
               response sender: up to `host_inflight` batches of this instance in the host at once
"""

from __future__ import annotations

import logging
import queue
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from trtpool.errors import InvalidInput
from trtpool.host.client import Answer, HostClient, Written
from trtpool.model.validate import accept
from trtpool.triton.metrics import PoolMetrics
from trtpool.triton.pb_api import InferenceRequest, InferenceResponse, PbUtils
from trtpool.triton.probes import is_probe
from trtpool.triton.requests import request_tensors
from trtpool.triton.responders import SenderResponder, error_response, response

log = logging.getLogger("trtpool")


class CheckedBatch:
    """A batch's requests split into those refused here (with their error) and those to forward."""

    def __init__(self, client: HostClient, requests: list[InferenceRequest]) -> None:
        self.refused: dict[int, InvalidInput] = {}
        self.forwarded: list[int] = []
        self.tensors: list[dict[str, np.ndarray]] = []
        self.probes: list[bool] = []
        for index, request in enumerate(requests):
            try:
                # inputs Triton left on the GPU come to the host here (the slab is host memory)
                inputs = {
                    name: t if isinstance(t, np.ndarray) else t.cpu().numpy()
                    for name, t in request_tensors(request).items()
                }
                if not client.process_file:  # the engine's own checks, before anything is sent
                    assert client.signature is not None  # learnt by attach(), before the handler was made
                    inputs, _ = accept(client.signature, inputs)
            except InvalidInput as exc:
                self.refused[index] = exc
                continue
            self.forwarded.append(index)
            self.tensors.append(inputs)
            self.probes.append(is_probe(request))


class HostHandler:
    """Forwards each batch to the model's engine host and returns its answers."""

    def __init__(self, pb_utils: PbUtils, client: HostClient, metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        self.client = client
        self.metrics = metrics

    def __call__(self, requests: list[InferenceRequest]) -> list[InferenceResponse | None]:
        batch = CheckedBatch(self.client, requests)
        responses: list[InferenceResponse | None] = [None] * len(requests)
        for index, error in batch.refused.items():
            responses[index] = error_response(self.pb, error)
        for index, answer in zip(batch.forwarded, self.client.run(batch.tensors, batch.probes), strict=True):
            responses[index] = _answered(self.pb, answer)
        return responses

    def close(self) -> None:
        pass  # the model closes the client after the metrics' last flush, which asks the host


class PipelinedHostHandler:
    """Keeps up to one batch per client in the host: execute() returns once the batch is in a
    free client's slab (waiting for one while every client has a batch in the host)."""

    def __init__(self, pb_utils: PbUtils, clients: list[HostClient], metrics: PoolMetrics) -> None:
        self.pb = pb_utils
        self.metrics = metrics
        self._free: queue.Queue[HostClient] = queue.Queue()
        for client in clients:
            self._free.put(client)
        self._waiting = ThreadPoolExecutor(max_workers=len(clients), thread_name_prefix="trtpool-host-wait")

    def __call__(self, requests: list[InferenceRequest]) -> None:
        responders = [SenderResponder(self.pb, request) for request in requests]
        client = self._free.get()
        try:
            batch = CheckedBatch(client, requests)
            for index, error in batch.refused.items():
                responders[index].fail(error)
            written = client.write(batch.tensors, batch.probes) if batch.forwarded else None
        except Exception as exc:  # answered once, whatever failed
            log.exception("writing a batch for the engine host")
            self._free.put(client)
            for responder in responders:
                responder.fail(exc)
            return
        if written is None:
            self._free.put(client)
            return
        self._waiting.submit(self._answer, client, written, [responders[i] for i in batch.forwarded])

    def _answer(self, client: HostClient, written: Written, responders: list[SenderResponder]) -> None:
        try:
            for responder, answer in zip(responders, client.send(written), strict=True):
                if isinstance(answer, Exception):
                    responder.fail(answer)
                else:
                    responder.send(answer)  # the response copies the views before the client's next batch
        except Exception as exc:
            log.exception("answering a batch from the engine host")
            for responder in responders:
                responder.fail(exc)  # a responder that already answered stays answered
        finally:
            self._free.put(client)

    def close(self) -> None:
        self._waiting.shutdown(wait=True)  # every batch in the host is answered before unload


def _answered(pb_utils: PbUtils, answer: Answer) -> InferenceResponse:
    return error_response(pb_utils, answer) if isinstance(answer, Exception) else response(pb_utils, answer)
