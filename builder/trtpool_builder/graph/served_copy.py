"""Repairs made to the copy of an ONNX file that a folder serves (the user's file is not changed).

Only what Triton cannot carry as the file has it: a ZipMap output is served
as the tensor of probabilities it reads (trtpool.model.zipmap). An input that
declares no shape at all (its rank unknown; ONNX Runtime reports it like a
scalar) gets the rank its --shapes range gives, every dimension dynamic; an
output without one gets what shape inference finds. An output declared as a
scalar that the graph computes with one element per row (a ReduceSum, ArgMax
or Squeeze over all but the first axis, traced on one row; ONNX Runtime
answers [1] for one row and [N] for N) is declared with the shape shape
inference finds for it, or, where inference loses the rank (a Squeeze without
axes, which makes a scalar of one row), with the rows ONNX Runtime answers at
2 and 3 rows; so it is served as ONNX Runtime answers.
Everything else is served as ONNX Runtime runs the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx

from trtpool.errors import ConfigError
from trtpool.model.shapes import parse_profile
from trtpool.model.zipmap import drop_zipmaps
from trtpool_builder.graph.batch_axis import row_output_shapes
from trtpool_builder.graph.onnx_io import inferred_value_shapes, io_specs
from trtpool_builder.graph.profiles import resolve_profiles
from trtpool_builder.graph.scalars import is_scalar


def declare_input_ranks(model: onnx.ModelProto, shapes: Sequence[str]) -> list[str]:
    """Give each input without a declared shape the rank of its range in `shapes` (trtpool.model.shapes
    text, one per profile), every dimension dynamic; notes."""
    ranges = parse_profile(shapes[0]) if shapes else {}
    weights = {init.name for init in model.graph.initializer}
    notes = []
    for value in model.graph.input:
        tensor_type = value.type.tensor_type
        if value.name in weights or not value.type.HasField("tensor_type") or tensor_type.HasField("shape"):
            continue
        if value.name not in ranges:
            raise ConfigError(
                f"input '{value.name}' declares no shape, so its rank is unknown (ONNX Runtime "
                f"would take it for a scalar): give its shape ranges, e.g. --shapes "
                f"{value.name}=MIN:OPT:MAX"
            )
        rank = len(ranges[value.name].min)
        for _ in range(rank):
            tensor_type.shape.dim.add()
        notes.append(
            f"input '{value.name}' declares no shape: served with rank {rank} from --shapes, every dimension dynamic"
        )
    return notes


def declare_output_shapes(model: onnx.ModelProto) -> list[str]:
    """Give each output without a declared shape the one ONNX shape inference finds, where it
    finds one; notes."""
    shapeless = [
        v for v in model.graph.output if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape")
    ]
    if not shapeless:
        return []
    inferred = inferred_value_shapes(model, {}, [v.name for v in shapeless])
    notes = []
    for value in shapeless:
        if value.name not in inferred:
            continue
        dims = value.type.tensor_type.shape.dim
        for size in inferred[value.name]:
            dim = dims.add()
            if size >= 0:
                dim.dim_value = size
        notes.append(
            f"output '{value.name}' declares no shape: served with rank {len(dims)}, as ONNX shape inference gives it"
        )
    return notes


def _inferred_rows(
    model: onnx.ModelProto, source: Path, shapes: Sequence[str], names: list[str]
) -> dict[str, tuple[int, ...]]:
    """The shapes of the outputs `names` where ONNX shape inference cannot tell their rank,
    found by running `source` on ONNX Runtime at two row counts (batch_axis.row_output_shapes)."""
    inputs, _ = io_specs(model)
    profiles = resolve_profiles(shapes, inputs)
    return row_output_shapes(source, inputs, profiles[0], names)


def declare_row_outputs(model: onnx.ModelProto, source: Path, shapes: Sequence[str]) -> list[str]:
    """Give each output declared as a scalar the shape of rank 1 or more that the graph computes
    it with, where ONNX shape inference finds one, else where ONNX Runtime running `source`
    (the user's file) at two row counts answers one entry per row; notes. A true scalar
    (inference finds rank 0, or neither finds rows) stays as declared."""
    scalars = [v for v in model.graph.output if is_scalar(v)]
    if not scalars:
        return []
    for value in scalars:  # inference then takes the shape from the graph, not from the declaration
        value.type.tensor_type.ClearField("shape")
    inferred = inferred_value_shapes(model, {}, [v.name for v in scalars])
    unknown = [v.name for v in scalars if v.name not in inferred]
    ran = _inferred_rows(model, source, shapes, unknown) if unknown else {}
    notes = []
    for value in scalars:
        shape = value.type.tensor_type.shape
        shape.SetInParent()
        for size in inferred.get(value.name, ran.get(value.name, ())):
            dim = shape.dim.add()
            if size >= 0:
                dim.dim_value = size
        if shape.dim:
            how = "ONNX Runtime computes it, at 2 and 3 rows," if value.name in ran else "the graph computes it"
            notes.append(
                f"output '{value.name}' is declared as a scalar but {how} with shape "
                f"{[d.dim_value if d.HasField('dim_value') else -1 for d in shape.dim]} (-1: dynamic): "
                "served so, as ONNX Runtime answers it"
            )
    return notes


def repair_for_serving(model: onnx.ModelProto, source: Path, shapes: Sequence[str] = ()) -> list[str]:
    """Make `model` (the copy to serve of the user's file `source`) carriable by Triton, in
    place; one note per change."""
    return [
        *drop_zipmaps(model),
        *declare_input_ranks(model, shapes),
        *declare_output_shapes(model),
        *declare_row_outputs(model, source, shapes),
    ]
