"""The pool and batch runner driven in-process over the real ONNX Runtime."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from tests.doubles.flaky_runtime import SENTINEL, FlakyOnnxRuntime
from trtpool import parameters
from trtpool.engine.answer import Kept
from trtpool.engine.batching import BatchRunner, Item
from trtpool.engine.pool import ContextPool, auto_size
from trtpool.errors import ConfigError, ContextFailure, InvalidInput
from trtpool.runtimes.onnxruntime import OnnxRuntime
from trtpool_builder.examples import write_example
from trtpool_builder.examples.tiny import tiny_reference

TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # float32 ONNX Runtime vs float64 numpy


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    version_dir = tmp_path_factory.mktemp("tiny") / "1"
    version_dir.mkdir()
    write_example("tiny", version_dir / "model.onnx")
    return version_dir


def make_cfg(version_dir: Path, **params: str) -> parameters.PoolConfig:
    config = {"name": "tiny", "max_batch_size": 8,
              "parameters": {k: {"string_value": v} for k, v in params.items()}}
    return parameters.load(config, version_dir, "cpu")


def run(runner: BatchRunner, requests):
    kept = [Kept() for _ in requests]
    runner.run(requests, kept)
    return [k.answer for k in kept]


def test_batch_matches_float64_reference_and_splits_per_request(tiny_dir):
    runtime = OnnxRuntime(make_cfg(tiny_dir, contexts="2"), tiny_dir / "model.onnx")
    runner = BatchRunner(ContextPool(runtime, 2))
    rng = np.random.default_rng(1)
    requests = [{"INPUT0": rng.standard_normal((n, 16)).astype(np.float32)} for n in (1, 3, 2)]
    for request, result in zip(requests, run(runner, requests)):
        np.testing.assert_allclose(result["OUTPUT0"], tiny_reference(request["INPUT0"]), **TOLERANCE)


def test_batch_above_profile_is_split_across_contexts(tiny_dir):
    runtime = OnnxRuntime(make_cfg(tiny_dir, profile="INPUT0=1x16:4x16:4x16"), tiny_dir / "model.onnx")
    pool = ContextPool(runtime, 3)
    runner = BatchRunner(pool)
    rng = np.random.default_rng(2)
    requests = [{"INPUT0": rng.standard_normal((2, 16)).astype(np.float32)} for _ in range(5)]
    planned = runner.planner.plan([Item(Kept(), {}, {"INPUT0": (2, 16)}) for _ in range(5)])
    assert [sum(i.batch for i in chunk) for chunk in planned] == [4, 4, 2]
    results = run(runner, requests)
    for request, result in zip(requests, results):
        np.testing.assert_allclose(result["OUTPUT0"], tiny_reference(request["INPUT0"]), **TOLERANCE)
    assert sum(s.runs for s in pool.stats.contexts.values()) == 3


def test_invalid_request_fails_alone(tiny_dir):
    runtime = OnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx")
    runner = BatchRunner(ContextPool(runtime, 1))
    good = {"INPUT0": np.ones((1, 16), np.float32)}
    results = run(runner, [good, {"INPUT0": np.ones((1, 16), np.int32)}, {"INPUT0": np.ones((1, 15), np.float32)}, {}])
    np.testing.assert_allclose(results[0]["OUTPUT0"], tiny_reference(good["INPUT0"]), **TOLERANCE)
    assert isinstance(results[1], InvalidInput) and "INPUT0" in str(results[1]) and "expected FP32" in str(results[1])
    assert isinstance(results[2], InvalidInput) and "dimension 1 is 15, expected 16" in str(results[2])
    assert isinstance(results[3], InvalidInput) and "missing input" in str(results[3])


def test_batch_above_max_batch_is_refused(tiny_dir):
    runtime = OnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx")
    runner = BatchRunner(ContextPool(runtime, 1))
    [result] = run(runner, [{"INPUT0": np.ones((9, 16), np.float32)}])
    assert isinstance(result, InvalidInput) and "outside 1..8" in str(result)


def test_failed_context_is_rebuilt_and_only_the_poisoned_request_fails(tiny_dir):
    runtime = FlakyOnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx")
    pool = ContextPool(runtime, 2)
    runner = BatchRunner(pool)
    rng = np.random.default_rng(3)
    requests = [{"INPUT0": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(4)]
    requests[2]["INPUT0"][0, 0] = SENTINEL
    results = run(runner, requests)
    assert isinstance(results[2], ContextFailure) and "injected failure" in str(results[2])
    for i in (0, 1, 3):
        np.testing.assert_allclose(results[i]["OUTPUT0"], tiny_reference(requests[i]["INPUT0"]), **TOLERANCE)
    assert sum(s.rebuilds for s in pool.stats.contexts.values()) >= 1
    # Every context serves again after the rebuild.
    for _ in range(4):
        [ok] = run(runner, [requests[0]])
        np.testing.assert_allclose(ok["OUTPUT0"], tiny_reference(requests[0]["INPUT0"]), **TOLERANCE)


def test_concurrent_batches_share_the_pool(tiny_dir):
    runtime = OnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx")
    pool = ContextPool(runtime, 2)
    runner = BatchRunner(pool)
    errors = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(50):
            x = rng.standard_normal((4, 16)).astype(np.float32)
            [out] = run(runner, [{"INPUT0": x}])
            if not np.allclose(out["OUTPUT0"], tiny_reference(x), **TOLERANCE):
                errors.append(seed)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == []
    assert pool.stats.acquisitions == 200
    assert all(s.runs > 0 for s in pool.stats.contexts.values())


def test_auto_size_uses_memory_fraction(tiny_dir):
    runtime = OnnxRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx")
    per_context = runtime.context_memory_bytes()
    assert per_context == 8 * 16 * 4 + 8 * 4 * 4  # input and output buffers at batch 8
    assert auto_size(runtime, 0.5, ceiling=3) == 3
    assert auto_size(runtime, 1e-12) == 1  # floor of one


@pytest.mark.parametrize("kind, device_id, device", [("GPU", "0", "cuda:0"), ("GPU", "1", "cuda:1"),
                                                     ("CPU", "0", "cpu"), ("MODEL", "0", "cpu")])
def test_each_instance_runs_on_the_device_triton_gives_it(kind, device_id, device):
    assert parameters.instance_device(kind, device_id) == device


def test_config_errors_name_parameter_and_accepted_values(tiny_dir):
    with pytest.raises(ConfigError, match="parameter 'contexts': 'many' is not an integer"):
        make_cfg(tiny_dir, contexts="many")
    with pytest.raises(ConfigError, match=r"parameter 'mode': 'async' is not accepted; expected one of sync, pipelined, decoupled"):
        make_cfg(tiny_dir, mode="async")
    with pytest.raises(ConfigError, match=r"memory_fraction.*expected a number in \(0, 1\]"):
        make_cfg(tiny_dir, memory_fraction="2")
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) \['context'\] \(did you mean 'contexts'\?\); "
                                          r"trtpool accepts \['FORCE_CPU_ONLY_INPUT_TENSORS', "):
        make_cfg(tiny_dir, context="2")
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) \['mdoe', 'zzz'\] \(did you mean 'mode' for 'mdoe'\?\);"):
        make_cfg(tiny_dir, mdoe="sync", zzz="1")
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) \['zzz'\]; trtpool accepts"):
        make_cfg(tiny_dir, zzz="1")
    with pytest.raises(ConfigError, match="parameter 'metrics_interval_ms': -1 is too small; expected a whole number from 0 to 60000"):
        make_cfg(tiny_dir, metrics_interval_ms="-1")
    assert make_cfg(tiny_dir, metrics_interval_ms="0").metrics_interval_ms == 0
    assert make_cfg(tiny_dir).metrics_interval_ms == 1000
    assert make_cfg(tiny_dir).cancel_check_after_us == 10_000
    assert make_cfg(tiny_dir, cancel_check_after_microseconds="0").cancel_check_after_us == 0
    with pytest.raises(ConfigError, match="parameter 'cancel_check_after_microseconds': 'soon' is not an integer"):
        make_cfg(tiny_dir, cancel_check_after_microseconds="soon")


class UnrebuildableRuntime(FlakyOnnxRuntime):
    """The flaky double whose context rebuilds fail while `rebuilds_fail` is set (a dead GPU, say)."""

    rebuilds_fail = False

    def create_context(self, index):
        if self.rebuilds_fail:
            raise RuntimeError("GPU is gone")
        return super().create_context(index)


def test_a_context_that_cannot_be_rebuilt_says_why_and_is_retried(tiny_dir):
    runtime = UnrebuildableRuntime(make_cfg(tiny_dir), tiny_dir / "model.onnx")
    runner = BatchRunner(ContextPool(runtime, 1))
    good = {"INPUT0": np.ones((1, 16), np.float32)}
    poisoned = {"INPUT0": np.full((1, 16), SENTINEL, np.float32)}
    runtime.rebuilds_fail = True
    [broken] = run(runner, [poisoned])
    assert isinstance(broken, ContextFailure) and "injected failure" in str(broken)
    [refused] = run(runner, [good])
    assert isinstance(refused, ContextFailure)
    assert "context 0 is out of service" in str(refused) and "GPU is gone" in str(refused)
    runtime.rebuilds_fail = False
    # Each use of the slot fails and tries the rebuild again; this one succeeds.
    [refused_again] = run(runner, [good])
    assert isinstance(refused_again, ContextFailure) and "out of service" in str(refused_again)
    [ok] = run(runner, [good])
    np.testing.assert_allclose(ok["OUTPUT0"], tiny_reference(good["INPUT0"]), **TOLERANCE)


@pytest.mark.parametrize("mode", ["sync", "pipelined", "decoupled"])
def test_auto_contexts_follow_the_mode(tiny_dir, mode):
    """`contexts: auto` stops at what the mode was measured to use (and at the cores on a CPU)."""
    import os

    from trtpool.instance import AUTO_CONTEXTS, ModelInstance

    config = {"name": "tiny", "max_batch_size": 8, "model_transaction_policy": {"decoupled": mode == "decoupled"},
              "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
              "parameters": {"mode": {"string_value": mode}}}
    instance = ModelInstance(config, tiny_dir, "cpu")
    try:
        assert instance.pool.size == min(AUTO_CONTEXTS[mode], os.cpu_count())
    finally:
        instance.close()


TWO_PROFILES = "INPUT0=1x16:2x16:4x16;INPUT0=8x16:16x16:64x16"  # disjoint, as the build example of docs/how-to/serve-an-onnx-model.md


@pytest.mark.parametrize("batches, planned", [
    ([1] * 12, [12]),          # no profile takes 12 from the small one's view: the large one does
    ([1] * 5, [4, 1]),         # 5 falls between the profiles: the largest admitted head, then the rest
    ([1] * 70, [64, 4, 2]),    # split above the largest profile only
    ([3, 2, 30, 1], [36]),
])
def test_batches_are_planned_for_the_profile_that_admits_them(tiny_dir, batches, planned):
    runtime = OnnxRuntime(make_cfg(tiny_dir, profile=TWO_PROFILES), tiny_dir / "model.onnx")
    runner = BatchRunner(ContextPool(runtime, 1))
    responders = [Kept() for _ in batches]
    chunks = runner.planner.plan([Item(r, {}, {"INPUT0": (n, 16)}) for r, n in zip(responders, batches)])
    assert [sum(item.batch for item in chunk) for chunk in chunks] == planned
    assert [item.responder for chunk in chunks for item in chunk] == responders  # order kept
    rng = np.random.default_rng(4)
    requests = [{"INPUT0": rng.standard_normal((n, 16)).astype(np.float32)} for n in batches]
    for request, result in zip(requests, run(runner, requests)):
        np.testing.assert_allclose(result["OUTPUT0"], tiny_reference(request["INPUT0"]), **TOLERANCE)
    runner.close()


def test_out_of_profile_shapes_name_the_models_profiles(tiny_dir):
    runtime = OnnxRuntime(make_cfg(tiny_dir, profile=TWO_PROFILES), tiny_dir / "model.onnx")
    runner = BatchRunner(ContextPool(runtime, 1))
    [result] = run(runner, [{"INPUT0": np.ones((6, 16), np.float32)}])
    assert isinstance(result, InvalidInput)
    assert "input 'INPUT0': shape [6, 16] is outside the model's optimization profiles" in str(result)
    assert "[[1, 16] .. [4, 16]] or [[8, 16] .. [64, 16]]" in str(result)


def test_an_output_sized_by_the_data_is_allocated_per_batch(tmp_path):
    """NonZero: its output's size depends on the values, not the shapes. ONNX Runtime
    allocates it for each batch and the batch's own shape comes back."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["where"], perm=[1, 0])],
        "nonzero", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("where", TensorProto.INT64, [None, 2])])
    path = tmp_path / "1" / "model.onnx"
    path.parent.mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    config = {"name": "nonzero", "max_batch_size": 0, "parameters": {"profile": {"string_value": "x=1x4:4x4:8x4"}}}
    runtime = OnnxRuntime(parameters.load(config, path.parent, "cpu"), path)
    assert [(s.name, s.shape) for s in runtime.signature.outputs] == [("where", (-1, 2))]
    runner = BatchRunner(ContextPool(runtime, 1))
    inputs = [np.eye(4, dtype=np.float32)[:3], np.zeros((2, 4), np.float32), np.ones((5, 4), np.float32)]
    for x, result in zip(inputs, run(runner, [{"x": x} for x in inputs])):
        np.testing.assert_array_equal(result["where"], np.argwhere(x))
