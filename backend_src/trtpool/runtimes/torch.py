"""ONNX models served by torch on a GPU, through the same pool, batching, stream,
event and buffer code as the TensorRT runtime (TensorRT cannot run on every GPU
we test on: the H200's compute capability 9.0 has neither TensorRT nor RTX).

The model file is the ONNX file itself, converted at load with onnx2torch
(pinned 1.5.15, a pure-Python wheel). Why not a TorchScript / torch.export file
written by the example generator:
- one source of truth: the same ONNX file the TensorRT builder and the ONNX
  Runtime reference read, so GPU results are checked against ONNX Runtime on
  that very file and a model folder needs no second artifact;
- no torch where models are built (the builder and CI machines have none),
  no change to the generator, and no file tied to the torch release that
  wrote it (torch.export archives are not promised to load in older torch;
  TorchScript is in maintenance).
What it costs: onnx2torch computes shapes as tensors, which breaks CUDA-graph
capture once those tensors live on the GPU. In our examples that is BERT's
``embeddings.seq_len`` (Shape, built on the GPU from a host list),
``embeddings.position.Slice`` (reads its bounds back), every attention
``Reshape`` (``*.split_shape`` / ``*.merge_shape``: tests ``shape == 0`` on the
host) and ``pooler.Gather`` (a 0-d index read back). The generator's graphs are
fine; the converted module is adjusted instead, as TensorRT keeps shape tensors
on the host: integer initializers stay on the CPU and Shape yields a CPU tensor,
so no op reads a device tensor on the host (the tests check this on torch's
meta device, where such a read raises). A graph that feeds shape values into
device arithmetic (say, divides by the sequence length) would then fail at
load with a device mismatch; none of ours does.

One copy of the weights is on the GPU, shared by every context. A context owns
a stream, an event, pinned host staging buffers, device input and output
buffers sized for the largest shapes (as a TensorRT context does), and one CUDA
graph per shape bucket, all sharing the context's private memory pool. Batch
sizes are bucketed to powers of two up to the max batch, dynamic non-batch
dimensions (a sequence) to SEQUENCE_BUCKETS; the largest bucket is captured
when the context is made, the others on first use. A batch smaller than its
bucket is zero-padded (attention_mask 0 for a padded token) and its outputs
sliced back; zero padding of a non-batch dimension is right only for models
that mask it, so pass ``sequence_buckets=None`` (a graph per distinct length)
for any other model.
"""
from __future__ import annotations

import bisect
import logging
import sys
import threading
import types
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import TensorProto

from trtpool import cuda, onnx_signature
from trtpool.buffers import HostBuffers
from trtpool.config import PoolConfig
from trtpool.errors import ConfigError, EngineError, InvalidInput
from trtpool.onnx_signature import DeclaredTensor, DimSource, output_shape
from trtpool.runtimes.base import ExecutionContext, Runtime
from trtpool.signature import Signature

log = logging.getLogger("trtpool")

PRECISIONS = ("fp32", "fp16")
SEQUENCE_BUCKETS = (32, 64, 128, 256, 512)
WARMUP_RUNS = 2  # eager runs on the context's stream before a capture (cuBLAS/cuDNN set-up)
ONNX_DTYPES = {
    TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64,
    TensorProto.INT64: np.int64, TensorProto.INT32: np.int32, TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8, TensorProto.BOOL: np.bool_,
}
TORCH_DTYPES = {
    np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
    np.dtype(np.float64): torch.float64, np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32, np.dtype(np.int8): torch.int8,
    np.dtype(np.uint8): torch.uint8, np.dtype(np.bool_): torch.bool,
}
Shapes = dict[str, tuple[int, ...]]
Buckets = tuple[int, ...] | None  # the sizes a dimension is padded to; None: used as given


# --- buckets ---------------------------------------------------------------

def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, ... below max_batch, then max_batch itself."""
    sizes, size = [], 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return (*sizes, max_batch)


def clip_buckets(candidates: tuple[int, ...], limit: int) -> tuple[int, ...]:
    """The candidates below limit, then limit itself."""
    return (*(c for c in sorted(candidates) if c < limit), limit)


def bucket_of(value: int, buckets: Buckets) -> int:
    return value if buckets is None else buckets[bisect.bisect_left(buckets, value)]


def leading(shape: tuple[int, ...]) -> tuple[slice, ...]:
    """Index of the leading `shape` block of a larger tensor (the real part of a padded one)."""
    return tuple(slice(0, d) for d in shape)


# --- the ONNX file's signature ---------------------------------------------

def _dims(value: onnx.ValueInfoProto) -> tuple[int | str, ...]:
    """Fixed dimensions as ints, symbolic ones by name ('' when unnamed)."""
    if not value.type.HasField("tensor_type"):
        raise ConfigError(f"tensor '{value.name}' is not a tensor, which trtpool does not serve")
    return tuple(d.dim_value if d.HasField("dim_value") else d.dim_param
                 for d in value.type.tensor_type.shape.dim)


def _declared(value: onnx.ValueInfoProto) -> DeclaredTensor:
    elem_type = value.type.tensor_type.elem_type
    if elem_type not in ONNX_DTYPES:
        raise ConfigError(f"tensor '{value.name}' has type {TensorProto.DataType.Name(elem_type)}, "
                          "which trtpool does not serve")
    return value.name, np.dtype(ONNX_DTYPES[elem_type]), _dims(value)


def read_signature(model: onnx.ModelProto, cfg: PoolConfig) -> tuple[Signature, dict[str, tuple[DimSource, ...]]]:
    """The model's signature (profiles as the ONNX Runtime runtime makes them) and
    each output dimension as a constant or as an input's dimension."""
    initializers = {i.name for i in model.graph.initializer}
    return onnx_signature.read_signature(
        [_declared(v) for v in model.graph.input if v.name not in initializers],
        [_declared(v) for v in model.graph.output], cfg)


# --- ONNX -> a capture-safe torch module -------------------------------------

class _Missing(types.ModuleType):
    """Stands in for a module that cannot be imported; fails only when used."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise EngineError(f"this model needs {self.__name__}, which cannot be imported here")


def _import_onnx2torch() -> types.ModuleType:
    """onnx2torch imports torchvision at import time, for its NMS and RoiAlign
    converters only. torchvision may be absent (a serving image with CUDA torch
    alone) or built for another torch, which fails to import: a placeholder then
    takes its place and fails only if one of those two converters is used."""
    try:
        import torchvision  # noqa: F401
    except Exception:  # ImportError, or RuntimeError from a mismatched build
        sys.modules["torchvision"] = sys.modules["torchvision.ops"] = _Missing("torchvision")
    try:
        import onnx2torch
    except ImportError as exc:
        raise EngineError(f"the torch runtime converts ONNX files with onnx2torch, which cannot be "
                          f"imported ({exc}); pip install --no-deps onnx2torch==1.5.15") from exc
    return onnx2torch


class HostShape(torch.nn.Module):
    """ONNX Shape as a CPU int64 tensor: shapes are host metadata, and consumers
    (Slice, Reshape) then read them without a device synchronization."""

    def __init__(self, start: int, end: int | None) -> None:
        super().__init__()
        self.start, self.end = start, end

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tensor(x.shape[self.start:self.end], dtype=torch.int64)


def convert(model: onnx.ModelProto, device: torch.device | str, precision: str = "fp32") -> torch.nn.Module:
    """The ONNX model as an eval-mode torch module on `device` whose forward reads
    no device tensor on the host (so it can be captured in a CUDA graph)."""
    onnx2torch = _import_onnx2torch()
    from onnx2torch.node_converters.cast import OnnxCast
    from onnx2torch.node_converters.shape import OnnxShape

    try:
        module = onnx2torch.convert(model).eval()
    except Exception as exc:  # NotImplementedError for unsupported ops, and others
        raise EngineError(f"onnx2torch cannot convert the ONNX model: {type(exc).__name__}: {exc}") from exc
    for name, sub in list(module.named_modules()):
        if isinstance(sub, OnnxShape):
            module.set_submodule(name, HostShape(sub._start, sub._end))
        elif precision == "fp16" and isinstance(sub, OnnxCast) and sub.torch_dtype == torch.float32:
            sub.torch_dtype = torch.float16  # a Cast to float would mix float32 into a half graph
    # Integer initializers are shapes, axes and indices: keep them on the host.
    host_constants = {name: b for name, b in module.named_buffers() if not b.is_floating_point()}
    module.to(device)
    if precision == "fp16":
        module.half()
    for name, tensor in host_constants.items():
        owner, _, leaf = name.rpartition(".")
        module.get_submodule(owner).register_buffer(leaf, tensor)
    return module


def _use_ieee_fp32() -> None:
    """fp32 means IEEE fp32 (as ONNX Runtime computes it), not TF32. torch's flags
    are process-wide; each Triton model instance is its own process."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


# --- runtime ----------------------------------------------------------------

class TorchRuntime(Runtime):
    name = "torch"

    def __init__(self, cfg: PoolConfig, path: Path, precision: str = "fp32",
                 sequence_buckets: tuple[int, ...] | None = SEQUENCE_BUCKETS) -> None:
        if precision not in PRECISIONS:
            raise ConfigError(f"precision '{precision}' is not accepted; expected one of {', '.join(PRECISIONS)}")
        try:
            index = cuda.device_index(cfg.device)
        except ConfigError:
            raise ConfigError(f"the torch runtime runs on a GPU, but this model instance is on "
                              f"'{cfg.device}'; use instance_group [{{ kind: KIND_GPU }}]") from None
        self.path = Path(path)
        if self.path.suffix != ".onnx":
            raise ConfigError(f"the torch runtime converts an ONNX file, not '{self.path.name}'; "
                              "set parameter 'model_file' to the model's ONNX file (e.g. model.onnx)")
        if index >= torch.cuda.device_count():
            raise EngineError(f"the torch runtime needs GPU {cfg.device}, but torch sees "
                              f"{torch.cuda.device_count()} GPU(s); check nvidia-smi and CUDA_VISIBLE_DEVICES")
        self.device = torch.device("cuda", index)
        self.precision = precision
        self.compute_dtype = torch.float16 if precision == "fp16" else torch.float32
        try:
            model = onnx.load(str(self.path))
        except Exception as exc:
            raise EngineError(f"ONNX file '{self.path}' cannot be read: {exc}") from exc
        self.signature, self._output_dims = read_signature(model, cfg)
        self.axis_buckets = self._axis_buckets(sequence_buckets)
        largest = {s.name: self.signature.max_shape(s.name) for s in self.signature.inputs}
        self.input_capacities = {s.name: (s.dtype, prod(largest[s.name])) for s in self.signature.inputs}
        largest_out = self.output_shapes(largest)
        self.output_capacities = {s.name: (s.dtype, prod(largest_out[s.name])) for s in self.signature.outputs}
        self.make_current()
        if precision == "fp32":
            _use_ieee_fp32()
        self.module = convert(model, self.device, precision)
        self.capture_lock = threading.Lock()  # one capture at a time in the process
        self._context_bytes: int | None = None

    def _axis_buckets(self, sequence_buckets: tuple[int, ...] | None) -> dict[str, tuple[Buckets, ...]]:
        """Per input and axis: batch buckets, sequence buckets, or None (fixed or exact)."""
        result = {}
        for spec in self.signature.inputs:
            largest = self.signature.max_shape(spec.name)
            axes: list[Buckets] = []
            for axis, dim in enumerate(spec.shape):
                if self.signature.batched and axis == 0:
                    axes.append(batch_buckets(largest[0]))
                elif dim == -1 and sequence_buckets:
                    axes.append(clip_buckets(sequence_buckets, largest[axis]))
                else:
                    axes.append(None)
            result[spec.name] = tuple(axes)
        return result

    def padded_shapes(self, shapes: Shapes) -> Shapes:
        """The bucket these input shapes run in, in the model's input order."""
        return {s.name: tuple(bucket_of(d, b) for d, b in zip(shapes[s.name], self.axis_buckets[s.name]))
                for s in self.signature.inputs}

    def output_shapes(self, input_shapes: Shapes) -> Shapes:
        return {name: output_shape(dims, input_shapes) for name, dims in self._output_dims.items()}

    def may_pad_inner(self, name: str) -> bool:
        """Whether a tensor's real part can be non-contiguous in its bucket (a padded non-leading dimension)."""
        if name in self.axis_buckets:
            return any(b is not None for b in self.axis_buckets[name][1:])
        return any(isinstance(d, tuple) and self.axis_buckets[d[0]][d[1]] is not None
                   for d in self._output_dims[name][1:])

    def make_current(self) -> None:
        """Make the GPU current for this thread in CUDA's runtime and in torch: each
        keeps its own per-thread device when they load separate copies of cudart."""
        cuda.set_device(self.device.index)
        torch.cuda.set_device(self.device)

    def forward(self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> None:
        """The module on static inputs into static outputs: what a context's graphs capture."""
        args = [t.to(self.compute_dtype) if t.dtype == torch.float32 else t for t in inputs.values()]
        results = self.module(*args)
        if isinstance(results, torch.Tensor):
            results = (results,)
        if len(results) != len(outputs):
            raise EngineError(f"the converted model returned {len(results)} outputs, its ONNX file declares "
                              f"{len(outputs)}")
        for (name, out), result in zip(outputs.items(), results):
            if result.shape != out.shape:
                raise EngineError(f"output '{name}' came out as {list(result.shape)}, expected "
                                  f"{list(out.shape)} from the ONNX file's output dimensions")
            out.copy_(result)  # casts a half result back to the declared type

    def create_context(self, index: int) -> TorchContext:
        return TorchContext(self, index)

    def context_memory_bytes(self) -> int:
        """Measured once: how much the caching allocator's reserved memory grows when a
        context is made (its device buffers, its stream's cuBLAS workspace and the graph
        pool holding the largest bucket's activations). Buckets captured later share
        that pool and its buffers, so they add little."""
        if self._context_bytes is None:
            self.make_current()
            torch.cuda.empty_cache()  # capture empties the cache: start from an empty one
            before = torch.cuda.memory_reserved(self.device)
            probe = self.create_context(-1)
            self._context_bytes = torch.cuda.memory_reserved(self.device) - before
            probe.close()
            del probe
            torch.cuda.empty_cache()
        return self._context_bytes

    def free_memory_bytes(self) -> int:
        self.make_current()
        free, _ = torch.cuda.mem_get_info(self.device)
        return free

    def close(self) -> None:
        self.module = None
        torch.cuda.empty_cache()


@dataclass
class CapturedBucket:
    """One bucket's graph and the static tensors it reads and writes (views of the context's buffers)."""

    graph: torch.cuda.CUDAGraph
    inputs: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor]

    def place(self, name: str, source: torch.Tensor) -> None:
        """Queue the real batch `source` (on the device) into the static input, zero-padded."""
        static = self.inputs[name]
        region = static[leading(tuple(source.shape))]
        if source.data_ptr() == region.data_ptr() and region.is_contiguous():  # copied in place
            if source.numel() < static.numel():
                static.view(-1)[source.numel():].zero_()
        else:
            if region.shape != static.shape:
                static.zero_()
            region.copy_(source)


class TorchContext(ExecutionContext):
    """Graphs over the shared module with their own stream, event and buffers on the runtime's GPU."""

    def __init__(self, runtime: TorchRuntime, index: int) -> None:
        self.index = index
        self._runtime = runtime
        runtime.make_current()
        self.inputs = HostBuffers(runtime.input_capacities, cuda.pinned_allocator)
        self.outputs = HostBuffers(runtime.output_capacities, cuda.pinned_allocator)
        # The stream is trtpool.cuda's, as in the TensorRT context: copies, the
        # event wait and teardown are the same checked calls on the same kind of
        # stream; torch only launches its kernels and graphs on it through an
        # ExternalStream view, which does not own it.
        self._stream = cuda.Stream()
        self._torch_stream = torch.cuda.ExternalStream(self._stream.handle, device=runtime.device)
        self._done = cuda.Event()
        self._pool = torch.cuda.graph_pool_handle()  # shared by this context's graphs, never replayed at once
        self._buckets: dict[tuple[tuple[int, ...], ...], CapturedBucket] = {}
        with torch.cuda.stream(self._torch_stream):
            self._static = {name: self._empty(dtype, count) for name, (dtype, count) in
                            (*runtime.input_capacities.items(), *runtime.output_capacities.items())}
            # Where a real batch is not the leading block of its bucket (a padded
            # sequence), it lands here first and is copied in or out on the device.
            self._landing = {name: self._empty(dtype, count) for name, (dtype, count) in
                             (*runtime.input_capacities.items(), *runtime.output_capacities.items())
                             if runtime.may_pad_inner(name)}
        largest = {s.name: runtime.signature.max_shape(s.name) for s in runtime.signature.inputs}
        self._bucket(largest)  # this context's memory is committed now, not under load

    def _empty(self, dtype: np.dtype, count: int) -> torch.Tensor:
        return torch.empty(count, dtype=TORCH_DTYPES[np.dtype(dtype)], device=self._runtime.device)

    @property
    def captured(self) -> list[tuple[tuple[int, ...], ...]]:
        """The buckets captured so far, as padded input shapes in the model's input order."""
        return list(self._buckets)

    def _bucket(self, shapes: Shapes) -> CapturedBucket:
        padded = self._runtime.padded_shapes(shapes)
        key = tuple(padded.values())
        if key not in self._buckets:
            self._buckets[key] = self._capture(padded)
        return self._buckets[key]

    def _capture(self, padded: Shapes) -> CapturedBucket:
        runtime = self._runtime
        inputs = {n: self._static[n][:prod(s)].view(s) for n, s in padded.items()}
        outputs = {n: self._static[n][:prod(s)].view(s) for n, s in runtime.output_shapes(padded).items()}
        graph = torch.cuda.CUDAGraph()
        with runtime.capture_lock, torch.inference_mode(), torch.cuda.stream(self._torch_stream):
            for tensor in inputs.values():
                tensor.zero_()
            for _ in range(WARMUP_RUNS):
                runtime.forward(inputs, outputs)
            try:
                with torch.cuda.graph(graph, pool=self._pool, stream=self._torch_stream,
                                      capture_error_mode="thread_local"):
                    runtime.forward(inputs, outputs)
            except RuntimeError as exc:
                raise EngineError(
                    f"the model converted from '{runtime.path}' cannot be captured in a CUDA graph for "
                    f"shapes {padded}: {exc}. An op that reads a device tensor on the host (a shape "
                    "computed on the GPU, .item(), data-dependent output sizes) breaks capture") from exc
        log.debug("context %d: captured bucket %s", self.index, padded)
        return CapturedBucket(graph, inputs, outputs)

    def run(self, shapes: Shapes) -> dict[str, np.ndarray]:
        runtime = self._runtime
        runtime.signature.choose_profile(shapes)  # InvalidInput if no profile fits
        runtime.make_current()
        bucket = self._bucket(shapes)
        with torch.cuda.stream(self._torch_stream):
            for name, shape in shapes.items():
                staged = self.inputs.view(name, shape)
                region = bucket.inputs[name][leading(shape)]
                target = region if region.is_contiguous() else self._landing[name][:prod(shape)].view(shape)
                cuda.memcpy_htod_async(target.data_ptr(), staged, staged.nbytes, self._stream)
                bucket.place(name, target)
            bucket.graph.replay()
            results = {}
            for name, device in self._results(bucket, shapes).items():
                host = self.outputs.view(name, tuple(device.shape))
                cuda.memcpy_dtoh_async(host, device.data_ptr(), host.nbytes, self._stream)
                results[name] = host
        self._wait()
        return results

    def run_device(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Run a batch that is already on this GPU (e.g. torch.from_dlpack of Triton's
        GPU tensors): no host copies. Work queued on the caller's current stream is
        waited for. Returns new contiguous device tensors the caller owns: one
        device copy per output and batch, made before the batch's one wait, so
        that responses can slice them without a copy and a wait per request."""
        runtime = self._runtime
        shapes = self._check_device_inputs(tensors)
        runtime.signature.choose_profile(shapes)
        runtime.make_current()
        bucket = self._bucket(shapes)
        self._torch_stream.wait_stream(torch.cuda.current_stream(runtime.device))
        with torch.cuda.stream(self._torch_stream):
            for name in shapes:
                bucket.place(name, tensors[name])
            bucket.graph.replay()
            results = {name: region.clone() for name, region in self._results(bucket, shapes).items()}
        self._wait()
        return results

    def _check_device_inputs(self, tensors: dict[str, torch.Tensor]) -> Shapes:
        signature, device = self._runtime.signature, self._runtime.device
        expected = sorted(s.name for s in signature.inputs)
        if sorted(tensors) != expected:
            raise InvalidInput(f"input tensors {sorted(tensors)} given; the model expects {expected}")
        for spec in signature.inputs:
            tensor, dtype = tensors[spec.name], TORCH_DTYPES[spec.dtype]
            if tensor.device != device or tensor.dtype != dtype or tensor.dim() != len(spec.shape):
                raise InvalidInput(f"input '{spec.name}': {tensor.dtype} {list(tensor.shape)} on {tensor.device} "
                                   f"given, expected {dtype} of rank {len(spec.shape)} on {device}")
        shapes = {name: tuple(t.shape) for name, t in tensors.items()}
        if signature.batched and len({s[0] for s in shapes.values()}) > 1:
            raise InvalidInput(f"inputs disagree on the batch size: {shapes}")
        return shapes

    def _results(self, bucket: CapturedBucket, shapes: Shapes) -> dict[str, torch.Tensor]:
        """The real part of each output as a contiguous device tensor (queued on the context's stream)."""
        results = {}
        for name, shape in self._runtime.output_shapes(shapes).items():
            region = bucket.outputs[name][leading(shape)]
            if not region.is_contiguous():
                compact = self._landing[name][:prod(shape)].view(shape)
                compact.copy_(region)
                region = compact
            results[name] = region
        return results

    def _wait(self) -> None:
        self._done.record(self._stream)
        self._done.synchronize()  # the one wait per batch

    def close(self) -> None:
        self._runtime.make_current()
        try:
            self._stream.synchronize()  # nothing may still read or write the buffers
        except cuda.CudaError as exc:
            log.warning("context %d: stream did not drain on close: %s", self.index, exc)
        self._buckets.clear()
        self._static.clear()
        self._landing.clear()
        self._done.close()
        self._stream.close()
