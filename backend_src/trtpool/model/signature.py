"""What a loaded model accepts and returns: tensors, dtypes, shape ranges, profiles.

Shapes here are full engine shapes: when the model is batched the first
dimension is the batch dimension. ``-1`` marks a dynamic dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from math import prod

import numpy as np

from trtpool.errors import ConfigError, InvalidInput
from trtpool.model.dtypes import TRITON_DTYPES


@dataclass(frozen=True)
class ShapeRange:
    """One optimization profile's min/opt/max for one input (full shapes)."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def contains(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.min) and all(
            lo <= d <= hi for lo, d, hi in zip(self.min, shape, self.max, strict=False)
        )


def check_range(spec: TensorSpec, shape_range: ShapeRange, where: str) -> None:
    """Refuse a shape range that contradicts the model's input: its rank, or a dimension it fixes."""
    if len(shape_range.min) != len(spec.shape):
        raise ConfigError(
            f"{where}: input '{spec.name}' has rank {len(spec.shape)} (shape {list(spec.shape)}) "
            f"but the profile gives rank {len(shape_range.min)}"
        )
    for axis, (dim, low, high) in enumerate(zip(spec.shape, shape_range.min, shape_range.max, strict=False)):
        if dim != -1 and not low == high == dim:
            raise ConfigError(
                f"{where}: input '{spec.name}' dimension {axis} is fixed at {dim} in the model "
                f"but the profile gives {low}..{high}"
            )


@dataclass(frozen=True)
class Profile:
    """An optimization profile: a shape range per input."""

    index: int
    ranges: dict[str, ShapeRange]

    def fits(self, shapes: dict[str, tuple[int, ...]]) -> bool:
        return all(self.ranges[name].contains(shape) for name, shape in shapes.items())

    def max_batch(self) -> int:
        return min(r.max[0] for r in self.ranges.values())

    def slack(self, shapes: dict[str, tuple[int, ...]]) -> int:
        """How much larger the profile's max is than the request: smaller fits better."""
        return sum(prod(self.ranges[n].max) - prod(s) for n, s in shapes.items())


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def triton_dtype(self) -> str:
        return TRITON_DTYPES[self.dtype]


def is_batched(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> bool:
    """Whether a model's tensors give it a batch axis (Triton's max_batch_size > 0): it has
    inputs, and every input and output starts with a dynamic dimension.

    The outputs count, for an engine as for an ONNX graph: a batch's outputs are cut back
    into its requests along their first axis, so an output without a batch axis there (a
    sum over the batch [N], NonZero's [2, count] whose length depends on the data) makes
    the model one that is served unbatched, a request at a time. A data-dependent output
    whose first dimension is -1 (NMS's [count, 6]) cannot be told from a batched one by
    its shape.
    """
    return bool(inputs) and all(spec.shape[:1] == (-1,) for spec in (*inputs, *outputs))


@dataclass(frozen=True)
class Signature:
    """A model's I/O and profiles, as read from the engine or ONNX file."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    profiles: tuple[Profile, ...]
    batched: bool
    owner: str = "model"  # whose profiles they are, in messages: "engine" for a TensorRT engine

    @cached_property
    def scalar_inputs(self) -> frozenset[str]:
        """The inputs of rank 0."""
        return frozenset(spec.name for spec in self.inputs if spec.shape == ())

    @cached_property
    def accepted_layouts(self) -> dict[tuple, dict[str, tuple[int, ...]]]:
        """Request layouts (name, data type, shape of each tensor) that trtpool.model.validate has
        accepted, with their shapes: the same few come again and again."""
        return {}

    @property
    def max_batch_size(self) -> int:
        """The largest batch any profile accepts (0 when the model is not batched)."""
        return max(p.max_batch() for p in self.profiles) if self.batched else 0

    def max_shape(self, name: str) -> tuple[int, ...]:
        """The largest shape any profile allows for an input (what buffers are sized for)."""
        maxima = [p.ranges[name].max for p in self.profiles]
        return tuple(max(dims) for dims in zip(*maxima, strict=False))

    def choose_profile(self, shapes: dict[str, tuple[int, ...]]) -> Profile:
        """The profile whose range fits these input shapes most tightly."""
        fitting = [p for p in self.profiles if p.fits(shapes)]
        if fitting:
            return min(fitting, key=lambda p: p.slack(shapes))
        raise InvalidInput(self.describe_misfit(shapes))

    def describe_misfit(self, shapes: dict[str, tuple[int, ...]]) -> str:
        """Name the first input and dimension that no profile admits."""
        for name, shape in shapes.items():
            ranges = [p.ranges[name] for p in self.profiles]
            if not any(r.contains(shape) for r in ranges):
                allowed = " or ".join(f"[{list(r.min)} .. {list(r.max)}]" for r in ranges)
                return (
                    f"input '{name}': shape {list(shape)} is outside the {self.owner}'s "
                    f"optimization profiles; expected a shape within {allowed}"
                )
        return "no single optimization profile admits the shapes " + ", ".join(
            f"'{n}' {list(s)}" for n, s in shapes.items()
        )
