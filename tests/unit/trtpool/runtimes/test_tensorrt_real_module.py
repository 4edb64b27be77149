"""The TensorRT adapter against the real ``tensorrt_rtx`` module, as far as a machine
without a GPU allows: the process logger, plugin registration and runtime flags on
the real bindings, the refusal to deserialize (with TensorRT-RTX's own words), and
the metadata of real multi-profile engines driving the adapter's profile choice.

TensorRT-RTX builds engines here, but nothing here can deserialize one (no driver;
and no GPU of the project runs TensorRT-RTX: the H200 is compute capability 9.0),
so a real engine's metadata is read from the real builder's network and
optimization profiles (the engine inspector and ICudaEngine.get_tensor_profile_shape
need a deserialized engine), and the double runs it.
"""
from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from tests.doubles.cuda_double import FakeCudart, FakeDevice
from tests.doubles.engines import write_engine
from tests.doubles.tensorrt_double import engine_bytes, make_module
from trtpool import parameters
from trtpool.errors import EngineError, InvalidInput
from trtpool.gpu import cuda, trt_api
from trtpool.model.sidecar import TensorInfo
from trtpool.runtimes.tensorrt import TensorRTRuntime

rtx = pytest.importorskip("tensorrt_rtx")
no_gpu = pytest.mark.skipif(cuda.device_count() > 0, reason="checks behaviour on a machine without a GPU")
GPU = FakeDevice()
CAPABILITY = f"{GPU.major}.{GPU.minor}"
NUMPY_NAMES = {"FLOAT": "float32", "INT64": "int64", "INT32": "int32", "HALF": "float16"}


def make_cfg(version_dir: Path, **params: str) -> parameters.PoolConfig:
    config = {"name": "real", "max_batch_size": 0,
              "parameters": {k: {"string_value": v} for k, v in params.items()}}
    return parameters.load(config, version_dir, "cuda:0")


def build_real_engine(onnx_path: Path, profiles: list[dict[str, tuple]]) -> dict[str, Any]:
    """Build with the real TensorRT-RTX builder; return its plan and the engine's metadata as the
    real builder holds it: the network's I/O and what each real profile reports back."""
    logger = rtx.Logger(rtx.Logger.ERROR)
    builder = rtx.Builder(logger)
    network = builder.create_network(0)  # strongly typed, explicit batch: TensorRT 10's only mode
    parser = rtx.OnnxParser(network, logger)
    assert parser.parse(onnx_path.read_bytes()), [parser.get_error(i) for i in range(parser.num_errors)]
    config = builder.create_builder_config()
    real_profiles = []
    for ranges in profiles:
        profile = builder.create_optimization_profile()
        for name, (low, opt, high) in ranges.items():
            profile.set_shape(name, low, opt, high)
        config.add_optimization_profile(profile)
        real_profiles.append(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None

    def described(tensor: Any) -> list:
        return [tensor.name, tensor.dtype.name, list(tensor.shape)]

    inputs = [described(network.get_input(i)) for i in range(network.num_inputs)]
    return {
        "plan": bytes(plan),
        "io": {"inputs": inputs, "outputs": [described(network.get_output(i)) for i in range(network.num_outputs)]},
        "profiles": [{name: tuple(tuple(d) for d in profile.get_shape(name)) for name, _, _ in inputs}
                     for profile in real_profiles],
    }


def serve_real_metadata(folder: Path, onnx_path: Path, real: dict[str, Any]) -> Path:
    """A model folder whose engine is the double running the ONNX file with the real engine's metadata."""
    data = engine_bytes(onnx.load(str(onnx_path)), real["profiles"], io=real["io"])

    def infos(kind: str) -> list[TensorInfo]:
        return [TensorInfo(name, NUMPY_NAMES[dtype], tuple(shape)) for name, dtype, shape in real["io"][kind]]

    return write_engine(folder, data, real["profiles"], infos("inputs"), infos("outputs"),
                        module="tensorrt_rtx", version=rtx.__version__, capability=CAPABILITY)


@pytest.fixture
def fake(monkeypatch) -> FakeCudart:
    double = FakeCudart((GPU,))
    monkeypatch.setattr(cuda, "_cudart", double)
    return double


# ---- the real bindings ------------------------------------------------------------------------

def test_the_process_logger_and_plugins_on_the_real_module():
    logger = trt_api.process_logger(rtx)
    assert isinstance(logger, rtx.ILogger) and trt_api.process_logger(rtx) is logger
    trt_api.register_plugins(rtx)  # the real init_libnvinfer_plugins accepts it
    trt_api.register_plugins(rtx)  # and is called once


def test_runtime_flags_on_the_real_module():
    assert trt_api.new_runtime(rtx, host_code=False).engine_host_code_allowed is False  # the real default
    assert trt_api.new_runtime(rtx, host_code=True).engine_host_code_allowed is True


def test_real_errors_reach_the_log_as_errors_on_the_calling_thread_only(caplog):
    """TensorRT-RTX logs a failed deserialization on the thread that asked: a block open on
    another thread at the same time does not get it."""
    caplog.set_level(logging.DEBUG, logger="trtpool")
    runtime = trt_api.new_runtime(rtx, host_code=False)
    started, finished = threading.Event(), threading.Event()
    worker_errors: list[str] = []

    def worker() -> None:
        with trt_api.tensorrt_errors() as errors:
            started.wait(timeout=10)
            assert runtime.deserialize_cuda_engine(b"\0" * 64) is None
        worker_errors.extend(errors)
        finished.set()

    thread = threading.Thread(target=worker)
    thread.start()
    with trt_api.tensorrt_errors() as mine:
        started.set()
        finished.wait(timeout=30)
    thread.join()
    assert worker_errors and not mine
    records = [r for r in caplog.records if r.getMessage().startswith("tensorrt_rtx: ")]
    assert {r.levelno for r in records if "Error Code" in r.getMessage()} == {logging.ERROR}
    assert any(r.levelno == logging.DEBUG and "Loaded engine size" in r.getMessage() for r in records)  # INFO


@no_gpu
def test_real_rtx_engine_without_gpu_is_a_clear_engine_error(tmp_path):
    """Here (no GPU, no driver) the adapter stops at device selection with CUDA's reason."""
    path = build_tiny(tmp_path, CAPABILITY)
    with pytest.raises(EngineError) as error:
        TensorRTRuntime(make_cfg(path.parent), path, module_name="tensorrt_rtx")
    assert "needs GPU cuda:0" in str(error.value) and "driver" in str(error.value)


def build_tiny(tmp_path: Path, capability: str, version_compatible: bool = False) -> Path:
    """tiny.onnx as a real TensorRT-RTX plan, with its sidecar."""
    from trtpool_builder.examples import write_example

    onnx_path = write_example("tiny", tmp_path / "tiny.onnx")
    real = build_real_engine(onnx_path, TINY_PROFILES)
    return write_engine(tmp_path / "1", real["plan"], TINY_PROFILES, [TensorInfo("INPUT0", "float32", (-1, 16))],
                        [TensorInfo("OUTPUT0", "float32", (-1, 4))], module="tensorrt_rtx",
                        version=rtx.__version__, capability=capability, version_compatible=version_compatible)


TINY_PROFILES = [{"INPUT0": ((1, 16), (4, 16), (8, 16))}, {"INPUT0": ((9, 16), (16, 16), (32, 16))}]


@no_gpu
@pytest.mark.parametrize("version_compatible", [False, True])
def test_real_deserialization_refusal_carries_tensorrt_rtx_words(tmp_path, fake, monkeypatch, version_compatible):
    """With the CUDA double pretending an RTX 4090 is present, the adapter reaches the REAL
    deserialize_cuda_engine, through a real Runtime made with the flags the sidecar asks for;
    without a driver it returns None, and the EngineError carries what the real module logged."""
    original, made = trt_api.new_runtime, []

    def recording(trt: Any, host_code: bool) -> Any:
        made.append(original(trt, host_code))
        return made[-1]

    monkeypatch.setattr(trt_api, "new_runtime", recording)
    path = build_tiny(tmp_path, CAPABILITY, version_compatible)
    with pytest.raises(EngineError) as error:
        TensorRTRuntime(make_cfg(path.parent), path, module_name="tensorrt_rtx")
    message = str(error.value)
    assert f"engine '{path}'" in message and "cannot be deserialized by tensorrt_rtx" in message
    assert "CUDA driver version is insufficient" in message  # logged by tensorrt_rtx itself
    assert "trtpool-build" in message
    assert made[0].engine_host_code_allowed is version_compatible  # the real property, read back



# ---- profile choice with real engines' metadata -------------------------------------------------

def test_profile_choice_with_a_real_two_profile_engine(tmp_path, fake, monkeypatch):
    from trtpool_builder.examples import tiny_reference, write_example

    onnx_path = write_example("tiny", tmp_path / "tiny.onnx")
    real = build_real_engine(onnx_path, TINY_PROFILES)
    assert real["io"] == {"inputs": [["INPUT0", "FLOAT", [-1, 16]]], "outputs": [["OUTPUT0", "FLOAT", [-1, 4]]]}
    assert real["profiles"] == TINY_PROFILES  # as the real profiles report them back
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", make_module(fake, "tensorrt_rtx", rtx.__version__))
    runtime = TensorRTRuntime(make_cfg(tmp_path / "1"), serve_real_metadata(tmp_path / "1", onnx_path, real),
                              module_name="tensorrt_rtx")
    assert runtime.signature.max_batch_size == 32
    context = runtime.create_context(0)
    rng = np.random.default_rng(1)
    for size, profile in [(1, 0), (8, 0), (9, 1), (32, 1), (5, 0), (17, 1)]:
        x = rng.standard_normal((size, 16)).astype(np.float32)
        context.submit({"INPUT0": [x]})
        output = context.complete()["OUTPUT0"]
        assert context._context.active_optimization_profile == profile
        np.testing.assert_allclose(output, tiny_reference(x), rtol=1e-4, atol=1e-4)  # numpy's, not the double's
    with pytest.raises(InvalidInput, match=r"\[33, 16\] is outside the engine's optimization profiles"):
        context.submit({"INPUT0": [np.zeros((33, 16), np.float32)]})
    context.close()


BERT_PROFILES = [
    {name: ((1, 1), (2, 16), (4, 64)) for name in ("input_ids", "attention_mask")},     # small batches, any length
    {name: ((5, 1), (8, 16), (16, 64)) for name in ("input_ids", "attention_mask")},    # large batches
    {name: ((1, 1), (1, 8), (1, 16)) for name in ("input_ids", "attention_mask")},      # one short sequence
]


def test_profile_choice_with_a_real_three_profile_two_input_engine(tmp_path, fake, monkeypatch):
    """Overlapping profiles: the tightest one that admits every input's shape is chosen; the
    model itself refuses inputs whose lengths disagree (the client's error)."""
    from trtpool_builder.examples import write_example

    onnx_path = write_example("bert_base", tmp_path / "bert.onnx", num_layers=1, hidden=32, num_heads=2,
                              vocab_size=100, max_positions=64)
    real = build_real_engine(onnx_path, BERT_PROFILES)
    assert real["io"]["inputs"] == [["input_ids", "INT64", [-1, -1]], ["attention_mask", "INT64", [-1, -1]]]
    assert real["io"]["outputs"] == [["last_hidden_state", "FLOAT", [-1, -1, 32]], ["pooler_output", "FLOAT", [-1, 32]]]
    assert real["profiles"] == BERT_PROFILES
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", make_module(fake, "tensorrt_rtx", rtx.__version__))
    runtime = TensorRTRuntime(make_cfg(tmp_path / "1"), serve_real_metadata(tmp_path / "1", onnx_path, real),
                              module_name="tensorrt_rtx")
    assert runtime.output_capacities["last_hidden_state"][1] == 16 * 64 * 32  # learnt per profile, the largest
    context = runtime.create_context(0)
    for size, length, profile in [(1, 8, 2), (1, 16, 2), (1, 17, 0), (3, 8, 0), (4, 64, 0), (6, 2, 1), (16, 64, 1)]:
        tokens = np.ones((size, length), np.int64)
        context.submit({"input_ids": [tokens], "attention_mask": [tokens]})
        outputs = context.complete()
        assert context._context.active_optimization_profile == profile, (size, length)
        assert outputs["last_hidden_state"].shape == (size, length, 32) and outputs["pooler_output"].shape == (size, 32)
    with pytest.raises(InvalidInput, match="the model rejected input shapes"):
        context.submit({"input_ids": [np.ones((2, 8), np.int64)], "attention_mask": [np.ones((2, 9), np.int64)]})
    context.close()


# ---- a real GPU --------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(cuda.device_count() == 0, reason="needs an NVIDIA GPU and driver")
def test_real_rtx_engine_on_gpu(tmp_path):
    gpu = cuda.device_properties(0)
    if gpu.compute_capability not in ("8.0", "8.6", "8.9", "12.0", "12.1"):
        pytest.skip(f"TensorRT-RTX does not run on compute capability {gpu.compute_capability} ({gpu.name})")
    from trtpool_builder.examples import tiny_reference

    path = build_tiny(tmp_path, gpu.compute_capability)
    runtime = TensorRTRuntime(make_cfg(path.parent), path, module_name="tensorrt_rtx")
    assert [p.ranges["INPUT0"].max for p in runtime.signature.profiles] == [(8, 16), (32, 16)]
    context = runtime.create_context(0)
    for size in (3, 3, 20, 20):  # the second of each replays a CUDA graph
        x = np.random.default_rng(size).standard_normal((size, 16)).astype(np.float32)
        context.submit({"INPUT0": [x]})
        np.testing.assert_allclose(context.complete()["OUTPUT0"], tiny_reference(x), rtol=1e-2, atol=1e-2)
    context.close()
    runtime.close()
