"""A gRPC stream client for decoupled models: send many requests, collect one final
answer per request.

An answer is the request's outputs (by request id) or an error. A stream error
carries no request id (ModelStreamInferResponse has only error_message), so
errors are collected as a list; a decoupled trtpool model's error message
ends with its code (`[status <CODE>]`, trtpool.triton.status_relay).

`status_codes` asks Triton (24.08 and later) for gRPC status codes through the
`triton_grpc_error` header instead: the first error the model sends then ends
the stream with its code. Only the tests and the probe of that header's fault
use it: Triton 2.51 dies on such streams when models refuse requests
(tests/reliability/test_grpc_error_stream_abort.py, docs/reliability.md).
"""
from __future__ import annotations

import queue
from dataclasses import dataclass, field

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype


@dataclass
class Answers:
    outputs: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    errors: list[InferenceServerException] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.outputs) + len(self.errors)


class StreamClient:
    def __init__(self, url: str, status_codes: bool = False) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self._answers: queue.Queue = queue.Queue()
        self._unanswered = 0
        self.client.start_stream(callback=lambda result, error: self._answers.put((result, error)),
                                 headers={"triton_grpc_error": "true"} if status_codes else None)

    def send(self, model: str, inputs: dict[str, np.ndarray], request_id: str) -> None:
        tensors = []
        for name, array in inputs.items():
            tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        self.client.async_stream_infer(model, tensors, request_id=request_id)
        self._unanswered += 1

    def collect(self, count: int, timeout: float = 60) -> Answers:
        """The next `count` answers; queue.Empty if one takes longer than `timeout` seconds."""
        answers = Answers()
        for _ in range(count):
            result, error = self._answers.get(timeout=timeout)
            self._unanswered -= 1
            if error is not None:
                answers.errors.append(error)
            else:
                response = result.get_response()
                answers.outputs[response.id] = {out.name: result.as_numpy(out.name) for out in response.outputs}
        return answers

    def close(self) -> None:
        """Stop the stream; cancel it only if answers are missing (stopping waits for them).
        Cancelling a stream whose requests were all answered can leave Triton 2.51
        holding the model: its unload then hung ("Waiting for the callback to
        retrieve cancellation" in the server's verbose log)."""
        self.client.stop_stream(cancel_requests=self._unanswered > 0)
        self.client.close()

    def __enter__(self) -> "StreamClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_on_stream(url: str, model: str, requests: dict[str, dict[str, np.ndarray]], timeout: float = 60) -> Answers:
    """Send every request on one stream, then collect an answer for each."""
    with StreamClient(url) as stream:
        for request_id, inputs in requests.items():
            stream.send(model, inputs, request_id)
        return stream.collect(len(requests), timeout)
