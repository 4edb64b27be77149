"""Tensors into and out of an ONNX Runtime IOBinding, for the dtypes numpy and ONNX Runtime
do not share: bfloat16 (ml_dtypes' numpy type, which ONNX Runtime's Python API does not
know) and strings (Triton hands bytes; ONNX Runtime takes and gives str)."""

from __future__ import annotations

import ctypes
from math import prod

import numpy as np

from trtpool.errors import InvalidInput
from trtpool.model.dtypes import BFLOAT16, ONNX_BFLOAT16


def bind_input(binding, name: str, array: np.ndarray) -> None:
    """Bind a host array (a view of a context's buffer) without copying it."""
    if array.dtype == BFLOAT16:
        import onnxruntime as ort

        value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), ONNX_BFLOAT16)
        binding.bind_ortvalue_input(name, value)
    else:
        binding.bind_input(name, "cpu", 0, array.dtype, array.shape, array.ctypes.data)


def read_output(value, dtype: np.dtype) -> np.ndarray:
    """An output ONNX Runtime allocated, as a numpy array (bfloat16 copied out bit for bit)."""
    if dtype != BFLOAT16:
        return value.numpy()
    shape = tuple(value.shape())
    count = prod(shape)
    if count == 0:
        return np.empty(shape, BFLOAT16)
    bits = np.ctypeslib.as_array((ctypes.c_uint16 * count).from_address(value.data_ptr()))
    return bits.copy().view(BFLOAT16).reshape(shape)


def decoded_strings(name: str, array: np.ndarray) -> np.ndarray:
    """A string tensor as ONNX Runtime takes it: str objects (Triton's BYTES are bytes, UTF-8)."""
    try:
        texts = [item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in array.ravel()]
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"input '{name}': element is not UTF-8 text ({exc}); the model's string tensors hold text"
        ) from None
    return np.array(texts, dtype=object).reshape(array.shape)
