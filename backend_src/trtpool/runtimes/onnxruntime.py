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
from trtpool.runtimes.base import ExecutionContext, Runtime
from trtpool.signature import Profile, ShapeRange, Signature, TensorSpec

ORT_DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
}

# An output dimension is either fixed or copied from an input's dimension.
DimSource = int | tuple[str, int]


def _dims(shape: list) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else -1 for d in shape)


def _default_profile(inputs: tuple[TensorSpec, ...], max_batch: int) -> dict[str, ShapeRange]:
    """Batch 1..max_batch_size; every other dimension must then be fixed."""
    ranges = {}
    for spec in inputs:
        rest = spec.shape[1:] if max_batch else spec.shape
        if -1 in rest:
            axis = rest.index(-1) + (1 if max_batch else 0)
            raise ConfigError(
                f"input '{spec.name}' has a dynamic dimension {axis}; set parameter 'profile' "
                f"(e.g. {spec.name}=1x1:8x128:32x512) so that buffers can be sized"
            )
        low = ((1,) if max_batch else ()) + rest
        high = ((max_batch,) if max_batch else ()) + rest
        ranges[spec.name] = ShapeRange(low, high, high)
    return ranges


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

        inputs = tuple(self._spec(i) for i in self.session.get_inputs())
        outputs = tuple(self._spec(o) for o in self.session.get_outputs())
        batched = cfg.max_batch_size > 0
        profiles = cfg.profiles or (_default_profile(inputs, cfg.max_batch_size),)
        names = {s.name for s in inputs}
        for ranges in profiles:
            if set(ranges) != names:
                raise ConfigError(
                    f"parameter 'profile' names inputs {sorted(ranges)}; the model's inputs are {sorted(names)}"
                )
        self.signature = Signature(
            inputs=inputs,
            outputs=outputs,
            profiles=tuple(Profile(i, r) for i, r in enumerate(profiles)),
            batched=batched,
        )
        self._output_dims = self._resolve_output_dims()

    @staticmethod
    def _spec(arg) -> TensorSpec:
        if arg.type not in ORT_DTYPES:
            raise ConfigError(f"tensor '{arg.name}' has type {arg.type}, which trtpool does not serve")
        return TensorSpec(arg.name, np.dtype(ORT_DTYPES[arg.type]), _dims(arg.shape))

    def _resolve_output_dims(self) -> dict[str, tuple[DimSource, ...]]:
        """Each output dimension as a constant or as an input's symbolic dimension."""
        symbols: dict[str, tuple[str, int]] = {}
        for arg in self.session.get_inputs():
            for axis, dim in enumerate(arg.shape):
                if isinstance(dim, str):
                    symbols.setdefault(dim, (arg.name, axis))
        resolved = {}
        for arg in self.session.get_outputs():
            dims: list[DimSource] = []
            for axis, dim in enumerate(arg.shape):
                if isinstance(dim, int):
                    dims.append(dim)
                elif isinstance(dim, str) and dim in symbols:
                    dims.append(symbols[dim])
                else:
                    raise ConfigError(
                        f"output '{arg.name}' dimension {axis} ('{dim}') is not fixed and matches no "
                        "input dimension, so its buffer cannot be preallocated; export the model with "
                        "named dynamic axes shared between inputs and outputs"
                    )
            resolved[arg.name] = tuple(dims)
        return resolved

    def output_shape(self, name: str, input_shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
        return tuple(
            d if isinstance(d, int) else input_shapes[d[0]][d[1]] for d in self._output_dims[name]
        )

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
