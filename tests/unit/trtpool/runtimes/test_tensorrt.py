"""The TensorRT adapter over test doubles of TensorRT and CUDA.

The doubles (tests/doubles/tensorrt_double.py, cuda_double.py) prove nothing
about TensorRT or CUDA: these tests check the adapter's own logic (signature,
profile choice, output sizing, buffers, copies, CUDA graphs, one wait per
batch, errors and rebuilds) against doubles whose surface is checked against
the real bindings (tests/unit/doubles/). What the real tensorrt_rtx module
allows on a machine without a GPU is in test_tensorrt_real_module.py.
"""
from __future__ import annotations

import gc
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from math import prod
from pathlib import Path

import numpy as np
import pytest

from tests.doubles.cuda_double import GRAPH_BYTES_PER_NODE, FakeCudart, FakeDevice
from tests.doubles.engines import (GPU_NAME, column_sums_model, linear_model, linear_reference, masked_model, positive_model,
                                   profile_text, write_engine)
from tests.doubles.tensorrt_double import UnsafeBindingCall, engine_bytes, make_module
from trtpool import parameters
from trtpool.engine.answer import Kept
from trtpool.engine.batching import BatchRunner
from trtpool.engine.pool import ContextPool
from trtpool.errors import ConfigError, ContextFailure, EngineError, InvalidInput
from trtpool.gpu import cuda, trt_api
from trtpool.gpu.device_tensors import DeviceArray
from trtpool.model.sidecar import TensorInfo
from trtpool.model.signature import ShapeRange
from trtpool.runtimes.tensorrt import TensorRTRuntime

K, N = 4, 3
PROFILES = [{"x": ((1, K), (2, K), (4, K))}, {"x": ((5, K), (8, K), (16, K))}]  # small and large batches
TRT_VERSION = "10.16.1.11"
GPU = FakeDevice(name=GPU_NAME)
RNG = np.random.default_rng(0)
W = RNG.standard_normal((K, N)).astype(np.float32)
B = RNG.standard_normal(N).astype(np.float32)
LINEAR_IO = ([TensorInfo("x", "float32", (-1, K))],
             [TensorInfo("y", "float32", (-1, N)), TensorInfo("top", "int64", (-1,))])


def make_cfg(version_dir: Path, device: str = "cuda:0", **params: str) -> parameters.PoolConfig:
    config = {"name": "linear", "max_batch_size": 16,
              "parameters": {k: {"string_value": v} for k, v in params.items()}}
    return parameters.load(config, version_dir, device)


def linear_engine(folder: Path, model=None, profiles=PROFILES, **options) -> Path:
    module, version = options.pop("module", "tensorrt"), options.pop("version", TRT_VERSION)
    data = engine_bytes(model or linear_model(W, B), profiles, **options)
    return write_engine(folder, data, profiles, *LINEAR_IO, module=module, version=version,
                        version_compatible=options.get("version_compatible", False))


@pytest.fixture
def fake(monkeypatch) -> FakeCudart:
    """The CUDA double in place of cuda.bindings.runtime, for trtpool.gpu.cuda."""
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
    return linear_engine(tmp_path / "1")


def load(path: Path, **params: str) -> TensorRTRuntime:
    return TensorRTRuntime(make_cfg(path.parent, **params), path)


@pytest.fixture
def runtime(engine_path) -> TensorRTRuntime:
    runtime = load(engine_path)
    yield runtime
    runtime.close()


def run(context, x: np.ndarray) -> dict[str, np.ndarray]:
    context.submit({"x": [x]})
    return {k: v.copy() for k, v in context.complete().items()}


def batch(size: int) -> np.ndarray:
    return RNG.standard_normal((size, K)).astype(np.float32)


def check(outputs: dict[str, np.ndarray], x: np.ndarray) -> None:
    expected = linear_reference(x, W, B)
    np.testing.assert_allclose(outputs["y"], expected["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(outputs["top"], expected["top"])
    assert outputs["y"].dtype == np.float32 and outputs["top"].dtype == np.int64


# ---- signature, profiles, output sizing ---------------------------------------------------

def test_signature_and_output_sizes_come_from_the_engine(runtime):
    sig = runtime.signature
    assert runtime.name == "tensorrt"
    assert [(s.name, s.dtype, s.shape) for s in sig.inputs] == [("x", np.dtype(np.float32), (-1, K))]
    assert [(s.name, s.dtype, s.shape) for s in sig.outputs] == [
        ("y", np.dtype(np.float32), (-1, N)), ("top", np.dtype(np.int64), (-1,))]
    assert [p.ranges["x"] for p in sig.profiles] == [
        ShapeRange((1, K), (2, K), (4, K)), ShapeRange((5, K), (8, K), (16, K))]
    assert sig.batched and sig.max_batch_size == 16
    assert runtime.input_capacities == {"x": (np.dtype(np.float32), 16 * K)}
    # learnt from the runtime's get_tensor_shape at each profile's largest inputs
    assert runtime.output_capacities == {"y": (np.dtype(np.float32), 16 * N), "top": (np.dtype(np.int64), 16)}
    assert runtime.data_dependent == frozenset()


def test_profile_is_chosen_per_batch_and_switched_on_the_context(engine_path):
    runtime = load(engine_path, cuda_graphs="off")
    context = runtime.create_context(0)
    trt_context = context._context
    for size, profile in [(3, 0), (9, 1), (16, 1), (1, 0), (4, 0), (5, 1)]:
        x = batch(size)
        check(run(context, x), x)
        assert trt_context.active_optimization_profile == profile
    assert trt_context.profile_switches == 4  # first selection, then 0->1, 1->0, 0->1
    context.close()


@pytest.mark.parametrize("graphs", ["on", "off"])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 11, 16])
def test_outputs_match_float64_reference(engine_path, graphs, size):
    context = load(engine_path, cuda_graphs=graphs).create_context(0)
    for _ in range(3):  # warm-up and capture, then replays
        x = batch(size)
        check(run(context, x), x)
    context.close()


def test_one_wait_and_one_copy_per_tensor_per_batch_without_graphs(engine_path, fake):
    context = load(engine_path, cuda_graphs="off").create_context(0)
    for size in (2, 7, 3):
        syncs, copies = fake.syncs(), fake.calls["cudaMemcpyAsync"]
        x = batch(size)
        check(run(context, x), x)
        assert fake.syncs() - syncs == 1
        assert fake.calls["cudaMemcpyAsync"] - copies == 3  # x in, y and top out
    assert context._context._engine.executions == 3
    assert fake.calls["cudaStreamBeginCapture"] == 0 and not context.captured
    context.close()


def test_outputs_are_read_only_after_the_wait(runtime, monkeypatch):
    """Without its synchronize the double leaves the queued work undone: the wait is load-bearing."""
    context = runtime.create_context(0)
    x = batch(3)
    context._outputs["y"].host_view((3, N))[...] = -7.0
    monkeypatch.setattr(context._done, "synchronize", lambda: None)
    assert np.all(run(context, x)["y"] == -7.0)


# ---- CUDA graphs ------------------------------------------------------------------------------

def test_first_batch_of_a_bucket_warms_up_then_captures_later_ones_replay(runtime, fake, caplog):
    context = runtime.create_context(0)
    engine = context._context._engine
    caplog.set_level(logging.INFO, logger="trtpool")
    x = batch(3)
    check(run(context, x), x)
    # an ordinary run (the warm-up, whose results are the batch's), then the same call captured
    assert engine.executions == 2 and fake.calls["cudaGraphInstantiate"] == 1
    assert context.captured == [(0, (("x", (4, K)),))]  # batch 3 runs in profile 0's bucket 4
    (graph,) = fake.graph_execs.values()
    assert [kind for kind, _ in graph.nodes] == ["kernel"]  # copies stay outside the graph
    assert f"holds {GRAPH_BYTES_PER_NODE} bytes of device memory" in caplog.text
    for size in (3, 4, 4, 3):
        syncs, executions = fake.syncs(), engine.executions
        x = batch(size)
        check(run(context, x), x)
        assert engine.executions == executions  # replayed: execute_async_v3 is not called
        assert fake.syncs() - syncs == 1
    assert graph.launches == 4 and fake.calls["cudaGraphInstantiate"] == 1
    context.close()
    assert fake.live()["graph_execs"] == 0


def test_padding_is_zeros_and_cut_from_the_outputs(runtime, fake):
    context = runtime.create_context(0)
    x = batch(6)  # profile 1 (5..16): buckets 5, 8, 16
    outputs = run(context, x)
    check(outputs, x)
    assert outputs["y"].shape == (6, N) and outputs["top"].shape == (6,)
    device = fake.device_view(context._inputs["x"].ptr, 8 * K * 4)
    np.testing.assert_array_equal(np.frombuffer(device, np.float32).reshape(8, K)[6:], 0.0)
    x = batch(7)
    check(run(context, x), x)
    assert context.captured == [(1, (("x", (8, K)),))]


def test_graphs_of_several_buckets_replay_with_their_own_shapes(runtime):
    """The double refuses a replay whose context shapes differ from the capture's: the adapter
    sets the bucket's shapes before each launch, as Triton's TensorRT backend does."""
    context = runtime.create_context(0)
    for size in (1, 2, 3, 1, 4, 2, 1):
        x = batch(size)
        check(run(context, x), x)
    assert sorted(shapes[0][1][0] for _, shapes in context.captured) == [1, 2, 4]
    context.close()


def test_a_profile_switch_runs_once_as_usual_before_graphs_replay(runtime, fake):
    """Selecting a profile defers layer resource updates to the next execute_async_v3, which a
    graph launch does not do (the double refuses such a replay)."""
    context = runtime.create_context(0)
    engine = context._context._engine
    # The large profile first: the context's activation memory grows once, to what it needs
    # (a growth drops the graphs captured before it), and the small profile's graph stays.
    for size in (9, 2, 2, 9, 9):
        x = batch(size)
        check(run(context, x), x)
    executions = engine.executions
    x = batch(2)  # back to profile 0, whose graph exists
    check(run(context, x), x)
    assert engine.executions == executions + 1  # an ordinary run settles the profile first
    x = batch(2)
    check(run(context, x), x)
    assert engine.executions == executions + 1  # then the graph replays
    assert not fake.misuse
    context.close()


def test_graphs_off_runs_exact_shapes(engine_path, fake):
    context = load(engine_path, cuda_graphs="off").create_context(0)
    x = batch(3)
    check(run(context, x), x)
    assert context._context.get_tensor_shape("x") == (3, K)  # not padded
    assert fake.calls["cudaStreamBeginCapture"] == 0
    context.close()


def test_a_failed_capture_turns_graphs_off_and_the_batch_is_still_answered(runtime, fake, caplog):
    fake.fail["cudaGraphInstantiate"] = fake.cudaError_t.cudaErrorMemoryAllocation
    context = runtime.create_context(0)
    x = batch(3)
    check(run(context, x), x)
    assert runtime.graphs_off and "cudaGraphInstantiate failed" in runtime.graphs_off
    assert "runs without CUDA graphs" in caplog.text
    del fake.fail["cudaGraphInstantiate"]
    for size in (3, 2):
        x = batch(size)
        check(run(context, x), x)
    assert not context.captured and fake.calls["cudaStreamBeginCapture"] == 1
    assert context._context.get_tensor_shape("x") == (2, K)  # no more padding
    context.close()


def test_capture_invalidated_by_work_that_cannot_be_captured(runtime, fake, monkeypatch):
    """If TensorRT's run needs set-up inside the capture (the double's set-up refuses to be
    captured), execute_async_v3 fails, CUDA invalidates the capture and graphs go off."""
    context = runtime.create_context(0)
    original = context._execute

    def unsettle_then_execute() -> None:
        context._context._set_up = False
        original()

    monkeypatch.setattr(context, "_execute", unsettle_then_execute)
    x = batch(2)
    check(run(context, x), x)
    assert "capturing execute_async_v3 failed" in runtime.graphs_off
    assert "set-up" in runtime.graphs_off
    assert fake.cudaGetLastError() == (fake.cudaError_t.cudaSuccess,)  # the capture's error was cleared
    assert any("capture invalidated" in why for why in fake.misuse)
    x = batch(2)
    check(run(context, x), x)
    context.close()


def test_an_output_that_is_not_batched_keeps_batches_unpadded(tmp_path, trt):
    """Padding rows could not be cut out of a sum over the batch: graphs are per exact shape."""
    data = engine_bytes(column_sums_model(W, B), PROFILES)
    outputs = [*LINEAR_IO[1], TensorInfo("sums", "float32", (N,))]
    runtime = load(write_engine(tmp_path / "1", data, PROFILES, LINEAR_IO[0], outputs, version=TRT_VERSION))
    context = runtime.create_context(0)
    for size in (3, 3):
        x = batch(size)
        outputs = run(context, x)
        check(outputs, x)
        np.testing.assert_allclose(outputs["sums"], linear_reference(x, W, B)["y"].sum(axis=0), rtol=1e-5)
    assert context.captured == [(0, (("x", (3, K)),))]
    context.close()


def test_graphs_are_bounded_per_context(runtime, monkeypatch):
    from trtpool.runtimes import tensorrt

    monkeypatch.setattr(tensorrt, "GRAPHS_PER_CONTEXT", 2)
    context = runtime.create_context(0)
    for size in (1, 2, 4, 8, 4):
        x = batch(size)
        check(run(context, x), x)
    assert len(context.captured) == 2
    context.close()


# ---- device inputs -------------------------------------------------------------------------

class DeviceTensor:
    """Duck-types the torch CUDA tensor that Triton hands over by DLPack, in the CUDA double's memory."""

    def __init__(self, fake: FakeCudart, array: np.ndarray) -> None:
        self.shape, self.dtype = array.shape, array.dtype
        self.buffer = cuda.DeviceBuffer(array.nbytes)
        fake.device_view(self.buffer.ptr, array.nbytes)[:] = array.tobytes()

    def data_ptr(self) -> int:
        return self.buffer.ptr

    def numel(self) -> int:
        return prod(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize


def test_device_inputs_are_copied_on_the_device_and_taken_before_submit_returns(runtime, fake):
    context = runtime.create_context(0)
    parts = [batch(2), batch(1)]
    syncs = fake.calls["cudaEventSynchronize"]
    context.submit({"x": [DeviceTensor(fake, p) for p in parts]})
    assert fake.calls["cudaEventSynchronize"] == syncs + 1  # inputs taken before returning
    check({k: v.copy() for k, v in context.complete().items()}, np.concatenate(parts))
    context.close()


def test_device_arrays_without_torch_are_taken_by_the_cuda_array_interface(runtime, fake):
    """A process file's preprocess_batch may hand over trtpool.gpu.device_tensors.DeviceArray rows
    (no torch): slices of one device batch, copied into the context's buffer on the device."""
    context = runtime.create_context(0)
    whole = batch(3)
    tensor = DeviceTensor(fake, whole)
    rows = DeviceArray(tensor, tensor.buffer.ptr, whole.shape)
    assert whole.dtype == rows.dtype
    copies = fake.calls["cudaMemcpyAsync"]
    context.submit({"x": [rows[0:1], rows[1:2], rows[2:3]]})
    output = {k: v.copy() for k, v in context.complete().items()}
    check(output, whole)
    # the adjacent rows went in one device copy (and the output came back in one)
    assert fake.calls["cudaMemcpyAsync"] - copies == 1 + len(output)
    context.close()


def test_device_arrays_that_are_not_adjacent_are_copied_apart(runtime, fake):
    context = runtime.create_context(0)
    whole = batch(4)
    tensor = DeviceTensor(fake, whole)
    rows = DeviceArray(tensor, tensor.buffer.ptr, whole.shape)
    context.submit({"x": [rows[2:4], rows[0:1]]})  # out of order: two copies, in the order given
    check({k: v.copy() for k, v in context.complete().items()}, np.concatenate([whole[2:4], whole[0:1]]))
    context.close()


# ---- data-dependent outputs ------------------------------------------------------------------

@pytest.fixture
def positive(tmp_path, trt) -> TensorRTRuntime:
    data = engine_bytes(positive_model(W, B), PROFILES)
    outputs = [*LINEAR_IO[1], TensorInfo("where", "int64", (2, -1))]
    runtime = load(write_engine(tmp_path / "1", data, PROFILES, LINEAR_IO[0], outputs, version=TRT_VERSION))
    yield runtime
    runtime.close()


def test_data_dependent_outputs_come_through_the_output_allocator(positive, caplog):
    assert positive.data_dependent == {"where"} and positive.output_capacities["where"][1] == 0
    assert "data-dependent shapes" in positive.graphs_off
    context = positive.create_context(0)
    for size in (1, 3, 16, 2):  # the buffer grows, then serves smaller results
        x = batch(size)
        outputs = run(context, x)
        check(outputs, x)
        expected = np.stack(np.nonzero(linear_reference(x, W, B)["y"] > 0))
        np.testing.assert_array_equal(outputs["where"], expected)  # its shape, as TensorRT reported it
    assert not context.captured
    context.close()


def test_an_output_without_a_batch_axis_makes_the_engine_unbatched(positive, runtime):
    """'where' is [2, count]: it cannot be cut into requests, so the engine is served unbatched,
    as its sidecar (and so trtpool-model's config) says."""
    assert runtime.signature.batched and not positive.signature.batched
    assert positive.signature.max_batch_size == 0


def rows_whose_outputs_are(value: float) -> np.ndarray:
    """16 rows whose every output y is `value` (so that 'where' lists none or all of them)."""
    return ((np.full((16, N), value) - B) @ np.linalg.pinv(W)).astype(np.float32)


def test_a_failed_output_allocation_is_a_context_failure_with_its_reason(positive, fake):
    context = positive.create_context(0)
    run(context, rows_whose_outputs_are(-1.0))  # activation memory for 16 rows; 'where' empty
    fake.fail["cudaMalloc"] = fake.cudaError_t.cudaErrorMemoryAllocation
    with pytest.raises(ContextFailure) as failure:
        run(context, rows_whose_outputs_are(1.0))  # 'where' needs memory for all 48 positives
    message = str(failure.value)
    assert "execute_async_v3" in message and "output 'where' failed" in message
    assert "cudaMalloc failed: cudaErrorMemoryAllocation" in message
    assert "output allocator returned no memory for where" in message  # TensorRT's (the double's) words


# ---- the client's errors and the context's failures ----------------------------------------------

def test_shape_outside_every_profile_is_invalid_input(runtime):
    context = runtime.create_context(0)
    with pytest.raises(InvalidInput) as too_big:
        context.submit({"x": [np.zeros((17, K), np.float32)]})
    assert "input 'x'" in str(too_big.value) and "[17, 4]" in str(too_big.value)
    with pytest.raises(InvalidInput, match="input 'x'"):
        context.submit({"x": [np.zeros((2, K + 1), np.float32)]})
    x = batch(2)
    check(run(context, x), x)  # the context is still good
    context.close()


MASK_PROFILES = [{"tokens": ((1, 1), (2, 4), (8, 16)), "mask": ((1, 1), (2, 4), (8, 16))}]
MASK_IO = ([TensorInfo("tokens", "float32", (-1, -1)), TensorInfo("mask", "float32", (-1, -1))],
           [TensorInfo("total", "float32", (-1,))])


def masked_runtime(folder: Path, **params: str) -> TensorRTRuntime:
    data = engine_bytes(masked_model(), MASK_PROFILES)
    return load(write_engine(folder, data, MASK_PROFILES, *MASK_IO, version=sys.modules["tensorrt"].__version__),
                **params)


def masked_request(length: int, mask_length: int) -> dict[str, np.ndarray]:
    return {"tokens": np.ones((2, length), np.float32), "mask": np.ones((2, mask_length), np.float32)}


def as_parts(request: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    return {name: [tensor] for name, tensor in request.items()}


def test_shapes_the_model_rejects_are_the_clients_error_and_keep_the_context(tmp_path, trt):
    """Both lengths are inside the profile; only the model knows they must agree: infer_shapes
    raises, which is the client's INVALID_ARGUMENT, and the pool does not rebuild the context."""
    runtime = masked_runtime(tmp_path / "1")
    pool = ContextPool(runtime, 1)
    runner = BatchRunner(pool)
    refused = Kept()
    runner.run([masked_request(4, 5)], [refused])
    error = refused.error
    assert isinstance(error, InvalidInput)
    assert "the model rejected input shapes 'tokens' [2, 4], 'mask' [2, 5]" in str(error)
    assert "Incompatible dimensions" in str(error) and "infer_shapes error code: -1" in str(error)
    served = Kept()
    runner.run([masked_request(4, 4)], [served])
    np.testing.assert_array_equal(served.outputs["total"], [4.0, 4.0])
    assert pool.stats.contexts[0].rebuilds == 0 and pool.stats.contexts[0].failures == 0
    runner.close()
    pool.close()


def test_before_tensorrt_10_13_infer_shapes_is_never_called(tmp_path, fake, monkeypatch):
    """There its failure raises without the GIL (UnsafeBindingCall in the double). A shape the
    model rejects is still the client's error where get_tensor_shape returns an error value;
    what real TensorRT returns there is unconfirmed, so where it returned a plausible shape
    instead, execute_async_v3 fails: a context failure the pool recovers from."""
    monkeypatch.setitem(sys.modules, "tensorrt", make_module(fake, "tensorrt", "10.5.0"))
    runtime = masked_runtime(tmp_path / "1")
    assert not runtime.infers_shapes
    context = runtime.create_context(0)
    with pytest.raises(InvalidInput, match="cannot compute output 'total'.*Incompatible dimensions"):
        context.submit(as_parts(masked_request(4, 5)))
    with monkeypatch.context() as patched:
        patched.setattr(type(context._context), "get_tensor_shape", lambda self, name: (2,))
        with pytest.raises(ContextFailure, match="execute_async_v3.*Incompatible dimensions"):
            context.submit(as_parts(masked_request(4, 5)))
    context.close()
    context = runtime.create_context(1)
    context.submit(as_parts(masked_request(3, 3)))
    np.testing.assert_array_equal(context.complete()["total"], [3.0, 3.0])
    context.close()


def test_the_double_crashes_where_real_tensorrt_may(tmp_path, fake, monkeypatch):
    """The guard above is load-bearing: the 10.5 double's infer_shapes fails unsafely."""
    monkeypatch.setitem(sys.modules, "tensorrt", make_module(fake, "tensorrt", "10.5.0"))
    runtime = masked_runtime(tmp_path / "1")
    runtime.infers_shapes = True
    context = runtime.create_context(0)
    with pytest.raises(UnsafeBindingCall):
        context.submit(as_parts(masked_request(4, 5)))


def test_a_refused_profile_switch_is_a_context_failure_with_tensorrt_words(runtime, fake):
    context = runtime.create_context(0)
    fake.streams.pop(context._stream.handle)  # the double refuses a stream it does not know
    with pytest.raises(ContextFailure) as failure:
        context.submit({"x": [batch(2)]})
    message = str(failure.value)
    assert message.startswith("context 0: selecting optimization profile 0: ")
    assert "setOptimizationProfileAsync: Error Code 3" in message  # TensorRT's words, from the log
    assert "RuntimeError: Error in set optimization profile async." in message


def test_failed_execution_raises_and_the_pool_rebuilds_the_context(runtime, fake):
    pool = ContextPool(runtime, 1)
    runner = BatchRunner(pool)
    runtime.engine.fail_next_executions = 1
    x = batch(3)

    def serve() -> object:
        kept = Kept()
        runner.run([{"x": x}], [kept])
        return kept.answer

    failure = serve()
    assert isinstance(failure, ContextFailure)
    assert "execute_async_v3" in str(failure) and "injected by the double" in str(failure)
    check(serve(), x)  # the rebuilt context serves the next request
    stats = pool.stats.contexts[0]
    assert (stats.failures, stats.rebuilds) == (1, 1)
    assert runtime.engine.contexts_created == 1 + 2  # the probe, the first context, its replacement
    assert fake.live()["streams"] == 1 and fake.live()["events"] == 2  # one context's; the broken one's were freed
    runner.close()
    pool.close()


def test_concurrent_failures_keep_their_own_messages(runtime):
    """Each context's error comes from what TensorRT logged on its own thread."""
    contexts = [runtime.create_context(i) for i in range(2)]
    barrier = threading.Barrier(2)
    for context in contexts:
        def failing(stream: int, context=context) -> bool:
            context._context._error(f"failure of context {context.index}")
            barrier.wait(timeout=5)  # both have logged before either returns
            return False

        context._context.execute_async_v3 = failing
    with ThreadPoolExecutor(2) as workers:
        futures = [workers.submit(c.submit, {"x": [batch(2)]}) for c in contexts]
        errors = [f.exception(timeout=10) for f in futures]
    for context, error in zip(contexts, errors):
        assert isinstance(error, ContextFailure)
        assert f"failure of context {context.index}" in str(error)
        assert f"failure of context {1 - context.index}" not in str(error)


def test_pool_and_batch_runner_with_concurrent_contexts(runtime):
    pool = ContextPool(runtime, 3)
    runner = BatchRunner(pool)
    failures: list[BaseException] = []

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(10):
            requests = [{"x": rng.standard_normal((int(n), K)).astype(np.float32)}
                        for n in rng.integers(1, 7, size=int(rng.integers(1, 6)))]
            kept = [Kept() for _ in requests]
            runner.run(requests, kept)
            try:
                for answer, request in zip((k.answer for k in kept), requests):
                    assert isinstance(answer, dict), answer
                    check(answer, request["x"])
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
    monkeypatch.setitem(sys.modules, "tensorrt", make_module(fake, "tensorrt", TRT_VERSION))
    runtime = TensorRTRuntime(make_cfg(tmp_path / "1", device="cuda:1"), linear_engine(tmp_path / "1"))
    context = runtime.create_context(0)
    x = batch(6)
    result: dict[str, object] = {}
    worker = threading.Thread(target=lambda: result.update(run(context, x)))
    worker.start()
    worker.join()
    check(result, x)
    assert {device for device, _ in fake.device_memory.values()} == {1}
    assert not fake.misuse


# ---- loading ----------------------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_or_truncated_engine_is_an_engine_error(tmp_path, trt, damage):
    whole = engine_bytes(linear_model(W, B), PROFILES)
    data = {"garbage": b"\x00\x01not an engine", "truncated": whole[: len(whole) // 2], "empty": b""}[damage]
    path = write_engine(tmp_path / "1", data, PROFILES, *LINEAR_IO, version=TRT_VERSION)
    with pytest.raises(EngineError) as error:
        load(path)
    message = str(error.value)
    assert f"engine '{path}'" in message and "cannot be deserialized" in message
    assert "truncated or corrupt" in message and "another TensorRT version or for another GPU" in message
    assert "Magic tag does not match" in message          # TensorRT's own words, via the logger
    assert "trtpool-build" in message and "--trt-module tensorrt" in message


def test_version_compatible_engines_are_allowed_host_code(tmp_path, trt):
    """A version-compatible engine embeds the lean runtime: the Runtime must allow host code."""
    runtime = load(linear_engine(tmp_path / "1", version_compatible=True))
    assert runtime._trt_runtime.engine_host_code_allowed
    runtime.close()
    plain = load(linear_engine(tmp_path / "2"))
    assert not plain._trt_runtime.engine_host_code_allowed  # only where the sidecar says so


def test_engines_with_plugin_layers_load_once_plugins_are_registered(tmp_path, trt):
    assert not trt._double.plugins_registered
    runtime = load(linear_engine(tmp_path / "1", plugins=("EfficientNMS_TRT",)))
    assert trt._double.plugins_registered
    runtime.close()


def test_incompatible_sidecar_is_refused_before_deserializing(tmp_path, trt):
    path = write_engine(tmp_path / "1", b"never read", PROFILES, *LINEAR_IO, version=TRT_VERSION, capability="9.0")
    with pytest.raises(EngineError, match="cannot run here") as error:
        load(path)
    assert "compute capability 9.0" in str(error.value) and "8.9" in str(error.value)


def test_missing_sidecar_is_an_engine_error(engine_path):
    engine_path.with_name("model.plan.json").unlink()
    with pytest.raises(EngineError, match="no sidecar"):
        load(engine_path)


def test_unsupported_io_dtype_is_an_engine_error(tmp_path, trt):
    io = {"inputs": [["x", "BF16", [-1, K]]], "outputs": [["y", "FLOAT", [-1, N]], ["top", "INT64", [-1]]]}
    with pytest.raises(EngineError, match="tensor 'x' has type BF16"):
        load(linear_engine(tmp_path / "1", io=io))


def test_cpu_instance_is_a_config_error(engine_path):
    with pytest.raises(ConfigError, match="KIND_GPU"):
        TensorRTRuntime(make_cfg(engine_path.parent, device="cpu"), engine_path)


def test_no_usable_gpu_is_an_engine_error(engine_path, fake):
    fake.fail["cudaSetDevice"] = fake.cudaError_t.cudaErrorInsufficientDriver
    with pytest.raises(EngineError, match="needs GPU cuda:0.*driver"):
        load(engine_path)


def test_profile_parameter_must_match_the_engine(engine_path):
    load(engine_path, profile=";".join(profile_text(p) for p in PROFILES)).close()
    with pytest.raises(ConfigError, match="parameter 'profile'"):
        load(engine_path, profile=profile_text({"x": ((1, K), (2, K), (8, K))}))


def test_cuda_graphs_parameter_is_validated(engine_path):
    with pytest.raises(ConfigError, match="parameter 'cuda_graphs': 'maybe' is not accepted; expected one of on, off"):
        load(engine_path, cuda_graphs="maybe")


@pytest.mark.parametrize("version, attribute", [("10.0.1", "device_memory_size"), ("10.8.0.43", "device_memory_size_v2"), ("10.16.1.11", "device_memory_size_v2"),
                                                ("11.4.0.106", "device_memory_size_v2")])
def test_context_memory_on_each_release(tmp_path, fake, monkeypatch, version, attribute):
    """device_memory_size_v2 exists from 10.1; 11.0 removed device_memory_size."""
    module = make_module(fake, "tensorrt", version)
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    runtime = load(linear_engine(tmp_path / "1", version=version))
    assert hasattr(runtime.engine, "device_memory_size") == (version < "11")
    io_bytes = 16 * K * 4 + 16 * N * 4 + 16 * 8
    assert runtime.context_memory_bytes() == getattr(runtime.engine, attribute) + io_bytes
    free = runtime.free_memory_bytes()
    context = runtime.create_context(0)
    # The CUDA double allocates exactly what is asked: a new context costs its I/O buffers,
    # and once it has run the largest shapes, exactly the estimate.
    assert free - runtime.free_memory_bytes() == io_bytes
    x = batch(16)
    check(run(context, x), x)
    graphs = len(context.captured) * GRAPH_BYTES_PER_NODE
    assert free - runtime.free_memory_bytes() - graphs == runtime.context_memory_bytes()
    context.close()


def test_activation_memory_follows_the_shapes_in_use(runtime, fake):
    """A context holds the activation memory its largest shapes so far need (USER_MANAGED,
    sized by update_device_memory_size_for_shapes), not the largest profile's; a batch that
    needs more grows it, and the graphs captured with the old memory are captured again."""
    context = runtime.create_context(0)
    full = trt_api.activation_bytes(runtime.engine)
    for _ in range(2):  # warm-up, then capture
        x = batch(1)
        check(run(context, x), x)
    small = context._activation_bytes
    assert 0 < small < full and len(context.captured) == 1
    for size in (16, 16, 1, 1, 1):  # grows: batch 1's graph is dropped, then captured again
        x = batch(size)
        check(run(context, x), x)
    assert context._activation_bytes == full and len(context.captured) == 2
    assert not fake.misuse
    context.close()


def test_closing_releases_device_and_pinned_memory_and_graphs(engine_path, fake):
    runtime = load(engine_path)
    pool = ContextPool(runtime, 2)
    with pool.acquire() as context:
        x = batch(2)
        check(run(context, x), x)
        x = batch(2)
        check(run(context, x), x)
    assert fake.live()["graph_execs"] == 1
    pool.close()
    del pool, runtime, context
    gc.collect()
    assert not any(fake.live().values()), fake.live()


# ---- module selection ---------------------------------------------------------------------------

def test_falls_back_to_tensorrt_rtx_end_to_end(tmp_path, fake, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", make_module(fake, "tensorrt_rtx", "1.7.1.116"))
    runtime = load(linear_engine(tmp_path / "1", module="tensorrt_rtx", version="1.7.1.116"))
    assert runtime.name == "tensorrt_rtx" and runtime.infers_shapes
    context = runtime.create_context(0)
    x = batch(8)
    check(run(context, x), x)
    context.close()
