"""A test double of the ``tensorrt`` Python module's runtime surface. It proves
nothing about TensorRT.

It has the names and call conventions that trtpool's TensorRT adapter uses
(ILogger, Runtime.deserialize_cuda_engine, ICudaEngine's I/O, profile and
memory queries, IExecutionContext's profile, shape, address and execute
calls) and "runs" one known function, so that the adapter's bookkeeping
(profiles, shapes, buffers, copies, synchronization, failure handling) is
tested without a GPU. Whether real TensorRT behaves the same is only checked
on a GPU.

The "engine file" is JSON (write it with ``engine_bytes``): one input
``x [-1, K]`` and two outputs

    y   = x @ W + b             [-1, N]   FLOAT
    top = argmax(y, axis=1)     [-1]      INT32

under the optimization profiles given. ``execute_async_v3`` queues the
computation on the FakeCudart stream: it reads x from, and writes y and top
to, emulated device memory at the tensor addresses when the stream is
synchronized.
"""
from __future__ import annotations

import enum
import functools
import json
import sys
import types
from typing import Any

import numpy as np

from tests.doubles.cuda_double import DoubleError, FakeCudart

MAGIC = "tensorrt-double-engine"


class DataType(enum.Enum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    FP8 = 6
    BF16 = 7
    INT64 = 8


class TensorIOMode(enum.Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


INPUT_DTYPES = {"FLOAT": np.float32, "HALF": np.float16}


class ILogger:
    class Severity(enum.IntEnum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    def log(self, severity: ILogger.Severity, msg: str) -> None:
        raise NotImplementedError


class Logger(ILogger):
    def __init__(self, min_severity: ILogger.Severity = ILogger.Severity.WARNING) -> None:
        self.min_severity = min_severity

    def log(self, severity: ILogger.Severity, msg: str) -> None:
        if severity <= self.min_severity:
            print(msg, file=sys.stderr)


def engine_bytes(weights: np.ndarray, bias: np.ndarray, batch_profiles: list[tuple[int, int, int]],
                 device_memory: list[int] | None = None, input_dtype: str = "FLOAT") -> bytes:
    """A double engine: W [K, N], b [N], one (min, opt, max) batch range per profile."""
    return json.dumps({
        "format": MAGIC,
        "W": np.asarray(weights, np.float32).tolist(),
        "b": np.asarray(bias, np.float32).tolist(),
        "profiles": batch_profiles,
        "device_memory": device_memory or [1 << 20] * len(batch_profiles),
        "input_dtype": input_dtype,
    }).encode()


class Runtime:
    def __init__(self, cudart: FakeCudart, logger: ILogger) -> None:
        self.cudart = cudart
        self.logger = logger

    def deserialize_cuda_engine(self, data: bytes) -> ICudaEngine | None:
        try:
            description = json.loads(bytes(data).decode())
            if description.get("format") != MAGIC:
                raise ValueError("magic tag")
            return ICudaEngine(self.cudart, self.logger, description)
        except (ValueError, UnicodeDecodeError, KeyError, AttributeError):
            self.logger.log(ILogger.Severity.ERROR,
                            "IRuntime::deserializeCudaEngine: Error Code 1: Serialization "
                            "(Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match)")
            return None


class ICudaEngine:
    def __init__(self, cudart: FakeCudart, logger: ILogger, description: dict[str, Any]) -> None:
        self.cudart = cudart
        self.logger = logger
        self.W = np.asarray(description["W"], np.float32)
        self.b = np.asarray(description["b"], np.float32)
        self.input_dtype = description["input_dtype"]
        self.batch_profiles = [tuple(p) for p in description["profiles"]]
        self.memory_per_profile = list(description["device_memory"])
        k, n = self.W.shape
        self.shapes = {"x": (-1, k), "y": (-1, n), "top": (-1,)}
        self.fail_next_executions = 0   # tests: execute_async_v3 returns False this many times
        self.executions = 0
        self.contexts_created = 0

    # I/O
    @property
    def num_io_tensors(self) -> int:
        return 3

    def get_tensor_name(self, index: int) -> str:
        return ("x", "y", "top")[index]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode.INPUT if name == "x" else TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str) -> DataType:
        return {"x": DataType[self.input_dtype], "y": DataType.FLOAT, "top": DataType.INT32}[name]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.shapes[name]

    def is_shape_inference_io(self, name: str) -> bool:
        return False

    # profiles and memory
    @property
    def num_optimization_profiles(self) -> int:
        return len(self.batch_profiles)

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[tuple[int, ...]]:
        k = self.W.shape[0]
        return [(batch, k) for batch in self.batch_profiles[profile_index]]

    @property
    def device_memory_size_v2(self) -> int:
        return max(self.memory_per_profile)

    def get_device_memory_size_for_profile_v2(self, profile_index: int) -> int:
        return self.memory_per_profile[profile_index]

    def create_execution_context(self) -> IExecutionContext:
        self.contexts_created += 1
        return IExecutionContext(self)


class IExecutionContext:
    """Allocates its activation memory (device_memory_size_v2) like the STATIC strategy."""

    def __init__(self, engine: ICudaEngine) -> None:
        self.engine = engine
        self.active_optimization_profile = 0
        self.profile_switches = 0
        self._input_shape: tuple[int, ...] | None = None
        self._addresses: dict[str, int] = {}
        err, self._activations = engine.cudart.cudaMalloc(engine.device_memory_size_v2)
        assert not err, f"double: activation memory: {err!r}"

    def __del__(self) -> None:
        self.engine.cudart.cudaFree(self._activations)

    def _error(self, message: str) -> bool:
        self.engine.logger.log(ILogger.Severity.ERROR, message)
        return False

    def set_optimization_profile_async(self, profile_index: int, stream_handle: int) -> bool:
        if not 0 <= profile_index < self.engine.num_optimization_profiles:
            return self._error(f"setOptimizationProfileAsync: profile index {profile_index} out of range")
        if int(stream_handle) not in self.engine.cudart.streams:
            return self._error("setOptimizationProfileAsync: invalid stream")
        self.active_optimization_profile = profile_index
        self.profile_switches += 1
        self._input_shape = None
        return True

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        low, _, high = self.engine.get_tensor_profile_shape(name, self.active_optimization_profile)
        shape = tuple(shape)
        if name != "x" or len(shape) != 2 or not all(lo <= d <= hi for lo, d, hi in zip(low, shape, high)):
            return self._error(f"IExecutionContext::setInputShape: Error Code 3: API Usage Error "
                               f"({name} {shape} outside profile {self.active_optimization_profile})")
        self._input_shape = shape
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        if self._input_shape is None:
            return self.engine.shapes[name]
        batch = self._input_shape[0]
        return {"x": self._input_shape, "y": (batch, self.engine.W.shape[1]), "top": (batch,)}[name]

    @property
    def all_binding_shapes_specified(self) -> bool:
        return self._input_shape is not None

    def infer_shapes(self) -> list[str]:
        return [] if self._input_shape is not None else ["x"]

    def set_tensor_address(self, name: str, memory: int) -> bool:
        if name not in self.engine.shapes:
            return self._error(f"setTensorAddress: no tensor {name}")
        self._addresses[name] = int(memory)
        return True

    def execute_async_v3(self, stream_handle: int) -> bool:
        engine = self.engine
        engine.executions += 1
        if engine.fail_next_executions > 0:
            engine.fail_next_executions -= 1
            return self._error("IExecutionContext::enqueueV3: Error Code 1: Cuda Runtime (injected by the double)")
        if self._input_shape is None:
            return self._error("enqueueV3: input shapes not specified")
        if set(self._addresses) != set(engine.shapes):
            return self._error(f"enqueueV3: tensor addresses missing for {sorted(set(engine.shapes) - set(self._addresses))}")
        shape, addresses = self._input_shape, dict(self._addresses)
        dtype = np.dtype(INPUT_DTYPES[engine.input_dtype])

        def kernel() -> None:
            count = shape[0] * shape[1]
            x = np.frombuffer(engine.cudart.device_view(addresses["x"], count * dtype.itemsize), dtype)
            y = (x.reshape(shape).astype(np.float32) @ engine.W + engine.b).astype(np.float32)
            top = np.argmax(y, axis=1).astype(np.int32)
            engine.cudart.device_view(addresses["y"], y.nbytes)[:] = y.tobytes()
            engine.cudart.device_view(addresses["top"], top.nbytes)[:] = top.tobytes()

        try:
            engine.cudart.enqueue(stream_handle, kernel)
        except DoubleError as exc:
            return self._error(f"enqueueV3: {exc}")
        return True


def make_module(cudart: FakeCudart, name: str = "tensorrt", version: str = "10.8.0.43") -> types.ModuleType:
    """A module object standing in for `tensorrt` (or `tensorrt_rtx`), bound to a FakeCudart."""
    module = types.ModuleType(name, __doc__)
    module.__version__ = version
    module.DataType = DataType
    module.TensorIOMode = TensorIOMode
    module.ILogger = ILogger
    module.Logger = Logger
    module.Runtime = functools.partial(Runtime, cudart)
    return module
