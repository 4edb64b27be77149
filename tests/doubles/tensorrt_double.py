"""A test double of the TensorRT Python module's runtime surface. It proves nothing about TensorRT.

It has the classes, members and signatures of the real bindings that trtpool's
adapter uses (tests/unit/doubles/test_tensorrt_double.py fails on any member or
signature the real ``tensorrt_rtx`` module, or a real ``tensorrt`` wheel of
the same release, lacks), and their behaviour as NVIDIA/TensorRT's
python/src/infer/pyCore.cpp and the C++ headers describe it; that test lists
each behaviour a machine without a GPU cannot confirm, with the line it was
taken from. Where the sources leave a choice open, the double takes the
stricter one: it is never kinder than the library.

The "engine file" is JSON (write it with ``engine_bytes``): an ONNX model, its
I/O as the engine describes it, the optimization profiles, and flags
(version-compatible, plugin layers). ``execute_async_v3`` queues "kernels" on
the FakeCudart stream that run the ONNX model with ONNX Runtime on the CPU,
reading inputs from and writing outputs to emulated device memory at the
tensor addresses; output shapes come from ONNX shape inference on the input
shapes set, and an output it cannot size is data-dependent: it is served
through the context's IOutputAllocator, as TensorRT does, after a
synchronization of the stream (TensorRT waits for the sizes).

What the double enforces, as TensorRT specifies it:
- an ``execute_async_v3`` after a profile switch, an input shape or a tensor
  address change first does set-up work that is illegal inside a stream
  capture (so a capture must follow an ordinary run: trtexec's
  sampleInference.cpp, "Avoid capturing initialization calls");
- a captured run, when replayed, needs the context in the profile and input
  shapes it was captured with, with the layer resources of that profile set
  up by an ordinary run (setOptimizationProfileAsync defers them to the next
  enqueueV3; a graph launch does not perform them);
- infer_shapes and set_optimization_profile_async raise on failure; before
  TensorRT 10.13 their raise happens without the GIL, which the double turns
  into UnsafeBindingCall (not an Exception): a test that triggers it fails.
"""
from __future__ import annotations

import base64
import copy
import enum
import json
import sys
import traceback
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.doubles.cuda_double import DoubleError, FakeCudart, cudaError_t

MAGIC = "tensorrt-double-engine"
ALIGNMENT = 256


class UnsafeBindingCall(BaseException):
    """A binding whose failure path sets a Python error without the GIL (TensorRT < 10.13)."""


class DataType(enum.IntEnum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    FP8 = 6
    BF16 = 7
    INT64 = 8


class TensorIOMode(enum.IntEnum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class ExecutionContextAllocationStrategy(enum.IntEnum):
    STATIC = 0
    ON_PROFILE_CHANGE = 1
    USER_MANAGED = 2


ONNX_TO_TRT = {TensorProto.FLOAT: "FLOAT", TensorProto.FLOAT16: "HALF", TensorProto.INT8: "INT8",
               TensorProto.INT32: "INT32", TensorProto.INT64: "INT64", TensorProto.BOOL: "BOOL",
               TensorProto.UINT8: "UINT8", TensorProto.BFLOAT16: "BF16"}
NUMPY = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32, "INT64": np.int64,
         "BOOL": np.bool_, "UINT8": np.uint8}


class Dims:
    """Like trt.Dims: indexable, sized, equal to a tuple or list of its values; not a tuple."""

    def __init__(self, shape: Any) -> None:
        self._values = tuple(int(d) for d in shape)

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, arg0: int) -> int:
        return self._values[arg0]

    def __eq__(self, arg0: object) -> bool:
        if isinstance(arg0, (tuple, list)):
            return self._values == tuple(arg0)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._values)


class ILogger:
    class Severity(enum.IntEnum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    def __init__(self) -> None:
        pass

    def log(self, severity: ILogger.Severity, msg: str) -> None:
        raise NotImplementedError


class Logger(ILogger):
    def __init__(self, min_severity: ILogger.Severity = ILogger.Severity.WARNING) -> None:
        self.min_severity = min_severity

    def log(self, severity: ILogger.Severity, msg: str) -> None:
        if severity <= self.min_severity:
            print(msg, file=sys.stderr)


class IOutputAllocator:
    """Base of application output allocators; TensorRT calls its subclass's methods by name."""

    def __init__(self) -> None:
        pass


def engine_bytes(model: onnx.ModelProto, profiles: list[dict[str, tuple]], *, io: dict | None = None,
                 device_memory: int = 1 << 20, version_compatible: bool = False,
                 plugins: tuple[str, ...] = ()) -> bytes:
    """A double engine of `model` with one {input: (min, opt, max)} per profile.

    `io` is {"inputs": [(name, DataType name, shape)], "outputs": [...]} as the
    engine reports them (e.g. read from a real TensorRT-RTX build); by default
    taken from the model's graph, symbolic dimensions as -1.
    """
    return json.dumps({
        "format": MAGIC,
        "onnx": base64.b64encode(model.SerializeToString()).decode(),
        "io": io or graph_io(model),
        "profiles": [{name: [list(s) for s in shapes] for name, shapes in p.items()} for p in profiles],
        "device_memory": device_memory,
        "version_compatible": version_compatible,
        "plugins": list(plugins),
    }).encode()


def graph_io(model: onnx.ModelProto) -> dict[str, list]:
    def described(value: onnx.ValueInfoProto) -> list:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        return [value.name, ONNX_TO_TRT[tensor.elem_type], shape]

    initializers = {i.name for i in model.graph.initializer}
    return {"inputs": [described(v) for v in model.graph.input if v.name not in initializers],
            "outputs": [described(v) for v in model.graph.output]}


class _Module:
    """What the classes of one double module share: its CUDA double, name and release."""

    def __init__(self, cudart: FakeCudart, name: str, version: str) -> None:
        self.cudart = cudart
        self.name = name
        self.release = tuple(int(p) for p in version.split(".")[:2])
        self.plugins_registered = False
        # TensorRT's lean runtime (trtpool.gpu.trt_api.LEAN_MODULES): no init_libnvinfer_plugins, checks
        # CUDA when a Runtime is made, and deserializes version-compatible engines only.
        self.lean = name in ("tensorrt_lean", "tensorrt_lean_bindings")

    @property
    def raises_safely(self) -> bool:
        return self.name == "tensorrt_rtx" or self.release >= (10, 13)


class Runtime:
    _module: _Module

    def __init__(self, logger: ILogger) -> None:
        self._logger = logger
        self._host_code = False
        if self._module.lean and not self._module.cudart.devices:  # the real lean module's words, seen here
            self._error("createInferRuntime: Error Code 6: API Usage Error (CUDA initialization failure with "
                        "error: 35 In checkCudaInstallation at /_src/runtime/dispatch/runtime.cpp:960)")

    @property
    def engine_host_code_allowed(self) -> bool:
        return self._host_code

    @engine_host_code_allowed.setter
    def engine_host_code_allowed(self, value: bool) -> None:
        self._host_code = bool(value)

    def _error(self, message: str) -> None:
        self._logger.log(ILogger.Severity.ERROR, message)

    def deserialize_cuda_engine(self, serialized_engine: bytes) -> ICudaEngine | None:
        try:
            description = json.loads(bytes(serialized_engine).decode())
            if description.get("format") != MAGIC:
                raise ValueError("magic tag")
        except (ValueError, UnicodeDecodeError):
            self._error("IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization assertion "
                        "magicTagRead == kMAGIC_TAG failed.Magic tag does not match)")
            return None
        if self._module.lean and not description["version_compatible"]:
            self._error("IRuntime::deserializeCudaEngine: Error Code 1: Internal Error (Unexpected call to stub "
                        "loadRunner for ReformatRunner)")  # NVIDIA/TensorRT issue 4790, a lean runtime
            return None
        if description["version_compatible"] and not self._host_code:
            self._error("IRuntime::deserializeCudaEngine: Error Code 1: Serialization (the engine contains host "
                        "code, which this runtime does not allow: set engine_host_code_allowed) [double's words]")
            return None
        if description["plugins"] and not self._module.plugins_registered:
            self._error("IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization assertion "
                        f"creator failed.Cannot deserialize plugin {description['plugins'][0]} since corresponding "
                        "IPluginCreator not found in Plugin Registry)")
            return None
        return self._module.engine_class(self._module, self._logger, description)


class ICudaEngine:
    def __init__(self, module: _Module, logger: ILogger, description: dict[str, Any]) -> None:
        import onnxruntime

        self.module = module
        self.logger = logger
        self.model = onnx.load_from_string(base64.b64decode(description["onnx"]))
        self.session = onnxruntime.InferenceSession(self.model.SerializeToString(),
                                                    providers=["CPUExecutionProvider"])
        io = description["io"]
        self.inputs = {name: (dtype, tuple(shape)) for name, dtype, shape in io["inputs"]}
        self.outputs = {name: (dtype, tuple(shape)) for name, dtype, shape in io["outputs"]}
        self.names = [*self.inputs, *self.outputs]
        self.profiles = [{name: [tuple(s) for s in shapes] for name, shapes in p.items()}
                         for p in description["profiles"]]
        self.memory = description["device_memory"]
        self._inferred: dict[tuple, dict[str, tuple[int, ...]] | str] = {}
        self.fail_next_executions = 0   # tests: execute_async_v3 returns False this many times
        self.executions = 0
        self.contexts_created = 0

    @property
    def num_io_tensors(self) -> int:
        return len(self.names)

    def get_tensor_name(self, index: int) -> str:
        return self.names[index]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode.INPUT if name in self.inputs else \
            TensorIOMode.OUTPUT if name in self.outputs else TensorIOMode.NONE

    def get_tensor_dtype(self, name: str) -> DataType:
        return DataType[{**self.inputs, **self.outputs}[name][0]]

    def get_tensor_shape(self, name: str) -> Dims:
        return Dims({**self.inputs, **self.outputs}[name][1])

    def is_shape_inference_io(self, name: str) -> bool:
        return False

    @property
    def num_optimization_profiles(self) -> int:
        return len(self.profiles)

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[Dims]:
        return [Dims(s) for s in self.profiles[profile_index][name]]

    def create_execution_context(self, strategy: ExecutionContextAllocationStrategy =
                                 ExecutionContextAllocationStrategy.STATIC) -> IExecutionContext | None:
        if strategy == ExecutionContextAllocationStrategy.USER_MANAGED:
            self.contexts_created += 1
            return self.module.context_class(self, None)  # its activation memory is the user's to set
        err, memory = self.module.cudart.cudaMalloc(self.memory)
        if err:
            self.logger.log(ILogger.Severity.ERROR, "IExecutionContext: Error Code 2: OutOfMemory "
                            f"(Requested size was {self.memory} bytes.)")
            return None
        self.contexts_created += 1
        return self.module.context_class(self, memory)

    # -- the model ------------------------------------------------------------------

    def _infer(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]] | str:
        """Output shapes (-1 where the data decides) for input shapes, or why they cannot be inferred."""
        key = tuple(sorted(shapes.items()))
        if key not in self._inferred:
            model = copy.deepcopy(self.model)
            for value in model.graph.input:
                if value.name in shapes:
                    value.CopyFrom(helper.make_tensor_value_info(value.name, value.type.tensor_type.elem_type,
                                                                 shapes[value.name]))
            try:
                inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
            except Exception as exc:  # onnx.shape_inference.InferenceError and kin
                self._inferred[key] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            else:
                self._inferred[key] = {v.name: tuple(d.dim_value if d.HasField("dim_value") else -1
                                                     for d in v.type.tensor_type.shape.dim)
                                       for v in inferred.graph.output}
        return self._inferred[key]

    def _compute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.outputs, self.session.run(list(self.outputs), inputs)))


class _MemorySize:
    @property
    def device_memory_size(self) -> int:
        return self.memory


class _MemorySizeV2:
    @property
    def device_memory_size_v2(self) -> int:
        return self.memory


class IExecutionContext:
    """Allocates its activation memory when made (the STATIC strategy), or runs on the
    memory the user sets (USER_MANAGED: `memory` None until the device_memory property
    is set; update_device_memory_size_for_shapes says how much the input shapes need)."""

    def __init__(self, engine: ICudaEngine, memory: int | None) -> None:
        self._engine = engine
        self._memory = memory
        self._owns_memory = memory is not None
        self._profile = 0  # "The newly created execution context will be assigned optimization profile 0."
        self.profile_switches = 0
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._addresses: dict[str, int] = {}
        self._allocators: dict[str, Any] = {}
        self._set_up = False        # whether the next execute_async_v3 must first set up
        self._resources: int | None = None  # the profile whose layer resources are set up

    def __del__(self) -> None:
        if self._owns_memory:
            self._engine.module.cudart.cudaFree(self._memory)

    # -- activation memory (USER_MANAGED) ---------------------------------------------------

    def _device_memory(self) -> None:
        raise AttributeError("unreadable attribute")  # pybind11: a property with a setter only

    def _set_device_memory(self, memory: int) -> None:
        if int(memory) % ALIGNMENT:
            self._error(f"IExecutionContext::setDeviceMemory: Error Code 3: API Usage Error (memory is not "
                        f"{ALIGNMENT}-byte aligned)")
            return
        if self._owns_memory:
            self._engine.module.cudart.cudaFree(self._memory)
            self._owns_memory = False
        self._memory = int(memory)
        self._set_up = False

    device_memory = property(_device_memory, _set_device_memory)

    def update_device_memory_size_for_shapes(self) -> int:
        """The activation memory the input shapes set need: the engine's (its largest profile's)
        scaled by their elements against the profile's largest, in whole alignment units."""
        if set(self._shapes) != set(self._engine.inputs):
            self._error("IExecutionContext::updateDeviceMemorySizeForShapes: Error Code 3: API Usage Error "
                        "(input shapes not set)")
            return 0
        return self._required_memory()

    def _required_memory(self) -> int:
        profile = self._engine.profiles[self._profile]
        used = sum(int(np.prod(self._shapes[name])) for name in self._engine.inputs)
        largest = sum(int(np.prod(profile[name][2])) for name in self._engine.inputs)
        units = -(-self._engine.memory * used // (largest * ALIGNMENT))
        return max(1, units) * ALIGNMENT

    @property
    def _cudart(self) -> FakeCudart:
        return self._engine.module.cudart

    def _error(self, message: str) -> bool:
        self._engine.logger.log(ILogger.Severity.ERROR, message)
        return False

    def _raise(self, message: str) -> None:
        if not self._engine.module.raises_safely:
            raise UnsafeBindingCall(f"{message}: this binding sets its Python error without the GIL "
                                    f"before TensorRT 10.13 (the process may crash)")
        raise RuntimeError(message)

    @property
    def active_optimization_profile(self) -> int:
        return self._profile

    def set_optimization_profile_async(self, profile_index: int, stream_handle: int) -> bool:
        if not 0 <= profile_index < self._engine.num_optimization_profiles or \
                int(stream_handle) not in self._cudart.streams:
            self._error(f"IExecutionContext::setOptimizationProfileAsync: Error Code 3: API Usage Error "
                        f"(profile index {profile_index} or stream {stream_handle:#x} invalid)")
            self._raise("Error in set optimization profile async.")
        self._profile = profile_index
        self.profile_switches += 1
        self._shapes.clear()  # switching "will invalidate all dynamic bindings" (active_optimization_profile doc)
        self._set_up = False
        return True

    def set_input_shape(self, name: str, shape: tuple | list | Dims) -> bool:
        if not isinstance(shape, (tuple, list, Dims)) or not all(type(d) is int for d in shape):
            raise TypeError("set_input_shape(): incompatible function arguments (a tuple, list or Dims of int)")
        shape = tuple(shape)
        if name not in self._engine.inputs:
            return self._error(f"IExecutionContext::setInputShape: Error Code 3: API Usage Error ({name} is "
                               "not an input)")
        low, _, high = self._engine.profiles[self._profile][name]
        if len(shape) != len(low) or not all(lo <= d <= hi for lo, d, hi in zip(low, shape, high)):
            return self._error(f"IExecutionContext::setInputShape: Error Code 3: API Usage Error (Parameter "
                               f"check failed, condition: {name} {list(shape)} within profile {self._profile} "
                               f"[{list(low)}, {list(high)}])")
        if self._shapes.get(name) != shape:
            self._shapes[name] = shape
            self._set_up = False
        return True

    def _inferred(self) -> dict[str, tuple[int, ...]] | str:
        return self._engine._infer(self._shapes)

    def get_tensor_shape(self, name: str) -> Dims:
        engine = self._engine
        if name in engine.inputs:
            return Dims(self._shapes.get(name, engine.inputs[name][1]))
        if set(self._shapes) != set(engine.inputs):
            return Dims(engine.outputs[name][1])  # -1 where an unset input decides
        inferred = self._inferred()
        if isinstance(inferred, str):  # unconfirmed: the C++ error value Dims{-1, {}}, as the bindings show it
            self._error(f"IExecutionContext::getTensorShape: Error Code 7: Internal Error ({inferred})")
            return Dims(())
        return Dims(inferred[name])

    def infer_shapes(self) -> list[str]:
        missing = [name for name in self._engine.inputs if name not in self._shapes]
        if missing:
            return missing
        inferred = self._inferred()
        if isinstance(inferred, str):
            self._error(f"IExecutionContext::inferShapes: Error Code 7: Internal Error ({inferred})")
            self._raise("infer_shapes error code: -1")
        return []

    def set_tensor_address(self, name: str, memory: int) -> bool:
        if name not in self._engine.names:
            return self._error(f"IExecutionContext::setTensorAddress: Error Code 3: API Usage Error (no tensor {name})")
        if int(memory) % ALIGNMENT:
            return self._error(f"IExecutionContext::setTensorAddress: Error Code 3: API Usage Error (address of "
                               f"{name} is not {ALIGNMENT}-byte aligned)")
        if self._addresses.get(name) != int(memory):
            self._addresses[name] = int(memory)
            self._set_up = False
        return True

    def set_output_allocator(self, name: str, output_allocator: IOutputAllocator | None) -> bool:
        if name not in self._engine.outputs:
            return self._error(f"IExecutionContext::setOutputAllocator: Error Code 3: API Usage Error ({name} is "
                               "not an output)")
        self._allocators[name] = output_allocator
        return True

    # -- execute_async_v3 ----------------------------------------------------------------

    def execute_async_v3(self, stream_handle: int) -> bool:
        engine, cudart = self._engine, self._cudart
        engine.executions += 1
        if engine.fail_next_executions > 0:
            engine.fail_next_executions -= 1
            return self._error("IExecutionContext::enqueueV3: Error Code 1: Cuda Runtime (injected by the double)")
        problem = self._unready()
        if problem:
            return self._error(f"IExecutionContext::enqueueV3: Error Code 3: API Usage Error ({problem})")
        inferred = self._inferred()
        if isinstance(inferred, str):
            return self._error(f"IExecutionContext::enqueueV3: Error Code 7: Internal Error ({inferred})")
        try:
            if not self._set_up:  # set-up work a stream capture cannot contain
                cudart.refuse_if_capturing(stream_handle, "enqueueV3's set-up after a profile, shape or address change")
                self._set_up, self._resources = True, self._profile
            dynamic = [name for name, shape in inferred.items() if -1 in shape]
            if dynamic:
                return self._execute_now(stream_handle, dynamic)
            cudart.enqueue(stream_handle, self._kernel(inferred))
        except DoubleError as exc:
            return self._error(f"IExecutionContext::enqueueV3: Error Code 1: Cuda Runtime ({exc})")
        return True

    def _unready(self) -> str | None:
        engine = self._engine
        missing = [n for n in engine.inputs if n not in self._shapes]
        if missing:
            return f"input shapes not set: {missing}"
        unbound = [n for n in engine.names if n not in self._addresses and n not in self._allocators]
        if unbound:
            return f"no address or output allocator for {unbound}"
        if self._memory is None:
            return "no device memory set on a context made with ExecutionContextAllocationStrategy.USER_MANAGED"
        return None

    def _state(self) -> tuple:
        return self._profile, tuple(sorted(self._shapes.items())), self._resources, self._memory

    def _read_inputs(self, shapes: dict[str, tuple[int, ...]], addresses: dict[str, int]) -> dict[str, np.ndarray]:
        engine, cudart = self._engine, self._cudart
        inputs = {}
        for name, (dtype, _) in engine.inputs.items():
            array_type, shape = np.dtype(NUMPY[dtype]), shapes[name]
            raw = cudart.device_view(addresses[name], int(np.prod(shape)) * array_type.itemsize)
            inputs[name] = np.frombuffer(raw, array_type).reshape(shape).copy()
        return inputs

    def _write(self, outputs: dict[str, np.ndarray], addresses: dict[str, int]) -> None:
        for name, value in outputs.items():
            value = np.ascontiguousarray(value, NUMPY[self._engine.outputs[name][0]])
            self._cudart.device_view(addresses[name], value.nbytes)[:] = value.tobytes()

    def _kernel(self, inferred: dict[str, tuple[int, ...]]) -> Any:
        """The run's work on the stream, with the shapes and addresses of now; when replayed
        from a graph, the context must be in the state it was captured in."""
        state, shapes, addresses = self._state(), dict(self._shapes), dict(self._addresses)
        activations = (self._memory, self._required_memory())

        def kernel() -> None:
            if self._state() != state:
                raise DoubleError(cudaError_t.cudaErrorIllegalAddress,
                                  f"a captured run replayed in context state {self._state()}, captured in {state}")
            self._cudart.device_view(*activations)  # the activations: inside one live allocation
            outputs = self._engine._compute(self._read_inputs(shapes, addresses))
            for name, value in outputs.items():
                if value.shape != inferred[name]:
                    raise DoubleError(cudaError_t.cudaErrorIllegalAddress, f"{name}: {value.shape} != {inferred[name]}")
            self._write(outputs, addresses)

        return kernel

    def _execute_now(self, stream_handle: int, dynamic: list[str]) -> bool:
        """A run with data-dependent outputs: TensorRT waits for the sizes, then asks the output
        allocators for memory and tells them the shapes, before execute_async_v3 returns."""
        cudart = self._cudart
        err, = cudart.cudaStreamSynchronize(stream_handle)
        if err:
            return self._error(f"IExecutionContext::enqueueV3: Error Code 1: Cuda Runtime ({err.name})")
        outputs = self._engine._compute(self._read_inputs(self._shapes, self._addresses))
        addresses = dict(self._addresses)
        for name in dynamic:
            allocator = self._allocators.get(name)
            if allocator is None:
                return self._error(f"IExecutionContext::enqueueV3: Error Code 3: API Usage Error (output {name} "
                                   "has a data-dependent shape and no output allocator)")
            nbytes = max(1, outputs[name].nbytes)  # "Always positive, even for an empty tensor"
            ptr = _reallocate(allocator, name, addresses.get(name, 0), nbytes, stream_handle)
            if not ptr:
                return self._error(f"IExecutionContext::enqueueV3: Error Code 2: OutOfMemory (output allocator "
                                   f"returned no memory for {name})")
            addresses[name] = ptr
            allocator.notify_shape(name, Dims(outputs[name].shape))
        cudart.enqueue(stream_handle, lambda: self._write(outputs, addresses))
        return True


def _reallocate(allocator: Any, name: str, memory: int, size: int, stream: int) -> int:
    """PyOutputAllocator::reallocateOutputAsync (pyCore.cpp): the Python override by name,
    else reallocate_output; an exception is printed and becomes a null pointer."""
    try:
        method = getattr(allocator, "reallocate_output_async", None)
        if method is not None:
            return int(method(name, memory, size, ALIGNMENT, stream))
        method = getattr(allocator, "reallocate_output", None)
        return int(method(name, memory, size, ALIGNMENT)) if method is not None else 0
    except Exception:  # noqa: BLE001 (the trampoline's catch (std::exception const& e))
        traceback.print_exc()
        return 0


class _StreamCapturable:
    def is_stream_capturable(self, stream: int) -> bool:
        return True


def make_module(cudart: FakeCudart, name: str = "tensorrt", version: str = "10.8.0.43") -> Any:
    """A module object standing in for `tensorrt` (or `tensorrt_rtx`, or TensorRT's lean runtime
    `tensorrt_lean` / `tensorrt_lean_bindings`) of a release, bound to a FakeCudart.

    The release decides the members that differ: device_memory_size (tensorrt 10.x, removed
    in 11.0, never in TensorRT-RTX), device_memory_size_v2 (10.1 and later, TensorRT-RTX),
    is_stream_capturable (TensorRT-RTX).
    """
    import types

    shared = _Module(cudart, name, version)
    rtx, release = name == "tensorrt_rtx", shared.release
    memory = ((_MemorySize,) if not rtx and release < (11, 0) else ()) + \
        ((_MemorySizeV2,) if rtx or release >= (10, 1) else ())
    capturable = (_StreamCapturable,) if rtx else ()
    shared.engine_class = type("ICudaEngine", (ICudaEngine, *memory), {})
    shared.context_class = type("IExecutionContext", (IExecutionContext, *capturable), {})

    def init_libnvinfer_plugins(logger: Any, namespace: str) -> bool:
        shared.plugins_registered = True
        return True

    module = types.ModuleType(name, __doc__)
    module.__version__ = version
    module.DataType = DataType
    module.TensorIOMode = TensorIOMode
    module.ExecutionContextAllocationStrategy = ExecutionContextAllocationStrategy
    module.Dims = Dims
    module.ILogger = ILogger
    module.Logger = Logger
    module.IOutputAllocator = IOutputAllocator
    module.Runtime = type("Runtime", (Runtime,), {"_module": shared})
    module.ICudaEngine = shared.engine_class
    module.IExecutionContext = shared.context_class
    if not shared.lean:
        module.init_libnvinfer_plugins = init_libnvinfer_plugins
    module._double = shared
    return module
