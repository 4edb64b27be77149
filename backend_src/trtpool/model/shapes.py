"""The one text form of optimization-profile shapes, shared by the builder's
``--shapes`` option and the model config's ``profile`` parameter.

    input_ids=1x1:8x128:32x512,attention_mask=1x1:8x128:32x512

Each input is ``name=MIN:OPT:MAX`` with the dimensions of a full shape (batch
first) joined by ``x``; inputs are separated by commas. ``name=SHAPE`` alone
means a fixed shape (min = opt = max). A scalar (rank 0) has no dimensions:
``sr=`` or ``sr=::``, as format_profile writes it.
"""

from __future__ import annotations

from trtpool.errors import ConfigError
from trtpool.model.signature import ShapeRange


def _parse_dims(text: str, where: str) -> tuple[int, ...]:
    if not text:
        return ()  # a scalar
    try:
        dims = tuple(int(d) for d in text.split("x"))
    except ValueError:
        raise ConfigError(f"{where}: '{text}' is not a shape like 8x3x224x224") from None
    if any(d < 0 for d in dims):
        raise ConfigError(f"{where}: every dimension in '{text}' must be at least 0 (0: an empty tensor)")
    return dims


def parse_profile(text: str) -> dict[str, ShapeRange]:
    """Parse one profile's shapes; errors name the input and the expected form."""
    ranges: dict[str, ShapeRange] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, spec = item.partition("=")
        if not sep or not name:
            raise ConfigError(
                f"shape '{item}': expected NAME=MIN:OPT:MAX, e.g. input=1x3x224x224:8x3x224x224:32x3x224x224"
            )
        where = f"input '{name}'"
        parts = [_parse_dims(p, where) for p in spec.split(":")]
        if len(parts) == 1:
            parts *= 3
        if len(parts) != 3:
            raise ConfigError(f"{where}: expected MIN:OPT:MAX or one fixed shape, got '{spec}'")
        low, opt, high = parts
        if not len(low) == len(opt) == len(high):
            raise ConfigError(f"{where}: MIN, OPT and MAX must have the same rank, got '{spec}'")
        if not all(a <= b <= c for a, b, c in zip(low, opt, high, strict=True)):
            raise ConfigError(f"{where}: need MIN <= OPT <= MAX in every dimension, got '{spec}'")
        ranges[name] = ShapeRange(low, opt, high)
    if not ranges:
        raise ConfigError("empty profile: expected NAME=MIN:OPT:MAX[,NAME=...]")
    return ranges


def format_profile(ranges: dict[str, ShapeRange]) -> str:
    def dims(shape: tuple[int, ...]) -> str:
        return "x".join(map(str, shape))

    return ",".join(f"{name}={dims(r.min)}:{dims(r.opt)}:{dims(r.max)}" for name, r in ranges.items())
