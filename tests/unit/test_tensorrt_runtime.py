"""The TensorRT adapter over test doubles of tensorrt and CUDA, plus what the
real tensorrt_rtx module allows on a machine without a GPU.

The doubles (tests/doubles/tensorrt_double.py, cuda_double.py) prove nothing
about TensorRT or CUDA: these tests check the adapter's own logic (signature,
profile choice, buffers, copies, one wait per batch, failures and rebuilds).
"""
from __future__ import annotations

import gc
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.doubles.cuda_double import FakeCudart, FakeDevice
from tests.doubles.tensorrt_double import engine_bytes, make_module
from trtpool import config as pool_config
from trtpool import cuda
from trtpool.errors import ConfigError, ContextFailure, EngineError, InvalidInput
from trtpool.pool import ContextPool
from trtpool.runtimes.tensorrt import TensorRTRuntime, import_tensorrt
from trtpool.serving import BatchRunner
from trtpool.shapes import format_profile
from trtpool.sidecar import Precision, Sidecar, Target, TensorInfo, write_sidecar
from trtpool.signature import ShapeRange

K, N = 4, 3
PROFILES = [(1, 2, 4), (5, 8, 16)]   # batch ranges: small and large
TRT_VERSION, RTX_VERSION = "10.8.0.43", "1.7.1.116"
GPU = FakeDevice()
RNG = np.random.default_rng(0)
W = RNG.standard_normal((K, N)).astype(np.float32)
B = RNG.standard_normal(N).astype(np.float32)


def reference(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) @ W.astype(np.float64) + B.astype(np.float64)


def profile_text(batches: tuple[int, int, int], k: int = K) -> str:
    low, opt, high = ((b, k) for b in batches)
    return format_profile({"x": ShapeRange(low, opt, high)})


def write_engine(folder: Path, data: bytes, module: str = "tensorrt", version: str = TRT_VERSION,
                 capability: str = "8.9", profiles: list = PROFILES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.plan"
    path.write_bytes(data)
    texts = tuple(profile_text(p) for p in profiles)
    write_sidecar(path, Sidecar(
        engine=str(path), module=module, module_version=version,
        target=Target((capability,), None if module == "tensorrt_rtx" else GPU.name),
        precision=Precision("fp32", strongly_typed=True), profiles=texts,
        inputs=(TensorInfo("x", "float32", (-1, K)),),
        outputs=(TensorInfo("y", "float32", (-1, N)), TensorInfo("top", "int32", (-1,))),
        onnx_path="linear.onnx", onnx_sha256="0" * 64,
        build_options={"onnx": "linear.onnx", "output": str(path), "trt_module": module, "shapes": list(texts)},
    ))
    return path


def make_cfg(version_dir: Path, device: str = "cuda:0", **params: str) -> pool_config.PoolConfig:
    config = {"name": "linear", "max_batch_size": 16,
              "parameters": {k: {"string_value": v} for k, v in params.items()}}
    return pool_config.load(config, version_dir, device)


@pytest.fixture
def fake(monkeypatch) -> FakeCudart:
    """The CUDA double in place of cuda.bindings.runtime, for trtpool.cuda."""
    double = FakeCudart((GPU,))
    monkeypatch.setattr(cuda, "_cudart", double)
    return double


@pytest.fixture
def trt(fake, monkeypatch):
    module = make_module(fake, "tensorrt", TRT_VERSION)
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    return module


@pytest.fixture
def engine_path(tmp_path, trt) -> Path:
    return write_engine(tmp_path / "1", engine_bytes(W, B, PROFILES))


@pytest.fixture
def runtime(engine_path) -> TensorRTRuntime:
    runtime = TensorRTRuntime(make_cfg(engine_path.parent), engine_path)
    yield runtime
    runtime.close()


def run(context, x: np.ndarray) -> dict[str, np.ndarray]:
    context.submit({"x": [x]})
    return {k: v.copy() for k, v in context.complete().items()}


def check(outputs: dict[str, np.ndarray], x: np.ndarray) -> None:
    expected = reference(x)
    np.testing.assert_allclose(outputs["y"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(outputs["top"], expected.argmax(axis=1))
    assert outputs["y"].dtype == np.float32 and outputs["top"].dtype == np.int32


# ---- signature, profiles, outputs ------------------------------------------------

def test_signature_is_read_from_the_engine(runtime):
    sig = runtime.signature
    assert runtime.name == "tensorrt"
    assert [(s.name, s.dtype, s.shape) for s in sig.inputs] == [("x", np.dtype(np.float32), (-1, K))]
    assert [(s.name, s.dtype, s.shape) for s in sig.outputs] == [
        ("y", np.dtype(np.float32), (-1, N)), ("top", np.dtype(np.int32), (-1,))]
    assert [p.ranges["x"] for p in sig.profiles] == [
        ShapeRange((1, K), (2, K), (4, K)), ShapeRange((5, K), (8, K), (16, K))]
    assert sig.batched and sig.max_batch_size == 16
    assert runtime.input_capacities == {"x": (np.dtype(np.float32), 16 * K)}
    assert runtime.output_capacities == {"y": (np.dtype(np.float32), 16 * N), "top": (np.dtype(np.int32), 16)}


def test_profile_is_chosen_per_batch_and_switched_on_the_context(runtime):
    context = runtime.create_context(0)
    trt_context = context._context
    for batch, profile in [(3, 0), (9, 1), (16, 1), (1, 0), (4, 0), (5, 1)]:
        x = RNG.standard_normal((batch, K)).astype(np.float32)
        check(run(context, x), x)
        assert trt_context.active_optimization_profile == profile
    assert trt_context.profile_switches == 4  # first selection, then 0->1, 1->0, 0->1
    context.close()


@pytest.mark.parametrize("batch", [1, 2, 4, 5, 11, 16])
def test_outputs_match_float64_reference(runtime, batch):
    context = runtime.create_context(0)
    x = RNG.standard_normal((batch, K)).astype(np.float32)
    check(run(context, x), x)
    context.close()


def test_one_synchronization_and_one_copy_per_tensor_per_batch(runtime, fake):
    context = runtime.create_context(0)
    for batch in (2, 7, 3):
        syncs, copies = fake.syncs(), fake.calls["cudaMemcpyAsync"]
        x = RNG.standard_normal((batch, K)).astype(np.float32)
        check(run(context, x), x)
        assert fake.syncs() - syncs == 1
        assert fake.calls["cudaMemcpyAsync"] - copies == 3  # x in, y and top out
    assert runtime.engine.executions == 3
    context.close()


def test_outputs_are_read_only_after_the_wait(runtime, fake, monkeypatch):
    """Without its synchronize the double leaves the queued work undone: the wait is load-bearing."""
    context = runtime.create_context(0)
    x = RNG.standard_normal((3, K)).astype(np.float32)
    context.outputs.view("y", (3, N))[...] = -7.0
    monkeypatch.setattr(context._done, "synchronize", lambda: None)
    outputs = run(context, x)
    assert np.all(outputs["y"] == -7.0)


def test_pool_and_batch_runner_with_concurrent_contexts(runtime):
    pool = ContextPool(runtime, 3)
    runner = BatchRunner(pool)
    failures: list[BaseException] = []

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(10):
            requests = [{"x": rng.standard_normal((int(n), K)).astype(np.float32)}
                        for n in rng.integers(1, 7, size=int(rng.integers(1, 6)))]
            results: dict[int, object] = {}
            runner.run(requests, lambda i, out: results.__setitem__(i, {k: v.copy() for k, v in out.items()}),
                       lambda i, err: results.__setitem__(i, err))
            try:
                for i, request in enumerate(requests):
                    assert isinstance(results[i], dict), results[i]
                    check(results[i], request["x"])
            except AssertionError as exc:
                failures.append(exc)

    with ThreadPoolExecutor(4) as clients:
        list(clients.map(client, range(4)))
    assert not failures, failures[0]
    assert sum(s.runs for s in pool.stats.contexts.values()) >= 40
    assert all(s.failures == 0 for s in pool.stats.contexts.values())
    runner.close()
    pool.close()


def test_worker_threads_select_the_runtime_device(tmp_path, monkeypatch):
    """The current device is per thread: a context used from a new thread must set cuda:1 itself."""
    fake = FakeCudart((FakeDevice(name="other"), GPU))
    monkeypatch.setattr(cuda, "_cudart", fake)
    monkeypatch.setitem(sys.modules, "tensorrt", make_module(fake))
    path = write_engine(tmp_path / "1", engine_bytes(W, B, PROFILES))
    runtime = TensorRTRuntime(make_cfg(path.parent, device="cuda:1"), path)
    context = runtime.create_context(0)
    x = RNG.standard_normal((6, K)).astype(np.float32)
    result: dict[str, object] = {}
    worker = threading.Thread(target=lambda: result.update(run(context, x)))
    worker.start()
    worker.join()
    check(result, x)
    assert {device for device, _ in fake.device_memory.values()} == {1}
    assert not fake.misuse


# ---- refusals and failures --------------------------------------------------------

def test_shape_outside_every_profile_is_invalid_input(runtime):
    context = runtime.create_context(0)
    with pytest.raises(InvalidInput) as too_big:
        context.submit({"x": [np.zeros((17, K), np.float32)]})
    assert "input 'x'" in str(too_big.value) and "[17, 4]" in str(too_big.value)
    assert "[1, 4] .. [4, 4]" in str(too_big.value) and "[5, 4] .. [16, 4]" in str(too_big.value)
    with pytest.raises(InvalidInput, match="input 'x'"):
        context.submit({"x": [np.zeros((2, K + 1), np.float32)]})
    x = RNG.standard_normal((2, K)).astype(np.float32)
    check(run(context, x), x)  # the context is still good
    context.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_or_truncated_engine_is_an_engine_error(tmp_path, trt, damage):
    whole = engine_bytes(W, B, PROFILES)
    data = {"garbage": b"\x00\x01not an engine", "truncated": whole[: len(whole) // 2], "empty": b""}[damage]
    path = write_engine(tmp_path / "1", data)
    with pytest.raises(EngineError) as error:
        TensorRTRuntime(make_cfg(path.parent), path)
    message = str(error.value)
    assert f"engine '{path}'" in message and "cannot be deserialized" in message
    assert "truncated or corrupt" in message and "another TensorRT version or for another GPU" in message
    assert "Magic tag does not match" in message          # TensorRT's own words, via the logger
    assert "trtpool-build" in message and "--trt-module tensorrt" in message


def test_incompatible_sidecar_is_refused_before_deserializing(tmp_path, trt):
    path = write_engine(tmp_path / "1", b"never read", capability="9.0")
    with pytest.raises(EngineError, match="cannot run here") as error:
        TensorRTRuntime(make_cfg(path.parent), path)
    assert "compute capability 9.0" in str(error.value) and "8.9" in str(error.value)


def test_missing_sidecar_is_an_engine_error(engine_path):
    engine_path.with_name("model.plan.json").unlink()
    with pytest.raises(EngineError, match="no sidecar"):
        TensorRTRuntime(make_cfg(engine_path.parent), engine_path)


def test_unsupported_io_dtype_is_an_engine_error(tmp_path, trt):
    path = write_engine(tmp_path / "1", engine_bytes(W, B, PROFILES, input_dtype="BF16"))
    with pytest.raises(EngineError, match="tensor 'x' has type BF16"):
        TensorRTRuntime(make_cfg(path.parent), path)


def test_cpu_instance_is_a_config_error(engine_path):
    with pytest.raises(ConfigError, match="KIND_GPU"):
        TensorRTRuntime(make_cfg(engine_path.parent, device="cpu"), engine_path)


def test_no_usable_gpu_is_an_engine_error(engine_path, fake):
    fake.fail["cudaSetDevice"] = fake.cudaError_t.cudaErrorInsufficientDriver
    with pytest.raises(EngineError, match="needs GPU cuda:0.*driver"):
        TensorRTRuntime(make_cfg(engine_path.parent), engine_path)


def test_profile_parameter_must_match_the_engine(engine_path):
    matching = ";".join(profile_text(p) for p in PROFILES)
    TensorRTRuntime(make_cfg(engine_path.parent, profile=matching), engine_path).close()
    with pytest.raises(ConfigError, match="parameter 'profile'"):
        TensorRTRuntime(make_cfg(engine_path.parent, profile=profile_text((1, 2, 8))), engine_path)


def test_failed_execution_raises_and_the_pool_rebuilds_the_context(runtime, fake):
    pool = ContextPool(runtime, 1)
    runner = BatchRunner(pool)
    runtime.engine.fail_next_executions = 1
    x = RNG.standard_normal((3, K)).astype(np.float32)

    def serve() -> object:
        results: dict[int, object] = {}
        runner.run([{"x": x}], lambda i, out: results.__setitem__(i, {k: v.copy() for k, v in out.items()}),
                   lambda i, err: results.__setitem__(i, err))
        return results[0]

    failure = serve()
    assert isinstance(failure, ContextFailure)
    assert "execute_async_v3 failed" in str(failure) and "injected by the double" in str(failure)
    check(serve(), x)  # the rebuilt context serves the next request
    stats = pool.stats.contexts[0]
    assert (stats.failures, stats.rebuilds) == (1, 1)
    assert runtime.engine.contexts_created == 1 + 2  # the probe, the first context, its replacement
    assert fake.live()["streams"] == 1 and fake.live()["events"] == 2  # one context's; the broken one's were freed
    runner.close()
    pool.close()


def test_context_memory_accounts_for_activations_and_io_buffers(runtime, fake):
    io_bytes = 16 * K * 4 + 16 * N * 4 + 16 * 4
    assert runtime.context_memory_bytes() == runtime.engine.device_memory_size_v2 + io_bytes
    free = runtime.free_memory_bytes()
    context = runtime.create_context(0)
    # The CUDA double allocates exactly what is asked: a context costs exactly its estimate.
    assert free - runtime.free_memory_bytes() == runtime.context_memory_bytes()
    context.close()


def test_closing_releases_device_and_pinned_memory(engine_path, fake):
    runtime = TensorRTRuntime(make_cfg(engine_path.parent), engine_path)
    pool = ContextPool(runtime, 2)
    with pool.acquire() as context:
        x = RNG.standard_normal((2, K)).astype(np.float32)
        check(run(context, x), x)
    assert fake.live()["host_memory"] == 2 * 3  # pinned staging for x, y and top per context
    pool.close()
    del pool, runtime, context
    gc.collect()
    assert fake.live() == {"device_memory": 0, "host_memory": 0, "streams": 0, "events": 0}


# ---- module selection ---------------------------------------------------------------

def test_module_selection(fake, monkeypatch):
    trt, rtx = make_module(fake, "tensorrt"), make_module(fake, "tensorrt_rtx", RTX_VERSION)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", rtx)
    assert import_tensorrt(None) is trt
    assert import_tensorrt("tensorrt_rtx") is rtx
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt now raises ImportError
    assert import_tensorrt(None) is rtx
    with pytest.raises(EngineError, match="cannot import tensorrt "):
        import_tensorrt("tensorrt")  # asked for explicitly: no fallback
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", None)
    with pytest.raises(EngineError) as neither:
        import_tensorrt(None)
    message = str(neither.value)
    assert "cannot import tensorrt or tensorrt_rtx" in message
    assert "pip install --extra-index-url https://pypi.nvidia.com tensorrt-cu12" in message
    assert "nvcr.io/nvidia/tritonserver" in message and "pip install tensorrt-rtx-cu13" in message


def test_falls_back_to_tensorrt_rtx_end_to_end(tmp_path, fake, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", make_module(fake, "tensorrt_rtx", RTX_VERSION))
    path = write_engine(tmp_path / "1", engine_bytes(W, B, PROFILES), module="tensorrt_rtx", version=RTX_VERSION)
    runtime = TensorRTRuntime(make_cfg(path.parent), path)
    assert runtime.name == "tensorrt_rtx"
    context = runtime.create_context(0)
    x = RNG.standard_normal((8, K)).astype(np.float32)
    check(run(context, x), x)
    context.close()


# ---- the real tensorrt_rtx module -------------------------------------------------------

def build_real_rtx_engine(tmp_path: Path, capability: str) -> Path:
    """tiny.onnx built by the real TensorRT-RTX builder (it runs without a GPU), with a sidecar."""
    rtx = pytest.importorskip("tensorrt_rtx")
    from trtpool_builder.examples import write_example

    onnx_path = tmp_path / "tiny.onnx"
    write_example("tiny", onnx_path)
    logger = rtx.Logger(rtx.Logger.ERROR)
    builder = rtx.Builder(logger)
    network = builder.create_network(0)  # strongly typed, explicit batch: TensorRT 10's only mode
    parser = rtx.OnnxParser(network, logger)
    assert parser.parse(onnx_path.read_bytes()), [parser.get_error(i) for i in range(parser.num_errors)]
    config = builder.create_builder_config()
    texts = []
    for low, opt, high in [(1, 4, 8), (9, 16, 32)]:
        profile = builder.create_optimization_profile()
        profile.set_shape("INPUT0", (low, 16), (opt, 16), (high, 16))
        config.add_optimization_profile(profile)
        texts.append(format_profile({"INPUT0": ShapeRange((low, 16), (opt, 16), (high, 16))}))
    serialized = builder.build_serialized_network(network, config)
    assert serialized is not None
    version_dir = tmp_path / "1"
    version_dir.mkdir()
    path = version_dir / "model.plan"
    path.write_bytes(bytes(serialized))
    write_sidecar(path, Sidecar(
        engine=str(path), module="tensorrt_rtx", module_version=rtx.__version__,
        target=Target((capability,)), precision=Precision("fp32", strongly_typed=True),
        profiles=tuple(texts), inputs=(TensorInfo("INPUT0", "float32", (-1, 16)),),
        outputs=(TensorInfo("OUTPUT0", "float32", (-1, 4)),), onnx_path=str(onnx_path),
        onnx_sha256="0" * 64, build_options={"onnx": str(onnx_path), "shapes": texts},
    ))
    return path


no_gpu = pytest.mark.skipif(cuda.device_count() > 0, reason="checks behaviour on a machine without a GPU")


@no_gpu
def test_real_rtx_engine_without_gpu_is_a_clear_engine_error(tmp_path):
    """Here (no GPU, no driver) the adapter stops at device selection with CUDA's reason."""
    path = build_real_rtx_engine(tmp_path, "8.9")
    with pytest.raises(EngineError) as error:
        TensorRTRuntime(make_cfg(path.parent), path, module_name="tensorrt_rtx")
    assert "needs GPU cuda:0" in str(error.value) and "driver" in str(error.value)


@no_gpu
def test_real_rtx_deserialization_failure_carries_tensorrt_messages(tmp_path, fake):
    """With the CUDA double pretending an RTX 4090 is present, the adapter reaches the REAL
    deserialize_cuda_engine; without a driver it returns None, and the EngineError carries the
    messages the real module logged through the adapter's ILogger subclass."""
    path = build_real_rtx_engine(tmp_path, f"{GPU.major}.{GPU.minor}")
    with pytest.raises(EngineError) as error:
        TensorRTRuntime(make_cfg(path.parent), path, module_name="tensorrt_rtx")
    message = str(error.value)
    assert f"engine '{path}'" in message and "cannot be deserialized by tensorrt_rtx" in message
    assert "CUDA driver version is insufficient" in message  # logged by tensorrt_rtx itself
    assert "trtpool-build" in message


@pytest.mark.gpu
@pytest.mark.skipif(cuda.device_count() == 0, reason="needs an NVIDIA GPU and driver")
def test_real_rtx_engine_signature_on_gpu(tmp_path):
    gpu = cuda.device_properties(0)
    if gpu.compute_capability not in ("8.0", "8.6", "8.9", "12.0", "12.1"):
        pytest.skip(f"TensorRT-RTX does not run on compute capability {gpu.compute_capability} ({gpu.name})")
    path = build_real_rtx_engine(tmp_path, gpu.compute_capability)
    runtime = TensorRTRuntime(make_cfg(path.parent), path, module_name="tensorrt_rtx")
    sig = runtime.signature
    assert [(s.name, s.shape) for s in sig.inputs] == [("INPUT0", (-1, 16))]
    assert [(s.name, s.shape) for s in sig.outputs] == [("OUTPUT0", (-1, 4))]
    assert [p.ranges["INPUT0"].max for p in sig.profiles] == [(8, 16), (32, 16)]
    runtime.close()
