"""bfloat16 tensors across the Python backend's boundary, without a framework.

The stub's ``as_numpy()`` refuses BF16 ("Use to_dlpack() and from_dlpack()
instead") and its ``Tensor(name, array)`` maps no numpy dtype to BF16, while
numpy (1.x) imports no bfloat16 DLPack tensor. Only DLPack crosses, so this
module reads a host BF16 DLPack capsule into an ml_dtypes bfloat16 array (a
copy), and makes a capsule for one from numpy's own uint16 capsule with its
type code set to bfloat16 (same bits, same size).
"""
from __future__ import annotations

import ctypes
from math import prod
from typing import Any

import numpy as np

from trtpool.signature import BFLOAT16

TRITONSERVER_TYPE_BF16 = 14  # tritonserver.h, TRITONSERVER_DataType
KDL_CPU = 1
KDL_BFLOAT = 4


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dl_tensor(capsule: Any) -> _DLTensor:
    """The DLTensor a (not yet consumed) 'dltensor' capsule holds; its first member."""
    return _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))


def is_bfloat16(tensor: Any) -> bool:
    """Whether a pb_utils.Tensor is BF16."""
    return tensor.triton_dtype() == TRITONSERVER_TYPE_BF16


def from_triton(tensor: Any) -> np.ndarray:
    """A host BF16 pb_utils.Tensor as a bfloat16 array (a copy: the capsule frees its memory)."""
    capsule = tensor.to_dlpack()
    dl = _dl_tensor(capsule)
    if dl.device_type != KDL_CPU or (dl.dtype.code, dl.dtype.bits) != (KDL_BFLOAT, 16):
        raise ValueError(f"tensor '{tensor.name()}': expected a host bfloat16 DLPack tensor")
    shape = tuple(dl.shape[axis] for axis in range(dl.ndim))
    count = prod(shape)
    if count == 0:
        return np.empty(shape, BFLOAT16)
    if dl.strides and any(dl.strides[a] != prod(shape[a + 1:]) for a in range(dl.ndim)):
        raise ValueError(f"tensor '{tensor.name()}': a strided bfloat16 tensor is not supported")
    address = dl.data + dl.byte_offset
    bits = np.ctypeslib.as_array((ctypes.c_uint16 * count).from_address(address))
    return bits.copy().view(BFLOAT16).reshape(shape)


def to_triton(pb_utils: Any, name: str, array: np.ndarray) -> Any:
    """A pb_utils.Tensor of a host bfloat16 array (the stub copies it when the response is sent)."""
    bits = np.ascontiguousarray(array).view(np.uint16)
    capsule = bits.__dlpack__()
    _dl_tensor(capsule).dtype.code = KDL_BFLOAT
    return pb_utils.Tensor.from_dlpack(name, capsule)
