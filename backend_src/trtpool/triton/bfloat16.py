"""bfloat16 tensors across the Python backend's boundary, without a framework.

The stub's ``as_numpy()`` refuses BF16 ("Use to_dlpack() and from_dlpack()
instead") and its ``Tensor(name, array)`` maps no numpy dtype to BF16, while
numpy (1.x) imports no bfloat16 DLPack tensor. Only DLPack crosses, so this
module reads a host BF16 DLPack capsule into an ml_dtypes bfloat16 array (a
copy), and lends the stub a bfloat16 array's memory through a DLPack capsule of
its own making (the DLPack C structs, spelled out below).
"""

from __future__ import annotations

import ctypes
from math import prod

import numpy as np

from trtpool.model.dtypes import BFLOAT16
from trtpool.triton.pb_api import PbUtils, Tensor

KDL_CPU = 1
KDL_BFLOAT = 4


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dl_tensor(capsule: object) -> _DLTensor:
    """The DLTensor a (not yet consumed) 'dltensor' capsule holds; its first member."""
    return _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))


def from_triton(tensor: Tensor) -> np.ndarray:
    """A host BF16 pb_utils.Tensor as a bfloat16 array (a copy: the capsule frees its memory)."""
    capsule = tensor.to_dlpack()
    dl = _dl_tensor(capsule)
    if dl.device_type != KDL_CPU or (dl.dtype.code, dl.dtype.bits) != (KDL_BFLOAT, 16):
        raise ValueError(f"tensor '{tensor.name()}': neither numpy nor a host bfloat16 DLPack tensor")
    shape = tuple(dl.shape[axis] for axis in range(dl.ndim))
    count = prod(shape)
    if count == 0:
        return np.empty(shape, BFLOAT16)
    if dl.strides and any(dl.strides[a] != prod(shape[a + 1 :]) for a in range(dl.ndim)):
        raise ValueError(f"tensor '{tensor.name()}': a strided bfloat16 tensor is not supported")
    address = dl.data + dl.byte_offset
    bits = np.ctypeslib.as_array((ctypes.c_uint16 * count).from_address(address))
    return bits.copy().view(BFLOAT16).reshape(shape)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
    ]


# What each capsule handed to the stub points into, by the address of its DLManagedTensor,
# until the stub calls the deleter. The deleter is ours (a ctypes callback takes the GIL
# on whatever thread calls it): numpy 1.x's own frees Python objects without the GIL.
_lent: dict[int, tuple] = {}
_CAPSULE_NAME = b"dltensor"
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


@_DLManagedTensor._fields_[2][1]
def _release(address: int) -> None:
    _lent.pop(address, None)


def to_triton(pb_utils: PbUtils, name: str, array: np.ndarray) -> Tensor:
    """A pb_utils.Tensor of a host bfloat16 array, lent to the stub without a copy."""
    bits = np.ascontiguousarray(array).view(np.uint16)
    shape = (ctypes.c_int64 * max(bits.ndim, 1))(*bits.shape)
    managed = _DLManagedTensor()
    managed.dl_tensor.data = bits.ctypes.data
    managed.dl_tensor.device_type, managed.dl_tensor.device_id = KDL_CPU, 0
    managed.dl_tensor.ndim = bits.ndim
    managed.dl_tensor.dtype = _DLDataType(KDL_BFLOAT, 16, 1)
    managed.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    managed.deleter = _release
    address = ctypes.addressof(managed)
    _lent[address] = (managed, bits, shape)
    return pb_utils.Tensor.from_dlpack(name, _capsule_new(address, _CAPSULE_NAME, None))
