"""Optimization profiles checked against a model's inputs before anything is built."""
from __future__ import annotations

from collections.abc import Sequence

from trtpool.errors import ConfigError
from trtpool.shapes import parse_profile
from trtpool.signature import Profile, ShapeRange, TensorSpec, check_range


def resolve_profiles(texts: Sequence[str], inputs: Sequence[TensorSpec]) -> tuple[Profile, ...]:
    """One Profile per shapes text, covering every input.

    Fully static inputs may be left out (their one shape is filled in); with no
    texts at all a model whose inputs are all static gets one fixed profile.
    """
    by_name = {spec.name: spec for spec in inputs}
    dynamic = [spec.name for spec in inputs if -1 in spec.shape]
    if not texts:
        if dynamic:
            raise ConfigError(f"inputs {dynamic} have dynamic dimensions: give their shape ranges, "
                              "e.g. --shapes " + ",".join(f"{n}=MIN:OPT:MAX" for n in dynamic))
        texts = [""]
    profiles = []
    for index, text in enumerate(texts):
        where = f"profile {index} ('{text}')"
        ranges = parse_profile(text) if text else {}
        unknown = sorted(set(ranges) - set(by_name))
        if unknown:
            raise ConfigError(f"{where}: the model has no input(s) {unknown}; its inputs are "
                              f"{[spec.name for spec in inputs]}")
        missing = [name for name in dynamic if name not in ranges]
        if missing:
            raise ConfigError(f"{where}: no shape range for dynamic input(s) {missing}; every profile "
                              "must give MIN:OPT:MAX for each input with a -1 dimension")
        for spec in inputs:
            if spec.name in ranges:
                check_range(spec, ranges[spec.name], where)
            else:
                ranges[spec.name] = ShapeRange(spec.shape, spec.shape, spec.shape)
        profiles.append(Profile(index, {spec.name: ranges[spec.name] for spec in inputs}))
    return tuple(profiles)


def is_batched(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> bool:
    """Batched (Triton max_batch_size > 0) when every tensor's first dimension is dynamic."""
    return all(spec.shape and spec.shape[0] == -1 for spec in (*inputs, *outputs))


def opt_batch(profile: Profile) -> int:
    return min(r.opt[0] for r in profile.ranges.values())
