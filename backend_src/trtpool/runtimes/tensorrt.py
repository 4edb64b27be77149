"""TensorRT engines (TensorRT 10.x, 11.x or TensorRT-RTX 1.x) served from a pool of execution contexts.

One engine is deserialized once per model on its GPU; each context is an IExecutionContext over
it with its own stream, events, device buffers and pinned staging (runtimes/stream_context.py),
its activation memory sized to the shapes it has run, and CUDA graphs per batch bucket
(parameter ``cuda_graphs``). Several contexts share an optimization profile. trtpool.gpu.trt_api
holds what differs between TensorRT releases. How and why: docs/design/tensorrt-runtime.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from trtpool.errors import ConfigError, ContextFailure, EngineError, InvalidInput
from trtpool.gpu import cuda, trt_api
from trtpool.gpu.buffers import HostBuffers
from trtpool.gpu.device_tensors import coalesced, device_nbytes, device_pointer, is_device
from trtpool.gpu.host_upload import HostUploader
from trtpool.model.dtypes import TENSORRT_DTYPES
from trtpool.model.shapes import format_profile
from trtpool.model.sidecar import BUILD_COMMAND, Sidecar, check_compatible, read_sidecar, rebuild_command
from trtpool.model.signature import Profile, ShapeRange, Signature, TensorSpec, is_batched
from trtpool.parameters import PoolConfig
from trtpool.runtimes.base import Parts, Runtime, batch_shapes
from trtpool.runtimes.buckets import bucket_of, power_of_two_buckets
from trtpool.runtimes.stream_context import StreamContext

log = logging.getLogger("trtpool")

GRAPHS_PER_CONTEXT = 32  # captured shapes per context; beyond, new shapes run without a graph
Capacities = dict[str, tuple[np.dtype, int]]
Shapes = dict[str, tuple[int, ...]]
GraphKey = tuple[int, tuple[tuple[str, tuple[int, ...]], ...]]


class TensorRTRuntime(Runtime):
    def __init__(self, cfg: PoolConfig, path: Path, module_name: str | None = None) -> None:
        self.trt = trt_api.import_tensorrt(module_name, runtime_only=True)
        self.name = self.trt.__name__
        self.path = Path(path)
        try:
            self.device = cuda.device_index(cfg.device)
        except ConfigError:
            raise ConfigError(
                f"{self.name} engines run on a GPU, but this model instance is on "
                f"'{cfg.device}'; use instance_group [{{ kind: KIND_GPU }}]"
            ) from None
        try:
            cuda.set_device(self.device)
            gpu = cuda.device_properties(self.device)
        except cuda.CudaError as exc:
            raise EngineError(f"engine '{self.path}' needs GPU {cfg.device}, which CUDA cannot use: {exc}") from exc
        sidecar = read_sidecar(self.path)
        release = trt_api.release(self.trt)
        check_compatible(sidecar, release, self.trt.__version__, gpu.name, gpu.compute_capability)
        self._rebuild = rebuild_command(sidecar, release, gpu.compute_capability)
        self._check_lean(sidecar)

        trt_api.register_plugins(self.trt)
        self._trt_runtime = trt_api.new_runtime(self.trt, host_code=sidecar.target.version_compatible)
        self.engine = self._deserialize(gpu)  # the runtime above must outlive it
        self._lock = threading.Lock()  # around create_execution_context
        self.signature = self._read_signature()
        self._check_profile_parameter(cfg)
        self.input_capacities = {
            s.name: (s.dtype, max(prod(p.ranges[s.name].max) for p in self.signature.profiles))
            for s in self.signature.inputs
        }
        self.output_capacities, self.data_dependent = self._learn_outputs()
        self.uploader = HostUploader()  # host inputs into the contexts' device buffers
        self.infers_shapes = trt_api.raises_safely(self.trt)
        self._buckets = self._graph_buckets()
        # Why batches run without CUDA graphs, once they do.
        self.graphs_off: str | None = None if cfg.cuda_graphs else "parameter 'cuda_graphs' is off"
        if self.graphs_off is None and self.data_dependent:
            self.stop_graphs(
                f"outputs {sorted(self.data_dependent)} have data-dependent shapes, and "
                f"{self.name} synchronizes inside such a run"
            )

    # ---- loading --------------------------------------------------------------------

    def _check_lean(self, sidecar: Sidecar) -> None:
        """TensorRT's lean runtime deserializes version-compatible engines only; refuse any other
        before it fails with its own internal words ("Unexpected call to stub loadRunner")."""
        if trt_api.is_lean(self.trt) and not sidecar.target.version_compatible:
            raise EngineError(
                f"engine '{self.path}' is not version-compatible, and {self.name} {self.trt.__version__} is "
                "TensorRT's lean runtime, which runs version-compatible engines only. Rebuild it with "
                f"--version-compatible:\n  {self._rebuild} --version-compatible\nor install the full "
                "TensorRT (pip install --extra-index-url https://pypi.nvidia.com tensorrt-cu12)"
            )

    def _deserialize(self, gpu: cuda.DeviceProperties) -> Any:
        data = self.path.read_bytes()
        with trt_api.tensorrt_errors() as errors:
            engine = self._trt_runtime.deserialize_cuda_engine(data)
        if engine is None:
            raise EngineError(
                f"engine '{self.path}' ({len(data)} bytes) cannot be deserialized by {self.name} "
                f"{self.trt.__version__} on {gpu.name} (compute capability {gpu.compute_capability}). "
                "Likely causes: the file is truncated or corrupt, or it was built by another TensorRT "
                f"version or for another GPU. {self.name} said: {trt_api.said(errors)}. "
                f"Rebuild it with:\n  {self._rebuild}"
            )
        return engine

    def _spec(self, name: str) -> TensorSpec:
        dtype = self.engine.get_tensor_dtype(name)
        if dtype.name not in TENSORRT_DTYPES:
            raise EngineError(
                f"engine '{self.path}': tensor '{name}' has type {dtype.name}, which trtpool cannot "
                f"pass through numpy; rebuild with {'/'.join(TENSORRT_DTYPES)} I/O (cast at the graph's edges)"
            )
        if self.engine.is_shape_inference_io(name):
            raise EngineError(f"engine '{self.path}': tensor '{name}' is a shape tensor, which trtpool does not serve")
        return TensorSpec(name, TENSORRT_DTYPES[dtype.name], trt_api.dims(self.engine.get_tensor_shape(name)))

    def _read_signature(self) -> Signature:
        engine, mode = self.engine, self.trt.TensorIOMode
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = tuple(self._spec(n) for n in names if engine.get_tensor_mode(n) == mode.INPUT)
        outputs = tuple(self._spec(n) for n in names if engine.get_tensor_mode(n) == mode.OUTPUT)

        def shape_range(spec: TensorSpec, profile: int) -> ShapeRange:
            if -1 not in spec.shape:
                return ShapeRange(spec.shape, spec.shape, spec.shape)
            low, opt, high = (trt_api.dims(d) for d in engine.get_tensor_profile_shape(spec.name, profile))
            return ShapeRange(low, opt, high)

        profiles = tuple(
            Profile(p, {s.name: shape_range(s, p) for s in inputs}) for p in range(engine.num_optimization_profiles)
        )
        # Outputs count as well as inputs, as for the sidecar's signature: see is_batched.
        return Signature(inputs, outputs, profiles, is_batched(inputs, outputs), owner="engine")

    def _check_profile_parameter(self, cfg: PoolConfig) -> None:
        built = [p.ranges for p in self.signature.profiles]
        if cfg.profiles and list(cfg.profiles) != built:
            raise ConfigError(
                f"parameter 'profile' is '{';'.join(map(format_profile, cfg.profiles))}' but the engine "
                f"'{self.path}' was built with '{';'.join(map(format_profile, built))}'; an engine's profiles "
                f"are fixed when it is built: remove the parameter, or rebuild with {BUILD_COMMAND} --shapes ..."
            )

    def _learn_outputs(self) -> tuple[Capacities, frozenset[str]]:
        """Per output, the elements it takes at each profile's largest inputs as the runtime
        computes them (the largest over profiles); and the outputs whose shape is still -1
        there, which depend on the data."""
        counts = {s.name: 0 for s in self.signature.outputs}
        data_dependent: set[str] = set()
        context, stream = self.new_trt_context(), cuda.Stream()
        try:
            for profile in self.signature.profiles:
                trt_api.call(
                    f"engine '{self.path}': selecting optimization profile {profile.index}",
                    context.set_optimization_profile_async,
                    profile.index,
                    stream.handle,
                    failure=EngineError,
                )
                for name, shape_range in profile.ranges.items():
                    trt_api.call(
                        f"engine '{self.path}': profile {profile.index} refuses its own max shape "
                        f"{list(shape_range.max)} for '{name}'",
                        context.set_input_shape,
                        name,
                        shape_range.max,
                        failure=EngineError,
                    )
                for name in counts:
                    shape = trt_api.dims(context.get_tensor_shape(name))
                    if min(shape, default=0) < 0:
                        data_dependent.add(name)
                    else:
                        counts[name] = max(counts[name], prod(shape))
            stream.synchronize()  # profile switches may have queued copies
        finally:
            del context
            stream.close()
        return {s.name: (s.dtype, counts[s.name]) for s in self.signature.outputs}, frozenset(data_dependent)

    def _graph_buckets(self) -> dict[int, tuple[int, ...]]:
        """Per profile, the batch sizes a batch is padded to for its graph. None for an
        unbatched model: padding rows could not be cut off an output without a batch axis."""
        signature = self.signature
        if not signature.batched:
            return {}
        return {
            p.index: power_of_two_buckets(max(r.min[0] for r in p.ranges.values()), p.max_batch())
            for p in signature.profiles
        }

    # ---- what contexts share ----------------------------------------------------------

    def run_shapes(self, profile: Profile, shapes: Shapes) -> Shapes:
        """The input shapes a batch runs at: its own, or padded to its profile's batch bucket
        when it may be captured."""
        if self.graphs_off is not None or not self._buckets:
            return shapes
        bucket = bucket_of(next(iter(shapes.values()))[0], self._buckets[profile.index])
        return {name: (bucket, *shape[1:]) for name, shape in shapes.items()}

    def stop_graphs(self, reason: str) -> None:
        """Run every later batch without CUDA graphs."""
        if self.graphs_off is None:
            self.graphs_off = reason
            log.warning("engine '%s' runs without CUDA graphs: %s", self.path, reason)

    def new_trt_context(self) -> Any:
        """An IExecutionContext without activation memory (USER_MANAGED): its owner gives it
        what the shapes in use need (TensorRTContext._fit_activations)."""
        with self._lock:
            return trt_api.call(
                f"engine '{self.path}': no execution context could be made (out of GPU memory?)",
                self.engine.create_execution_context,
                self.trt.ExecutionContextAllocationStrategy.USER_MANAGED,
                failure=ContextFailure,
            )

    def device_bytes(self) -> int:
        """One context's preallocated device I/O buffers."""
        capacities = (*self.input_capacities.values(), *self.output_capacities.values())
        return sum(np.dtype(dtype).itemsize * count for dtype, count in capacities)

    def create_context(self, index: int) -> TensorRTContext:
        return TensorRTContext(self, index)

    def context_memory_bytes(self) -> int:
        # At most: a context's activation memory grows to what the shapes it runs
        # need, up to the largest profile's. CUDA graphs, captured on first use, add
        # what each logs.
        return trt_api.activation_bytes(self.engine) + self.device_bytes()

    def free_memory_bytes(self) -> int:
        cuda.set_device(self.device)
        free, _ = cuda.mem_get_info()
        return free

    def close(self) -> None:
        self.uploader.close()
        self.engine = None
        self._trt_runtime = None


class DeviceOutput:
    """One output's device buffer and pinned host staging, grown when a batch needs more."""

    def __init__(self, dtype: np.dtype, count: int) -> None:
        self.dtype = np.dtype(dtype)
        self.nbytes = 0
        self._device: cuda.DeviceBuffer | None = None
        self._host = np.empty(0, self.dtype)
        self.ensure(count * self.dtype.itemsize)

    @property
    def ptr(self) -> int:
        assert self._device is not None  # made in __init__
        return self._device.ptr

    def ensure(self, nbytes: int) -> bool:
        """Hold at least `nbytes`; True when the device address changed."""
        if self._device is not None and nbytes <= self.nbytes:
            return False
        self.close()
        self._device = cuda.DeviceBuffer(nbytes)
        self._host = cuda.pinned_allocator(self.dtype, -(-nbytes // self.dtype.itemsize))
        self.nbytes = nbytes
        return True

    def host_view(self, shape: tuple[int, ...]) -> np.ndarray:
        return self._host[: prod(shape)].reshape(shape)

    def close(self) -> None:
        if self._device is not None:
            self._device.close()


class TensorRTContext(StreamContext):
    """One IExecutionContext with its own stream, events, buffers and graphs on the runtime's GPU."""

    def __init__(self, runtime: TensorRTRuntime, index: int) -> None:
        self.index = index
        self._runtime = runtime
        cuda.set_device(runtime.device)
        self.staging = HostBuffers(runtime.input_capacities, cuda.pinned_allocator)
        self._inputs = {
            name: cuda.DeviceBuffer(np.dtype(dtype).itemsize * count)
            for name, (dtype, count) in runtime.input_capacities.items()
        }
        self._outputs = {name: DeviceOutput(dtype, count) for name, (dtype, count) in runtime.output_capacities.items()}
        self._open_stream(cuda.Stream())
        self._context = runtime.new_trt_context()
        self._reported: Shapes = {}  # data-dependent outputs' shapes, as the allocator was told
        allocator = trt_api.output_allocator(runtime.trt, self._allocate_output, self._reported.__setitem__)
        for name in sorted(runtime.data_dependent):
            self._trt(f"setting the output allocator of '{name}'", self._context.set_output_allocator, name, allocator)
        self._profile: int | None = None  # selected on the context (explicitly, on the first batch)
        self._shapes: Shapes | None = None  # input shapes set on the context
        self._settled: int | None = None  # the profile of the last ordinary run since it was selected
        self._graphs: dict[GraphKey, cuda.Graph] = {}
        self._activations: cuda.DeviceBuffer | None = None  # sized to the largest shapes run so far
        self._activation_bytes = 0

    def _buffers(self) -> list[tuple[str, cuda.DeviceBuffer | DeviceOutput]]:
        """Every input's and output's device buffer, by tensor name."""
        return [*self._inputs.items(), *self._outputs.items()]

    @property
    def captured(self) -> list[GraphKey]:
        """The (profile, input shapes) this context has CUDA graphs for."""
        return list(self._graphs)

    def _trt(self, what: str, function: Any, *args: Any) -> Any:
        """A TensorRT call whose failure may have broken this context."""
        return trt_api.call(f"context {self.index}: {what}", function, *args, failure=ContextFailure)

    # ---- the contract ---------------------------------------------------------------

    def submit(self, parts: Parts) -> None:
        runtime = self._runtime
        shapes = batch_shapes(parts, runtime.signature.batched)
        profile = runtime.signature.choose_profile(shapes)  # InvalidInput if no profile admits them
        run_shapes = runtime.run_shapes(profile, shapes)
        cuda.set_device(runtime.device)  # the current device is per thread
        self._select(profile.index)
        self._set_shapes(profile.index, run_shapes, shapes)
        output_shapes = self._fixed_output_shapes(shapes)
        on_device = any(is_device(t) for tensors in parts.values() for t in tensors)
        for name, shape in shapes.items():
            self._upload(name, parts[name], shape, run_shapes[name])
        self._inputs_placed(on_device)
        self._run(profile.index, run_shapes)
        padded = run_shapes != shapes
        self._queued(self._download(output_shapes, next(iter(shapes.values()))[0] if padded else None), on_device)

    # ---- the steps of a batch -----------------------------------------------------------

    def _select(self, profile: int) -> None:
        """Select the batch's optimization profile on the context, and bind the buffers again."""
        if profile == self._profile:
            return
        self._profile = self._shapes = self._settled = None
        self._trt(
            f"selecting optimization profile {profile}",
            self._context.set_optimization_profile_async,
            profile,
            self._stream.handle,
        )
        self._profile = profile
        for name, buffer in self._buffers():
            self._trt(f"binding tensor '{name}'", self._context.set_tensor_address, name, buffer.ptr)

    def _set_shapes(self, profile: int, run_shapes: Shapes, shapes: Shapes) -> None:
        """Set the input shapes and have TensorRT infer the rest: a refusal is the client's."""
        if run_shapes == self._shapes:
            return
        self._shapes = None
        runtime = self._runtime
        for name, shape in run_shapes.items():
            trt_api.call(
                f"input '{name}': {runtime.name} refused shape {list(shape)} for optimization profile {profile}",
                self._context.set_input_shape,
                name,
                shape,
                failure=InvalidInput,
            )
        if runtime.infers_shapes:
            trt_api.call(
                f"the model rejected input shapes {self._listed(shapes)}",
                self._context.infer_shapes,
                failure=InvalidInput,
            )
        self._fit_activations(run_shapes)
        self._shapes = run_shapes

    def _fit_activations(self, run_shapes: Shapes) -> None:
        """Give the context the activation memory the input shapes set need, when it holds
        less: a context that runs small batches never holds the largest profile's. The old
        block is idle (the last batch has completed); graphs captured with it are dropped."""
        need = int(
            self._trt(
                "sizing activation memory for the input shapes", self._context.update_device_memory_size_for_shapes
            )
        )
        if self._activations is not None and need <= self._activation_bytes:
            return
        try:
            fresh = cuda.DeviceBuffer(max(need, 1))
        except cuda.CudaError as exc:
            raise ContextFailure(
                f"context {self.index}: {need} bytes of activation memory for input shapes "
                f"{self._listed(run_shapes)} could not be allocated: {exc}"
            ) from exc
        self._context.device_memory = fresh.ptr
        if self._activations is not None:
            self._settled = None
            self._drop_graphs()
            self._activations.close()
        self._activations, self._activation_bytes = fresh, need

    def _fixed_output_shapes(self, shapes: Shapes) -> Shapes:
        """The shapes of the outputs that do not depend on the data, as the runtime computes
        them for the input shapes set; their buffers grown where these need more."""
        result = {}
        for spec in self._runtime.signature.outputs:
            if spec.name in self._runtime.data_dependent:
                continue
            with trt_api.tensorrt_errors() as errors:
                shape = trt_api.dims(self._context.get_tensor_shape(spec.name))
            # A shape the runtime failed to compute has -1s, or no dimensions at all
            # (Dims{-1} is the C++ API's error value: include/NvInferRuntime.h, getTensorShape).
            if len(shape) != len(spec.shape) or min(shape, default=0) < 0:
                raise InvalidInput(
                    f"the model cannot compute output '{spec.name}' for input shapes "
                    f"{self._listed(shapes)}: {trt_api.said(errors)}"
                )
            buffer = self._outputs[spec.name]
            if buffer.ensure(prod(shape) * buffer.dtype.itemsize):
                self._rebind(spec.name, buffer.ptr)
            result[spec.name] = shape
        return result

    def _rebind(self, name: str, ptr: int) -> None:
        """Bind a grown output buffer; the graphs captured with the old address are dropped."""
        self._trt(f"binding tensor '{name}'", self._context.set_tensor_address, name, ptr)
        self._settled = None
        self._drop_graphs()

    def _upload(self, name: str, parts: Sequence[Any], shape: tuple[int, ...], run_shape: tuple[int, ...]) -> None:
        """Queue the copies of one input's parts into its device buffer (host parts through
        the pinned staging buffer, GPU parts device to device), then zeros for the padding."""
        device = self._inputs[name].ptr
        itemsize = self.staging.flat(name).itemsize
        if is_device(parts[0]):
            offset = 0
            for part in coalesced(parts):
                nbytes = device_nbytes(part)
                cuda.memcpy_dtod_async(device + offset, device_pointer(part), nbytes, self._stream)
                offset += nbytes
        else:
            self._runtime.uploader.upload(parts, self.staging.view(name, shape), device, self._stream)
        padding = (prod(run_shape) - prod(shape)) * itemsize
        if padding:
            cuda.memset_async(device + prod(shape) * itemsize, 0, padding, self._stream)

    def _run(self, profile: int, run_shapes: Shapes) -> None:
        """Replay the graph of these shapes, or run as usual (and capture it after)."""
        key = (profile, tuple(run_shapes.items()))
        graph = self._graphs.get(key)
        if graph is not None and self._settled == profile:
            graph.launch(self._stream)
            return
        self._execute()
        self._settled = profile
        if graph is None and self._runtime.graphs_off is None and len(self._graphs) < GRAPHS_PER_CONTEXT:
            self._capture(key)

    def _execute(self) -> None:
        self._trt("execute_async_v3", self._context.execute_async_v3, self._stream.handle)

    def _capture(self, key: GraphKey) -> None:
        """Capture execute_async_v3 for the shapes just run; the run before was its warm-up."""
        runtime, stream = self._runtime, self._stream
        if hasattr(self._context, "is_stream_capturable") and not self._context.is_stream_capturable(stream.handle):
            runtime.stop_graphs(f"{runtime.name} reports that the context cannot be captured on a stream")
            return
        stream.synchronize()  # the warm-up's work is done first, as trtexec and Triton wait before capturing
        free = cuda.mem_get_info()[0]
        try:
            graph = cuda.capture(stream, self._execute)
        except (cuda.CudaError, ContextFailure) as exc:
            self._settled = None
            runtime.stop_graphs(f"capturing execute_async_v3 failed: {exc}")
            return
        self._graphs[key] = graph
        log.info(
            "context %d: captured a CUDA graph for optimization profile %d, input shapes %s; it holds "
            "%d bytes of device memory (free memory before and after instantiation)",
            self.index,
            key[0],
            self._listed(dict(key[1])),
            free - cuda.mem_get_info()[0],
        )

    def _download(self, output_shapes: Shapes, cut_to: int | None) -> dict[str, np.ndarray]:
        """Queue each output's copy to its pinned staging buffer; `cut_to`: the real batch
        size of a padded batch, whose padding rows are left out."""
        results = {}
        for name, buffer in self._outputs.items():
            shape = output_shapes[name] if name in output_shapes else self._reported[name]
            if cut_to is not None:
                shape = (cut_to, *shape[1:])
            view = buffer.host_view(shape)
            cuda.memcpy_dtoh_async(view, buffer.ptr, view.nbytes, self._stream)
            results[name] = view
        return results

    def _allocate_output(self, name: str, nbytes: int) -> int:
        """TensorRT's request for a data-dependent output's memory, during a run."""
        self._outputs[name].ensure(nbytes)
        return self._outputs[name].ptr

    @staticmethod
    def _listed(shapes: Shapes) -> str:
        return ", ".join(f"'{name}' {list(shape)}" for name, shape in shapes.items())

    def _drop_graphs(self) -> None:
        for graph in self._graphs.values():
            graph.close()
        self._graphs.clear()

    def close(self) -> None:
        cuda.set_device(self._runtime.device)
        self._drain()
        self._drop_graphs()
        self._context = None
        for _, buffer in self._buffers():
            buffer.close()
        if self._activations is not None:  # after the context that used it
            self._activations.close()
        self._close_events()
        self._stream.close()
