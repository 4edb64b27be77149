"""The elastic context pool in-process over the real ONNX Runtime (and its flaky
double): it grows off the request path while batches wait, closes contexts that
idle, never touches a running one, and serves on when a context cannot be made.

No test sleeps to synchronize: each waits for a state with a generous deadline.
Answers are compared with the tiny model's float64 numpy reference.
"""
from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.doubles.flaky_runtime import FAIL_CREATE_FILE, FlakyOnnxRuntime
from tests.unit.trtpool.engine.test_batching import make_cfg
from tests.unit.trtpool.runtimes.test_tensorrt import batch, check, engine_path, fake, load, run, trt  # noqa: F401 (fixtures)
from trtpool.engine.answer import Kept
from trtpool.engine.batching import BatchRunner
from trtpool.engine.pool import ContextPool
from trtpool.errors import ConfigError
from trtpool.parameters import Elasticity
from trtpool.runtimes.onnxruntime import OnnxRuntime
from trtpool_builder.examples import write_example
from trtpool_builder.examples.tiny import tiny_reference

TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # float32 ONNX Runtime vs float64 numpy
DEADLINE_S = 30.0
NEVER = 3600.0  # an idle period no test reaches


@pytest.fixture()
def tiny_dir(tmp_path) -> Path:
    version_dir = tmp_path / "1"
    version_dir.mkdir()
    write_example("tiny", version_dir / "model.onnx")
    return version_dir


def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}"
        time.sleep(0.01)


def check_runs(context, seed: int) -> None:
    """One batch on a context, its answer compared with the reference."""
    x = np.random.default_rng(seed).standard_normal((3, 16)).astype(np.float32)
    context.submit({"INPUT0": [x]})
    np.testing.assert_allclose(context.complete()["OUTPUT0"], tiny_reference(x), **TOLERANCE)


def waiting_taker(pool: ContextPool) -> tuple[threading.Thread, list]:
    got: list = []
    thread = threading.Thread(target=lambda: got.append(pool.take()))
    thread.start()
    return thread, got


def test_a_waiting_batch_gets_a_new_context_while_the_busy_one_runs(tiny_dir):
    pool = ContextPool(OnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx"), 3,
                       Elasticity(min_contexts=1, grow_after_wait_us=0, shrink_after_idle_s=NEVER))
    try:
        assert (pool.stats.current, pool.stats.minimum, pool.stats.maximum) == (1, 1, 3)
        busy = pool.take()
        thread, got = waiting_taker(pool)
        thread.join(DEADLINE_S)
        assert got and got[0].index == 1, "the waiting taker was served by a context made for it"
        assert (pool.stats.current, pool.stats.grown) == (2, 1)
        check_runs(got[0], 1)
        check_runs(busy, 2)
        pool.give(got[0])
        pool.give(busy)
    finally:
        pool.close()


def test_grows_no_further_than_its_maximum(tiny_dir):
    pool = ContextPool(OnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx"), 2,
                       Elasticity(min_contexts=1, grow_after_wait_us=0, shrink_after_idle_s=NEVER))
    try:
        held = [pool.take()]
        thread, got = waiting_taker(pool)
        thread.join(DEADLINE_S)
        held += got
        thread, got = waiting_taker(pool)  # waits: the pool is at its maximum of 2
        eventually(lambda: pool.stats.grown == 1 and len(pool._waiting) == 1, "one taker waiting at the maximum")
        assert not got and pool.stats.current == 2
        pool.give(held.pop())
        thread.join(DEADLINE_S)
        assert got and pool.stats.current == 2 and pool.stats.grown == 1
        pool.give(got[0])
        pool.give(held.pop())
    finally:
        pool.close()


def test_concurrent_load_grows_the_pool_and_every_answer_is_right(tiny_dir):
    pool = ContextPool(OnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx"), 3,
                       Elasticity(min_contexts=1, grow_after_wait_us=0, shrink_after_idle_s=NEVER))
    runner = BatchRunner(pool)
    stop = threading.Event()

    def client(seed: int) -> int:
        rng, answered = np.random.default_rng(seed), 0
        while not stop.is_set():
            x = rng.standard_normal((int(rng.integers(1, 9)), 16)).astype(np.float32)
            kept = Kept()
            runner.run([{"INPUT0": x}], [kept])
            assert kept.error is None, kept.error
            np.testing.assert_allclose(kept.outputs["OUTPUT0"], tiny_reference(x), **TOLERANCE)
            answered += 1
        return answered

    try:
        with ThreadPoolExecutor(6) as clients:
            futures = [clients.submit(client, seed) for seed in range(6)]
            try:
                eventually(lambda: pool.stats.current == 3 or any(f.done() for f in futures), "growth to 3")
            finally:
                stop.set()
            answered = sum(f.result() for f in futures)  # re-raises any wrong answer
        assert pool.stats.current == 3 and pool.stats.grown == 2 and answered > 0
        assert sum(s.runs for s in pool.stats.contexts.values()) == answered
    finally:
        runner.close()
        pool.close()


def test_idle_contexts_are_closed_down_to_the_minimum_and_the_rest_serve(tiny_dir):
    pool = ContextPool(OnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx"), 3,
                       Elasticity(min_contexts=1, grow_after_wait_us=0, shrink_after_idle_s=0.05))
    try:
        held = [pool.take()]
        for _ in range(2):
            thread, got = waiting_taker(pool)
            thread.join(DEADLINE_S)
            held += got
        assert pool.stats.current == 3
        for context in held:
            pool.give(context)
        eventually(lambda: pool.stats.current == 1, "shrink to the minimum")
        assert pool.stats.shrunk == 2
        closed = [c for c in held if c.inputs is None]
        assert len(closed) == 2, "the closed contexts dropped their buffers and binding"
        with pool.acquire() as context:
            assert context.inputs is not None
            check_runs(context, 3)
    finally:
        pool.close()


def test_a_running_context_is_never_closed(tiny_dir):
    """While one context holds a batch past the idle period, only the free one is
    closed, and the running batch completes with the right answer."""
    pool = ContextPool(OnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx"), 2,
                       Elasticity(min_contexts=1, grow_after_wait_us=0, shrink_after_idle_s=0.05))
    try:
        first = pool.take()
        thread, got = waiting_taker(pool)
        thread.join(DEADLINE_S)
        second = got[0]
        x = np.random.default_rng(4).standard_normal((2, 16)).astype(np.float32)
        second.submit({"INPUT0": [x]})  # in flight while the other one idles
        pool.give(first)
        eventually(lambda: pool.stats.shrunk == 1, "the idle context closed")
        assert pool.stats.current == 1 and first.inputs is None and second.inputs is not None
        np.testing.assert_allclose(second.complete()["OUTPUT0"], tiny_reference(x), **TOLERANCE)
        pool.give(second)
        with pool.acquire() as context:
            assert context is second
            check_runs(context, 5)
    finally:
        pool.close()


def test_no_batch_waits_for_a_creation_while_a_context_is_free(tiny_dir):
    runtime = FlakyOnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx")
    pool = ContextPool(runtime, 2, Elasticity(min_contexts=1, grow_after_wait_us=0, shrink_after_idle_s=NEVER))
    try:
        runtime.creations_allowed.clear()  # the next creation hangs until the test lets it go
        busy = pool.take()
        thread, got = waiting_taker(pool)  # starts a creation, which hangs
        eventually(lambda: 1 in pool._live, "a creation under way")
        pool.give(busy)  # the waiting taker gets this one, not the context being made
        thread.join(DEADLINE_S)
        assert got and got[0] is busy and pool.stats.grown == 0
        check_runs(got[0], 6)
        with ThreadPoolExecutor(1) as other:  # another batch, with the creation still hanging
            pool.give(got[0])
            again = other.submit(pool.take).result(timeout=DEADLINE_S)
        assert again is busy and pool.stats.grown == 0
        pool.give(again)
        runtime.creations_allowed.set()
        eventually(lambda: pool.stats.current == 2, "the new context joined")
    finally:
        runtime.creations_allowed.set()
        pool.close()


def test_a_context_that_cannot_be_made_leaves_the_pool_serving(tiny_dir):
    runtime = FlakyOnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx")
    (tiny_dir / FAIL_CREATE_FILE).touch()
    pool = ContextPool(runtime, 2, Elasticity(min_contexts=1, grow_after_wait_us=0, shrink_after_idle_s=0.2))
    try:
        busy = pool.take()
        thread, got = waiting_taker(pool)
        eventually(lambda: pool.stats.grow_failures == 1, "a failed creation")
        assert not got and pool.stats.current == 1
        pool.give(busy)
        thread.join(DEADLINE_S)
        assert got and got[0] is busy
        check_runs(got[0], 7)
        pool.give(got[0])
        # Once contexts can be made again, the pool grows at the next wait after its back-off.
        (tiny_dir / FAIL_CREATE_FILE).unlink()
        busy = pool.take()
        thread, got = waiting_taker(pool)
        thread.join(DEADLINE_S)
        assert got and got[0].index == 1 and pool.stats.grown == 1
        check_runs(got[0], 8)
        pool.give(got[0])
        pool.give(busy)
    finally:
        pool.close()


class FullDevice(OnnxRuntime):
    """A device with less memory free than one more context costs."""

    def free_memory_bytes(self) -> int:
        return self.context_memory_bytes() - 1


def test_growth_stops_before_the_device_runs_out(tiny_dir):
    pool = ContextPool(FullDevice(make_cfg(tiny_dir), tiny_dir / "model.onnx"), 2,
                       Elasticity(min_contexts=1, grow_after_wait_us=0, shrink_after_idle_s=NEVER))
    try:
        busy = pool.take()
        thread, got = waiting_taker(pool)
        eventually(lambda: pool.stats.grow_failures == 1, "a refused creation")
        assert not got and pool.stats.current == 1 and pool.stats.grown == 0
        pool.give(busy)
        thread.join(DEADLINE_S)
        check_runs(got[0], 9)
        pool.give(got[0])
    finally:
        pool.close()


@pytest.mark.parametrize("params, message", [
    ({"contexts": "4", "max_contexts": "8"}, "parameter 'contexts' is 4 but 'max_contexts' is set too"),
    ({"min_contexts": "3", "max_contexts": "2"}, "parameter 'max_contexts': 2 is below min_contexts 3"),
    ({"min_contexts": "0"}, "parameter 'min_contexts': 0 is too small; expected a whole number from 1 to 64"),
    ({"max_contexts": "many"}, "parameter 'max_contexts': 'many' is not an integer"),
    ({"min_contexts": "1", "grow_after_wait_microseconds": "-1"},
     "parameter 'grow_after_wait_microseconds': -1 is too small; expected a whole number from 0 to 1000000"),
    ({"min_contexts": "1", "shrink_after_idle_seconds": "0"},
     "parameter 'shrink_after_idle_seconds': '0' is not accepted; expected a number of seconds above 0 and at most 86400"),
    ({"shrink_after_idle_seconds": "5"}, "parameter 'shrink_after_idle_seconds' applies to an elastic pool"),
])
def test_bad_elastic_parameters_are_named(tiny_dir, params, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_cfg(tiny_dir, **params)


def test_elastic_parameters_and_defaults(tiny_dir):
    assert make_cfg(tiny_dir, contexts="3").elastic is None
    cfg = make_cfg(tiny_dir, min_contexts="2", max_contexts="8", grow_after_wait_microseconds="500",
                   shrink_after_idle_seconds="0.5")
    assert cfg.elastic == Elasticity(2, 8, 500, 0.5) and cfg.most_contexts == 8 and cfg.contexts is None
    assert make_cfg(tiny_dir, max_contexts="4").elastic == Elasticity(1, 4, 500, 60.0)
    assert make_cfg(tiny_dir, contexts="auto", min_contexts="2").elastic.max_contexts is None


def test_a_closed_tensorrt_context_frees_its_device_memory_streams_and_graphs(engine_path, fake):
    """Over the TensorRT runtime (its double on the CUDA double): contexts made under
    load, each with graphs captured, and closed when idle leave the device as one
    context left it: every allocation, stream, event and graph of the others freed."""
    runtime = load(engine_path)
    pool = ContextPool(runtime, 3, Elasticity(min_contexts=1, grow_after_wait_us=0, shrink_after_idle_s=0.05))
    try:
        with pool.acquire() as context:
            for _ in range(2):  # warm-up, then capture
                x = batch(3)
                check(run(context, x), x)
        gc.collect()
        one = fake.live()
        held = [pool.take()]
        for _ in range(2):
            thread, got = waiting_taker(pool)
            thread.join(DEADLINE_S)
            held += got
        for context in held:
            for _ in range(2):
                x = batch(3)
                check(run(context, x), x)
        assert pool.stats.current == 3 and fake.live()["device_memory"] > one["device_memory"]
        for context in held:
            pool.give(context)
        eventually(lambda: pool.stats.current == 1, "shrink to one context")
        del held, context, got
        gc.collect()
        assert fake.live() == one
        with pool.acquire() as context:
            x = batch(5)
            check(run(context, x), x)
    finally:
        pool.close()
