"""Preallocated per-context host buffers and request gather/scatter.

Each context owns one flat array per tensor, sized for the largest shape the
model's profiles allow. A batch is gathered into a view of that array and
outputs are scattered back per request as views: nothing is allocated per
request on this path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod

import numpy as np

# Allocates `count` elements of `dtype` as a flat array (pinned host memory on
# a GPU runtime, plain numpy memory on the CPU).
Allocator = Callable[[np.dtype, int], np.ndarray]


def numpy_allocator(dtype: np.dtype, count: int) -> np.ndarray:
    return np.empty(count, dtype=dtype)


class HostBuffers:
    """Named flat buffers, each with a fixed capacity in elements."""

    def __init__(self, capacities: dict[str, tuple[np.dtype, int]], allocate: Allocator = numpy_allocator) -> None:
        self._flat = {name: allocate(np.dtype(dtype), count) for name, (dtype, count) in capacities.items()}

    def __contains__(self, name: str) -> bool:
        return name in self._flat

    def flat(self, name: str) -> np.ndarray:
        return self._flat[name]

    def view(self, name: str, shape: Sequence[int]) -> np.ndarray:
        """A writable view of the first prod(shape) elements, shaped."""
        flat = self._flat[name]
        count = prod(shape)
        if count > flat.size:
            raise ValueError(
                f"tensor '{name}': shape {list(shape)} needs {count} elements, the buffer holds {flat.size}"
            )
        return flat[:count].reshape(shape)


def gather(parts: Sequence[np.ndarray], out: np.ndarray) -> np.ndarray:
    """Concatenate request tensors along the batch axis into a preallocated view."""
    if len(parts) == 1:
        np.copyto(out, parts[0], casting="no")
    else:
        np.concatenate(parts, axis=0, out=out, casting="no")
    return out


def split_points(batch_sizes: Sequence[int]) -> list[tuple[int, int]]:
    """[(start, stop)] along the batch axis for each request, in order."""
    bounds, start = [], 0
    for size in batch_sizes:
        bounds.append((start, start + size))
        start += size
    return bounds
