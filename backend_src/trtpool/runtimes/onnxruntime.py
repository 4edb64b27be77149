"""The embedded default runtime for machines without a GPU or TensorRT.

One InferenceSession is shared by every context (ONNX Runtime's Run is
thread-safe); each context binds its own preallocated input and output
arrays through an IOBinding, so a batch runs without allocations.
"""
from __future__ import annotations

import os
from math import prod
from pathlib import Path

import numpy as np

from trtpool.buffers import HostBuffers
from trtpool.config import PoolConfig
from trtpool.errors import ConfigError, EngineError
from trtpool.onnx_signature import DeclaredTensor, output_shape, read_signature
from trtpool.runtimes.base import ExecutionContext, Runtime

ORT_DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
}


class OnnxRuntime(Runtime):
    name = "onnxruntime"

    def __init__(self, cfg: PoolConfig, path: Path) -> None:
        import onnxruntime as ort

        cores = os.cpu_count() or 1
        # Batches in flight at once: one in sync mode (Triton runs one execute
        # per instance), one per context in decoupled mode. Concurrent runs
        # share the session's intra-op pool, so each gets its share of cores.
        in_flight = (cfg.contexts or cores) if cfg.mode == "decoupled" else 1
        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, cores // in_flight)
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own Fail/InvalidProtobuf types
            raise EngineError(f"ONNX file '{path}' cannot be loaded by ONNX Runtime: {exc}") from exc

        self.signature, self._output_dims = read_signature(
            [self._declared(arg) for arg in self.session.get_inputs()],
            [self._declared(arg) for arg in self.session.get_outputs()], cfg)

    @staticmethod
    def _declared(arg) -> DeclaredTensor:
        if arg.type not in ORT_DTYPES:
            raise ConfigError(f"tensor '{arg.name}' has type {arg.type}, which trtpool does not serve")
        return arg.name, np.dtype(ORT_DTYPES[arg.type]), arg.shape

    def output_shape(self, name: str, input_shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
        return output_shape(self._output_dims[name], input_shapes)

    def _max_input_shapes(self) -> dict[str, tuple[int, ...]]:
        return {s.name: self.signature.max_shape(s.name) for s in self.signature.inputs}

    def buffer_capacities(self) -> tuple[dict, dict]:
        largest = self._max_input_shapes()
        inputs = {s.name: (s.dtype, prod(largest[s.name])) for s in self.signature.inputs}
        outputs = {s.name: (s.dtype, prod(self.output_shape(s.name, largest))) for s in self.signature.outputs}
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

    def run(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
        signature = self._runtime.signature
        signature.choose_profile(shapes)  # refuses shapes outside every profile
        binding = self._binding
        for spec in signature.inputs:
            view = self.inputs.view(spec.name, shapes[spec.name])
            binding.bind_input(spec.name, "cpu", 0, spec.dtype, view.shape, view.ctypes.data)
        results = {}
        for spec in signature.outputs:
            view = self.outputs.view(spec.name, self._runtime.output_shape(spec.name, shapes))
            binding.bind_output(spec.name, "cpu", 0, spec.dtype, view.shape, view.ctypes.data)
            results[spec.name] = view
        self._runtime.session.run_with_iobinding(binding)
        return results
