"""TorchRuntime: one copy of the weights on the GPU, shared by every context, the buckets a batch
is padded to (trtpool.runtimes.buckets), and the forward pass in the file's output types.
"""

from __future__ import annotations

import threading
from math import prod
from pathlib import Path

import onnx
import torch

from trtpool.errors import ConfigError, EngineError
from trtpool.gpu import cuda
from trtpool.gpu.host_upload import HostUploader
from trtpool.parameters import PoolConfig
from trtpool.runtimes.base import Runtime
from trtpool.runtimes.buckets import Buckets, bucket_of, clip_buckets, stepped_buckets
from trtpool.runtimes.torch.context import Shapes, TorchContext
from trtpool.runtimes.torch.convert import convert
from trtpool.runtimes.torch.signature import padded_axis_sources, read_signature, torch_dtype


def _use_ieee_fp32() -> None:
    """fp32 means IEEE fp32 (as ONNX Runtime computes it), not TF32. torch's flags
    are process-wide; each Triton model instance is its own process."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


class TorchRuntime(Runtime):
    name = "torch"

    def __init__(self, cfg: PoolConfig, path: Path) -> None:
        """`cfg.precision` is the compute precision; `cfg.sequence_buckets` pads dynamic dimensions."""
        precision, sequence_buckets = cfg.precision, cfg.sequence_buckets
        try:
            index = cuda.device_index(cfg.device)
        except ConfigError:
            raise ConfigError(
                f"the torch runtime runs on a GPU, but this model instance is on "
                f"'{cfg.device}'; use instance_group [{{ kind: KIND_GPU }}]"
            ) from None
        self.path = Path(path)
        if self.path.suffix != ".onnx":
            raise ConfigError(
                f"the torch runtime converts an ONNX file, not '{self.path.name}'; "
                "set parameter 'model_file' to the model's ONNX file (e.g. model.onnx)"
            )
        if index >= torch.cuda.device_count():
            raise EngineError(
                f"the torch runtime needs GPU {cfg.device}, but torch sees "
                f"{torch.cuda.device_count()} GPU(s); check nvidia-smi and CUDA_VISIBLE_DEVICES"
            )
        self.device = torch.device("cuda", index)
        self.precision = precision
        self.compute_dtype = torch.float16 if precision == "fp16" else torch.float32
        try:
            model = onnx.load(str(self.path))
        except Exception as exc:
            raise EngineError(f"ONNX file '{self.path}' cannot be read: {exc}") from exc
        self.signature = read_signature(model, cfg.profiles, cfg.max_batch_size)
        self.padded_axes = padded_axis_sources(model, self.signature) if sequence_buckets else {}
        self.axis_buckets = self._axis_buckets(sequence_buckets)
        self.input_capacities = {
            s.name: (s.dtype, prod(self.signature.max_shape(s.name))) for s in self.signature.inputs
        }
        self.make_current()
        if precision == "fp32":
            _use_ieee_fp32()
        self.module = convert(model, self.device, precision)
        # The fp32 copies the conversion made stay reserved (most of the weights' memory for
        # BERT-base: bench/results/h200/memory_breakdown_bert_base.json): hand them back.
        torch.cuda.empty_cache()
        self.uploader = HostUploader()  # host inputs into the contexts' device buffers
        self.capture_lock = threading.Lock()  # one capture at a time in the process
        self.eager_reason: str | None = None  # set once a capture fails: every bucket then runs eagerly
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
                    axes.append(stepped_buckets(largest[0]))
                elif dim == -1 and sequence_buckets:
                    axes.append(clip_buckets(sequence_buckets, largest[axis]))
                else:
                    axes.append(None)
            result[spec.name] = tuple(axes)
        return result

    def padded_shapes(self, shapes: Shapes) -> Shapes:
        """The bucket these input shapes run in, in the model's input order."""
        return {
            s.name: tuple(bucket_of(d, b) for d, b in zip(shapes[s.name], self.axis_buckets[s.name], strict=True))
            for s in self.signature.inputs
        }

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
            raise EngineError(
                f"the converted model returned {len(results)} outputs, its ONNX file declares {len(outputs)}"
            )
        return {spec.name: result.to(torch_dtype(spec.dtype)) for spec, result in zip(outputs, results, strict=True)}

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
            measured = self.create_context(-1)
            measured.prepare({s.name: self.signature.max_shape(s.name) for s in self.signature.inputs})
            self._context_bytes = torch.cuda.memory_reserved(self.device) - before
            measured.close()
            del measured
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
