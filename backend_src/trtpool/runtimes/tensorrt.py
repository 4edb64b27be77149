"""TensorRT engines (TensorRT 10 or TensorRT-RTX) served from a pool of execution contexts.

One engine is deserialized once per model on its GPU; every context is an
``IExecutionContext`` over it with its own CUDA stream, event, device I/O
buffers and pinned host staging buffers, all allocated when the context is
made. The weights exist once; each further context costs its activation
memory and its I/O buffers.

Several contexts may use the same optimization profile at once: in
TensorRT 10 the preview feature kPROFILE_SHARING_0806 (profiles shared
across execution contexts) is on by default and can no longer be switched
off, and ``trtexec --infStreams=N`` runs N contexts on one profile the same
way. (Triton's own TensorRT backend instead loads a separate copy of the
engine for each instance of a dynamic-shape model; trtpool does not.)

``execute_async_v3`` releases the GIL, so the serving layer's thread per
busy context runs contexts concurrently.
"""
from __future__ import annotations

import collections
import importlib
import logging
import threading
from collections.abc import Sequence
from math import prod
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from trtpool import cuda
from trtpool.buffers import HostBuffers, gather
from trtpool.config import PoolConfig
from trtpool.device_tensors import is_device
from trtpool.errors import ConfigError, ContextFailure, EngineError, InvalidInput
from trtpool.runtimes.base import ExecutionContext, Parts, Runtime, batch_shapes
from trtpool.shapes import format_profile
from trtpool.sidecar import BUILD_COMMAND, check_compatible, read_sidecar, rebuild_command
from trtpool.signature import Profile, ShapeRange, Signature, TensorSpec

log = logging.getLogger("trtpool")

INSTALL_HINT = (
    "install TensorRT from NVIDIA's pip index (pip install --extra-index-url https://pypi.nvidia.com "
    "tensorrt-cu12) or serve from the NGC image nvcr.io/nvidia/tritonserver:<yy.mm>-py3, which ships it; "
    "on RTX GPUs, TensorRT-RTX is on PyPI: pip install tensorrt-rtx-cu13"
)
# trt.DataType member name -> numpy dtype. BF16, FP8, INT4, FP4 have no numpy
# dtype that Triton's Python backend carries.
NUMPY_DTYPES = {
    "FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32,
    "INT64": np.int64, "BOOL": np.bool_, "UINT8": np.uint8,
}
Capacities = dict[str, tuple[np.dtype, int]]


def import_tensorrt(module_name: str | None) -> ModuleType:
    """`tensorrt`, else `tensorrt_rtx`; or exactly the module named."""
    names = (module_name,) if module_name else ("tensorrt", "tensorrt_rtx")
    failures = []
    for name in names:
        try:
            return importlib.import_module(name)
        except (ImportError, OSError) as exc:  # OSError: a shared library failed to load
            failures.append(f"{name}: {exc}")
    raise EngineError(f"cannot import {' or '.join(names)} ({'; '.join(failures)}); {INSTALL_HINT}")


def make_logger(trt: ModuleType) -> Any:
    """An ILogger that forwards to trtpool's log and keeps the latest errors for messages."""
    severity = trt.ILogger.Severity
    errors_at = (severity.INTERNAL_ERROR, severity.ERROR)

    class CapturingLogger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: collections.deque[str] = collections.deque(maxlen=8)

        def log(self, level: Any, msg: str) -> None:
            if level in errors_at:
                self.errors.append(msg)
                log.error("%s: %s", trt.__name__, msg)
            elif level == severity.WARNING:
                log.warning("%s: %s", trt.__name__, msg)
            elif level == severity.INFO:
                log.debug("%s: %s", trt.__name__, msg)

        def take(self) -> str:
            """The errors logged since the last take(), as one line."""
            text = " | ".join(self.errors) or "(no error message)"
            self.errors.clear()
            return text

    return CapturingLogger()


class TensorRTRuntime(Runtime):
    def __init__(self, cfg: PoolConfig, path: Path, module_name: str | None = None) -> None:
        self.trt = import_tensorrt(module_name)
        self.name = self.trt.__name__
        self.path = Path(path)
        try:
            self.device = cuda.device_index(cfg.device)
        except ConfigError:
            raise ConfigError(f"{self.name} engines run on a GPU, but this model instance is on "
                              f"'{cfg.device}'; use instance_group [{{ kind: KIND_GPU }}]") from None
        try:
            cuda.set_device(self.device)
            gpu = cuda.device_properties(self.device)
        except cuda.CudaError as exc:
            raise EngineError(f"engine '{self.path}' needs GPU {cfg.device}, which CUDA cannot use: {exc}") from exc
        sidecar = read_sidecar(self.path)
        check_compatible(sidecar, self.name, self.trt.__version__, gpu.name, gpu.compute_capability)
        self._rebuild = rebuild_command(sidecar, self.name, gpu.compute_capability)

        self._logger = make_logger(self.trt)
        self._trt_runtime = self.trt.Runtime(self._logger)  # must outlive the engine
        self.engine = self._deserialize(gpu)
        self._lock = threading.Lock()  # around create_execution_context
        self.signature = self._read_signature()
        built = [p.ranges for p in self.signature.profiles]
        if cfg.profiles and list(cfg.profiles) != built:
            raise ConfigError(
                f"parameter 'profile' is '{';'.join(map(format_profile, cfg.profiles))}' but the engine "
                f"'{self.path}' was built with '{';'.join(map(format_profile, built))}'; an engine's profiles "
                f"are fixed when it is built: remove the parameter, or rebuild with {BUILD_COMMAND} --shapes ...")
        self.input_capacities = {
            s.name: (s.dtype, max(prod(p.ranges[s.name].max) for p in self.signature.profiles))
            for s in self.signature.inputs}
        self.output_capacities = self._max_output_capacities()

    def _deserialize(self, gpu: cuda.DeviceProperties) -> Any:
        data = self.path.read_bytes()
        try:
            engine = self._trt_runtime.deserialize_cuda_engine(data)
        except Exception as exc:  # some releases raise instead of returning None
            self._logger.errors.append(f"{type(exc).__name__}: {exc}")
            engine = None
        if engine is None:
            raise EngineError(
                f"engine '{self.path}' ({len(data)} bytes) cannot be deserialized by {self.name} "
                f"{self.trt.__version__} on {gpu.name} (compute capability {gpu.compute_capability}). "
                "Likely causes: the file is truncated or corrupt, or it was built by another TensorRT "
                f"version or for another GPU. {self.name} said: {self._logger.take()}. "
                f"Rebuild it with:\n  {self._rebuild}")
        return engine

    def _spec(self, name: str) -> TensorSpec:
        dtype = self.engine.get_tensor_dtype(name)
        if dtype.name not in NUMPY_DTYPES:
            raise EngineError(
                f"engine '{self.path}': tensor '{name}' has type {dtype.name}, which trtpool cannot "
                f"pass through numpy; rebuild with {'/'.join(NUMPY_DTYPES)} I/O (cast at the graph's edges)")
        if self.engine.is_shape_inference_io(name):
            raise EngineError(f"engine '{self.path}': tensor '{name}' is a shape tensor, which trtpool "
                              "does not serve")
        return TensorSpec(name, np.dtype(NUMPY_DTYPES[dtype.name]), tuple(self.engine.get_tensor_shape(name)))

    def _read_signature(self) -> Signature:
        engine, mode = self.engine, self.trt.TensorIOMode
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = tuple(self._spec(n) for n in names if engine.get_tensor_mode(n) == mode.INPUT)
        outputs = tuple(self._spec(n) for n in names if engine.get_tensor_mode(n) == mode.OUTPUT)

        def shape_range(spec: TensorSpec, profile: int) -> ShapeRange:
            if -1 not in spec.shape:
                return ShapeRange(spec.shape, spec.shape, spec.shape)
            low, opt, high = engine.get_tensor_profile_shape(spec.name, profile)
            return ShapeRange(tuple(low), tuple(opt), tuple(high))

        profiles = tuple(Profile(p, {s.name: shape_range(s, p) for s in inputs})
                         for p in range(engine.num_optimization_profiles))
        batched = bool(inputs) and all(s.shape[:1] == (-1,) for s in inputs)
        return Signature(inputs, outputs, profiles, batched)

    def _max_output_capacities(self) -> Capacities:
        """Elements per output at each profile's largest input shapes, the largest over profiles."""
        counts = {s.name: 0 for s in self.signature.outputs}
        context, stream = self.new_trt_context(), cuda.Stream()
        try:
            for profile in self.signature.profiles:
                if not context.set_optimization_profile_async(profile.index, stream.handle):
                    raise EngineError(f"engine '{self.path}': cannot select profile {profile.index}: "
                                      f"{self._logger.take()}")
                for name, shape_range in profile.ranges.items():
                    if not context.set_input_shape(name, shape_range.max):
                        raise EngineError(f"engine '{self.path}': profile {profile.index} refuses its own "
                                          f"max shape {list(shape_range.max)} for '{name}': {self._logger.take()}")
                for name in counts:
                    shape = tuple(context.get_tensor_shape(name))
                    if any(d < 0 for d in shape):
                        raise EngineError(
                            f"engine '{self.path}': output '{name}' has a data-dependent shape {list(shape)}; "
                            "trtpool preallocates outputs and cannot serve it")
                    counts[name] = max(counts[name], prod(shape))
            stream.synchronize()  # profile switches may have queued copies
        finally:
            del context
            stream.close()
        return {s.name: (s.dtype, counts[s.name]) for s in self.signature.outputs}

    def new_trt_context(self) -> Any:
        with self._lock:
            context = self.engine.create_execution_context()
        if context is None:
            raise ContextFailure(f"engine '{self.path}': no execution context could be made "
                                 f"(out of GPU memory?): {self._logger.take()}")
        return context

    def device_bytes(self) -> int:
        """One context's device I/O buffers."""
        capacities = (*self.input_capacities.values(), *self.output_capacities.values())
        return sum(np.dtype(dtype).itemsize * count for dtype, count in capacities)

    def create_context(self, index: int) -> TensorRTContext:
        return TensorRTContext(self, index)

    def context_memory_bytes(self) -> int:
        # A context created with the default (STATIC) strategy allocates the
        # activation memory of its largest profile.
        return self.engine.device_memory_size_v2 + self.device_bytes()

    def free_memory_bytes(self) -> int:
        cuda.set_device(self.device)
        free, _ = cuda.mem_get_info()
        return free

    def take_errors(self) -> str:
        return self._logger.take()

    def close(self) -> None:
        self.engine = None
        self._trt_runtime = None


class TensorRTContext(ExecutionContext):
    """One IExecutionContext with its own stream, event and buffers on the runtime's GPU."""

    def __init__(self, runtime: TensorRTRuntime, index: int) -> None:
        self.index = index
        self._runtime = runtime
        cuda.set_device(runtime.device)
        self.inputs = HostBuffers(runtime.input_capacities, cuda.pinned_allocator)
        self.outputs = HostBuffers(runtime.output_capacities, cuda.pinned_allocator)
        self._device = {name: cuda.DeviceBuffer(np.dtype(dtype).itemsize * count)
                        for name, (dtype, count) in (*runtime.input_capacities.items(),
                                                     *runtime.output_capacities.items())}
        self._stream = cuda.Stream()
        self._done = cuda.Event()
        self._inputs_taken = cuda.Event()
        self._results: dict[str, np.ndarray] | None = None
        self._context = runtime.new_trt_context()
        self._profile: int | None = None  # selected explicitly on the first run

    def submit(self, parts: Parts) -> None:
        runtime = self._runtime
        shapes = batch_shapes(parts, runtime.signature.batched)
        profile = runtime.signature.choose_profile(shapes)  # InvalidInput if none fits
        cuda.set_device(runtime.device)  # the current device is per thread
        on_device = any(is_device(t) for tensors in parts.values() for t in tensors)
        for name, shape in shapes.items():
            self._upload(name, parts[name], shape)
        if on_device:
            self._inputs_taken.record(self._stream)
        self._results = self._execute(profile, shapes)
        if on_device:
            self._inputs_taken.synchronize()  # the caller's GPU tensors may be reused once we return

    def complete(self) -> dict[str, np.ndarray]:
        self._done.synchronize()  # the one wait per batch
        results, self._results = self._results, None
        return results

    def _upload(self, name: str, parts: Sequence[Any], shape: tuple[int, ...]) -> None:
        """Queue the copies of one input's parts into its device buffer: host parts
        through the pinned staging buffer, GPU parts device to device."""
        device = self._device[name].ptr
        if not is_device(parts[0]):
            staged = gather(parts, self.inputs.view(name, shape))
            cuda.memcpy_htod_async(device, staged, staged.nbytes, self._stream)
            return
        offset = 0
        for part in parts:
            nbytes = part.numel() * part.element_size()
            cuda.memcpy_dtod_async(device + offset, part.data_ptr(), nbytes, self._stream)
            offset += nbytes

    def _execute(self, profile: Profile, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
        """Run on the device inputs and queue the outputs' copies to the pinned staging buffers."""
        context, stream, runtime = self._context, self._stream, self._runtime
        if profile.index != self._profile:
            if not context.set_optimization_profile_async(profile.index, stream.handle):
                raise ContextFailure(f"context {self.index}: cannot select optimization profile "
                                     f"{profile.index}: {runtime.take_errors()}")
            self._profile = profile.index
            # Bound again after a switch: cheap, and independent of whether
            # addresses survive a profile change.
            for name, buffer in self._device.items():
                if not context.set_tensor_address(name, buffer.ptr):
                    raise ContextFailure(f"context {self.index}: cannot bind tensor '{name}': "
                                         f"{runtime.take_errors()}")
        for name, shape in shapes.items():
            if not context.set_input_shape(name, shape):
                raise InvalidInput(f"input '{name}': {runtime.name} refused shape {list(shape)} "
                                   f"for optimization profile {profile.index}: {runtime.take_errors()}")
        unspecified = context.infer_shapes()
        if unspecified or not context.all_binding_shapes_specified:
            raise InvalidInput(f"{runtime.name} cannot infer shapes; unspecified: {unspecified}")
        if not context.execute_async_v3(stream.handle):
            raise ContextFailure(f"context {self.index}: execute_async_v3 failed: {runtime.take_errors()}")
        results = {}
        for spec in runtime.signature.outputs:
            view = self.outputs.view(spec.name, tuple(context.get_tensor_shape(spec.name)))
            cuda.memcpy_dtoh_async(view, self._device[spec.name].ptr, view.nbytes, stream)
            results[spec.name] = view
        self._done.record(stream)
        return results

    def close(self) -> None:
        cuda.set_device(self._runtime.device)
        try:
            self._stream.synchronize()  # nothing may still read or write the buffers
        except cuda.CudaError as exc:
            log.warning("context %d: stream did not drain on close: %s", self.index, exc)
        self._context = None
        for buffer in self._device.values():
            buffer.close()
        self._done.close()
        self._inputs_taken.close()
        self._stream.close()
