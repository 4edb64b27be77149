"""Optimization profiles checked against a model's inputs before anything is built."""

from __future__ import annotations

from collections.abc import Sequence

from trtpool.errors import ConfigError
from trtpool.model.shapes import format_profile, parse_profile
from trtpool.model.signature import Profile, ShapeRange, TensorSpec, check_range

# The batch axis's MIN, OPT, MAX where trtpool chooses it, and example sizes for the other
# dynamic axes in the message that asks for --shapes.
BATCHES = (1, 8, 32)
EXAMPLE_SIZES = (64, 128, 256)


def batch_only_profile(inputs: Sequence[TensorSpec], largest: int | None = None) -> str | None:
    """Shapes text for a model whose only dynamic dimension is each input's first (the batch):
    batches BATCHES (MAX `largest` where given, OPT at most it); None for any other model,
    whose ranges only the user knows."""
    if not inputs or any(spec.shape[:1] != (-1,) or -1 in spec.shape[1:] for spec in inputs):
        return None
    low, opt, high = BATCHES if not largest else (1, min(BATCHES[1], largest), largest)
    return format_profile(
        {
            spec.name: ShapeRange((low, *spec.shape[1:]), (opt, *spec.shape[1:]), (high, *spec.shape[1:]))
            for spec in inputs
        }
    )


def _example(spec: TensorSpec) -> ShapeRange:
    """A range in the real format: BATCHES on a dynamic axis 0, EXAMPLE_SIZES on other dynamic axes."""

    def shape(level: int) -> tuple[int, ...]:
        return tuple(
            d if d != -1 else (BATCHES if axis == 0 else EXAMPLE_SIZES)[level] for axis, d in enumerate(spec.shape)
        )

    return ShapeRange(shape(0), shape(1), shape(2))


def shapes_needed(dynamic: Sequence[TensorSpec]) -> str:
    """Why --shapes is needed and what it looks like, from the model's own shapes."""
    axes = "; ".join(
        f"'{spec.name}' {list(spec.shape)} axes {[a for a, d in enumerate(spec.shape) if d == -1]}" for spec in dynamic
    )
    return (
        f"dynamic dimensions ({axes}), and trtpool chooses a range only for a batch axis alone (every "
        "input's first dimension, no other): give each input's shape range with "
        "--shapes NAME=MIN:OPT:MAX, each a full shape with its dimensions joined by 'x', e.g. --shapes "
        f"{format_profile({spec.name: _example(spec) for spec in dynamic})} (sizes beyond the batch axis "
        "are examples: give the ones your model takes)"
    )


def resolve_profiles(texts: Sequence[str], inputs: Sequence[TensorSpec]) -> tuple[Profile, ...]:
    """One Profile per shapes text, covering every input.

    Fully static inputs may be left out (their one shape is filled in); with no
    texts at all a model whose inputs are all static gets one fixed profile.
    """
    by_name = {spec.name: spec for spec in inputs}
    dynamic = [spec.name for spec in inputs if -1 in spec.shape]
    if not texts:
        if dynamic:
            raise ConfigError(f"inputs {dynamic} have " + shapes_needed([by_name[n] for n in dynamic]))
        texts = [""]
    profiles = []
    for index, text in enumerate(texts):
        where = f"profile {index} ('{text}')"
        ranges = parse_profile(text) if text else {}
        unknown = sorted(set(ranges) - set(by_name))
        if unknown:
            raise ConfigError(
                f"{where}: the model has no input(s) {unknown}; its inputs are {[spec.name for spec in inputs]}"
            )
        missing = [name for name in dynamic if name not in ranges]
        if missing:
            raise ConfigError(
                f"{where}: no shape range for dynamic input(s) {missing}; every profile "
                "must give MIN:OPT:MAX for each input with a -1 dimension"
            )
        for spec in inputs:
            if spec.name in ranges:
                check_range(spec, ranges[spec.name], where)
            else:
                ranges[spec.name] = ShapeRange(spec.shape, spec.shape, spec.shape)
        profiles.append(Profile(index, {spec.name: ranges[spec.name] for spec in inputs}))
    return tuple(profiles)


def opt_batch(profile: Profile) -> int:
    return min(r.opt[0] for r in profile.ranges.values())
