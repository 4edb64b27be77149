"""Tensors in shared memory: a memfd that one side writes and the other reads in place.

A slab is an anonymous memory file (memfd_create): it has no name in /dev/shm or
anywhere else, so nothing can be left behind by a process that is killed; it is
shared by handing its file descriptor over the channel (trtpool.host.wire), and
the kernel frees it once the last process holding it has closed or unmapped it.
Only processes given the descriptor can map it.

Each side writes into a slab of its own and grows it (a new, larger memfd sent with
the next message) when a batch does not fit: the instance its requests' inputs, the
host the answers' outputs. A slab is sealed against shrinking (F_SEAL_SHRINK) before
it is handed over, and the reader refuses one that is not: a peer that truncated a
mapped file would otherwise make the reader's next access a SIGBUS. A tensor in a slab is described by a small list,
[name, Triton type, shape, offset, nbytes]; numbers are read back as numpy views of
the mapping (no copy), BYTES elements as Triton serialises them (a 4-byte
little-endian length before each element's bytes).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
from collections.abc import Callable, Iterable
from math import prod
from typing import Any

import numpy as np

from trtpool.host.wire import MessageError
from trtpool.model.dtypes import NUMPY_DTYPES, STRING, TRITON_DTYPES

ALIGN = 64  # every tensor starts on a cache line
MAX_RANK = 16
MAX_TENSORS = 4096  # per message: descriptors beyond this are refused
_ELEMENT_LENGTH = struct.Struct("<I")

Descriptor = list[Any]  # [name, triton type, shape, offset, nbytes]


def aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def _as_bytes(element: object) -> bytes:
    """A BYTES element as Triton's Python backend serialises it: bytes as they are, anything
    else as its text in UTF-8."""
    if isinstance(element, bytes | bytearray | memoryview):
        return bytes(element)
    return (element if isinstance(element, str) else str(element)).encode()


def _bytes_elements(array: np.ndarray) -> list[bytes]:
    return [_as_bytes(e) for e in array.reshape(-1)]


def nbytes_of(array: np.ndarray) -> int:
    """The bytes a tensor takes in a slab."""
    if array.dtype == STRING:
        return sum(_ELEMENT_LENGTH.size + len(e) for e in _bytes_elements(array))
    return array.nbytes


def room_for(tensors: Iterable[np.ndarray]) -> int:
    """The slab bytes a set of tensors needs, alignment included."""
    return sum(aligned(nbytes_of(t)) for t in tensors)


WriteTensor = Callable[[str, Any, int], tuple[Descriptor, int]]


def input_major(write: WriteTensor, batch: list[dict[str, Any]]) -> list[list[Descriptor]]:
    """Each request's descriptors, its tensors written input by input (every request's first
    input, then every request's second, ...): one input's rows lie side by side, so the host
    copies them to the device in one piece where each is a multiple of ALIGN bytes."""
    descriptors: list[list[Descriptor]] = [[] for _ in batch]
    offset = 0
    names = next(iter(batch)).keys() if len(batch) == 1 else dict.fromkeys(n for tensors in batch for n in tensors)
    for name in names:
        for written, tensors in zip(descriptors, batch, strict=True):
            if name in tensors:
                descriptor, offset = write(name, tensors[name], offset)
                written.append(descriptor)
    return descriptors


def checked(descriptor: Any, region_size: int) -> tuple[str, np.dtype, tuple[int, ...], int, int]:
    """A peer's tensor descriptor, every field checked against a region of `region_size` bytes:
    (name, dtype, shape, offset, nbytes), or MessageError saying what is wrong."""
    if not (isinstance(descriptor, list) and len(descriptor) == 5):
        raise MessageError(f"a tensor descriptor must be [name, type, shape, offset, nbytes], got {descriptor!r:.80}")
    name, data_type, shape, offset, size = descriptor
    if not isinstance(name, str) or data_type not in NUMPY_DTYPES:
        raise MessageError(f"tensor {name!r:.40}: unknown data type {data_type!r:.40}")
    if not (isinstance(shape, list) and len(shape) <= MAX_RANK and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise MessageError(f"tensor '{name}': shape {shape!r:.80} is not a list of at most {MAX_RANK} sizes")
    if not (
        isinstance(offset, int) and isinstance(size, int) and offset >= 0 and size >= 0 and offset + size <= region_size
    ):
        raise MessageError(f"tensor '{name}': bytes {offset!r}..+{size!r} lie outside the {region_size:,}-byte slab")
    dtype = NUMPY_DTYPES[data_type]
    if dtype != STRING and size != prod(shape) * dtype.itemsize:
        raise MessageError(f"tensor '{name}': {size} bytes for shape {shape} of {data_type}")
    return name, dtype, tuple(shape), offset, size


class Slab:
    """One shared mapping of a memfd; `fd` is kept open while it may still be sent (-1 once closed)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.memory = mmap.mmap(fd, self.size) if self.size else None

    @classmethod
    def create(cls, size: int, name: str) -> Slab:
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, max(size, ALIGN))
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
            return cls(fd)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def attach(cls, fd: int) -> Slab:
        """Map a slab a peer sent, taking `fd` over (closed here once mapped: the mapping keeps the
        memory). MessageError for a descriptor that is not a slab sealed against shrinking."""
        try:
            sealed = fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK
            slab = cls(fd) if sealed else None
        except (OSError, ValueError) as exc:
            os.close(fd)
            raise MessageError(f"the descriptor sent cannot be mapped as a slab ({exc})") from None
        if slab is None:
            os.close(fd)
            raise MessageError("the slab sent is not sealed against shrinking (F_SEAL_SHRINK)")
        slab.close()
        return slab

    def close(self) -> None:
        """Close the descriptor; the mapping stays valid while arrays view it (freed with the last)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # --- writing ----------------------------------------------------------------

    def write(self, tensors: dict[str, np.ndarray], offset: int = 0) -> tuple[list[Descriptor], int]:
        """Copy tensors in from `offset`; their descriptors and the offset after them."""
        descriptors = []
        for name, array in tensors.items():
            descriptor, offset = self.write_tensor(name, array, offset)
            descriptors.append(descriptor)
        return descriptors, offset

    def write_tensor(self, name: str, array: np.ndarray, offset: int) -> tuple[Descriptor, int]:
        """Copy one tensor in at `offset` (aligned up); its descriptor and the offset after it."""
        data_type = TRITON_DTYPES.get(array.dtype)
        if data_type is None:
            raise TypeError(f"tensor '{name}': numpy {array.dtype} has no Triton data type")
        offset = aligned(offset)
        size = self._put(array, offset)
        return [name, data_type, list(array.shape), offset, size], offset + size

    def _put(self, array: np.ndarray, offset: int) -> int:
        assert self.memory is not None
        if array.dtype == STRING:
            position = offset
            for element in _bytes_elements(array):
                _ELEMENT_LENGTH.pack_into(self.memory, position, len(element))
                position += _ELEMENT_LENGTH.size
                self.memory[position : position + len(element)] = element
                position += len(element)
            return position - offset
        np.ndarray(array.shape, array.dtype, self.memory, offset)[...] = array
        return array.nbytes

    # --- reading ----------------------------------------------------------------

    def read(self, descriptors: Any) -> dict[str, np.ndarray]:
        """The tensors the descriptors name, numbers as views of the mapping. Every field is
        checked: a peer's descriptor that points outside the slab raises MessageError."""
        if not isinstance(descriptors, list) or len(descriptors) > MAX_TENSORS:
            raise MessageError(f"tensors must be a list of at most {MAX_TENSORS} descriptors")
        tensors = {}
        for descriptor in descriptors:
            name, dtype, shape, offset, size = checked(descriptor, self.size)
            tensors[name] = self._get(name, dtype, shape, offset, size)
        return tensors

    def _get(self, name: str, dtype: np.dtype, shape: tuple[int, ...], offset: int, size: int) -> np.ndarray:
        assert self.memory is not None or size == 0
        memory = self.memory if self.memory is not None else b""  # a 0-byte slab maps nothing: no tensor reads it
        if dtype != STRING:
            if size == 0:
                return np.empty(shape, dtype)
            return np.ndarray(shape, dtype, memory, offset)  # a view; 4x faster than frombuffer and reshape
        elements = []
        position, end = offset, offset + size
        for _ in range(prod(shape)):
            if position + _ELEMENT_LENGTH.size > end:
                raise MessageError(f"tensor '{name}': its BYTES elements end early")
            (length,) = _ELEMENT_LENGTH.unpack_from(memory, position)
            position += _ELEMENT_LENGTH.size
            if position + length > end:
                raise MessageError(f"tensor '{name}': an element of {length:,} bytes runs past the tensor")
            elements.append(memory[position : position + length])
            position += length
        array = np.empty(len(elements), dtype=np.object_)
        array[:] = elements
        return array.reshape(shape)


class GrowingSlab:
    """The writer's side: a slab that is replaced by a larger one when a batch does not fit."""

    def __init__(self, name: str, initial: int) -> None:
        self.name = name
        self.slab = Slab.create(initial, name)
        self.fresh = True  # not yet sent to the reader

    def room(self, needed: int) -> Slab:
        """A slab of at least `needed` bytes (a new one, marked fresh, when the current is smaller)."""
        if needed > self.slab.size:
            old = self.slab
            self.slab = Slab.create(max(needed, 2 * old.size), self.name)
            old.close()
            self.fresh = True
        return self.slab

    def handover(self) -> tuple[int, ...]:
        """The descriptor to send with this message when the reader has not got this slab yet."""
        if not self.fresh:
            return ()
        self.fresh = False
        return (self.slab.fd,)

    def close(self) -> None:
        self.slab.close()
