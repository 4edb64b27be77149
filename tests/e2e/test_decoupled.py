"""Decoupled mode through a real server: gRPC streaming, the unary front,
batching by trtpool's scheduler, failures, overload and cancellation."""
from __future__ import annotations

import queue
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.doubles.flaky_runtime import SENTINEL, SLOW
from tests.harness.clients import TINY_TOLERANCE, grpc_input, http_input, infer_concurrently
from trtpool_builder.examples.tiny import tiny_reference


class Stream:
    """One gRPC stream; responses and errors collected by request id."""

    def __init__(self, served) -> None:
        self.client = grpcclient.InferenceServerClient(served.server.grpc_url)
        self.answers: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.answers.put((result, error)))

    def send(self, model: str, x: np.ndarray, request_id: str) -> None:
        self.client.async_stream_infer(model, [grpc_input("INPUT0", x, "FP32")], request_id=request_id)

    def collect(self, count: int, timeout: float = 60) -> tuple[dict[str, np.ndarray], list[str]]:
        outputs, errors = {}, []
        for _ in range(count):
            result, error = self.answers.get(timeout=timeout)
            if error is not None:
                errors.append(str(error))
            else:
                outputs[result.get_response().id] = result.as_numpy("OUTPUT0")
        return outputs, errors

    def run_all(self, model: str, inputs: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
        """Send every input on this stream, collect every answer, close the stream."""
        try:
            for request_id, x in inputs.items():
                self.send(model, x, request_id)
            return self.collect(len(inputs))
        finally:
            self.close()

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def test_streaming_requests_are_batched_by_the_scheduler_and_correct(served):
    runs_before = served.server.metric_total("trtpool_context_runs_total", "tiny_decoupled")
    rng = np.random.default_rng(10)
    inputs = {str(i): rng.standard_normal((1, 16)).astype(np.float32) for i in range(64)}
    outputs, errors = Stream(served).run_all("tiny_decoupled", inputs)
    assert errors == []
    for request_id, x in inputs.items():
        np.testing.assert_allclose(outputs[request_id], tiny_reference(x), **TINY_TOLERANCE)
    time.sleep(0.2)
    runs = served.server.metric_total("trtpool_context_runs_total", "tiny_decoupled") - runs_before
    assert 0 < runs < len(inputs), f"{runs} runs for {len(inputs)} requests: the scheduler did not batch"
    assert served.server.metric_total("trtpool_request_wait_us_total", "tiny_decoupled") > 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unary_clients_use_the_front(served, protocol):
    client, make = (served.http, http_input) if protocol == "http" else (served.grpc, grpc_input)
    x = np.random.default_rng(11).standard_normal((3, 16)).astype(np.float32)
    result = client.infer("tiny_decoupled_unary", [make("INPUT0", x, "FP32")])
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), tiny_reference(x), **TINY_TOLERANCE)


def test_front_under_concurrent_unary_load(served):
    rng = np.random.default_rng(12)
    inputs = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(48)]

    outputs = infer_concurrently(served.server.grpc_url, "tiny_decoupled_unary", inputs, workers=12)
    for x, y in zip(inputs, outputs):
        np.testing.assert_allclose(y, tiny_reference(x), **TINY_TOLERANCE)


def test_unary_http_to_the_decoupled_model_itself_is_refused_by_triton(served):
    with pytest.raises(InferenceServerException, match="decoupled"):
        served.http.infer("tiny_decoupled", [http_input("INPUT0", np.ones((1, 16), np.float32), "FP32")])


def test_bad_input_on_the_stream_fails_alone(served):
    stream = Stream(served)
    try:
        stream.send("tiny_decoupled", np.ones((1, 16), np.float32), "good")
        stream.client.async_stream_infer(
            "tiny_decoupled", [grpc_input("INPUT0", np.ones((1, 15), np.float32), "FP32")], request_id="bad")
        outputs, errors = stream.collect(2)
    finally:
        stream.close()
    assert list(outputs) == ["good"]
    assert len(errors) == 1 and "INPUT0" in errors[0]


def test_failing_request_does_not_disturb_others(served):
    rng = np.random.default_rng(13)
    inputs = {str(i): rng.standard_normal((1, 16)).astype(np.float32) for i in range(32)}
    inputs["7"][0, 0] = SENTINEL
    outputs, errors = Stream(served).run_all("tiny_decoupled_flaky", inputs)
    assert len(errors) == 1 and "injected failure" in errors[0]
    assert set(outputs) == set(inputs) - {"7"}
    for request_id, y in outputs.items():
        np.testing.assert_allclose(y, tiny_reference(inputs[request_id]), **TINY_TOLERANCE)


def slow_input() -> np.ndarray:
    x = np.ones((1, 16), np.float32)
    x[0, 0] = SLOW
    return x


def test_queue_overflow_gets_an_overloaded_error(served):
    stream = Stream(served)
    try:
        stream.send("tiny_small_queue", slow_input(), "slow")
        time.sleep(0.3)  # the slow batch now occupies the only context
        normal = np.full((1, 16), 0.25, np.float32)
        for i in range(8):
            stream.send("tiny_small_queue", normal, str(i))
        outputs, errors = stream.collect(9)
    finally:
        stream.close()
    assert len(errors) == 6 and all("overloaded" in e and "max_queue_size 2" in e for e in errors), errors
    assert len(outputs) == 3 and "slow" in outputs
    for request_id, y in outputs.items():
        if request_id != "slow":
            np.testing.assert_allclose(y, tiny_reference(normal), **TINY_TOLERANCE)


def test_cancelled_requests_are_dropped_before_they_run(served):
    time.sleep(0.5)  # metrics of earlier tests published
    runs_before = served.server.metric_total("trtpool_context_runs_total", "tiny_small_queue")
    stream = Stream(served)
    stream.send("tiny_small_queue", slow_input(), "slow")
    time.sleep(0.3)
    stream.send("tiny_small_queue", np.ones((1, 16), np.float32), "queued-1")
    stream.send("tiny_small_queue", np.ones((1, 16), np.float32), "queued-2")
    time.sleep(0.1)
    stream.close(cancel=True)
    time.sleep(1.5)  # the slow batch finishes; the workers see the cancellations
    runs = served.server.metric_total("trtpool_context_runs_total", "tiny_small_queue") - runs_before
    assert runs == 1, f"{runs} runs: cancelled requests ran"
    # The model still serves.
    stream = Stream(served)
    try:
        stream.send("tiny_small_queue", np.ones((1, 16), np.float32), "after")
        outputs, errors = stream.collect(1)
    finally:
        stream.close()
    assert errors == [] and "after" in outputs
