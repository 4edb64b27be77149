"""ONNX value types written as ONNX Runtime writes them ('tensor(float)',
'seq(tensor(float))', 'map(int64, tensor(float))'): how trtpool names a graph
input or output it cannot serve. Triton carries tensors only."""
from __future__ import annotations

import onnx


def _element(elem_type: int) -> str:
    return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type else "undefined"


def type_text(value_type: onnx.TypeProto) -> str:
    kind = value_type.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({_element(value_type.tensor_type.elem_type)})"
    if kind == "sparse_tensor_type":
        return f"sparse_tensor({_element(value_type.sparse_tensor_type.elem_type)})"
    if kind == "sequence_type":
        return f"seq({type_text(value_type.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_text(value_type.optional_type.elem_type)})"
    if kind == "map_type":
        return f"map({_element(value_type.map_type.key_type)}, {type_text(value_type.map_type.value_type)})"
    return "undefined"


def is_tensor(value: onnx.ValueInfoProto) -> bool:
    """A dense tensor of a known element type: the only kind of value Triton carries."""
    return value.type.WhichOneof("value") == "tensor_type" and value.type.tensor_type.elem_type != 0


def not_a_tensor(value: onnx.ValueInfoProto) -> str:
    return (f"tensor '{value.name}' has ONNX type {type_text(value.type)}, which is not a tensor: "
            "Triton carries tensors only (no sequences, maps, optionals or sparse tensors)")
