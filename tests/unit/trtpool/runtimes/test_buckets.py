"""trtpool.runtimes.buckets: the sizes each GPU runtime pads a batch to, by its policy (TensorRT's
powers of two within each profile, the torch runtime's steps of at most an eighth of the largest
batch), and the torch runtime's sequence buckets cut at the profile's largest length."""
from __future__ import annotations

from trtpool.runtimes.buckets import bucket_of, clip_buckets, power_of_two_buckets, stepped_buckets


def test_batch_buckets_cover_each_profile():
    assert power_of_two_buckets(1, 4) == (1, 2, 4)
    assert power_of_two_buckets(5, 16) == (5, 8, 16)
    assert power_of_two_buckets(1, 12) == (1, 2, 4, 8, 12)
    assert power_of_two_buckets(3, 3) == (3,)


def test_batch_buckets_pad_by_at_most_an_eighth_of_the_max():
    assert stepped_buckets(32) == (1, 2, 4, 8, 12, 16, 20, 24, 28, 32)
    assert stepped_buckets(64) == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert stepped_buckets(24) == (1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24)
    assert stepped_buckets(8) == (1, 2, 3, 4, 5, 6, 7, 8)
    assert stepped_buckets(1) == (1,)
    for largest in range(1, 130):
        buckets = stepped_buckets(largest)
        assert buckets[-1] == largest and list(buckets) == sorted(set(buckets))
        assert all(bucket_of(n, buckets) - n <= max(1, largest // 8) for n in range(1, largest + 1))


def test_sequence_buckets_stop_at_the_profile_max():
    assert clip_buckets((32, 64, 128, 256, 512), 512) == (32, 64, 128, 256, 512)
    assert clip_buckets((32, 64, 128, 256, 512), 100) == (32, 64, 100)
    buckets = clip_buckets((32, 64, 128), 128)
    assert [bucket_of(n, buckets) for n in (1, 32, 33, 127, 128)] == [32, 32, 64, 128, 128]
    assert bucket_of(77, None) == 77
