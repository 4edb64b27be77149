"""Whether an ONNX model is served with a batch axis (max_batch_size > 0): decided once, here,
where its folder is written; every other module reads the config's max_batch_size.

Declared shapes alone cannot tell: exporters with dynamic axes make every first
dimension dynamic, including those of tensors that have no batch axis (a state,
a list of axes, NonZero's count). A first axis is a batch axis when Triton's
dynamic batcher may stack requests along it and cut the outputs back, so the
model is served batched only when

- every input and output has a dynamic first dimension,
- every profile gives all inputs the same first dimension (one batch size), and
- ONNX Runtime, run on two different requests alone and on both stacked, gives
  every output a first dimension equal to the rows it was given, and the stacked
  outputs the same values as the two alone, side by side (within float tolerance).

Otherwise it is served as ONNX Runtime runs it, one request at a time. The user
can decide instead (`--max-batch-size`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtpool.errors import ConfigError
from trtpool.model.signature import Profile, TensorSpec, is_batched

# Stacked outputs must match the requests run alone within this (float) tolerance.
RTOL, ATOL = 1e-3, 1e-5


@dataclass(frozen=True)
class BatchDecision:
    batched: bool
    why: str  # the reason, for a note when a model that looks batched is not


def _agree_on_batch(profile: Profile) -> bool:
    """All inputs take the same batch sizes, and a batch has at least one row."""
    firsts = {(r.min[0], r.opt[0], r.max[0]) for r in profile.ranges.values()}
    return len(firsts) == 1 and min(firsts)[0] >= 1


def _sample(spec: TensorSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Request data that keeps indices in range (integers 0) and makes rows differ (floats)."""
    if spec.dtype.kind == "f":
        return rng.uniform(0.5, 1.5, shape).astype(spec.dtype)
    if spec.dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if spec.dtype == np.dtype(object):
        return np.full(shape, "a", dtype=object)
    return np.zeros(shape, spec.dtype)


def _stacking_changes_answers(model_file: Path, inputs: Sequence[TensorSpec], profile: Profile) -> str | None:
    """Why stacking two requests along axis 0 does not give their answers side by side, or None."""
    import onnxruntime as ort

    rows = max(1, profile.ranges[inputs[0].name].opt[0])
    rng = np.random.default_rng(0)
    requests = [{s.name: _sample(s, (rows, *profile.ranges[s.name].opt[1:]), rng) for s in inputs} for _ in range(2)]
    stacked = {s.name: np.concatenate([r[s.name] for r in requests]) for s in inputs}
    try:
        session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
        alone = [session.run(None, r) for r in requests]
        together = session.run(None, stacked)
    except Exception as exc:  # noqa: BLE001 - any refusal means the axis cannot be used to stack
        return f"ONNX Runtime refused {2 * rows} stacked rows ({type(exc).__name__}: {str(exc)[:200]})"
    names = [o.name for o in session.get_outputs()]
    for name, first, second, both in zip(names, *alone, together, strict=True):
        if first.shape[:1] != (rows,) or second.shape[:1] != (rows,) or both.shape[:1] != (2 * rows,):
            return (
                f"output '{name}' has shape {list(both.shape)} for {2 * rows} stacked rows and "
                f"{list(first.shape)} for {rows}: its first dimension is not the batch"
            )
        expected = np.concatenate([first, second])
        same = (
            np.array_equal(both, expected)
            if both.dtype.kind not in "fc"
            else np.allclose(both, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
        )
        if not same:
            return f"output '{name}' of stacked rows differs from the rows run alone (rows are not independent)"
    return None


def row_output_shapes(
    model_file: Path, inputs: Sequence[TensorSpec], profile: Profile, names: Sequence[str]
) -> dict[str, tuple[int, ...]]:
    """The shapes (-1 for the rows) of the outputs `names` that ONNX Runtime computes with one
    entry per row on axis 0, found by running `model_file` at 2 and 3 rows (the fewest that
    tell rows from a scalar and from a fixed size); the others are left out.

    For outputs shape inference cannot follow (a Squeeze without axes makes [N, 1] into [N],
    or into a scalar for one row), so that the declaration follows what the graph computes."""
    import onnxruntime as ort

    if (
        not inputs
        or any(s.shape[:1] != (-1,) for s in inputs)
        or not _agree_on_batch(profile)
        or profile.max_batch() < 2
    ):
        return {}
    options = ort.SessionOptions()
    options.log_severity_level = 3  # the shape it computes differs from the declared [] by design
    rng = np.random.default_rng(0)
    try:
        session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        outputs = [
            dict(
                zip(
                    [o.name for o in session.get_outputs()],
                    session.run(
                        None, {s.name: _sample(s, (rows, *profile.ranges[s.name].opt[1:]), rng) for s in inputs}
                    ),
                    strict=True,
                )
            )
            for rows in (2, 3)
        ]
    except Exception:  # noqa: BLE001 - a graph ONNX Runtime cannot run at 2 and 3 rows has no row axis to find
        return {}
    found = {}
    for name in names:
        two, three = (np.shape(o[name]) if name in o else () for o in outputs)
        if two[:1] == (2,) and three[:1] == (3,) and two[1:] == three[1:]:
            found[name] = (-1, *two[1:])
    return found


def _without_batch_axis(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> str:
    """The tensors whose first dimension is not dynamic, named with their shapes."""
    return ", ".join(f"'{s.name}' {list(s.shape)}" for s in (*inputs, *outputs) if s.shape[:1] != (-1,))


def decide_batched(
    model_file: Path,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    profiles: Sequence[Profile],
    requested: int | None,
) -> BatchDecision:
    """Whether to serve the model batched; `requested` is the user's max_batch_size (None: decide)."""
    if requested is not None and requested < 0:
        raise ConfigError(f"--max-batch-size {requested}: expected 0 (no batch axis) or a largest batch >= 1")
    shaped = is_batched(inputs, outputs)
    if requested == 0:
        return BatchDecision(False, "--max-batch-size 0")
    if not shaped:
        if requested:
            raise ConfigError(
                f"--max-batch-size {requested}: the model has no batch axis: every input and output "
                f"needs a dynamic first dimension (the batch), which {_without_batch_axis(inputs, outputs)} "
                "do not have"
            )
        return BatchDecision(
            False,
            "every input and output needs a dynamic first dimension (the batch), which "
            f"{_without_batch_axis(inputs, outputs)} do not have",
        )
    disagree = [p.index for p in profiles if not _agree_on_batch(p)]
    if disagree:
        if requested:
            raise ConfigError(
                f"--max-batch-size {requested}: profile {disagree[0]} gives the inputs different (or "
                "empty) first dimensions, so they have no common batch size"
            )
        return BatchDecision(False, f"profile {disagree[0]} gives the inputs different (or empty) first dimensions")
    if requested:
        return BatchDecision(True, "")
    why = _stacking_changes_answers(model_file, inputs, profiles[0])
    return BatchDecision(why is None, why or "")
