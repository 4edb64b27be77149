"""Issue 15, item 1: a decoupled worker thread that dies (here: SystemExit raised
by the flaky double's context) answers the batch it held, is replaced by the
watchdog and counted in trtpool_workers_lost_total, and the model keeps serving."""
from __future__ import annotations


import numpy as np

from tests.doubles.flaky_runtime import KILL, KILL_AT_SUBMIT
from tests.harness.clients import TINY_TOLERANCE
from tests.harness.streams import Answers, run_on_stream
from trtpool_builder.examples.tiny import tiny_reference

STOPPED = "the worker running it stopped"


def tiny_requests(count: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {str(i): {"INPUT0": rng.standard_normal((1 + i % 4, 16)).astype(np.float32)} for i in range(count)}


def assert_answers(answers: Answers, requests: dict[str, dict[str, np.ndarray]], killed: set[str]) -> None:
    """Every request answered once: the killed ones with the worker's error, the
    rest correctly (a request batched with a killed one may carry the error too)."""
    assert answers.count == len(requests)
    assert killed.isdisjoint(answers.outputs)
    assert len(answers.errors) >= len(killed)
    assert all(STOPPED in str(error) for error in answers.errors), [str(e) for e in answers.errors]
    for request_id, outputs in answers.outputs.items():
        np.testing.assert_allclose(outputs["OUTPUT0"], tiny_reference(requests[request_id]["INPUT0"]),
                                   **TINY_TOLERANCE)


def serves(reliability, model: str, seed: int, timeout: float = 30) -> None:
    requests = tiny_requests(8, seed)
    answers = run_on_stream(reliability.server.grpc_url, model, requests, timeout=timeout)
    assert_answers(answers, requests, killed=set())
    assert answers.errors == []


def test_a_killed_worker_answers_its_batch_and_is_replaced(reliability):
    server = reliability.server
    lost_before = server.metric_total("trtpool_workers_lost_total", "kill_dec")
    requests = tiny_requests(24, seed=160)
    requests["9"]["INPUT0"][0, 3] = KILL

    answers = run_on_stream(server.grpc_url, "kill_dec", requests, timeout=30)

    assert_answers(answers, requests, killed={"9"})
    serves(reliability, "kill_dec", seed=161)
    assert server.wait_for_metric("trtpool_workers_lost_total", "kill_dec", lost_before + 1) == lost_before + 1


def test_more_kills_than_contexts_leave_the_model_serving(reliability):
    """Two contexts, three kills one after the other: a dying worker gives its
    context back, so the pool never shrinks."""
    server = reliability.server
    lost_before = server.metric_total("trtpool_workers_lost_total", "kill_dec")
    for kill in range(3):
        requests = tiny_requests(4, seed=170 + kill)
        requests["0"]["INPUT0"][0, 0] = KILL
        assert_answers(run_on_stream(server.grpc_url, "kill_dec", requests, timeout=30), requests, killed={"0"})
        serves(reliability, "kill_dec", seed=180 + kill)
    assert server.wait_for_metric("trtpool_workers_lost_total", "kill_dec", lost_before + 3) == lost_before + 3


def test_a_worker_killed_while_submitting_leaves_the_model_serving(reliability):
    """A kill inside submit: the context is given back (rebuilt) on the way out, so a
    one-context model serves the next request (it never did before)."""
    requests = tiny_requests(1, seed=190)
    requests["0"]["INPUT0"][0, 0] = KILL_AT_SUBMIT
    assert_answers(run_on_stream(reliability.server.grpc_url, "kill_submit_dec", requests, timeout=30),
                   requests, killed={"0"})
    serves(reliability, "kill_submit_dec", seed=191, timeout=10)
