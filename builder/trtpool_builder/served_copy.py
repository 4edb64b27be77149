"""Repairs made to the copy of an ONNX file that a folder serves (the user's file is not changed).

Only what Triton cannot carry as the file has it: a ZipMap output (ai.onnx.ml,
a sequence of maps from class label to probability, as skl2onnx and
onnxmltools write classifiers by default) is served as the tensor of
probabilities the ZipMap reads, one column per class in the order of its
labels. An input that declares no shape at all (its rank unknown; ONNX Runtime
reports it like a scalar) gets the rank its --shapes range gives, every
dimension dynamic; an output without one gets what shape inference finds.
Everything else is served as ONNX Runtime runs the file.
"""
from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper

from trtpool.errors import ConfigError
from trtpool.shapes import parse_profile
from trtpool_builder.onnx_io import inferred_value_shapes


def _zipmap_labels(node: onnx.NodeProto) -> list:
    for attribute in node.attribute:
        if attribute.name in ("classlabels_int64s", "classlabels_strings"):
            values = helper.get_attribute_value(attribute)
            return [v.decode() if isinstance(v, bytes) else v for v in values]
    return []


def _tensor_type_of(model: onnx.ModelProto, name: str) -> onnx.TypeProto | None:
    """The type ONNX shape inference gives the value `name`, if it is a tensor."""
    inferred = onnx.shape_inference.infer_shapes(model)
    for value in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output):
        if value.name == name and value.type.HasField("tensor_type"):
            return value.type
    return None


def drop_zipmaps(model: onnx.ModelProto) -> list[str]:
    """Serve each ZipMap graph output as the probability tensor it reads; notes."""
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    notes = []
    for output in graph.output:
        node = producers.get(output.name)
        if node is None or node.op_type != "ZipMap" or output.type.HasField("tensor_type"):
            continue
        probabilities, labels = node.input[0], _zipmap_labels(node) or "of its class labels"
        tensor_type = _tensor_type_of(model, probabilities)
        node.CopyFrom(helper.make_node("Identity", [probabilities], [output.name], name=node.name or output.name))
        output.type.Clear()
        if tensor_type is not None:
            output.type.CopyFrom(tensor_type)
        else:
            output.type.CopyFrom(helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [None, None]))
        notes.append(f"output '{output.name}' is a ZipMap (a sequence of maps, which Triton cannot carry): it is "
                     f"served as the probability tensor it is made from, one column per class in the order "
                     f"{labels}")
    return notes


def declare_input_ranks(model: onnx.ModelProto, shapes: Sequence[str]) -> list[str]:
    """Give each input without a declared shape the rank of its range in `shapes` (trtpool.shapes
    text, one per profile), every dimension dynamic; notes."""
    ranges = parse_profile(shapes[0]) if shapes else {}
    weights = {init.name for init in model.graph.initializer}
    notes = []
    for value in model.graph.input:
        tensor_type = value.type.tensor_type
        if value.name in weights or not value.type.HasField("tensor_type") or tensor_type.HasField("shape"):
            continue
        if value.name not in ranges:
            raise ConfigError(f"input '{value.name}' declares no shape, so its rank is unknown (ONNX Runtime "
                              f"would take it for a scalar): give its shape ranges, e.g. --shapes "
                              f"{value.name}=MIN:OPT:MAX")
        rank = len(ranges[value.name].min)
        for _ in range(rank):
            tensor_type.shape.dim.add()
        notes.append(f"input '{value.name}' declares no shape: served with rank {rank} from --shapes, "
                     "every dimension dynamic")
    return notes


def declare_output_shapes(model: onnx.ModelProto) -> list[str]:
    """Give each output without a declared shape the one ONNX shape inference finds, where it
    finds one; notes."""
    shapeless = [v for v in model.graph.output
                 if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape")]
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
        notes.append(f"output '{value.name}' declares no shape: served with rank {len(dims)}, "
                     "as ONNX shape inference gives it")
    return notes


def repair_for_serving(model: onnx.ModelProto, shapes: Sequence[str] = ()) -> list[str]:
    """Make `model` (the copy to serve) carriable by Triton, in place; one note per change."""
    return [*drop_zipmaps(model), *declare_input_ranks(model, shapes), *declare_output_shapes(model)]
