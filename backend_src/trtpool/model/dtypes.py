"""The one table of data types: numpy's, and their names in Triton, ONNX, ONNX Runtime and TensorRT.

Serving is numpy arrays throughout; each naming maps onto numpy dtypes here and nowhere else.
TRITON_DTYPES lists every type tritonserver 2.51 carries to and from a Python-based backend
(bfloat16 as ml_dtypes' type, strings as object arrays of bytes), with config.pbtxt's names.
ONNX and ONNX Runtime types follow ONNX's element types (onnx is imported on first use);
an ONNX value that is no tensor is named as ONNX Runtime writes it ('seq(tensor(float))'),
to say why Triton cannot carry it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

if TYPE_CHECKING:
    import onnx

# numpy has no bfloat16 of its own; ml_dtypes' is the one onnx and tritonclient use.
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
# Strings (Triton's BYTES, config.pbtxt's TYPE_STRING) are numpy object arrays of bytes.
STRING = np.dtype(object)

# Triton's data types by numpy dtype; also the names config.pbtxt uses. Every one
# tritonserver 2.51 carries to and from a Python-based backend (a plain Python-backend
# model echoes each: tests/conformance/test_triton_types.py).
TRITON_DTYPES: dict[np.dtype, str] = {
    np.dtype(np.bool_): "TYPE_BOOL",
    np.dtype(np.uint8): "TYPE_UINT8",
    np.dtype(np.uint16): "TYPE_UINT16",
    np.dtype(np.uint32): "TYPE_UINT32",
    np.dtype(np.uint64): "TYPE_UINT64",
    np.dtype(np.int8): "TYPE_INT8",
    np.dtype(np.int16): "TYPE_INT16",
    np.dtype(np.int32): "TYPE_INT32",
    np.dtype(np.int64): "TYPE_INT64",
    np.dtype(np.float16): "TYPE_FP16",
    np.dtype(np.float32): "TYPE_FP32",
    np.dtype(np.float64): "TYPE_FP64",
    BFLOAT16: "TYPE_BF16",
    STRING: "TYPE_STRING",
}

# config.pbtxt's names -> numpy dtypes.
NUMPY_DTYPES: dict[str, np.dtype] = {name: dtype for dtype, name in TRITON_DTYPES.items()}
# TensorRT's trt.DataType member names -> numpy dtypes. BF16, FP8, INT4, FP4 have no numpy
# dtype that Triton's Python backend carries.
TENSORRT_DTYPES: dict[str, np.dtype] = {
    "FLOAT": np.dtype(np.float32),
    "HALF": np.dtype(np.float16),
    "INT8": np.dtype(np.int8),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
}
ONNX_BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16, the element type ONNX Runtime takes for BFLOAT16 arrays


def onnx_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype of an ONNX element type (onnx.TensorProto.FLOAT ...)."""
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def ort_dtype(type_name: str) -> np.dtype | None:
    """The numpy dtype of an ONNX Runtime type name ('tensor(float)'); None for a type that is no
    tensor or has no numpy dtype Triton carries."""
    import onnx

    element = type_name.removeprefix("tensor(").removesuffix(")")
    if f"tensor({element})" != type_name or element.upper() not in onnx.TensorProto.DataType.keys():  # noqa: SIM118 - a protobuf enum: no `in`
        return None
    dtype = onnx_dtype(onnx.TensorProto.DataType.Value(element.upper()))
    return dtype if dtype in TRITON_DTYPES else None


def dtype_of(tensor: Any) -> np.dtype:
    """A numpy dtype for a numpy array or a torch tensor (torch.float32 -> float32)."""
    if isinstance(tensor, np.ndarray):
        return tensor.dtype
    return np.dtype(str(tensor.dtype).removeprefix("torch."))


def _element(elem_type: int) -> str:
    import onnx

    return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type else "undefined"


def type_text(value_type: onnx.TypeProto) -> str:
    """An ONNX value type as ONNX Runtime writes it: 'tensor(float)', 'seq(tensor(float))', ..."""
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
    return (
        f"tensor '{value.name}' has ONNX type {type_text(value.type)}, which is not a tensor: "
        "Triton carries tensors only (no sequences, maps, optionals or sparse tensors)"
    )
