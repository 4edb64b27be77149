"""Elastic context pools through a real server: the pool grows under concurrent
load and shrinks when idle (read from trtpool's metrics on /metrics), every
request is answered right while contexts come and go, and a context that
cannot be made leaves the model serving.

The policy's time knobs are small here (grow at the first wait, close after
0.5 s idle, metrics every 100 ms) so that each phase takes seconds. Outputs
are compared with the tiny model's float64 numpy reference (TINY_TOLERANCE).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.doubles.flaky_runtime import FAIL_CREATE_FILE
from tests.harness.clients import TINY_TOLERANCE, infer_concurrently
from tests.harness.repository import FLAKY_RUNTIME, add_example, set_parameters
from tests.harness.server import TritonServer
from tests.harness.streams import StreamClient
from trtpool_builder.examples.tiny import tiny_reference

MAX_CONTEXTS = 3
DEADLINE_S = 120.0
ELASTIC = dict(min_contexts="1", max_contexts=str(MAX_CONTEXTS), grow_after_wait_microseconds="0",
               shrink_after_idle_seconds="0.5", metrics_interval_ms="100")


@pytest.fixture(scope="module")
def server(start_server, tmp_path_factory) -> TritonServer:
    base = tmp_path_factory.mktemp("elastic")
    repo, cache = base / "repo", base / "onnx"
    repo.mkdir()
    cache.mkdir()
    set_parameters(add_example(repo, cache, "tiny", "tiny_elastic", mode="decoupled"), **ELASTIC)
    failing = add_example(repo, cache, "tiny", "tiny_elastic_failing", mode="pipelined", runtime=FLAKY_RUNTIME)
    set_parameters(failing, **ELASTIC)
    (failing / "1" / FAIL_CREATE_FILE).touch()  # only context 0 can be made
    return start_server(repo)


def contexts(server: TritonServer, model: str) -> float:
    return server.metric_total("trtpool_contexts", model)


def stream_load(server: TritonServer, seed: int, rounds: int, per_round: int) -> tuple[int, int]:
    """`rounds` times, `per_round` requests in flight on one stream, each answer checked:
    (requests sent, answers right)."""
    rng = np.random.default_rng(seed)
    sent = right = 0
    with StreamClient(server.grpc_url) as stream:
        for _ in range(rounds):
            inputs = {f"{seed}-{sent + i}": rng.standard_normal((int(rng.integers(1, 5)), 16)).astype(np.float32)
                      for i in range(per_round)}
            for request_id, x in inputs.items():
                stream.send("tiny_elastic", {"INPUT0": x}, request_id)
            sent += per_round
            answers = stream.collect(per_round)
            assert answers.errors == []
            for request_id, x in inputs.items():
                np.testing.assert_allclose(answers.outputs[request_id]["OUTPUT0"], tiny_reference(x),
                                           **TINY_TOLERANCE)
                right += 1
    return sent, right


def load_until(server: TritonServer, clients: int, per_round: int, done) -> tuple[int, int]:
    """`clients` streams send rounds of requests until done() or the deadline: (sent, right)."""
    deadline = time.monotonic() + DEADLINE_S
    sent = right = 0
    with ThreadPoolExecutor(clients) as pool:
        while not done():
            assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {server.log_tail(40)}"
            for s, r in pool.map(lambda seed: stream_load(server, seed, 4, per_round), range(sent, sent + clients)):
                sent, right = sent + s, right + r
    return sent, right


def wait_for(server: TritonServer, condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}\n{server.log_tail(40)}"
        time.sleep(0.1)


def test_pool_follows_the_load_and_every_request_is_answered_right(server):
    model = "tiny_elastic"
    wait_for(server, lambda: server.metric_total("trtpool_contexts_max", model) == MAX_CONTEXTS, "the gauges")
    assert contexts(server, model) == 1 and server.metric_total("trtpool_contexts_min", model) == 1

    # Peak: 8 streams with 16 requests each in flight.
    sent, right = load_until(server, 8, 16, lambda: contexts(server, model) == MAX_CONTEXTS)
    assert sent == right > 0
    assert server.wait_for_metric("trtpool_contexts_grown_total", model, MAX_CONTEXTS - 1) >= MAX_CONTEXTS - 1

    # Low: one stream, one request at a time, while the idle contexts are closed.
    sent, right = load_until(server, 1, 1, lambda: contexts(server, model) == 1)
    assert sent == right > 0
    assert server.metric_total("trtpool_contexts_shrunk_total", model) >= MAX_CONTEXTS - 1

    # Peak again: the pool grows back, every answer still right.
    sent, right = load_until(server, 8, 16, lambda: contexts(server, model) == MAX_CONTEXTS)
    assert sent == right > 0
    assert server.metric_total("trtpool_contexts_grown_total", model) >= 2 * (MAX_CONTEXTS - 1)


def test_a_context_that_cannot_be_made_leaves_the_model_serving(server):
    model = "tiny_elastic_failing"
    rng = np.random.default_rng(21)
    deadline = time.monotonic() + DEADLINE_S
    while server.metric_total("trtpool_context_create_failures_total", model) < 1:
        assert time.monotonic() < deadline, f"no failed creation within {DEADLINE_S} s\n{server.log_tail(40)}"
        inputs = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(32)]
        for x, result in zip(inputs, infer_concurrently(server.grpc_url, model, inputs, workers=16)):
            assert not isinstance(result, Exception), result
            np.testing.assert_allclose(result, tiny_reference(x), **TINY_TOLERANCE)
    assert contexts(server, model) == 1
    assert "could not be made (MemoryError: injected: out of memory" in server.log_text()
