"""The TensorRT double (tests/doubles/tensorrt_double.py) held to the real bindings it stands in for.

Signatures: every class member, property, enum value and function of the
TensorRT double must exist in the real bindings with the same parameters (a
member the bindings lack, a property settable in one and not the other, other
parameter names or defaults, another enum value all fail). The real modules:

- ``tensorrt_rtx``, installed with the dev extras (TensorRT-RTX: the TensorRT
  10 runtime API under another name, built from NVIDIA/TensorRT's python/src);
- real ``tensorrt`` bindings wheels (tensorrt-cu12-bindings, on PyPI: they
  import here with stand-ins for TensorRT's libraries, see
  tests/harness/binding_surface.py), one per release the double imitates,
  found in $TRTPOOL_TENSORRT_WHEELS; without it those cases are skipped
  with the command that fetches them;
- TensorRT's lean runtime, real (tensorrt-lean-cu12-bindings and -libs, which
  import here as they are), installed by scripts/setup.sh into
  .triton/tensorrt-lean/site ($TRTPOOL_TENSORRT_LEAN elsewhere): the double
  named ``tensorrt_lean_bindings`` is held to its runtime classes.

Behaviour: what a machine without a GPU cannot confirm against the real module
(does a call raise or return False, when is a callback made) is listed in
BEHAVIOUR with the source it was taken from, and each entry is checked here on
the double. None of this is proof that TensorRT behaves so; it is proof that
the double says what the sources say.
"""
from __future__ import annotations

import inspect
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.doubles import tensorrt_double
from tests.doubles.cuda_double import FakeCudart
from tests.doubles.engines import masked_model
from tests.doubles.tensorrt_double import UnsafeBindingCall, engine_bytes, make_module
from tests.harness.binding_surface import installed_surface, surface, wheel_surface
from tests.harness.server import ROOT
from trtpool.gpu import trt_api

WHEELS = os.environ.get("TRTPOOL_TENSORRT_WHEELS", "")
LEAN_SITE = Path(os.environ.get("TRTPOOL_TENSORRT_LEAN", ROOT / ".triton" / "tensorrt-lean"
                                / "site"))
NO_LEAN = (f"TensorRT's lean runtime is not installed in {LEAN_SITE} (scripts/setup.sh installs it; or "
           "pip install --no-deps --target DIR tensorrt-lean-cu12-libs tensorrt-lean-cu12-bindings, then "
           "TRTPOOL_TENSORRT_LEAN=DIR)")
RELEASES = [line for line in (Path(tensorrt_double.__file__).with_name("tensorrt_releases.txt").read_text().split("\n"))
            if line and not line.startswith("#")]
FETCH = (f"scripts/setup.sh downloads them; or pip download --no-deps -d DIR tensorrt-cu12-bindings==VERSION "
         f"({', '.join(RELEASES)}), then TRTPOOL_TENSORRT_WHEELS=DIR")


def differences(double: dict[str, Any], real: dict[str, Any]) -> list[str]:
    """What the double has that the bindings lack or have otherwise."""
    found = []
    for cls, members in double["classes"].items():
        real_members = real["classes"].get(cls)
        if real_members is None:
            found.append(f"class {cls}: not in the bindings")
            continue
        for name, member in members.items():
            found += _member_differences(f"{cls}.{name}", member, real_members.get(name))
    for enum, members in double["enums"].items():
        for name, value in members.items():
            if real["enums"].get(enum, {}).get(name) != value:
                found.append(f"{enum}.{name} = {value}: the bindings have {real['enums'].get(enum, {}).get(name)}")
    for name, overloads in double["functions"].items():
        found += _member_differences(name, {"kind": "method", "overloads": overloads},
                                     {"kind": "method", "overloads": real["functions"][name]}
                                     if name in real["functions"] else None)
    return found


def _member_differences(where: str, member: dict[str, Any], real: dict[str, Any] | None) -> list[str]:
    if real is None:
        return [f"{where}: not in the bindings"]
    if member["kind"] != real["kind"]:
        return [f"{where}: a {member['kind']} in the double, a {real['kind']} in the bindings"]
    if member["kind"] == "property" and member["settable"] != real["settable"]:
        return [f"{where}: settable {member['settable']} in the double, {real['settable']} in the bindings"]
    if member["kind"] == "method" and member["overloads"][0] not in real["overloads"]:
        return [f"{where}{member['overloads'][0]}: the bindings take {real['overloads']}"]
    return []


def double_surface(name: str, version: str) -> dict[str, Any]:
    return surface(make_module(FakeCudart(), name, version))


# ---- signatures -----------------------------------------------------------------------------

def test_the_double_has_only_what_tensorrt_rtx_has():
    rtx = pytest.importorskip("tensorrt_rtx")
    assert differences(double_surface("tensorrt_rtx", rtx.__version__), surface(rtx)) == []


def test_the_comparison_catches_a_member_the_bindings_lack_or_take_otherwise():
    rtx = pytest.importorskip("tensorrt_rtx")
    double = double_surface("tensorrt_rtx", rtx.__version__)
    context = double["classes"]["IExecutionContext"]
    context["all_binding_shapes_specified"] = {"kind": "property", "settable": True}  # read-only in the bindings
    context["execute_async_v3"] = {"kind": "method", "overloads": [[["stream", False]]]}
    context["run"] = {"kind": "method", "overloads": [[]]}
    double["enums"]["DataType"]["INT64"] = 5
    assert sorted(differences(double, surface(rtx))) == [
        "DataType.INT64 = 5: the bindings have 8",
        "IExecutionContext.all_binding_shapes_specified: settable True in the double, False in the bindings",
        "IExecutionContext.execute_async_v3[['stream', False]]: the bindings take [[['stream_handle', False]]]",
        "IExecutionContext.run: not in the bindings",
    ]


def _wheels() -> list[Path]:
    return sorted(Path(WHEELS).glob("tensorrt_cu1*_bindings-*.whl")) if WHEELS else []


@pytest.mark.skipif(not _wheels(), reason=f"no TensorRT bindings wheels; to check against them: {FETCH}")
@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("nm") and shutil.which("readelf")),
                    reason="needs gcc, nm and readelf to import the wheels with stand-in libraries")
@pytest.mark.parametrize("wheel", _wheels(), ids=lambda w: w.name.split("-")[1])
def test_the_double_of_each_release_has_only_what_its_bindings_have(wheel, tmp_path):
    real = wheel_surface(wheel, tmp_path)
    assert differences(double_surface("tensorrt", real["version"]), real) == []
    assert allocator_differences(real) == []


@pytest.mark.skipif(not (LEAN_SITE / "tensorrt_lean_bindings").is_dir(), reason=NO_LEAN)
def test_the_double_of_the_lean_runtime_has_only_what_the_lean_runtime_has():
    """Runtime, ICudaEngine, IExecutionContext and the rest the adapter uses, as the real lean module
    has them; it has no init_libnvinfer_plugins, so neither has the double (nor does trtpool call it)."""
    real = installed_surface("tensorrt_lean_bindings", LEAN_SITE)
    double = double_surface("tensorrt_lean_bindings", real["version"])
    assert sorted(real["classes"]) == sorted(double["classes"])  # every runtime class compared
    assert differences(double, real) == []
    assert allocator_differences(real) == []
    assert "init_libnvinfer_plugins" not in real["functions"] and "init_libnvinfer_plugins" not in double["functions"]


def allocator_differences(real: dict[str, Any]) -> list[str]:
    """trtpool's IOutputAllocator against the methods the bindings call by name (a misspelt one
    would never be called: TensorRT would get a null pointer, and only on a GPU)."""
    import types

    module = types.SimpleNamespace(__name__="bindings", IOutputAllocator=type("IOutputAllocator", (), {}))
    allocator = trt_api.output_allocator(module, lambda name, size: 0, lambda name, shape: None)
    expected = {name: params for name, params in real["callbacks"].items() if name != "reallocate_output"}
    ours = {name: list(inspect.signature(getattr(allocator, name)).parameters) for name in expected}
    return [f"{name}{ours[name]}: the bindings call {params}" for name, params in expected.items()
            if ours[name] != params] + (["the bindings document no callbacks"] if not expected else [])


def test_trtpools_output_allocator_has_the_methods_tensorrt_rtx_calls():
    rtx = pytest.importorskip("tensorrt_rtx")
    assert surface(rtx)["callbacks"]["reallocate_output_async"] == ["tensor_name", "memory", "size", "alignment",
                                                                    "stream"]
    assert allocator_differences(surface(rtx)) == []


# ---- behaviour a machine without a GPU cannot confirm -----------------------------------------------

BEHAVIOUR = {
    "profile_switch_raises": (
        "set_optimization_profile_async raises RuntimeError('Error in set optimization profile async.') "
        "on failure and returns True otherwise",
        "python/src/infer/pyCore.cpp release/10.16:346-352, release/11.1:336-342 (PY_ASSERT_RUNTIME_ERROR)"),
    "infer_shapes_raises": (
        "infer_shapes raises RuntimeError('infer_shapes error code: -1') when shapes cannot be inferred, and "
        "returns the names of inputs not yet specified",
        "pyCore.cpp release/10.16:95-111; docstring python/docstrings/infer/pyCoreDoc.h (infer_shapes, ':raises:')"),
    "raises_without_gil_before_10_13": (
        "before 10.13 both raise with the GIL released (bound with py::call_guard<py::gil_scoped_release>; "
        "throwPyError calls PyErr_SetString): the process may crash",
        "pyCore.cpp release/10.12:95-108 and 1302-1311, python/src/utils.cpp release/10.12:160-164; "
        "fixed in release/10.13 (gil_scoped_acquire at pyCore.cpp:105, no release on the profile call)"),
    "bool_results": (
        "set_input_shape, set_tensor_address, set_output_allocator and execute_async_v3 return False on "
        "failure and log why; they do not raise",
        "pyCore.cpp release/10.16:113-116 (enqueueV3), 118-121, 158-162 (setInputShape); "
        "include/NvInferRuntime.h setInputShape/setTensorAddress/enqueueV3 '\\return'"),
    "output_allocator_by_name": (
        "TensorRT calls reallocate_output_async (else reallocate_output) by name during execute_async_v3, "
        "then notify_shape before it returns; an exception in a callback is printed and becomes a null pointer",
        "pyCore.cpp release/11.1:591-700 (PyOutputAllocator); include/NvInferRuntime.h release/11.1:3877-3892"),
    "set_up_outside_capture": (
        "the first execute_async_v3 after a profile, shape or address change does set-up work that a stream "
        "capture cannot contain",
        "samples/common/sampleInference.cpp release/10.16:1326-1333 ('Avoid capturing initialization calls "
        "by executing the enqueue function at least once'); NvInferRuntime.h onShapeChange/configurePlugin"),
    "profile_resources_on_enqueue": (
        "a profile switch defers layer resource updates to the next execute_async_v3, which a graph launch "
        "does not perform",
        "include/NvInferRuntime.h release/11.1:4272 (setOptimizationProfileAsync '\\warning')"),
    "user_managed_memory": (
        "a context made with ExecutionContextAllocationStrategy.USER_MANAGED holds no activation memory: "
        "execute_async_v3 fails until memory is assigned to its device_memory property (write-only); "
        "update_device_memory_size_for_shapes, called once the profile and every input shape are set, "
        "returns how much those shapes need",
        "the bindings' docstrings (pyCoreDoc.h, as tensorrt_rtx 1.7 prints them): "
        "ExecutionContextAllocationStrategy.USER_MANAGED 'The user supplies custom allocation to the "
        "execution context'; update_device_memory_size_for_shapes 'Recompute the internal activation buffer "
        "sizes based on the current input shapes, and return the total amount of memory required. Users can "
        "allocate the device memory based on the size returned and provided the memory to TRT with an "
        "assignment to IExecutionContext.device_memory. Must specify all input shapes and the optimization "
        "profile to use before calling this function'"),
    "failed_output_shape": (
        "UNCONFIRMED: get_tensor_shape of an output whose shape inference failed returns Dims{-1} (no "
        "dimensions, as the bindings show it)",
        "include/NvInferRuntime.h release/11.1:4144 (the error value for an unknown name)"),
    "host_code": (
        "a version-compatible engine deserializes only with engine_host_code_allowed = True (default False)",
        "pyCoreDoc.h release/10.16:2001; samples/common/sampleEngines.cpp release/10.16:137-141; "
        "tools/Polygraphy/polygraphy/backend/trt/loader.py release/10.16:716-719"),
    "plugins": (
        "an engine with plugin layers deserializes only after init_libnvinfer_plugins registered the creators",
        "plugin/api/inferPlugin.cpp release/10.16:98-140, 181-257; Polygraphy loader.py release/10.16:714"),
}


@pytest.fixture
def context_of():
    """A double context over the masked model, in a module of the given release."""
    made = []

    def make(version: str) -> Any:
        cudart = FakeCudart()
        module = make_module(cudart, "tensorrt", version)
        logger = module.Logger(module.Logger.Severity.INTERNAL_ERROR)
        profile = {name: ((1, 1), (2, 4), (8, 16)) for name in ("tokens", "mask")}
        engine = module.Runtime(logger).deserialize_cuda_engine(engine_bytes(masked_model(), [profile]))
        made.append((cudart, engine))
        stream = cudart.cudaStreamCreateWithFlags(1)[1]
        return engine.create_execution_context(), stream

    return make


def test_every_behaviour_is_checked():
    assert sorted(BEHAVIOUR) == sorted(name.removeprefix("test_behaviour_") for name in globals()
                                       if name.startswith("test_behaviour_"))


def test_behaviour_profile_switch_raises(context_of):
    context, stream = context_of("10.16.1.11")
    assert context.set_optimization_profile_async(0, stream) is True
    with pytest.raises(RuntimeError, match=r"^Error in set optimization profile async\.$"):
        context.set_optimization_profile_async(1, stream)


def test_behaviour_infer_shapes_raises(context_of):
    context, _ = context_of("11.4.0.106")
    assert context.infer_shapes() == ["tokens", "mask"]
    context.set_input_shape("tokens", (2, 4))
    context.set_input_shape("mask", (2, 5))
    with pytest.raises(RuntimeError, match=r"^infer_shapes error code: -1$"):
        context.infer_shapes()


def test_behaviour_raises_without_gil_before_10_13(context_of):
    context, stream = context_of("10.12.0.36")
    context.set_input_shape("tokens", (2, 4))
    context.set_input_shape("mask", (2, 5))
    with pytest.raises(UnsafeBindingCall):
        context.infer_shapes()
    with pytest.raises(UnsafeBindingCall):
        context.set_optimization_profile_async(3, stream)


def test_behaviour_bool_results(context_of):
    context, stream = context_of("10.16.1.11")
    assert context.set_input_shape("tokens", (9, 4)) is False      # outside the profile
    assert context.set_tensor_address("nothing", 0) is False
    assert context.set_output_allocator("tokens", None) is False    # not an output
    assert context.execute_async_v3(stream) is False                # nothing set


def test_behaviour_output_allocator_by_name(capsys):
    calls = []

    class Legacy(tensorrt_double.IOutputAllocator):
        def reallocate_output(self, tensor_name: str, memory: int, size: int, alignment: int) -> int:
            calls.append(("legacy", tensor_name, size))
            return 4096

    class Broken(tensorrt_double.IOutputAllocator):
        def reallocate_output_async(self, *args: Any) -> int:
            raise ValueError("no memory here")

    assert tensorrt_double._reallocate(Legacy(), "out", 0, 64, 1) == 4096 and calls == [("legacy", "out", 64)]
    assert tensorrt_double._reallocate(Broken(), "out", 0, 64, 1) == 0
    assert "ValueError: no memory here" in capsys.readouterr().err


def test_behaviour_set_up_outside_capture(context_of):
    context, stream = context_of("10.16.1.11")
    cudart = context._cudart
    context.set_input_shape("tokens", (2, 4))
    context.set_input_shape("mask", (2, 4))
    for name in ("tokens", "mask", "total"):
        context.set_tensor_address(name, cudart.cudaMalloc(64)[1])
    cudart.cudaStreamBeginCapture(stream, cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal)
    assert context.execute_async_v3(stream) is False  # set-up inside the capture
    assert cudart.cudaStreamEndCapture(stream)[0] == cudart.cudaError_t.cudaErrorStreamCaptureInvalidated
    assert context.execute_async_v3(stream) is True   # an ordinary run does the set-up
    cudart.cudaStreamBeginCapture(stream, cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal)
    assert context.execute_async_v3(stream) is True
    assert cudart.cudaStreamEndCapture(stream)[0] == cudart.cudaError_t.cudaSuccess


def test_behaviour_profile_resources_on_enqueue(context_of):
    context, stream = context_of("10.16.1.11")
    cudart = context._cudart
    for name in ("tokens", "mask", "total"):
        context.set_tensor_address(name, cudart.cudaMalloc(64)[1])
    shapes = {"tokens": (2, 4), "mask": (2, 4)}
    for name, shape in shapes.items():
        context.set_input_shape(name, shape)
    context.execute_async_v3(stream)
    cudart.cudaStreamBeginCapture(stream, cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal)
    context.execute_async_v3(stream)
    graph = cudart.cudaGraphInstantiate(cudart.cudaStreamEndCapture(stream)[1], 0)[1]
    context.set_optimization_profile_async(0, stream)  # the same profile, selected again
    for name, shape in shapes.items():
        context.set_input_shape(name, shape)
    cudart.cudaGraphLaunch(graph, stream)
    assert cudart.cudaStreamSynchronize(stream)[0] == cudart.cudaError_t.cudaSuccess  # resources still there
    context._resources = None  # as after a switch to another profile and back, with no ordinary run
    cudart.cudaGraphLaunch(graph, stream)
    assert cudart.cudaStreamSynchronize(stream)[0] == cudart.cudaError_t.cudaErrorIllegalAddress


def test_behaviour_user_managed_memory():
    cudart = FakeCudart()
    module = make_module(cudart, "tensorrt", "10.0.1")
    logger = module.Logger(module.Logger.Severity.INTERNAL_ERROR)
    profile = {name: ((1, 1), (2, 4), (8, 16)) for name in ("tokens", "mask")}
    engine = module.Runtime(logger).deserialize_cuda_engine(engine_bytes(masked_model(), [profile]))
    context = engine.create_execution_context(module.ExecutionContextAllocationStrategy.USER_MANAGED)
    stream = cudart.cudaStreamCreateWithFlags(1)[1]
    for name in ("tokens", "mask", "total"):
        context.set_tensor_address(name, cudart.cudaMalloc(1024)[1])
    context.set_input_shape("tokens", (2, 4))
    context.set_input_shape("mask", (2, 4))
    assert context.execute_async_v3(stream) is False  # no memory yet
    small = context.update_device_memory_size_for_shapes()
    context.device_memory = cudart.cudaMalloc(small)[1]
    assert context.execute_async_v3(stream) is True
    assert cudart.cudaStreamSynchronize(stream)[0] == cudart.cudaError_t.cudaSuccess
    context.set_input_shape("tokens", (8, 16))
    context.set_input_shape("mask", (8, 16))
    assert context.update_device_memory_size_for_shapes() > small  # larger shapes need more
    with pytest.raises(AttributeError):
        context.device_memory  # noqa: B018 (write-only)


def test_behaviour_failed_output_shape(context_of):
    context, _ = context_of("10.16.1.11")
    context.set_input_shape("tokens", (2, 4))
    context.set_input_shape("mask", (2, 5))
    assert len(context.get_tensor_shape("total")) == 0


def test_behaviour_host_code():
    module = make_module(FakeCudart())
    runtime = module.Runtime(module.Logger(module.Logger.Severity.INTERNAL_ERROR))
    data = engine_bytes(masked_model(), [{n: ((1, 1), (1, 1), (1, 1)) for n in ("tokens", "mask")}],
                        version_compatible=True)
    assert runtime.engine_host_code_allowed is False
    assert runtime.deserialize_cuda_engine(data) is None
    runtime.engine_host_code_allowed = True
    assert runtime.deserialize_cuda_engine(data) is not None


def test_behaviour_plugins():
    module = make_module(FakeCudart())
    logger = module.Logger(module.Logger.Severity.INTERNAL_ERROR)
    runtime = module.Runtime(logger)
    data = engine_bytes(masked_model(), [{n: ((1, 1), (1, 1), (1, 1)) for n in ("tokens", "mask")}],
                        plugins=("EfficientNMS_TRT",))
    assert runtime.deserialize_cuda_engine(data) is None
    assert module.init_libnvinfer_plugins(logger, "") is True
    assert runtime.deserialize_cuda_engine(data) is not None
