"""The ONNX project's node tests as a conformance corpus for trtpool's load path.

Each case (one small model per operator case, with inputs and expected
outputs) comes from the installed `onnx` package's case definitions
(`onnx.backend.test.case.node`), the source of the `model.onnx` +
`test_data_set_0/*.pb` corpus the ONNX project publishes. A case counts when
Triton has types for its tensors and ONNX Runtime itself answers it right;
trtpool then runs it the way a server does: the folder `trtpool-model` writes
(make_model_folder), a ModelInstance loaded from that folder's config as
Triton hands it over, and the batch runner, fed the inputs as Triton hands
them to the backend. Two variants: the model as exported, and with every
input and output dimension made dynamic (each axis its own symbol), as
exporters with dynamic axes write them, the test's shapes given as the
profile.
"""
from __future__ import annotations

import re
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from trtpool.engine.answer import Kept
from trtpool.model.dtypes import BFLOAT16
from trtpool.runtimes.ort_values import bind_input, read_output
from trtpool_builder.folder.load_check import as_triton_hands_it
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config

# The tolerance of the conformance goal; integers, booleans and strings compare exactly.
RTOL, ATOL = 1e-3, 1e-4
VARIANTS = ("stock", "dynamic")
# ONNX element types Triton has no data type for.
NO_TRITON_TYPE = {
    onnx.TensorProto.FLOAT8E4M3FN, onnx.TensorProto.FLOAT8E4M3FNUZ, onnx.TensorProto.FLOAT8E5M2,
    onnx.TensorProto.FLOAT8E5M2FNUZ, onnx.TensorProto.UINT4, onnx.TensorProto.INT4,
    onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128,
    *(getattr(onnx.TensorProto, name) for name in ("FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2")
      if hasattr(onnx.TensorProto, name)),
}


@dataclass(frozen=True)
class NodeCase:
    name: str
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


@dataclass(frozen=True)
class Outcome:
    right: bool
    message: str = ""


def quiet_onnxruntime() -> None:
    """ONNX Runtime's warnings (unused initializers, lenient shape merges) for 1,500 models bury the results."""
    import onnxruntime as ort

    ort.set_default_logger_severity(4)


def collect() -> list[NodeCase]:
    """Every node test case with its first data set, by name."""
    from onnx.backend.test.case.node import collect_testcases

    quiet_onnxruntime()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    collected = []
    for case in cases:
        if not case.data_sets:
            continue
        given, expected = case.data_sets[0]
        graph = case.model.graph
        weights = {init.name for init in graph.initializer}
        input_names = [v.name for v in graph.input if v.name not in weights]
        if len(given) != len(input_names) or len(expected) != len(graph.output):
            continue  # optional inputs left out by position: not a tensor-per-name case
        collected.append(NodeCase(case.name, case.model, dict(zip(input_names, map(_array, given))),
                                  dict(zip([v.name for v in graph.output], map(_array, expected)))))
    return sorted(collected, key=lambda c: c.name)


def _array(value: Any) -> Any:
    """A data set's value as numpy holds it (a TensorProto for types numpy lacks, such as
    bfloat16; a numpy scalar for rank 0); sequences and optionals stay as they are."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value) if isinstance(value, np.generic) else value


def _io(model: onnx.ModelProto) -> Iterator[onnx.ValueInfoProto]:
    weights = {init.name for init in model.graph.initializer}
    yield from (v for v in model.graph.input if v.name not in weights)
    yield from model.graph.output


def unservable(case: NodeCase) -> str | None:
    """Why Triton itself has no way to carry the case's tensors, or None."""
    for value in _io(case.model):
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            return f"'{value.name}' is a {kind.replace('_type', '')}, not a tensor"
        if value.type.tensor_type.elem_type in NO_TRITON_TYPE:
            return f"'{value.name}' has ONNX type {onnx.TensorProto.DataType.Name(value.type.tensor_type.elem_type)}"
    if any(not isinstance(a, np.ndarray) for a in (*case.inputs.values(), *case.outputs.values())):
        return "a data set holds a sequence or optional value"
    return None


# How trtpool-model refuses a value Triton has no type for (builder/trtpool_builder/graph/onnx_io.py).
REFUSAL = re.compile(r"^tensor '.+' has ONNX type .+, which (is not a tensor|has no Triton data type)")


def uncarriable(cases: list[NodeCase]) -> list[NodeCase]:
    """The cases whose graph declares a value Triton has no type for (not those where only a
    data set holds a sequence)."""
    return [case for case in cases if (why := unservable(case)) and not why.startswith("a data set")]


def refusal_mistakes(cases: list[NodeCase]) -> dict[str, str]:
    """trtpool-model must refuse each of `cases` (uncarriable) naming the tensor and its type:
    the cases where it did something else, and what it did."""
    from trtpool.errors import ConfigError

    mistakes = {}
    with tempfile.TemporaryDirectory(prefix="trtpool-refusals-") as workdir:
        for case in cases:
            model_file = Path(workdir) / f"{case.name}.onnx"
            onnx.save_model(case.model, str(model_file))
            try:
                make_model_folder(Path(workdir) / "repo", case.name, model_file, log=lambda _: None)
                mistakes[case.name] = "accepted"
            except ConfigError as exc:
                if not REFUSAL.match(str(exc)):
                    mistakes[case.name] = f"refused otherwise: {str(exc)[:400]}"
            except Exception as exc:  # noqa: BLE001 - a traceback is the mistake being measured
                mistakes[case.name] = f"{type(exc).__name__}: {str(exc)[:400]}"
    return mistakes


def _as_numpy(value: Any) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else np.asarray(value)


def mismatch(expected: dict[str, np.ndarray], got: dict[str, Any]) -> str | None:
    """The first output that differs beyond the tolerance, described; None when all agree."""
    if set(got) != set(expected):
        return f"outputs {sorted(got)} given, expected {sorted(expected)}"
    for name, want in expected.items():
        have = _as_numpy(got[name])
        if have.shape != want.shape:
            return f"output '{name}': shape {list(have.shape)}, expected {list(want.shape)}"
        if want.dtype == object or have.dtype == object:
            if [_text(x) for x in have.ravel()] != [_text(x) for x in want.ravel()]:
                return f"output '{name}': strings differ"
            continue
        if have.dtype != want.dtype:
            return f"output '{name}': dtype {have.dtype}, expected {want.dtype}"
        if want.dtype.kind in "biu":
            if not np.array_equal(have, want):
                return f"output '{name}': values differ"
        elif not np.allclose(have.astype(np.float64), want.astype(np.float64), rtol=RTOL, atol=ATOL,
                             equal_nan=True):
            return f"output '{name}': values differ beyond rtol {RTOL}, atol {ATOL}"
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def onnxruntime_outcome(case: NodeCase) -> Outcome:
    """Whether ONNX Runtime itself answers the case right (the corpus keeps those)."""
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        got = dict(zip(names, _run_bfloat16(session, case.inputs) if _has_bfloat16(case)
                       else session.run(names, case.inputs)))
    except Exception as exc:  # noqa: BLE001 - any failure of ONNX Runtime excludes the case
        return Outcome(False, f"ONNX Runtime: {type(exc).__name__}: {str(exc)[:300]}")
    why = mismatch(case.outputs, got)
    return Outcome(why is None, why or "")


def _has_bfloat16(case: NodeCase) -> bool:
    return any(a.dtype == BFLOAT16 for a in (*case.inputs.values(), *case.outputs.values()))


def _run_bfloat16(session, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """session.run takes and gives no bfloat16 arrays: an IOBinding does, through OrtValues."""
    binding = session.io_binding()
    for name, array in inputs.items():
        bind_input(binding, name, np.ascontiguousarray(array))
    for output in session.get_outputs():
        binding.bind_output(output.name, "cpu")
    session.run_with_iobinding(binding)
    types = {o.name: o.type for o in session.get_outputs()}
    return [read_output(value, BFLOAT16 if types[o.name] == "tensor(bfloat16)" else None)
            for o, value in zip(session.get_outputs(), binding.get_outputs())]


def dynamic_variant(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every input and output dimension dynamic, each axis its own symbol."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in _io(copy):
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            dim.Clear()
            dim.dim_param = f"{value.name}_dim{axis}"
    return copy


def profile_text(inputs: dict[str, np.ndarray]) -> str:
    """The test's own shapes as one fixed profile (trtpool.model.shapes text)."""
    return ",".join(f"{name}={'x'.join(map(str, array.shape))}" for name, array in inputs.items())


def _declared_dims(value: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim]


def needs_shapes(model: onnx.ModelProto) -> bool:
    weights = {init.name for init in model.graph.initializer}
    return any(-1 in _declared_dims(v) or not v.type.tensor_type.HasField("shape")
               for v in model.graph.input if v.name not in weights)


def as_triton_hands_it_over(config: dict[str, Any], inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """The request's tensors as the Python backend gives them to the model: strings as
    bytes objects, and each input in the shape the config lets a client send (a scalar
    as [1], which Triton hands over as sent)."""
    handed = {}
    for entry in config.get("input", []):
        array = inputs[entry["name"]]
        if array.dtype == object or array.dtype.kind in "US":
            array = np.array([_text(x).encode() for x in array.ravel()], dtype=object).reshape(array.shape)
        if array.ndim == 0 and "reshape" not in entry:
            array = array.reshape(1)
        handed[entry["name"]] = array
    return handed


def run_in_trtpool(case: NodeCase, model: onnx.ModelProto, workdir: Path) -> Outcome:
    """Write the folder with trtpool-model's code, load it as the server does, run the request."""
    from trtpool.instance import ModelInstance

    model_file = workdir / f"{case.name}.onnx"
    onnx.save_model(model, str(model_file))
    shapes = [profile_text(case.inputs)] if needs_shapes(model) and case.inputs else []
    try:
        folder = make_model_folder(workdir / "repo", case.name, model_file, shapes,
                                   ServingOptions(contexts="1", instance_kind="cpu"), log=lambda _: None)
        config = as_triton_hands_it(read_config(folder))
        instance = ModelInstance(config, folder / "1", "cpu")
    except Exception as exc:  # noqa: BLE001 - a refusal is the outcome being measured
        return Outcome(False, f"load: {type(exc).__name__}: {str(exc)[:400]}")
    kept = Kept()
    try:
        instance.runner.run([as_triton_hands_it_over(config, case.inputs)], [kept], detach=True)
    finally:
        instance.close()
    if kept.error is not None:
        error = kept.error
        return Outcome(False, f"request: {type(error).__name__}: {str(error)[:400]}")
    why = mismatch(case.outputs, kept.outputs)
    return Outcome(why is None, why or "")


def variant_model(case: NodeCase, variant: str) -> onnx.ModelProto:
    return case.model if variant == "stock" else dynamic_variant(case.model)


@dataclass
class VariantResult:
    """One variant's run over the corpus."""

    variant: str
    valid: int = 0
    right: int = 0
    failures: dict[str, str] = field(default_factory=dict)      # valid cases trtpool answered wrong
    excluded: dict[str, str] = field(default_factory=dict)      # cases left out, and why

    def record(self) -> dict[str, Any]:
        return {f"{self.variant}_right": self.right, f"{self.variant}_valid": self.valid}


def run_corpus(cases: list[NodeCase], variant: str) -> VariantResult:
    """Every case Triton can carry and ONNX Runtime answers right (as this variant), through trtpool."""
    result = VariantResult(variant)
    with tempfile.TemporaryDirectory(prefix="trtpool-conformance-") as workdir, \
            warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for case in cases:
            why = unservable(case)
            model = variant_model(case, variant)
            reference = None if why else onnxruntime_outcome(replace(case, model=model))
            if why or not reference.right:
                result.excluded[case.name] = why or f"not ONNX-Runtime-valid: {reference.message}"
                continue
            result.valid += 1
            outcome = run_in_trtpool(case, model, Path(workdir))
            if outcome.right:
                result.right += 1
            else:
                result.failures[case.name] = outcome.message
    return result
