"""The decoupled mode's scheduler driven in-process: which requests it asks
about cancellation (each question is a round trip to the server in Triton)."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.doubles.flaky_runtime import SLOW, SLOW_SECONDS, FlakyOnnxRuntime
from trtpool import config as pool_config
from trtpool.pool import ContextPool
from trtpool.scheduler import Scheduler
from trtpool.serving import BatchRunner
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
    cfg = pool_config.load({"name": "tiny", "max_batch_size": 8, "parameters": {}}, version_dir, "cpu")
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
    time.sleep(0.1)  # the slow batch now holds the only context for SLOW_SECONDS
    waited_cancelled, waited_live = RecordingResponder(cancelled=True), RecordingResponder(cancelled=False)
    scheduler.submit({"INPUT0": x}, waited_cancelled)
    scheduler.submit({"INPUT0": x}, waited_live)
    for responder in (blocker, waited_cancelled, waited_live):
        assert responder.answered.wait(SLOW_SECONDS + 5)
    assert waited_cancelled.asked == 1 and waited_cancelled.outcome == "failed: Cancelled: request cancelled before it ran"
    assert waited_live.asked == 1 and waited_live.outcome == "sent"
    np.testing.assert_allclose(waited_live.outputs["OUTPUT0"], tiny_reference(x), rtol=1e-5, atol=1e-5)
