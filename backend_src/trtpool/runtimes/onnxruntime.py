"""The embedded default runtime for machines without a GPU or TensorRT.

One InferenceSession is shared by every context (ONNX Runtime's Run is
thread-safe); each context binds its own preallocated input arrays and, for
outputs whose shape is known before the run (fixed but for the batch size),
its own preallocated output arrays through an IOBinding. Any other output
(a size computed from the input's, or from the data) is allocated by ONNX
Runtime for the batch, from its CPU arena, and its shape is read after the run.

``submit`` stages the batch; ``complete`` runs it, on the caller's thread:
a pipelined caller completes on a thread of its own, so ONNX Runtime (which
releases the GIL) overlaps the next execute().
"""
from __future__ import annotations

import os
from math import prod
from pathlib import Path

import numpy as np

from trtpool.buffers import HostBuffers, gather
from trtpool.config import PoolConfig
from trtpool.device_tensors import to_host
from trtpool.errors import ConfigError, EngineError, InvalidInput
from trtpool.onnx_signature import DeclaredTensor, is_static, read_signature
from trtpool.runtimes.base import ExecutionContext, Parts, Runtime, batch_shapes

ORT_DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
}
# ONNX Runtime's messages for failures of the machine, not of the request.
RESOURCE_FAILURES = ("bad_alloc", "Failed to allocate memory", "out of memory")


class OnnxRuntime(Runtime):
    name = "onnxruntime"

    def __init__(self, cfg: PoolConfig, path: Path) -> None:
        import onnxruntime as ort

        cores = os.cpu_count() or 1
        # Batches in flight at once: one in sync mode (Triton runs one execute
        # per instance), one per context in the other modes. Concurrent runs
        # share the session's intra-op pool, so each gets its share of cores.
        in_flight = 1 if cfg.mode == "sync" else (cfg.contexts or cores)
        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, cores // in_flight)
        options.inter_op_num_threads = 1
        # Idle pool threads sleep instead of spinning: a server shares its cores with
        # Triton's threads, other instances and the stub; spinning threads took them
        # (2 threads, ResNet-50-shaped at 64x64, 2-core VM under load: 13-24 items/s
        # spinning against 36-38 sleeping at batch 1, 15-29 against 59-62 at batch 16).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own Fail/InvalidProtobuf types
            raise EngineError(f"ONNX file '{path}' cannot be loaded by ONNX Runtime: {exc}") from exc
        self.signature = read_signature([self._declared(arg) for arg in self.session.get_inputs()],
                                        [self._declared(arg) for arg in self.session.get_outputs()], cfg)

    @staticmethod
    def _declared(arg) -> DeclaredTensor:
        if arg.type not in ORT_DTYPES:
            raise ConfigError(f"tensor '{arg.name}' has type {arg.type}, which trtpool does not serve")
        return arg.name, np.dtype(ORT_DTYPES[arg.type]), arg.shape

    def buffer_capacities(self) -> tuple[dict, dict]:
        """Elements per preallocated input, and per output whose shape is known before a run."""
        signature = self.signature
        inputs = {s.name: (s.dtype, prod(signature.max_shape(s.name))) for s in signature.inputs}
        largest_batch = max(signature.max_batch_size, 1)
        outputs = {s.name: (s.dtype, prod(s.shape[1:]) * largest_batch if signature.batched else prod(s.shape))
                   for s in signature.outputs if is_static(s, signature.batched)}
        return inputs, outputs

    def create_context(self, index: int) -> ExecutionContext:
        return OnnxContext(self, index)

    def context_memory_bytes(self) -> int:
        inputs, outputs = self.buffer_capacities()
        return sum(np.dtype(d).itemsize * n for d, n in (*inputs.values(), *outputs.values()))

    def free_memory_bytes(self) -> int:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class OnnxContext(ExecutionContext):
    def __init__(self, runtime: OnnxRuntime, index: int) -> None:
        self.index = index
        self._runtime = runtime
        inputs, outputs = runtime.buffer_capacities()
        self.inputs = HostBuffers(inputs)
        self.outputs = HostBuffers(outputs)
        self._binding = runtime.session.io_binding()
        self._batch: int | None = None  # the staged batch's size, until complete()

    def submit(self, parts: Parts) -> None:
        signature = self._runtime.signature
        shapes = batch_shapes(parts, signature.batched)
        signature.choose_profile(shapes)  # refuses shapes outside every profile
        binding = self._binding
        binding.clear_binding_inputs()
        for spec in signature.inputs:
            view = gather([to_host(t) for t in parts[spec.name]], self.inputs.view(spec.name, shapes[spec.name]))
            binding.bind_input(spec.name, "cpu", 0, spec.dtype, view.shape, view.ctypes.data)
        self._batch = shapes[signature.inputs[0].name][0] if signature.batched else 1

    def complete(self) -> dict[str, np.ndarray]:
        signature, binding, batch = self._runtime.signature, self._binding, self._batch
        self._batch = None
        binding.clear_binding_outputs()
        preallocated = {}
        for spec in signature.outputs:
            if spec.name in self.outputs:
                shape = (batch, *spec.shape[1:]) if signature.batched else spec.shape
                view = self.outputs.view(spec.name, shape)
                binding.bind_output(spec.name, "cpu", 0, spec.dtype, view.shape, view.ctypes.data)
                preallocated[spec.name] = view
            else:
                binding.bind_output(spec.name, "cpu")  # ONNX Runtime allocates it for this batch
        try:
            self._runtime.session.run_with_iobinding(binding)
        except Exception as exc:  # ORT's own Fail/InvalidArgument/RuntimeException types
            if any(text in str(exc) for text in RESOURCE_FAILURES):
                raise
            # A session run keeps no state: the model refused this input (a shape it
            # cannot compute with), and the context stays usable.
            raise InvalidInput(f"the model rejected the input: {exc}") from exc
        results = {}
        for spec, value in zip(signature.outputs, binding.get_outputs()):
            results[spec.name] = preallocated.get(spec.name)
            if results[spec.name] is None:
                results[spec.name] = value.numpy()
            if signature.batched and results[spec.name].shape[:1] != (batch,):
                raise EngineError(f"output '{spec.name}' came out with shape {list(results[spec.name].shape)} "
                                  f"for a batch of {batch}: its first dimension does not follow the batch, so "
                                  "the model cannot be served batched; set max_batch_size: 0")
        return results
