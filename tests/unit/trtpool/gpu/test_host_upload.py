"""Host parts gathered into pinned staging in slices and copied to the device,
over the CUDA double (tests/doubles/cuda_double.py: its copies run when the
stream is synchronized, reading the host memory then, as a real DMA does).
Every result is read back from the device and compared with np.concatenate."""
from __future__ import annotations

import mmap

import numpy as np
import pytest

from tests.doubles.cuda_double import FakeCudart
from trtpool.gpu import cuda
from trtpool.gpu.host_upload import HostUploader, row_slices
from trtpool.gpu.pinned_regions import PinnedRegion


@pytest.fixture
def fake(monkeypatch) -> FakeCudart:
    double = FakeCudart()
    monkeypatch.setattr(cuda, "_cudart", double)
    return double


def through_device(uploader: HostUploader, parts: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """Upload the parts, then copy the device buffer back and wait once."""
    dtype = parts[0].dtype
    count = int(np.prod(shape))
    staging = cuda.pinned_allocator(dtype, count)[:count].reshape(shape)
    device, stream = cuda.DeviceBuffer(staging.nbytes), cuda.Stream()
    uploader.upload(parts, staging, device.ptr, stream)
    back = cuda.pinned_allocator(dtype, count)
    cuda.memcpy_dtoh_async(back, device.ptr, staging.nbytes, stream)
    stream.synchronize()
    return back.reshape(shape)


@pytest.mark.parametrize("rows, nbytes, slice_bytes, expected", [
    (32, 19 << 20, 2 << 20, 8),   # a ResNet-50 batch: capped at MAX_SLICES
    (32, 3 << 20, 2 << 20, 1),    # under two slices' worth: one piece
    (3, 64 << 20, 1 << 20, 3),    # never more slices than rows
    (1, 1 << 30, 1 << 20, 1),
])
def test_row_slices_cover_the_rows_in_near_equal_parts(rows, nbytes, slice_bytes, expected):
    slices = row_slices(rows, nbytes, slice_bytes)
    assert len(slices) == expected
    assert slices[0][0] == 0 and slices[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(slices, slices[1:]))
    sizes = [stop - start for start, stop in slices]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("threads", [1, 3])
def test_parts_arrive_joined_in_one_copy_per_slice(fake, threads):
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((n, 4, 5)).astype(np.float32) for n in (1, 3, 2, 5, 1)]
    uploader = HostUploader(threads=threads, slice_bytes=3 * 4 * 5 * 4)  # three rows per slice
    try:
        before = fake.calls["cudaMemcpyAsync"]
        result = through_device(uploader, parts, (12, 4, 5))
    finally:
        uploader.close()
    np.testing.assert_array_equal(result, np.concatenate(parts))
    assert fake.calls["cudaMemcpyAsync"] - before == 4 + 1  # four slices up, one copy back


def test_strided_parts_and_a_single_part(fake):
    rng = np.random.default_rng(1)
    wide = rng.standard_normal((6, 8)).astype(np.float32)
    uploader = HostUploader(threads=2, slice_bytes=8)
    try:
        np.testing.assert_array_equal(through_device(uploader, [wide[:, ::2], wide[:2, 1::2]], (8, 4)),
                                      np.concatenate([wide[:, ::2], wide[:2, 1::2]]))
        np.testing.assert_array_equal(through_device(uploader, [wide], (6, 8)), wide)
        scalar = np.array(2.5, np.float32)
        np.testing.assert_array_equal(through_device(uploader, [scalar], ()), scalar)
    finally:
        uploader.close()


def test_a_part_of_another_type_is_refused(fake):
    parts = [np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float64)]
    uploader = HostUploader(threads=3, slice_bytes=8)
    staging = cuda.pinned_allocator(np.float32, 16).reshape(4, 4)
    device, stream = cuda.DeviceBuffer(staging.nbytes), cuda.Stream()
    try:
        with pytest.raises(TypeError, match="float64"):
            uploader.upload(parts, staging, device.ptr, stream)
    finally:
        uploader.close()


def slab_rows(memory: mmap.mmap, rows: list[int], row_floats: int, gap: int = 0) -> list[np.ndarray]:
    """Parts as an engine host reads them: float32 views of one mapping, `gap` bytes apart."""
    parts, offset = [], 0
    for count in rows:
        parts.append(np.frombuffer(memory, np.float32, count * row_floats, offset).reshape(count, row_floats))
        parts[-1][...] = (np.arange(parts[-1].size, dtype=np.float32) + offset).reshape(parts[-1].shape)
        offset += parts[-1].nbytes + gap
    return parts


def test_parts_page_locked_in_place_go_by_dma_from_where_they_lie(fake):
    """An engine host's input slab, registered: its rows skip staging, one copy per run of
    adjacent parts, read by the DMA when the stream runs (so the slab's owner must not change
    them before then: here a change made before the synchronize is what arrives)."""
    memory = mmap.mmap(-1, 1 << 20)
    region = PinnedRegion(memory)
    uploader = HostUploader(threads=2, slice_bytes=1024)
    try:
        parts = slab_rows(memory, [1, 1, 2], 16 << 10)  # 64 KiB rows, side by side: one run
        staging = cuda.pinned_allocator(np.float32, 4 * (16 << 10)).reshape(4, 16 << 10)
        staging[...] = -1
        device, stream = cuda.DeviceBuffer(staging.nbytes), cuda.Stream()
        before = fake.calls["cudaMemcpyAsync"]
        uploader.upload(parts, staging, device.ptr, stream)
        assert fake.calls["cudaMemcpyAsync"] - before == 1
        expected = np.concatenate(parts).copy()
        parts[0][0, 0] = 12345.0  # after the call, before the stream ran: the DMA reads it
        expected[0, 0] = 12345.0
        back = cuda.pinned_allocator(np.float32, staging.size)
        cuda.memcpy_dtoh_async(back, device.ptr, staging.nbytes, stream)
        stream.synchronize()
        np.testing.assert_array_equal(back.reshape(staging.shape), expected)
        assert (staging == -1).all(), "the rows went through staging"
    finally:
        uploader.close()
        region.close()


@pytest.mark.parametrize("case", ["small runs", "not registered", "registration closed"])
def test_other_parts_are_gathered_into_staging(fake, case):
    """Many small runs (a copy call each would cost more than gathering them), memory that is
    not page-locked, or no longer: the parts go through staging as before."""
    memory = mmap.mmap(-1, 1 << 20)
    region = PinnedRegion(memory) if case != "not registered" else None
    if case == "registration closed":
        region.close()
    uploader = HostUploader(threads=1, slice_bytes=None)
    try:
        parts = slab_rows(memory, [1] * 8, 16, gap=64) if case == "small runs" else slab_rows(memory, [2, 2], 4096)
        shape = (8, 16) if case == "small runs" else (4, 4096)
        before = fake.calls["cudaMemcpyAsync"]
        np.testing.assert_array_equal(through_device(uploader, parts, shape), np.concatenate(parts))
        assert fake.calls["cudaMemcpyAsync"] - before == 1 + 1  # one piece up through staging, one back
    finally:
        uploader.close()
        if region is not None:
            region.close()
