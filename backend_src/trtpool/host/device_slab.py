"""GPU inputs handed to the engine host through CUDA IPC: device memory the host owns, written by an instance.

Where Triton leaves a request's inputs on the GPU (FORCE_CPU_ONLY_INPUT_TENSORS "no",
e.g. for CUDA shared-memory clients), a thin instance copies them device to device into
a buffer that the host allocated on its GPU and exported (cudaIpcGetMemHandle), and the
host's contexts read them there: the inputs never pass through host memory, and the
instance's only CUDA work is that copy. Each instance's connection has one such buffer,
grown like the memfd slabs: between runs, a larger one replaces it. The instance
waits for its copies before it sends the run, and reuses the buffer only after the
answer, by which time the host's contexts have read it.

A host that cannot export one (no GPU, or CUDA refuses) says why; the instance then
copies its GPU inputs to host memory and sends them in its memfd slab, as before.
"""

from __future__ import annotations

from typing import Any

from trtpool.gpu import cuda
from trtpool.gpu.device_tensors import DeviceArray, device_nbytes, device_pointer
from trtpool.host.slab import ALIGN, MAX_TENSORS, Descriptor, aligned, checked
from trtpool.host.wire import MessageError
from trtpool.model.dtypes import STRING, TRITON_DTYPES, dtype_of

MAX_DEVICE_SLAB_BYTES = 1 << 36  # a request beyond this is a bad message, not asked of CUDA


def room_for_device(tensors: list[Any]) -> int:
    """The device slab bytes a set of GPU tensors needs, alignment included."""
    return sum(aligned(device_nbytes(t)) for t in tensors)


def can_travel(tensor: Any) -> bool:
    """Whether a GPU tensor can go through a device slab: contiguous, of a Triton number type."""
    contiguous = tensor.is_contiguous() if hasattr(tensor, "is_contiguous") else True
    try:
        dtype = dtype_of(tensor)
    except TypeError:
        return False
    return contiguous and dtype in TRITON_DTYPES and dtype != STRING


class ExportedSlab:
    """The host's side: `nbytes` of its GPU's memory, and the handle that lets one instance map it."""

    def __init__(self, nbytes: int, device_index: int) -> None:
        cuda.set_device(device_index)
        self.buffer = cuda.DeviceBuffer(aligned(nbytes))
        self.size = self.buffer.nbytes
        self.handle = cuda.ipc_handle(self.buffer.ptr)

    def read(self, descriptors: Any) -> dict[str, DeviceArray]:
        """The GPU tensors the descriptors name, as views of this memory (they keep it alive).
        A descriptor that points outside it, or names BYTES, raises MessageError."""
        if not isinstance(descriptors, list) or len(descriptors) > MAX_TENSORS:
            raise MessageError(f"device tensors must be a list of at most {MAX_TENSORS} descriptors")
        tensors = {}
        for descriptor in descriptors:
            name, dtype, shape, offset, _ = checked(descriptor, self.size)
            if dtype == STRING or offset % ALIGN:
                raise MessageError(f"device tensor '{name}': BYTES, or an offset ({offset}) off the {ALIGN}-byte grid")
            tensors[name] = DeviceArray(self.buffer, self.buffer.ptr + offset, shape, dtype)
        return tensors


class ImportedSlab:
    """The instance's side: the host's exported memory mapped here, written by device copies."""

    def __init__(self, handle: bytes, size: int, device_index: int) -> None:
        self.device_index = device_index
        cuda.set_device(device_index)
        self.ptr = cuda.ipc_open(handle)
        self.size = size
        self._stream = cuda.Stream()

    def write_tensor(self, name: str, tensor: Any, offset: int) -> tuple[Descriptor, int]:
        """Queue the copy of one GPU tensor in at `offset` (aligned up); its descriptor and the
        offset after it. Call finish() before the host may read it."""
        offset = aligned(offset)
        nbytes = device_nbytes(tensor)
        if offset + nbytes > self.size:
            raise ValueError(f"device tensor '{name}' does not fit the {self.size:,}-byte device slab")
        cuda.memcpy_dtod_async(self.ptr + offset, device_pointer(tensor), nbytes, self._stream)
        return [name, TRITON_DTYPES[dtype_of(tensor)], list(tensor.shape), offset, nbytes], offset + nbytes

    def finish(self) -> None:
        """Wait for the copies queued by write_tensor()."""
        self._stream.synchronize()

    def close(self) -> None:
        cuda.set_device(self.device_index)
        cuda.ipc_close(self.ptr)
        self._stream.close()
