"""Input dimension names that TensorRT can use, set in the copy of a model that is built.

TensorRT's ONNX parser takes an input's dimension name (dim_param) as a
promise: axes that share a name are equal, and a profile in which they differ
is refused ("Dimensions with name ? must be equal"), at build or at run time.
Exporters do not keep that promise: paddle2onnx names both spatial axes of an
image '?', tf2onnx writes 'unk__12', others leave an axis unnamed or write -1.
So an axis whose name the profiles contradict, and a dynamic axis with no
name, get a name of their own. Names the profiles agree with are kept (BERT's
'sequence' on input_ids and attention_mask stays shared). Output names are
left alone: the parser does not read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import onnx

from trtpool.model.signature import Profile


@dataclass(frozen=True)
class Renamed:
    """One input axis given a name of its own, and why."""

    tensor: str
    axis: int
    old: str | None  # None: the axis had no name
    new: str
    why: str

    def describe(self) -> str:
        was = f"named '{self.old}'" if self.old else "unnamed"
        return f"input '{self.tensor}' axis {self.axis} ({was}) renamed '{self.new}': {self.why}"


Axis = tuple[str, int]


def _sizes(profiles: Sequence[Profile], axis: Axis) -> tuple[tuple[int, int, int], ...]:
    tensor, index = axis
    return tuple(
        (p.ranges[tensor].min[index], p.ranges[tensor].opt[index], p.ranges[tensor].max[index]) for p in profiles
    )


def _describe_sizes(profiles: Sequence[Profile], axes: Sequence[Axis]) -> str:
    parts = []
    for axis in axes:
        ranges = ", ".join(f"{lo}..{hi}" for lo, _, hi in _sizes(profiles, axis))
        parts.append(f"'{axis[0]}' axis {axis[1]} {ranges}")
    return "the profiles give " + "; ".join(parts)


def rename_dims(model: onnx.ModelProto, profiles: Sequence[Profile]) -> list[Renamed]:
    """Rename, in `model`, the input axes TensorRT cannot take as named; return what changed.

    `profiles` cover every input (builder.profiles.resolve_profiles)."""
    weights = {init.name for init in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in weights]
    dims = {(v.name, axis): dim for v in inputs for axis, dim in enumerate(v.type.tensor_type.shape.dim)}
    by_name = axes_named(model)
    taken = set(by_name)

    def fresh(axis: Axis) -> str:
        base = name = f"{axis[0]}_dim{axis[1]}"
        suffix = 1
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(name)
        return name

    wanted: list[tuple[Axis, str | None, str]] = []
    for name, axes in by_name.items():
        if len({_sizes(profiles, axis) for axis in axes}) > 1:
            why = f"one name on axes of different sizes ({_describe_sizes(profiles, axes)})"
            wanted.extend((axis, name, why) for axis in axes)
    for axis, dim in dims.items():
        if not dim.dim_param and not (dim.HasField("dim_value") and dim.dim_value > 0):
            wanted.append((axis, None, "a dynamic axis with no name"))

    renamed = []
    for axis, old, why in wanted:
        new = fresh(axis)
        dim = dims[axis]
        dim.Clear()
        dim.dim_param = new
        renamed.append(Renamed(axis[0], axis[1], old, new, why))
    return renamed


def axes_named(model: onnx.ModelProto) -> dict[str, list[Axis]]:
    """Each input dimension name and the (input, axis) pairs that carry it."""
    weights = {init.name for init in model.graph.initializer}
    named: dict[str, list[Axis]] = {}
    for value in model.graph.input:
        if value.name in weights:
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.dim_param:
                named.setdefault(dim.dim_param, []).append((value.name, axis))
    return named
