"""A ZipMap output (ai.onnx.ml: a sequence of maps from class label to probability, as
skl2onnx and onnxmltools write classifiers by default) served as the tensor of
probabilities the ZipMap reads, one column per class in the order of its labels.

Triton carries tensors only. trtpool-model and trtpool-build make this repair in the
copy they serve or build; the server's load path makes it in memory, so a folder with
the user's own file serves the same answers.
"""

from __future__ import annotations

import onnx
from onnx import helper


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


def _import_default_domain(model: onnx.ModelProto) -> None:
    """Import the standard ONNX domain, which the Identity needs, into a model that uses only
    ai.onnx.ml (onnxmltools' tree classifiers): at the newest opset its IR version allows."""
    if any(entry.domain in ("", "ai.onnx") for entry in model.opset_import):
        return
    opset = max((row[2] for row in helper.VERSION_TABLE if row[1] <= model.ir_version), default=1)
    model.opset_import.append(helper.make_opsetid("", opset))


def drop_zipmaps(model: onnx.ModelProto) -> list[str]:
    """Serve each ZipMap graph output of `model` (in place) as the probability tensor it reads; notes."""
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    notes = []
    for output in graph.output:
        node = producers.get(output.name)
        if node is None or node.op_type != "ZipMap" or output.type.HasField("tensor_type"):
            continue
        probabilities, labels = node.input[0], _zipmap_labels(node) or "of its class labels"
        _import_default_domain(model)
        tensor_type = _tensor_type_of(model, probabilities)
        node.CopyFrom(helper.make_node("Identity", [probabilities], [output.name], name=node.name or output.name))
        output.type.Clear()
        if tensor_type is not None:
            output.type.CopyFrom(tensor_type)
        else:
            output.type.CopyFrom(helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [None, None]))
        notes.append(
            f"output '{output.name}' is a ZipMap (a sequence of maps, which Triton cannot carry): it is "
            f"served as the probability tensor it is made from, one column per class in the order "
            f"{labels}"
        )
    return notes
