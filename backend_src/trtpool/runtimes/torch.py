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

One copy of the weights is on the GPU, shared by every context; an fp16 model with
2-D convolutions keeps them channels_last (NHWC, the tensor-core layout; prefers_channels_last). A context owns
a stream, events, pinned host staging buffers, device input buffers sized for
the largest shapes (as a TensorRT context does), and one CUDA graph per shape
bucket, all sharing the context's private memory pool; a graph's outputs live
in that pool, and their real part is copied to pinned host memory per batch.
Host inputs reach the device buffers through the pinned staging
(trtpool.gpu.host_upload, one uploader shared by the contexts); GPU inputs are
copied device to device. Batch sizes are bucketed (see batch_buckets) up to the max batch. Other dynamic
dimensions are used as given (a graph per distinct shape) unless the config's
``sequence_buckets`` pads them (e.g. 32,64,128,256,512): zero padding of a
non-batch dimension is right only for models that mask it (attention_mask 0
for a padded token), and only where every output dimension it changes is
named after an input dimension, so that it can be cut back. Activations are
sized to the shapes in use, as the TensorRT runtime's USER_MANAGED blocks are:
a bucket is captured on its first batch on a context (a one-time cost on that
request; config.pbtxt's model_warmup moves it to load time), so a context that
only runs 128-token batches never holds the activations of the profile's
largest shapes. A context made later, as an elastic pool grows, captures the
buckets others have run when it is made, off the request path. A model that
cannot be captured (an output sized by the data, an op that reads a device
value on the host) runs eagerly on the context's stream.
"""
from __future__ import annotations

import bisect
import logging
import sys
import threading
import types
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import TensorProto

from trtpool.errors import ConfigError, EngineError, InvalidInput
from trtpool.gpu import cuda
from trtpool.gpu.buffers import HostBuffers
from trtpool.gpu.device_tensors import is_device
from trtpool.gpu.host_upload import HostUploader
from trtpool.model import onnx as onnx_signature
from trtpool.model.dtypes import is_tensor, not_a_tensor, type_text
from trtpool.model.onnx import DeclaredTensor
from trtpool.model.signature import Signature
from trtpool.parameters import PoolConfig
from trtpool.runtimes.base import ExecutionContext, Parts, Runtime, batch_shapes

log = logging.getLogger("trtpool")

PRECISIONS = ("fp32", "fp16")
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

def batch_buckets(max_batch: int, steps: int = 8) -> tuple[int, ...]:
    """Powers of two up to max_batch / `steps`, then multiples of it, then max_batch.

    A batch runs in the smallest bucket that holds it, padded: with powers of two
    alone a batch of 17 computes 32 rows. Here no bucket wastes more than
    max_batch / steps rows (4 of 32), for `steps` + log2 graphs per context."""
    step = 1 << max(0, (max_batch // steps).bit_length() - 1)  # a power of two, max_batch / steps or below
    sizes = [1 << k for k in range(step.bit_length() - 1)]
    sizes += range(step, max_batch, step)
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
    return tuple(d.dim_value if d.HasField("dim_value") else d.dim_param
                 for d in value.type.tensor_type.shape.dim)


def _declared(value: onnx.ValueInfoProto) -> DeclaredTensor:
    if not is_tensor(value):
        raise ConfigError(not_a_tensor(value))
    elem_type = value.type.tensor_type.elem_type
    if elem_type not in ONNX_DTYPES:
        raise ConfigError(f"tensor '{value.name}' has type {type_text(value.type)}, "
                          "which trtpool does not serve")
    return value.name, np.dtype(ONNX_DTYPES[elem_type]), _dims(value)


def graph_io(model: onnx.ModelProto) -> tuple[list[DeclaredTensor], list[DeclaredTensor]]:
    """The graph's inputs (initializers are weights, not inputs) and outputs."""
    initializers = {i.name for i in model.graph.initializer}
    return ([_declared(v) for v in model.graph.input if v.name not in initializers],
            [_declared(v) for v in model.graph.output])


def read_signature(model: onnx.ModelProto, cfg: PoolConfig) -> Signature:
    """The model's signature, with profiles as the ONNX Runtime runtime makes them."""
    return onnx_signature.read_signature(*graph_io(model), cfg)


def padded_axis_sources(model: onnx.ModelProto, signature: Signature) -> dict[str, dict[int, tuple[str, int]]]:
    """For sequence buckets: per output, each dynamic non-batch axis as the input axis
    it follows, by dimension name. Padding an input axis is right only when every
    output axis it changes can be cut back, so an output axis that no input axis
    names refuses the option."""
    inputs, outputs = graph_io(model)
    named: dict[str, tuple[str, int]] = {}
    for name, _, dims in inputs:
        for axis, dim in enumerate(dims):
            if isinstance(dim, str) and dim:
                named.setdefault(dim, (name, axis))
    first = 1 if signature.batched else 0
    sources: dict[str, dict[int, tuple[str, int]]] = {}
    for name, _, dims in outputs:
        sources[name] = {}
        for axis, dim in enumerate(dims[first:], start=first):
            if isinstance(dim, int) and dim > 0:
                continue
            if dim not in named:
                raise ConfigError(f"parameter 'sequence_buckets': output '{name}' dimension {axis} ('{dim}') "
                                  "is named after no input dimension, so a padded input cannot be cut back "
                                  "out of it; remove the parameter (a CUDA graph per distinct shape)")
            sources[name][axis] = named[dim]
    return sources


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


class NonZero(torch.nn.Module):
    """ONNX NonZero: the indices of the non-zero elements as (rank, count), row-major.
    onnx2torch 1.5.15 returns torch.nonzero's (count, rank) instead."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x).T


def prefers_channels_last(module: torch.nn.Module, precision: str) -> bool:
    """Whether the module runs faster with its 4-D weights laid out NHWC (channels_last):
    fp16 2-D convolutions, which cuDNN runs on tensor cores in that layout (ResNet-50 224,
    batch 32 on the H200: 1.40x, bench/results/h200/torch_layout.json). Inputs stay NCHW,
    as the ONNX file declares them; the first convolution converts its input."""
    return precision == "fp16" and any(isinstance(m, torch.nn.Conv2d) for m in module.modules())


def convert(model: onnx.ModelProto, device: torch.device | str, precision: str = "fp32",
            channels_last: bool | None = None) -> torch.nn.Module:
    """The ONNX model as an eval-mode torch module on `device` whose forward reads
    no device tensor on the host (so it can be captured in a CUDA graph).
    `channels_last`: lay 4-D weights out NHWC; None: where prefers_channels_last says so."""
    onnx2torch = _import_onnx2torch()
    from onnx2torch.node_converters.cast import OnnxCast
    from onnx2torch.node_converters.nonzero import OnnxNonZero
    from onnx2torch.node_converters.shape import OnnxShape

    try:
        module = onnx2torch.convert(model).eval()
    except Exception as exc:  # NotImplementedError for unsupported ops, and others
        raise EngineError(f"onnx2torch cannot convert the ONNX model: {type(exc).__name__}: {exc}") from exc
    for name, sub in list(module.named_modules()):
        if isinstance(sub, OnnxShape):
            module.set_submodule(name, HostShape(sub._start, sub._end))
        elif isinstance(sub, OnnxNonZero):
            module.set_submodule(name, NonZero())
        elif precision == "fp16" and isinstance(sub, OnnxCast) and sub.torch_dtype == torch.float32:
            sub.torch_dtype = torch.float16  # a Cast to float would mix float32 into a half graph
    # Integer initializers are shapes, axes and indices: keep them on the host.
    host_constants = {name: b for name, b in module.named_buffers() if not b.is_floating_point()}
    module.to(device)
    if precision == "fp16":
        module.half()
    if prefers_channels_last(module, precision) if channels_last is None else channels_last:
        module.to(memory_format=torch.channels_last)
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
                 sequence_buckets: tuple[int, ...] | None = None) -> None:
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
        self.signature = read_signature(model, cfg)
        self.padded_axes = padded_axis_sources(model, self.signature) if sequence_buckets else {}
        self.axis_buckets = self._axis_buckets(sequence_buckets)
        self.input_capacities = {s.name: (s.dtype, prod(self.signature.max_shape(s.name)))
                                 for s in self.signature.inputs}
        self.make_current()
        if precision == "fp32":
            _use_ieee_fp32()
        self.module = convert(model, self.device, precision)
        # The fp32 copies the conversion made stay reserved (BERT-base: 290 of 516 MiB,
        # bench/results/h200/memory_breakdown_bert_base.json): hand them back.
        torch.cuda.empty_cache()
        self.uploader = HostUploader()  # host inputs into the contexts' device buffers
        self.capture_lock = threading.Lock()  # one capture at a time in the process
        self.eager_reason: str | None = None   # set once a capture fails: every bucket then runs eagerly
        self._context_bytes: int | None = None
        # Streams of closed contexts, for the next ones: torch keeps a cuBLAS workspace
        # per stream for the process's life, so new streams after every close (an
        # elastic pool's shrink and grow) would each leave one behind.
        self._spare_streams: list[cuda.Stream] = []
        self._streams_lock = threading.Lock()
        # The buckets some context has run (padded input shapes by key): a context made
        # later (an elastic pool's growth) captures them when it is made, off the request path.
        self.buckets_in_use: dict[tuple[tuple[int, ...], ...], Shapes] = {}

    def stream(self) -> cuda.Stream:
        with self._streams_lock:
            return self._spare_streams.pop() if self._spare_streams else cuda.Stream()

    def spare_stream(self, stream: cuda.Stream) -> None:
        with self._streams_lock:
            self._spare_streams.append(stream)

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

    def real_output(self, name: str, output: torch.Tensor, shapes: Shapes) -> torch.Tensor:
        """The part of a bucket's output that belongs to a batch of these input shapes."""
        index = [slice(None)] * output.dim()
        if self.signature.batched:
            index[0] = slice(0, shapes[self.signature.inputs[0].name][0])
        for axis, (input_name, input_axis) in self.padded_axes.get(name, {}).items():
            index[axis] = slice(0, shapes[input_name][input_axis])
        return output[tuple(index)]

    def may_pad_inner(self, name: str) -> bool:
        """Whether an input's real part can be non-contiguous in its bucket (a padded non-leading dimension)."""
        return any(b is not None for b in self.axis_buckets[name][1:])

    def make_current(self) -> None:
        """Make the GPU current for this thread in CUDA's runtime and in torch: each
        keeps its own per-thread device when they load separate copies of cudart."""
        cuda.set_device(self.device.index)
        torch.cuda.set_device(self.device)

    def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The module on these inputs; outputs in the types the ONNX file declares."""
        args = [t.to(self.compute_dtype) if t.dtype == torch.float32 else t for t in inputs.values()]
        results = self.module(*args)
        if isinstance(results, torch.Tensor):
            results = (results,)
        outputs = self.signature.outputs
        if len(results) != len(outputs):
            raise EngineError(f"the converted model returned {len(results)} outputs, its ONNX file declares "
                              f"{len(outputs)}")
        return {spec.name: result.to(TORCH_DTYPES[spec.dtype]) for spec, result in zip(outputs, results)}

    def keep_outputs_on_device(self) -> bool:
        self.outputs_on_device = True
        return True

    def create_context(self, index: int) -> TorchContext:
        return TorchContext(self, index)

    def context_memory_bytes(self) -> int:
        """Measured once, at most: how much the caching allocator's reserved memory grows
        when a context is made and runs the largest shapes (its device buffers, its
        stream's cuBLAS workspace and the graph pool holding the largest bucket's
        activations). Smaller buckets share that pool and its buffers."""
        if self._context_bytes is None:
            self.make_current()
            torch.cuda.empty_cache()  # capture empties the cache: start from an empty one
            before = torch.cuda.memory_reserved(self.device)
            probe = self.create_context(-1)
            probe.prepare({s.name: self.signature.max_shape(s.name) for s in self.signature.inputs})
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
        self.uploader.close()
        self.module = None
        for stream in self._spare_streams:
            stream.close()
        self._spare_streams.clear()
        torch.cuda.empty_cache()


def _model_refused(exc: RuntimeError, shapes: Shapes) -> Exception:
    """A failure of the module on new shapes: the client's error unless CUDA itself failed."""
    if "CUDA" in str(exc) or "cuda" in type(exc).__name__.lower():
        return exc
    return InvalidInput(f"the model rejected input shapes {shapes}: {exc}")


@dataclass
class Bucket:
    """One bucket's static inputs (views of the context's buffers) and its graph with
    the outputs it writes; a model that cannot be captured runs eagerly (graph None)."""

    inputs: dict[str, torch.Tensor]
    graph: torch.cuda.CUDAGraph | None = None
    outputs: dict[str, torch.Tensor] | None = None

    def run(self, runtime: TorchRuntime) -> dict[str, torch.Tensor]:
        if self.graph is None:
            return runtime.forward(self.inputs)
        self.graph.replay()
        return self.outputs


class TorchContext(ExecutionContext):
    """Graphs over the shared module with their own stream, events and buffers on the runtime's GPU."""

    def __init__(self, runtime: TorchRuntime, index: int) -> None:
        self.index = index
        self._runtime = runtime
        runtime.make_current()
        self.staging = HostBuffers(runtime.input_capacities, cuda.pinned_allocator)
        self._host_outputs: dict[str, np.ndarray] = {}  # pinned, grown to the largest output seen
        # The stream is trtpool.gpu.cuda's, as in the TensorRT context: copies, the
        # event wait and teardown are the same checked calls on the same kind of
        # stream; torch only launches its kernels and graphs on it through an
        # ExternalStream view, which does not own it.
        self._stream = runtime.stream()
        self._torch_stream = torch.cuda.ExternalStream(self._stream.handle, device=runtime.device)
        self._done = cuda.Event()
        self._inputs_taken = cuda.Event()
        self._pool = torch.cuda.graph_pool_handle()  # shared by this context's graphs, never replayed at once
        self._buckets: dict[tuple[tuple[int, ...], ...], Bucket] = {}
        self._results: dict[str, np.ndarray] | None = None
        with torch.cuda.stream(self._torch_stream):
            self._static = {name: self._empty(dtype, count) for name, (dtype, count) in runtime.input_capacities.items()}
            # Where a real batch is not the leading block of its bucket (a padded
            # sequence), it lands here first and is copied in on the device.
            self._landing = {name: self._empty(dtype, count) for name, (dtype, count)
                             in runtime.input_capacities.items() if runtime.may_pad_inner(name)}
        for shapes in list(runtime.buckets_in_use.values()):  # the graphs the load runs, captured now
            self._bucket(shapes)

    def _empty(self, dtype: np.dtype, count: int) -> torch.Tensor:
        return torch.empty(count, dtype=TORCH_DTYPES[np.dtype(dtype)], device=self._runtime.device)

    @property
    def captured(self) -> list[tuple[tuple[int, ...], ...]]:
        """The buckets made so far, as padded input shapes in the model's input order."""
        return list(self._buckets)

    def prepare(self, shapes: Shapes) -> None:
        """Capture the bucket of these input shapes now, without counting it among the
        buckets in use (which contexts made later capture): a measurement's probe."""
        self._bucket(shapes, in_use=False)

    def _bucket(self, shapes: Shapes, in_use: bool = True) -> Bucket:
        padded = self._runtime.padded_shapes(shapes)
        key = tuple(padded.values())
        if key not in self._buckets:
            inputs = {n: self._static[n][:prod(s)].view(s) for n, s in padded.items()}
            self._buckets[key] = self._capture(inputs)
            if in_use:
                self._runtime.buckets_in_use.setdefault(key, padded)
        return self._buckets[key]

    def _capture(self, inputs: dict[str, torch.Tensor]) -> Bucket:
        runtime = self._runtime
        bucket = Bucket(inputs)
        shapes = {n: tuple(t.shape) for n, t in inputs.items()}
        with runtime.capture_lock, torch.inference_mode(), torch.cuda.stream(self._torch_stream):
            for tensor in inputs.values():
                tensor.zero_()
            try:
                for _ in range(WARMUP_RUNS):
                    runtime.forward(inputs)
            except RuntimeError as exc:
                raise _model_refused(exc, shapes) from exc
            if runtime.eager_reason is not None:
                return bucket
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, pool=self._pool, stream=self._torch_stream,
                                      capture_error_mode="thread_local"):
                    outputs = runtime.forward(inputs)
            except RuntimeError as exc:
                # An op that reads a device tensor on the host (a shape computed on the
                # GPU, .item(), an output sized by the data) breaks capture: such a model
                # runs eagerly on the context's stream, slower but right.
                runtime.eager_reason = f"{type(exc).__name__}: {exc}"
                log.warning("the model converted from '%s' cannot be captured in a CUDA graph (%s); "
                            "it runs without graphs", runtime.path, runtime.eager_reason)
                return bucket
        log.debug("context %d: captured bucket %s", self.index, shapes)
        bucket.graph, bucket.outputs = graph, outputs
        return bucket

    def _host_output(self, name: str, real: torch.Tensor) -> np.ndarray:
        """A pinned host array of `real`'s shape and type (the context's, reused)."""
        dtype, count = np.dtype(str(real.dtype).removeprefix("torch.")), real.numel()
        held = self._host_outputs.get(name)
        if held is None or held.size < count:
            held = self._host_outputs[name] = cuda.pinned_allocator(dtype, count)
        return held[:count].reshape(tuple(real.shape))

    def _place(self, bucket: Bucket, name: str, parts: Sequence[Any], shape: tuple[int, ...]) -> None:
        """Queue the batch's `parts` of one input into the bucket's static input, zero-padded."""
        static = bucket.inputs[name]
        region = static[leading(shape)]
        if region.shape != static.shape:  # the padding is zeros
            (static.view(-1)[region.numel():] if region.is_contiguous() else static).zero_()
        if is_device(parts[0]):  # already on the GPU: device copies straight into place
            offset = 0
            for part in parts:
                rows = part.shape[0] if self._runtime.signature.batched else shape[0]
                # torch's own tensors as they are; others by the CUDA array interface, not copied
                region[offset:offset + rows].copy_(torch.as_tensor(part, device=region.device))
                offset += rows
            return
        target = region if region.is_contiguous() else self._landing[name][:prod(shape)].view(shape)
        self._runtime.uploader.upload(parts, self.staging.view(name, shape), target.data_ptr(), self._stream)
        if target is not region:
            region.copy_(target)

    def submit(self, parts: Parts) -> None:
        runtime = self._runtime
        shapes = batch_shapes(parts, runtime.signature.batched)
        runtime.signature.choose_profile(shapes)  # InvalidInput if no profile fits
        runtime.make_current()
        bucket = self._bucket(shapes)
        on_device = any(is_device(t) for tensors in parts.values() for t in tensors)
        if on_device:  # work queued on the caller's stream (e.g. copies into the tensors)
            self._torch_stream.wait_stream(torch.cuda.current_stream(runtime.device))
        with torch.inference_mode(), torch.cuda.stream(self._torch_stream):
            for name, shape in shapes.items():
                self._place(bucket, name, parts[name], shape)
            if on_device:
                self._inputs_taken.record(self._stream)
            try:
                outputs = bucket.run(runtime)
            except RuntimeError as exc:
                raise _model_refused(exc, shapes) from exc
            self._results = {}
            for name, output in outputs.items():
                real = runtime.real_output(name, output, shapes)
                if runtime.outputs_on_device:  # the caller's own copy: the graph's buffers are the next batch's
                    self._results[name] = real.clone(memory_format=torch.contiguous_format)
                    continue
                real = real.contiguous()
                host = self._host_output(name, real)
                cuda.memcpy_dtoh_async(host, real.data_ptr(), host.nbytes, self._stream)
                self._results[name] = host
            self._done.record(self._stream)
        if on_device:
            self._inputs_taken.synchronize()  # the caller's GPU tensors may be reused once we return

    def complete(self) -> dict[str, np.ndarray]:
        self._done.synchronize()  # the one wait per batch
        results, self._results = self._results, None
        return results

    def close(self) -> None:
        self._runtime.make_current()
        try:
            self._stream.synchronize()  # nothing may still read or write the buffers
        except cuda.CudaError as exc:
            log.warning("context %d: stream did not drain on close: %s", self.index, exc)
        self._buckets.clear()  # the graphs, and with the last of them the private pool's hold on its memory
        self._static.clear()
        self._landing.clear()
        self._host_outputs.clear()
        self.staging = None  # pinned memory, freed with its last view
        self._done.close()
        self._inputs_taken.close()
        self._runtime.spare_stream(self._stream)  # drained above
        # The caching allocator keeps what the graphs' pool and the buffers held:
        # hand it back to the driver (not during another context's capture).
        with self._runtime.capture_lock:
            torch.cuda.empty_cache()
