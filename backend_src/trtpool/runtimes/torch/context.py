"""TorchContext: graphs over the shared module with the context's own stream, events and buffers.

A bucket (padded input shapes) is captured on its first batch on a context, after warm-up runs
on the context's stream; later batches of the bucket replay it. A model that cannot be captured
runs eagerly on the same stream.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from trtpool.errors import InvalidInput
from trtpool.gpu import cuda
from trtpool.gpu.buffers import HostBuffers
from trtpool.gpu.device_tensors import coalesced, is_device
from trtpool.model.dtypes import dtype_of
from trtpool.runtimes.base import Parts, batch_shapes
from trtpool.runtimes.stream_context import StreamContext
from trtpool.runtimes.torch.signature import torch_dtype

if TYPE_CHECKING:
    from trtpool.runtimes.torch.runtime import TorchRuntime

log = logging.getLogger("trtpool")

WARMUP_RUNS = 2  # eager runs on the context's stream before a capture (cuBLAS/cuDNN set-up)
Shapes = dict[str, tuple[int, ...]]


def leading(shape: tuple[int, ...]) -> tuple[slice, ...]:
    """Index of the leading `shape` block of a larger tensor (the real part of a padded one)."""
    return tuple(slice(0, d) for d in shape)


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
        assert self.outputs is not None  # captured with the graph
        return self.outputs


class TorchContext(StreamContext):
    """Graphs over the shared module with their own stream, events and buffers on the runtime's GPU."""

    def __init__(self, runtime: TorchRuntime, index: int) -> None:
        self.index = index
        self._runtime = runtime
        runtime.make_current()
        self.staging: HostBuffers | None = HostBuffers(runtime.input_capacities, cuda.pinned_allocator)  # None: closed
        self._host_outputs: dict[str, np.ndarray] = {}  # pinned, grown to the largest output seen
        # The stream is trtpool.gpu.cuda's, as in the TensorRT context: copies, the
        # event wait and teardown are the same checked calls on the same kind of
        # stream; torch only launches its kernels and graphs on it through an
        # ExternalStream view, which does not own it.
        self._open_stream(runtime.stream())
        self._torch_stream = torch.cuda.ExternalStream(self._stream.handle, device=runtime.device)
        self._pool = torch.cuda.graph_pool_handle()  # shared by this context's graphs, never replayed at once
        self._buckets: dict[tuple[tuple[int, ...], ...], Bucket] = {}
        with torch.cuda.stream(self._torch_stream):
            self._static = {
                name: self._empty(dtype, count) for name, (dtype, count) in runtime.input_capacities.items()
            }
            # Where a real batch is not the leading block of its bucket (a padded
            # sequence), it lands here first and is copied in on the device.
            self._landing = {
                name: self._empty(dtype, count)
                for name, (dtype, count) in runtime.input_capacities.items()
                if runtime.may_pad_inner(name)
            }
        for shapes in list(runtime.buckets_in_use.values()):  # the graphs the load runs, captured now
            self._bucket(shapes)

    def _empty(self, dtype: np.dtype, count: int) -> torch.Tensor:
        return torch.empty(count, dtype=torch_dtype(dtype), device=self._runtime.device)

    @property
    def captured(self) -> list[tuple[tuple[int, ...], ...]]:
        """The buckets made so far, as padded input shapes in the model's input order."""
        return list(self._buckets)

    def prepare(self, shapes: Shapes) -> None:
        """Capture the bucket of these input shapes now, without counting it among the
        buckets in use (which contexts made later capture): for a measurement."""
        self._bucket(shapes, in_use=False)

    def _bucket(self, shapes: Shapes, in_use: bool = True) -> Bucket:
        padded = self._runtime.padded_shapes(shapes)
        key = tuple(padded.values())
        if key not in self._buckets:
            inputs = {n: self._static[n][: prod(s)].view(s) for n, s in padded.items()}
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
                with torch.cuda.graph(
                    graph, pool=self._pool, stream=self._torch_stream, capture_error_mode="thread_local"
                ):
                    outputs = runtime.forward(inputs)
            except RuntimeError as exc:
                # An op that reads a device tensor on the host (a shape computed on the
                # GPU, .item(), an output sized by the data) breaks capture: such a model
                # runs eagerly on the context's stream, slower but right.
                runtime.eager_reason = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "the model converted from '%s' cannot be captured in a CUDA graph (%s); it runs without graphs",
                    runtime.path,
                    runtime.eager_reason,
                )
                return bucket
        log.debug("context %d: captured bucket %s", self.index, shapes)
        bucket.graph, bucket.outputs = graph, outputs
        return bucket

    def _host_output(self, name: str, real: torch.Tensor) -> np.ndarray:
        """A pinned host array of `real`'s shape and type (the context's, reused)."""
        dtype, count = dtype_of(real), real.numel()
        held = self._host_outputs.get(name)
        if held is None or held.size < count:
            held = self._host_outputs[name] = cuda.pinned_allocator(dtype, count)
        return held[:count].reshape(tuple(real.shape))

    def _place(self, bucket: Bucket, name: str, parts: Sequence[Any], shape: tuple[int, ...]) -> None:
        """Queue the batch's `parts` of one input into the bucket's static input, zero-padded."""
        static = bucket.inputs[name]
        region = static[leading(shape)]
        if region.shape != static.shape:  # the padding is zeros
            (static.view(-1)[region.numel() :] if region.is_contiguous() else static).zero_()
        if is_device(parts[0]):  # already on the GPU: device copies straight into place
            offset = 0
            for part in coalesced(parts):
                rows = part.shape[0] if self._runtime.signature.batched else shape[0]
                # torch's own tensors as they are; others by the CUDA array interface, not copied
                region[offset : offset + rows].copy_(torch.as_tensor(part, device=region.device))
                offset += rows
            return
        target = region if region.is_contiguous() else self._landing[name][: prod(shape)].view(shape)
        assert self.staging is not None  # open
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
            self._inputs_placed(on_device)
            try:
                outputs = bucket.run(runtime)
            except RuntimeError as exc:
                raise _model_refused(exc, shapes) from exc
            results = {}
            for name, output in outputs.items():
                real = runtime.real_output(name, output, shapes)
                if runtime.outputs_on_device:  # the caller's own copy: the graph's buffers are the next batch's
                    results[name] = real.clone(memory_format=torch.contiguous_format)
                    continue
                real = real.contiguous()
                host = self._host_output(name, real)
                cuda.memcpy_dtoh_async(host, real.data_ptr(), host.nbytes, self._stream)
                results[name] = host
            self._queued(results, on_device)

    def close(self) -> None:
        self._runtime.make_current()
        self._drain()
        self._buckets.clear()  # the graphs, and with the last of them the private pool's hold on its memory
        self._static.clear()
        self._landing.clear()
        self._host_outputs.clear()
        self.staging = None  # pinned memory, freed with its last view
        self._close_events()
        self._runtime.spare_stream(self._stream)  # drained above
        # The caching allocator keeps what the graphs' pool and the buffers held:
        # hand it back to the driver (not during another context's capture).
        with self._runtime.capture_lock:
            torch.cuda.empty_cache()
