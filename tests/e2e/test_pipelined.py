"""Pipelined mode through a real server: unary clients (HTTP /infer, gRPC),
concurrent load with mixed shapes and cancelled clients, every answer compared
with the reference (a context failure under load: test_bad_input.py).

Tolerances: TINY_TOLERANCE for the tiny model; the sequence model's outputs
against float64 numpy within rtol=atol=1e-5 (float32 sums of 8 products).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.doubles.flaky_runtime import SLOW, SLOW_SECONDS
from tests.harness.clients import TINY_TOLERANCE, grpc_input, http_input, infer_concurrently
from tests.harness.perf import perf_analyzer
from tests.harness.sequence_model import FEATURES, sequence_reference
from trtpool_builder.examples.tiny import tiny_reference

SEQUENCE_TOLERANCE = dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unary_clients_are_answered(served, protocol):
    client, make = (served.http, http_input) if protocol == "http" else (served.grpc, grpc_input)
    for batch in (1, 3, 8):
        x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
        result = client.infer("tiny_pipelined", [make("INPUT0", x, "FP32")])
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), tiny_reference(x), **TINY_TOLERANCE)


def sequence_requests(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((int(rng.integers(1, 5)), int(rng.integers(1, 65)), FEATURES)).astype(np.float32)
            for _ in range(count)]


def infer_sequence(url: str, model: str, tokens: np.ndarray) -> dict[str, np.ndarray] | Exception:
    client = grpcclient.InferenceServerClient(url)
    try:
        result = client.infer(model, [grpc_input("tokens", tokens, "FP32")])
        return {name: result.as_numpy(name) for name in ("per_token", "pooled")}
    except InferenceServerException as exc:
        return exc
    finally:
        client.close()


@pytest.mark.parametrize("model", ["sequence_sync", "sequence_pipelined"])
def test_concurrent_mixed_shapes_are_each_answered_right(served, model):
    """Lengths 1..64 and batches 1..4 from 16 clients at once: requests of one length
    share batches, others run apart, and each output has its own request's shape
    (the model names every dynamic axis '?': the runtime reports the shapes)."""
    requests = sequence_requests(seed=21, count=96)
    with ThreadPoolExecutor(16) as clients:
        results = list(clients.map(lambda t: infer_sequence(served.server.grpc_url, model, t), requests))
    for tokens, result in zip(requests, results):
        assert isinstance(result, dict), f"{list(tokens.shape)}: {result}"
        for name, expected in sequence_reference(tokens).items():
            assert result[name].shape == expected.shape
            np.testing.assert_allclose(result[name], expected, **SEQUENCE_TOLERANCE)


def test_decoupled_stream_with_mixed_shapes(served):
    """The same on one gRPC stream to the decoupled model: its scheduler groups by shape."""
    import queue

    requests = sequence_requests(seed=22, count=60)
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i, tokens in enumerate(requests):
            client.async_stream_infer("sequence_decoupled", [grpc_input("tokens", tokens, "FP32")], request_id=str(i))
        got = [answers.get(timeout=60) for _ in requests]
    finally:
        client.stop_stream()
        client.close()
    assert [error for _, error in got if error is not None] == []
    for result, _ in got:
        tokens = requests[int(result.get_response().id)]
        for name, expected in sequence_reference(tokens).items():
            np.testing.assert_allclose(result.as_numpy(name), expected, **SEQUENCE_TOLERANCE)


def test_cancelled_clients_leave_the_model_serving(served):
    """Clients that give up on slow batches (a deadline) do not hang or break the
    model: their responses are sent into the void, every other request is answered."""
    slow = np.ones((1, 16), np.float32)
    slow[0, 0] = SLOW
    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        for _ in range(4):  # both contexts busy with slow batches whose clients leave
            with pytest.raises(InferenceServerException, match="Deadline"):
                client.infer("tiny_pipelined_flaky", [grpc_input("INPUT0", slow, "FP32")], client_timeout=0.2)
        time.sleep(SLOW_SECONDS * 2 + 0.5)
        rng = np.random.default_rng(24)
        inputs = [rng.standard_normal((2, 16)).astype(np.float32) for _ in range(32)]
        for x, y in zip(inputs, infer_concurrently(served.server.grpc_url, "tiny_pipelined_flaky", inputs)):
            np.testing.assert_allclose(y, tiny_reference(x), **TINY_TOLERANCE)
    finally:
        client.close()
    assert served.http.is_model_ready("tiny_pipelined_flaky")


def test_perf_analyzer_defaults_drive_a_pipelined_model(served):
    # Its default stability bound (10%) is not reached on a busy 2-core CI machine (seen 2026-12-04:
    # "Failed to obtain stable measurement"); the README's load command uses 50 for that reason.
    [row] = perf_analyzer("tiny_pipelined", served.server.grpc_url, concurrency="8", interval_ms=1000,
                          extra=("--stability-percentage", "50"))
    assert row["Inferences/Second"] > 0
    assert "error" not in row["_stdout"].lower(), row["_stdout"]
