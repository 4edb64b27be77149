"""DeviceArray's row views and how a batch's GPU parts are joined (pointer arithmetic only: no GPU)."""

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
