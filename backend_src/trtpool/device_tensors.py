"""Request tensors that arrive on the GPU (Triton hands them over by DLPack when
FORCE_CPU_ONLY_INPUT_TENSORS is "no", e.g. from CUDA shared-memory clients).

They are torch tensors here, or, from a process file's preprocess_batch, any
object with the CUDA array interface (trtpool.crop_kernel.DeviceArray, made
without torch). A GPU runtime's context copies them straight into its device
buffers; a host runtime copies them to the host. torch is imported only when
such a tensor exists.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def is_device(tensor: Any) -> bool:
    return not isinstance(tensor, np.ndarray)


def dtype_of(tensor: Any) -> np.dtype:
    """A numpy dtype for a numpy array or a torch tensor (torch.float32 -> float32)."""
    if isinstance(tensor, np.ndarray):
        return tensor.dtype
    return np.dtype(str(tensor.dtype).removeprefix("torch."))


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

