"""Host memory page-locked in place (cudaHostRegister), and whether an array lies in it.

The engine host registers each instance's input slab (trtpool.host.slab) on a GPU: a
runtime's upload then copies the requests' rows from the slab to the device by DMA, with
no gather into pinned staging (trtpool.gpu.host_upload). A DMA reads the rows after the
upload call returns, so the region's owner keeps them unchanged until the batch is done
and unregisters the region before its memory is unmapped (the host: when the slab is
replaced or its instance is gone, never while a run of it is in flight).
"""

from __future__ import annotations

import logging
import mmap
import threading

import numpy as np

from trtpool.gpu import cuda

log = logging.getLogger("trtpool")

_regions: dict[int, int] = {}  # start address -> end address, of every region registered now
_lock = threading.Lock()


class PinnedRegion:
    """A mapping page-locked in place while this is open; close() unlocks it."""

    def __init__(self, memory: mmap.mmap) -> None:
        view = np.frombuffer(memory, np.uint8)  # its address (the buffer export ends with the view)
        self.start, self.nbytes = int(view.ctypes.data), view.nbytes
        cuda.host_register(self.start, self.nbytes)
        with _lock:
            _regions[self.start] = self.start + self.nbytes

    def close(self) -> None:
        with _lock:
            if _regions.pop(self.start, None) is None:
                return
        cuda.host_unregister(self.start)


def pinned(memory: mmap.mmap | None, what: str) -> PinnedRegion | None:
    """`memory` registered, or None (logged) where CUDA refuses: its rows then go through staging."""
    if memory is None:
        return None
    try:
        region = PinnedRegion(memory)
    except cuda.CudaError as exc:
        log.warning("%s stays pageable (its rows go through pinned staging): %s", what, exc)
        return None
    log.info(
        "%s is page-locked in place (%s bytes): its rows go to the GPU by DMA from there", what, f"{region.nbytes:,}"
    )
    return region


def any_pinned() -> bool:
    """Whether any region is registered now (none outside an engine host): a cheap first look."""
    return bool(_regions)


def range_is_pinned(start: int, nbytes: int) -> bool:
    """Whether the bytes [start, start + nbytes) lie in one registered region."""
    end = start + nbytes
    with _lock:
        return any(low <= start and end <= high for low, high in _regions.items())
