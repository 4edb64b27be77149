"""Batch buckets: the sizes a GPU runtime pads a batch to, so that a context captures one CUDA
graph per bucket instead of one per batch size. Two policies, one per runtime:

    power_of_two_buckets  TensorRT: the profile's smallest batch, the powers of two above it,
                          its largest (as Triton's TensorRT backend captures graphs)
    stepped_buckets       torch: powers of two up to max / steps, then multiples of that step,
                          then max (no bucket pads by more than max / steps rows)

A batch runs in the smallest bucket that holds it (bucket_of), its padding cut off the outputs.
"""

from __future__ import annotations

import bisect

Buckets = tuple[int, ...] | None  # the sizes a dimension is padded to; None: used as given


def power_of_two_buckets(low: int, high: int) -> tuple[int, ...]:
    """The batch sizes graphs are captured for in a profile taking batches low..high."""
    powers = {1 << k for k in range(high.bit_length()) if low < 1 << k < high}
    return tuple(sorted({low, high} | powers))


def stepped_buckets(max_batch: int, steps: int = 8) -> tuple[int, ...]:
    """Powers of two up to max_batch / `steps`, then multiples of it, then max_batch.

    A batch runs in the smallest bucket that holds it, padded: with powers of two
    alone a batch of 17 computes 32 rows. Here no bucket wastes more than
    max_batch / steps rows (4 of 32), for `steps` + log2 graphs per context."""
    step = 1 << max(0, (max_batch // steps).bit_length() - 1)  # a power of two, max_batch / steps or below
    sizes = [1 << k for k in range(step.bit_length() - 1)]
    sizes += range(step, max_batch, step)
    return (*sizes, max_batch)


def clip_buckets(candidates: tuple[int, ...], limit: int) -> tuple[int, ...]:
    """The candidates below limit, then limit itself."""
    return (*(c for c in sorted(candidates) if c < limit), limit)


def bucket_of(value: int, buckets: Buckets) -> int:
    """The smallest bucket that holds `value` (`value` itself where there are none)."""
    return value if buckets is None else buckets[bisect.bisect_left(buckets, value)]
