"""The decoupled mode's scheduler driven in-process: which requests it asks
about cancellation (each question is a round trip to the server in Triton)."""
from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.doubles.flaky_runtime import SLOW, SLOW_SECONDS, FlakyOnnxRuntime
from trtpool import parameters
from trtpool.engine.batching import BatchRunner
from trtpool.engine.pool import ContextPool
from trtpool.modes.decoupled import Scheduler
from trtpool_builder.examples import write_example
from trtpool_builder.examples.tiny import tiny_reference


class RecordingResponder:
    """A Responder that records what the scheduler did with its request."""

    def __init__(self, cancelled: bool) -> None:
        self.is_cancelled = cancelled
        self.asked = 0
        self.outcome: str | None = None
        self.outputs: dict[str, np.ndarray] | None = None
        self.answered = threading.Event()

    def send(self, outputs: dict[str, np.ndarray]) -> None:
        self.outcome, self.outputs = "sent", {k: v.copy() for k, v in outputs.items()}
        self.answered.set()

    def fail(self, error: Exception) -> None:
        self.outcome = f"failed: {type(error).__name__}: {error}"
        self.answered.set()

    def cancelled(self) -> bool:
        self.asked += 1
        return self.is_cancelled


@pytest.fixture
def scheduler(tmp_path: Path):
    version_dir = tmp_path / "1"
    version_dir.mkdir()
    write_example("tiny", version_dir / "model.onnx")
    cfg = parameters.load({"name": "tiny", "max_batch_size": 8, "parameters": {}}, version_dir, "cpu")
    runtime = FlakyOnnxRuntime(cfg, version_dir / "model.onnx")
    pool = ContextPool(runtime, 1)
    # Requests that waited 0.3 s or more are asked; the slow batch holds the one context for 1 s.
    scheduler = Scheduler(BatchRunner(pool), max_queue=8, batch_wait_us=0, cancel_check_after_us=300_000)
    yield scheduler
    scheduler.close()
    pool.close()


def test_only_requests_that_waited_are_asked_about_cancellation(scheduler):
    x = np.full((1, 16), 0.5, np.float32)
    prompt = RecordingResponder(cancelled=True)  # would say cancelled, but is taken at once
    scheduler.submit({"INPUT0": x}, prompt)
    assert prompt.answered.wait(5)
    assert prompt.asked == 0 and prompt.outcome == "sent"
    np.testing.assert_allclose(prompt.outputs["OUTPUT0"], tiny_reference(x), rtol=1e-5, atol=1e-5)

    slow = np.ones((1, 16), np.float32)
    slow[0, 0] = SLOW
    blocker = RecordingResponder(cancelled=False)
    scheduler.submit({"INPUT0": slow}, blocker)
    until_taken(scheduler, 2)  # the slow batch now holds the only context for SLOW_SECONDS
    waited_cancelled, waited_live = RecordingResponder(cancelled=True), RecordingResponder(cancelled=False)
    scheduler.submit({"INPUT0": x}, waited_cancelled)
    scheduler.submit({"INPUT0": x}, waited_live)
    for responder in (blocker, waited_cancelled, waited_live):
        assert responder.answered.wait(SLOW_SECONDS + 5)
    assert waited_cancelled.asked == 1 and waited_cancelled.outcome == "failed: Cancelled: request cancelled before it ran"
    assert waited_live.asked == 1 and waited_live.outcome == "sent"
    np.testing.assert_allclose(waited_live.outputs["OUTPUT0"], tiny_reference(x), rtol=1e-5, atol=1e-5)


def make_scheduler(tmp_path: Path, profile: str, contexts: int = 1, on_worker_lost=None) -> Scheduler:
    version_dir = tmp_path / "1"
    version_dir.mkdir(exist_ok=True)
    write_example("tiny", version_dir / "model.onnx")
    config = {"name": "tiny", "max_batch_size": 64, "parameters": {"profile": {"string_value": profile}}}
    cfg = parameters.load(config, version_dir, "cpu")
    pool = ContextPool(FlakyOnnxRuntime(cfg, version_dir / "model.onnx"), contexts)
    return Scheduler(BatchRunner(pool), max_queue=256, batch_wait_us=0, cancel_check_after_us=10**9,
                     on_worker_lost=on_worker_lost)


def until_taken(scheduler: Scheduler, batches: int) -> None:
    """Wait until the scheduler's workers have taken a context `batches` times in all
    (the slow batch holds its context from then on, for SLOW_SECONDS)."""
    deadline = time.monotonic() + 10
    while scheduler.runner.pool.stats.acquisitions < batches:
        assert time.monotonic() < deadline, "no worker took the batch"
        time.sleep(0.005)


def slow_request() -> dict[str, np.ndarray]:
    x = np.ones((1, 16), np.float32)
    x[0, 0] = SLOW
    return {"INPUT0": x}


def test_requests_that_do_not_fit_one_batch_wait_their_turn_and_all_are_answered(tmp_path):
    """The report's repro: batch sizes 60, 8, 1 repeating behind a busy context. A
    request that does not fit the batch being taken stays queued (the old queue
    search compared request records holding arrays, raised, and killed the worker)."""
    scheduler = make_scheduler(tmp_path, "INPUT0=1x16:8x16:64x16")
    try:
        blocker = RecordingResponder(cancelled=False)
        scheduler.submit(slow_request(), blocker)
        until_taken(scheduler, 1)
        rng = np.random.default_rng(5)
        requests = [rng.standard_normal((n, 16)).astype(np.float32) for n in [60, 8, 1] * 10]
        responders = [RecordingResponder(cancelled=False) for _ in requests]
        for x, responder in zip(requests, responders):
            scheduler.submit({"INPUT0": x}, responder)
        for responder in (blocker, *responders):
            assert responder.answered.wait(SLOW_SECONDS + 10)
        for x, responder in zip(requests, responders):
            assert responder.outcome == "sent", responder.outcome
            np.testing.assert_allclose(responder.outputs["OUTPUT0"], tiny_reference(x), rtol=1e-5, atol=1e-5)
        assert all(worker.is_alive() for worker in scheduler.workers)
    finally:
        scheduler.close()
        scheduler.runner.pool.close()


def test_queued_requests_join_the_profile_that_admits_them(tmp_path):
    """Twelve batch-1 requests behind a busy context run as one batch of 12 with profiles
    1-4 and 8-64 (the small profile alone would have split them 4 + 4 + 4)."""
    scheduler = make_scheduler(tmp_path, "INPUT0=1x16:2x16:4x16;INPUT0=8x16:16x16:64x16")
    pool = scheduler.runner.pool
    try:
        blocker = RecordingResponder(cancelled=False)
        scheduler.submit(slow_request(), blocker)
        until_taken(scheduler, 1)
        responders = [RecordingResponder(cancelled=False) for _ in range(12)]
        for responder in responders:
            scheduler.submit({"INPUT0": np.full((1, 16), 0.5, np.float32)}, responder)
        for responder in (blocker, *responders):
            assert responder.answered.wait(SLOW_SECONDS + 10)
        assert [r.outcome for r in responders] == ["sent"] * 12
        assert pool.stats.contexts[0].runs == 2  # the slow batch, then the twelve together
    finally:
        scheduler.close()
        pool.close()


class WorkerKilled(BaseException):
    """Raised into a worker thread from outside, as a crash that no `except Exception` stops."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the kill, on purpose
def test_a_killed_worker_fails_its_batch_is_replaced_and_every_request_is_answered(tmp_path):
    lost = []
    scheduler = make_scheduler(tmp_path, "INPUT0=1x16:8x16:64x16", on_worker_lost=lambda: lost.append(1))
    try:
        in_flight = RecordingResponder(cancelled=False)
        scheduler.submit(slow_request(), in_flight)
        until_taken(scheduler, 1)
        time.sleep(0.2)  # the worker is inside the slow batch's run, past taking its context
        [worker] = scheduler.workers
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(WorkerKilled))
        queued = [RecordingResponder(cancelled=False) for _ in range(5)]
        for responder in queued:
            scheduler.submit({"INPUT0": np.full((1, 16), 0.25, np.float32)}, responder)
        assert in_flight.answered.wait(SLOW_SECONDS + 10)
        assert in_flight.outcome.startswith("failed: ContextFailure") and "worker running it stopped" in in_flight.outcome
        for responder in queued:  # served by the replacement worker
            assert responder.answered.wait(10) and responder.outcome == "sent", responder.outcome
        assert lost == [1] and scheduler.workers[0] is not worker and scheduler.workers[0].is_alive()
    finally:
        scheduler.close()
        scheduler.runner.pool.close()
