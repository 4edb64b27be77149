"""Squeeze nodes without axes (older torch.onnx writes them), given their axes in the copy that is built.

ONNX squeezes every dimension of size 1 when a Squeeze has no axes; TensorRT
needs to know which at build time and refuses the node when a dimension it
cannot prove constant might be 1 ("ISqueezeLayer ... without an axes input
requires dimension 0 to not be 1 at runtime ... Set the axes input"), even
with a fixed profile. The exporter meant the axes that are 1 whatever the
input: those that shape inference finds of size 1 at every profile's min,
opt and max shapes. They are written into the copy (an `axes` input from
opset 13, an attribute before), and a note says so; a Squeeze whose input
shape inference cannot tell is left as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpool.model.signature import Profile
from trtpool_builder.graph.onnx_io import inferred_value_shapes


def _default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _axisless(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [
        n
        for n in model.graph.node
        if n.op_type == "Squeeze"
        and n.domain in ("", "ai.onnx")
        and len([i for i in n.input if i]) < 2
        and not any(a.name == "axes" for a in n.attribute)
    ]


def _ones_everywhere(shapes: Sequence[tuple[int, ...]]) -> list[int] | None:
    """The axes of size 1 in every shape; None when a rank or a size is unknown."""
    if not shapes or any(-1 in s for s in shapes) or len({len(s) for s in shapes}) != 1:
        return None
    return [axis for axis in range(len(shapes[0])) if all(s[axis] == 1 for s in shapes)]


def give_squeezes_axes(model: onnx.ModelProto, profiles: Sequence[Profile]) -> list[str]:
    """Give each Squeeze without axes the axes of size 1 at every profile shape, in place; notes."""
    squeezes = _axisless(model)
    if not squeezes:
        return []
    names = [node.input[0] for node in squeezes]
    seen: dict[str, list[tuple[int, ...]]] = {name: [] for name in names}
    for profile in profiles:
        for pick in ("min", "opt", "max"):
            shapes = {name: getattr(r, pick) for name, r in profile.ranges.items()}
            for name, shape in inferred_value_shapes(model, shapes, names).items():
                seen[name].append(shape)
    notes = []
    opset = _default_opset(model)
    for index, node in enumerate(squeezes):
        axes = _ones_everywhere(seen[node.input[0]])
        label = node.name or f"Squeeze #{index}"
        if not axes:
            notes.append(
                f"Squeeze node '{label}' has no axes and shape inference cannot tell which of its "
                "input's dimensions are always 1: left as it is"
            )
            continue
        if opset >= 13:
            constant = f"{node.output[0]}__squeeze_axes"
            model.graph.initializer.append(numpy_helper.from_array(np.array(axes, np.int64), constant))
            del node.input[1:]
            node.input.append(constant)
        else:
            node.attribute.append(helper.make_attribute("axes", axes))
        notes.append(
            f"Squeeze node '{label}' has no axes (TensorRT needs them): given axes {axes}, the "
            "dimensions of size 1 at every profile shape, in the copy that is built"
        )
    return notes
