"""DeviceArray's row views and how a batch's GPU parts are joined (pointer arithmetic only: no GPU)."""

import numpy as np

from trtpool.gpu.device_tensors import DeviceArray, coalesced

ROW = 3 * 4 * 4  # bytes of a [3, 4] float32 row


def batch(rows: int, owner: object | None = None, ptr: int = 1 << 20) -> DeviceArray:
    return DeviceArray(owner if owner is not None else object(), ptr, (rows, 3, 4))


def test_adjacent_rows_of_one_batch_become_one_part():
    whole = batch(5)
    joined = coalesced([whole[0:1], whole[1:3], whole[3:5]])
    assert len(joined) == 1
    assert (joined[0].ptr, joined[0].shape) == (whole.ptr, whole.shape)


def test_a_gap_a_reordering_or_another_allocation_keeps_parts_apart():
    whole = batch(6)
    assert [p.shape[0] for p in coalesced([whole[0:2], whole[3:4], whole[4:6]])] == [2, 3]
    assert [p.ptr for p in coalesced([whole[2:3], whole[1:2]])] == [whole.ptr + 2 * ROW, whole.ptr + ROW]
    other = batch(2, ptr=whole.ptr + 6 * ROW)  # memory right after, but not the same buffer's
    assert len(coalesced([whole[4:6], other])) == 2


def test_parts_that_are_not_device_arrays_pass_through():
    whole = batch(2)
    foreign = object()
    joined = coalesced([foreign, whole[0:1], whole[1:2], foreign])
    assert joined[0] is foreign and joined[2] is foreign and len(joined) == 3
    assert (joined[1].ptr, joined[1].shape) == (whole.ptr, whole.shape)


def test_a_device_array_of_another_type_keeps_it_through_slices_and_joins():
    """The engine host's device slabs carry any number type (fp16 inputs among them)."""
    owner = object()
    half = DeviceArray(owner, 0x1000, (4, 8), np.float16)
    assert half.nbytes == 64 and half.__cuda_array_interface__["typestr"] == "<f2"
    tail = half[2:]
    assert (tail.ptr, tail.shape, tail.dtype) == (0x1000 + 32, (2, 8), np.float16)
    joined = coalesced([half[:2], half[2:]])
    assert len(joined) == 1 and joined[0].shape == (4, 8) and joined[0].dtype == np.float16
    as_float = DeviceArray(owner, 0x1000 + 32, (2, 8))  # adjacent bytes, another type: kept apart
    assert len(coalesced([half[:2], as_float])) == 2
