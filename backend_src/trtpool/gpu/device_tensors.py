"""Request tensors that arrive on the GPU (Triton hands them over by DLPack when
FORCE_CPU_ONLY_INPUT_TENSORS is "no", e.g. from CUDA shared-memory clients).

They are torch tensors here, or, from a process file's preprocess_batch, any
object with the CUDA array interface (DeviceArray below, made without torch).
A GPU runtime's context copies them straight into its device buffers; a host
runtime copies them to the host. torch is imported only when such a tensor
exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from trtpool.gpu import cuda


def is_device(tensor: Any) -> bool:
    return not isinstance(tensor, np.ndarray)


def to_host(tensor: Any) -> np.ndarray:
    if isinstance(tensor, np.ndarray):
        return tensor
    return tensor.cpu().numpy() if hasattr(tensor, "cpu") else tensor.to_host()


def device_pointer(tensor: Any) -> int:
    """The device address of a contiguous device tensor (torch's, or by the CUDA array interface)."""
    if hasattr(tensor, "data_ptr"):
        return tensor.data_ptr()
    return int(tensor.__cuda_array_interface__["data"][0])


def device_nbytes(tensor: Any) -> int:
    return tensor.numel() * tensor.element_size() if hasattr(tensor, "numel") else int(tensor.nbytes)


def coalesced(parts: Sequence[Any]) -> list[Any]:
    """GPU parts with each run of adjacent DeviceArray rows joined into one part: one device copy
    for a batch that a process file's batch face made in one piece, not one per request."""
    joined: list[Any] = []
    for part in parts:
        both = joined[-1].followed_by(part) if joined and isinstance(joined[-1], DeviceArray) else None
        if both is None:
            joined.append(part)
        else:
            joined[-1] = both
    return joined


def from_dlpack(capsule_owner: Any) -> Any:
    import torch.utils.dlpack

    return torch.utils.dlpack.from_dlpack(capsule_owner.to_dlpack())


def keep_after_execute(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests' tensors, with those on the GPU copied into memory trtpool owns.

    Decoupled workers read a request after execute() has returned, and the Python
    backend reuses a request's GPU input buffers from then on (seen on the H200:
    token ids read later triggered an embedding's out-of-range device assert).
    Host inputs stay valid while the request object lives. One wait covers all
    copies, before execute() returns.
    """
    if not any(is_device(t) for tensors in requests for t in tensors.values()):
        return requests
    import torch

    copies = [{name: t.clone() if is_device(t) else t for name, t in tensors.items()} for tensors in requests]
    devices = {t.device for tensors in copies for t in tensors.values() if is_device(t)}
    for device in devices:
        torch.cuda.current_stream(device).synchronize()
    return copies


class DeviceArray:
    """An array in device memory (float32 unless told), shown to torch, numpy-free runtimes and
    TensorRT through the CUDA array interface; slicing rows gives a view that keeps the memory alive."""

    def __init__(self, owner: Any, ptr: int, shape: tuple[int, ...], dtype: np.dtype | None = None) -> None:
        self._owner = owner
        self.ptr = ptr
        self.shape = shape
        self.dtype = np.dtype(np.float32) if dtype is None else np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.dtype.itemsize

    def followed_by(self, other: Any) -> DeviceArray | None:
        """This array and `other` as one, where `other` is the rows right after this one's in the
        same memory (a batch face's per-request slices of one batch); else None."""
        if (
            not isinstance(other, DeviceArray)
            or other._owner is not self._owner
            or other.shape[1:] != self.shape[1:]
            or other.dtype != self.dtype
            or other.ptr != self.ptr + self.nbytes
        ):
            return None
        return DeviceArray(self._owner, self.ptr, (self.shape[0] + other.shape[0], *self.shape[1:]), self.dtype)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> DeviceArray:
        start, stop, step = rows.indices(self.shape[0])
        if step != 1:
            raise IndexError("only contiguous row ranges")
        row_bytes = self.nbytes // max(1, self.shape[0])
        return DeviceArray(self._owner, self.ptr + start * row_bytes, (stop - start, *self.shape[1:]), self.dtype)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
        }

    def to_host(self) -> np.ndarray:
        host = np.empty(self.shape, self.dtype)
        stream = cuda.Stream()
        cuda.memcpy_dtoh_async(host, self.ptr, self.nbytes, stream)
        stream.synchronize()
        return host
