"""Host request tensors into a context's device buffer, for the GPU runtimes.

A batch's host parts are gathered into the context's pinned staging buffer and copied to the
device: cut into row slices, a few threads gather at once while each slice's copy is queued as
soon as it is in place; a small batch goes in one piece on the caller's thread. The runtimes use
the sliced uploader (bench/results/h200/host_copies.json); ONE_PIECE stays as the baseline of
bench/host_copies.py. docs/design/host-uploads.md.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

import numpy as np

from trtpool.gpu import cuda
from trtpool.gpu.pinned_regions import any_pinned, range_is_pinned

SLICE_BYTES = 2 << 20  # a slice must be worth a thread hop (tens of µs) and a DMA call
DMA_WORTH_BYTES = 32 << 10  # a copy call costs what gathering this many bytes does (a few µs)
MAX_SLICES = 8  # enough to keep the DMA busy behind the gather; each slice costs a copy call
ONE_PIECE = {"threads": 1, "slice_bytes": None}  # one gather, one copy: the baseline host_copies measures


def default_threads() -> int:
    """Gather threads per runtime: a quarter of the cores, 1 to 4 (the server, the
    stub's other threads and the clients share the machine)."""
    return max(1, min(4, (os.cpu_count() or 1) // 4))


def row_slices(
    rows: int, nbytes: int, slice_bytes: int | None = SLICE_BYTES, max_slices: int = MAX_SLICES
) -> list[tuple[int, int]]:
    """[(start, stop)] rows of near-equal size covering `rows`, each about
    `slice_bytes` or more, at most `max_slices` (None: one piece)."""
    if slice_bytes is None:
        return [(0, rows)]
    count = max(1, min(max_slices, rows, nbytes // max(slice_bytes, 1)))
    bounds = [rows * k // count for k in range(count + 1)]
    return list(itertools.pairwise(bounds))


def copy_rows(parts: Sequence[np.ndarray], offsets: Sequence[int], out: np.ndarray, start: int, stop: int) -> None:
    """Rows [start, stop) of the parts joined along axis 0 (part i starts at row
    offsets[i]), into the same rows of `out`."""
    for index in range(bisect.bisect_right(offsets, start) - 1, len(parts)):
        offset = offsets[index]
        if offset >= stop:
            return
        low, high = max(start, offset), min(stop, offset + parts[index].shape[0])
        if low < high:
            np.copyto(out[low:high], parts[index][low - offset : high - offset], casting="no")


def pinned_runs(parts: Sequence[np.ndarray], dtype: np.dtype) -> list[tuple[int, int]] | None:
    """The parts as (address, nbytes) runs of adjacent memory where every part is C-contiguous
    and of `dtype`, and every run lies in one page-locked region; else None (they go through
    staging). The regions are looked up once a run, not once a part: a batch's rows written
    side by side in a slab are one run."""
    if not any_pinned():  # an ordinary instance: no look at all on its request path
        return None
    runs: list[tuple[int, int]] = []
    for part in parts:
        if part.dtype != dtype or not part.flags.c_contiguous:
            return None
        address = int(part.ctypes.data)
        if runs and sum(runs[-1]) == address:
            runs[-1] = (runs[-1][0], runs[-1][1] + part.nbytes)
        else:
            runs.append((address, part.nbytes))
    return runs if all(range_is_pinned(address, nbytes) for address, nbytes in runs) else None


class HostUploader:
    """Gathers host parts into pinned staging and queues their copy to the device.
    One per runtime, shared by its contexts (thread-safe). `threads` counts the
    caller's: threads - 1 more are started, on first use."""

    def __init__(self, threads: int | None = None, slice_bytes: int | None = SLICE_BYTES) -> None:
        threads = default_threads() if threads is None else threads
        self.slice_bytes = slice_bytes
        self._pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="trtpool-gather") if threads > 1 else None

    def upload(self, parts: Sequence[np.ndarray], staging: np.ndarray, device_ptr: int, stream: cuda.Stream) -> None:
        """Copy the parts joined along axis 0 into `staging` (pinned, C-contiguous, the
        joined shape) and queue its copy to `device_ptr` on `stream`.

        Returns once the parts are no longer read (the DMA from staging may still
        run: the staging buffer must not be refilled before the stream passes it).
        Parts that are page-locked where they lie (trtpool.gpu.pinned_regions: an engine
        host's input slabs) skip staging where their runs of adjacent parts are few or large
        enough to be worth a copy call each: the DMA reads them after this returns, and their
        owner keeps them unchanged until then."""
        runs = pinned_runs(parts, staging.dtype) if staging.ndim else None
        if runs is not None and (len(runs) == 1 or staging.nbytes >= len(runs) * DMA_WORTH_BYTES):
            offset = 0
            for address, nbytes in runs:
                cuda.memcpy_htod_from_async(device_ptr + offset, address, nbytes, stream)
                offset += nbytes
            return
        if staging.ndim == 0:
            np.copyto(staging, parts[0], casting="no")
            cuda.memcpy_htod_async(device_ptr, staging.reshape(1), staging.nbytes, stream)
            return
        slices = row_slices(staging.shape[0], staging.nbytes, self.slice_bytes)
        row_bytes = staging.nbytes // max(staging.shape[0], 1)
        offsets = [0, *itertools.accumulate(part.shape[0] for part in parts)][:-1]
        # The caller gathers the first slice and queues its DMA while the pool gathers the rest.
        later: list[Future] = (
            [self._pool.submit(copy_rows, parts, offsets, staging, start, stop) for start, stop in slices[1:]]
            if self._pool is not None
            else []
        )
        try:
            for index, (start, stop) in enumerate(slices):
                if index == 0 or self._pool is None:
                    copy_rows(parts, offsets, staging, start, stop)
                else:
                    later[index - 1].result()
                rows = staging[start:stop]
                cuda.memcpy_htod_async(device_ptr + start * row_bytes, rows, rows.nbytes, stream)
        finally:
            wait(later)  # on a failure too: no slice may still be written after we return

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
