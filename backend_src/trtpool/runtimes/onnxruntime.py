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

import logging
import os
from math import prod
from pathlib import Path

import numpy as np

from trtpool.errors import ConfigError, EngineError, InvalidInput
from trtpool.gpu.buffers import HostBuffers, gather
from trtpool.gpu.device_tensors import to_host
from trtpool.model.dtypes import BFLOAT16, STRING, ort_dtype
from trtpool.model.onnx import DeclaredTensor, is_static, read_signature
from trtpool.model.zipmap import drop_zipmaps
from trtpool.parameters import PoolConfig
from trtpool.runtimes.base import ExecutionContext, Parts, Runtime, batch_shapes
from trtpool.runtimes.ort_values import bind_input, decoded_strings, read_output

log = logging.getLogger("trtpool")
# ONNX Runtime's messages for failures of the machine, not of the request.
RESOURCE_FAILURES = ("bad_alloc", "Failed to allocate memory", "out of memory")


def _session(ort, path: Path, options):
    """The session for `path`; a ZipMap output (which Triton cannot carry) is repaired in memory
    as trtpool-model repairs it in the copy it serves (trtpool.model.zipmap)."""
    providers = ["CPUExecutionProvider"]
    session = ort.InferenceSession(str(path), options, providers=providers)
    if not any(arg.type.startswith("seq(map(") for arg in session.get_outputs()):
        return session
    import onnx

    model = onnx.load(str(path))
    notes = drop_zipmaps(model)
    if not notes:
        return session
    for note in notes:
        log.info("'%s': %s", path, note)
    return ort.InferenceSession(model.SerializeToString(), options, providers=providers)


class OnnxRuntime(Runtime):
    name = "onnxruntime"

    def __init__(self, cfg: PoolConfig, path: Path) -> None:
        import onnxruntime as ort

        cores = os.cpu_count() or 1
        # Batches in flight at once: one in sync mode (Triton runs one execute
        # per instance), one per context in the other modes (an elastic pool's
        # most). Concurrent runs share the session's intra-op pool, so each gets
        # its share of cores.
        in_flight = 1 if cfg.mode == "sync" else (cfg.most_contexts or cores)
        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, cores // in_flight)
        options.inter_op_num_threads = 1
        # Idle pool threads sleep instead of spinning: a server shares its cores with
        # Triton's threads, other instances and the stub; spinning threads took them
        # (measured beside bench/results/cpu_vs_naive.json: BENCHMARKS.md, the CPU serving record).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = _session(ort, path, options)
        except Exception as exc:  # ORT raises its own Fail/InvalidProtobuf types
            raise EngineError(f"ONNX file '{path}' cannot be loaded by ONNX Runtime: {exc}") from exc
        self.signature = read_signature(
            [self._declared(arg) for arg in self.session.get_inputs()],
            [self._declared(arg) for arg in self.session.get_outputs()],
            cfg.profiles,
            cfg.max_batch_size,
        )
        tensors = (*self.signature.inputs, *self.signature.outputs)
        # IOBinding takes no string tensors: a model with any runs through session.run.
        self.binds = not any(spec.dtype == STRING for spec in tensors)
        # Outputs ONNX Runtime allocates per batch: those whose size the declared shape does
        # not fix, bfloat16 ones (numpy cannot receive them), declared scalars (exporters that
        # trace on one row declare a per-row output so: a [] buffer took the [1] of one row and
        # answered [], where ONNX Runtime answers [1]), and any whose declared shape a run has
        # contradicted (a size computed from the data, declared as one example's).
        self.runtime_allocated = frozenset(
            spec.name
            for spec in self.signature.outputs
            if not is_static(spec, self.signature.batched) or spec.dtype == BFLOAT16 or not spec.shape
        )

    @staticmethod
    def _declared(arg) -> DeclaredTensor:
        dtype = ort_dtype(arg.type)
        if dtype is None:
            raise ConfigError(f"tensor '{arg.name}' has type {arg.type}, which trtpool does not serve")
        return arg.name, dtype, arg.shape

    def buffer_capacities(self) -> tuple[dict, dict]:
        """Elements per preallocated input, and per output whose shape is known before a run."""
        signature = self.signature
        inputs = {s.name: (s.dtype, prod(signature.max_shape(s.name))) for s in signature.inputs}
        largest_batch = max(signature.max_batch_size, 1)
        outputs = {
            s.name: (s.dtype, prod(s.shape[1:]) * largest_batch if signature.batched else prod(s.shape))
            for s in signature.outputs
            if s.name not in self.runtime_allocated
        }
        return inputs, outputs

    def learn_runtime_allocated(self, names: set[str]) -> None:
        """Stop preallocating these outputs: a run computed another shape than their declared one."""
        log.warning(
            "model outputs %s came out in another shape than the model file declares (a size "
            "computed from the data); ONNX Runtime allocates them per batch from now on",
            sorted(names),
        )
        self.runtime_allocated = self.runtime_allocated | names

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
        self.inputs: HostBuffers | None = HostBuffers(inputs)  # None once closed
        self.outputs: HostBuffers | None = HostBuffers(outputs)
        self._binding = runtime.session.io_binding()
        self._batch: int | None = None  # the staged batch's size, until complete()
        self._staged: dict[str, np.ndarray] = {}  # its inputs, views of the context's buffers

    def close(self) -> None:
        """Drop the binding and the buffers (an elastic pool closes idle contexts)."""
        self._binding = self.inputs = self.outputs = None

    def submit(self, parts: Parts) -> None:
        signature = self._runtime.signature
        shapes = batch_shapes(parts, signature.batched)
        signature.choose_profile(shapes)  # refuses shapes outside every profile
        inputs = self.inputs
        assert inputs is not None  # open
        self._staged = {
            spec.name: gather([to_host(t) for t in parts[spec.name]], inputs.view(spec.name, shapes[spec.name]))
            for spec in signature.inputs
        }
        self._batch = shapes[signature.inputs[0].name][0] if signature.batched else 1

    def complete(self) -> dict[str, np.ndarray]:
        batch, staged = self._batch, self._staged
        assert batch is not None  # submit() staged a batch
        self._batch, self._staged = None, {}
        try:
            results = self._run_bound(staged, batch) if self._runtime.binds else self._run_plain(staged)
        except Exception as exc:  # ORT's own Fail/InvalidArgument/RuntimeException types
            if any(text in str(exc) for text in RESOURCE_FAILURES):
                raise
            # A session run keeps no state: the model refused this input (a shape it
            # cannot compute with), and the context stays usable.
            raise InvalidInput(f"the model rejected the input: {exc}") from exc
        return results

    def _run_plain(self, staged: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """session.run: for models with string tensors (ONNX Runtime takes str, Triton hands bytes)."""
        feed = {
            name: decoded_strings(name, array) if array.dtype == STRING else array for name, array in staged.items()
        }
        names = [spec.name for spec in self._runtime.signature.outputs]
        return dict(zip(names, self._runtime.session.run(names, feed), strict=True))

    def _run_bound(self, staged: dict[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
        """run_with_iobinding into the context's preallocated outputs where their shape is known.

        A declared output shape is only a guess for sizes computed from the data (NonZero,
        NMS, Unique ... as exported with one example's sizes): when a run with preallocated
        outputs fails, it is run again with ONNX Runtime allocating every output; if that
        succeeds, the outputs whose shape differed are allocated per batch from then on."""
        runtime, binding = self._runtime, self._binding
        binding.clear_binding_inputs()
        for name, array in staged.items():
            bind_input(binding, name, array)
        preallocated = self._bind_outputs(batch, runtime.runtime_allocated)
        try:
            runtime.session.run_with_iobinding(binding)
        except Exception:
            if not preallocated:
                raise
            self._bind_outputs(batch, frozenset(spec.name for spec in runtime.signature.outputs))
            runtime.session.run_with_iobinding(binding)
            results = self._read_outputs({})
            contradicted = {name for name, view in preallocated.items() if results[name].shape != view.shape}
            if contradicted:
                runtime.learn_runtime_allocated(contradicted)
            return results
        return self._read_outputs(preallocated)

    def _bind_outputs(self, batch: int, allocated_by_runtime: frozenset[str]) -> dict[str, np.ndarray]:
        """Bind every output; the views of those bound to the context's buffers."""
        signature, binding, outputs = self._runtime.signature, self._binding, self.outputs
        assert outputs is not None  # open
        binding.clear_binding_outputs()
        preallocated = {}
        for spec in signature.outputs:
            if spec.name in outputs and spec.name not in allocated_by_runtime:
                shape = (batch, *spec.shape[1:]) if signature.batched else spec.shape
                view = outputs.view(spec.name, shape)
                binding.bind_output(spec.name, "cpu", 0, spec.dtype, view.shape, view.ctypes.data)
                preallocated[spec.name] = view
            else:
                binding.bind_output(spec.name, "cpu")  # ONNX Runtime allocates it for this batch
        return preallocated

    def _read_outputs(self, preallocated: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self._runtime.signature.outputs
        return {
            spec.name: preallocated[spec.name] if spec.name in preallocated else read_output(value, spec.dtype)
            for spec, value in zip(outputs, self._binding.get_outputs(), strict=True)
        }
