"""The client profile trtpool-tune measures under, and the check that the model can take it."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trtpool.errors import ConfigError
from trtpool.shapes import parse_profile

PROTOCOLS = ("grpc", "http")
TRANSPORTS = ("none", "system", "cuda")


class ProfileError(ValueError):
    """The client profile is one the model cannot take."""


@dataclass(frozen=True)
class ClientProfile:
    batch: int = 1
    concurrency: int = 1
    request_rate: float | None = None     # requests/s, open loop; replaces concurrency
    protocol: str = "grpc"
    shm: str = "none"
    shapes: tuple[str, ...] = ()          # perf_analyzer's NAME:D1,D2 (no batch dimension)
    input_data: str | None = None         # zero, random, or a JSON file

    def as_dict(self) -> dict:
        load = {"request_rate": self.request_rate} if self.request_rate else {"concurrency": self.concurrency}
        return {"batch": self.batch, **load, "protocol": self.protocol, "shm": self.shm,
                "shapes": list(self.shapes), "input_data": self.input_data}

    def shape_of(self) -> dict[str, tuple[int, ...]]:
        shapes = {}
        for text in self.shapes:
            name, sep, dims = text.rpartition(":")
            try:
                shapes[name] = tuple(int(d) for d in dims.split(","))
            except ValueError:
                raise ProfileError(f"--shape {text}: expected NAME:D1,D2,... (the dimensions after the batch "
                                   "dimension), e.g. input_ids:128") from None
            if not sep or not name:
                raise ProfileError(f"--shape {text}: expected NAME:D1,D2,..., e.g. input_ids:128")
        return shapes


def _fits(dims: Sequence[int], shape: Sequence[int]) -> bool:
    return len(dims) == len(shape) and all(d in (-1, s) for d, s in zip(dims, shape))


def _ranges(config: dict[str, Any]) -> list[dict]:
    text = config.get("parameters", {}).get("profile", {}).get("string_value", "")
    try:
        return [parse_profile(p) for p in text.split(";") if p.strip()]
    except ConfigError:
        return []   # the model loaded, so the backend took it; nothing to check against here


def _in_some_profile(name: str, full: tuple[int, ...], ranges: list[dict]) -> tuple[bool, str]:
    spans = [r[name] for r in ranges if name in r]
    fits = not spans or any(len(s.min) == len(full) and all(a <= v <= b for a, v, b in zip(s.min, full, s.max))
                            for s in spans)
    text = " or ".join("x".join(map(str, s.min)) + " to " + "x".join(map(str, s.max)) for s in spans)
    return fits, text


def check(profile: ClientProfile, config: dict[str, Any], model: str) -> None:
    """Raise ProfileError naming the input (or the batch) and what the model expects."""
    max_batch = int(config.get("max_batch_size", 0))
    if max_batch == 0 and profile.batch > 1:
        raise ProfileError(f"--batch {profile.batch}: model '{model}' does not batch (max_batch_size 0); use --batch 1")
    if max_batch and profile.batch > max_batch:
        raise ProfileError(f"--batch {profile.batch}: model '{model}' takes batches up to max_batch_size {max_batch}")
    inputs = {spec["name"]: [int(d) for d in spec.get("dims", [])] for spec in config.get("input", [])}
    given = profile.shape_of()
    for name in given:
        if name not in inputs:
            raise ProfileError(f"--shape {name}: model '{model}' has no input '{name}'; its inputs are "
                               f"{', '.join(sorted(inputs))}")
    ranges = _ranges(config)
    for name, dims in inputs.items():
        if name not in given:
            if -1 in dims and profile.input_data in (None, "zero", "random"):
                raise ProfileError(f"input '{name}' has variable dimensions {dims}: give its shape, "
                                   f"e.g. --shape {name}:{','.join(str(max(d, 1)) for d in dims)}")
            continue
        shape = given[name]
        if not _fits(dims, shape):
            raise ProfileError(f"--shape {name}:{','.join(map(str, shape))}: input '{name}' expects dims {dims} "
                               "(after the batch dimension; -1 takes any size)")
        full = (profile.batch, *shape) if max_batch else shape
        fits, spans = _in_some_profile(name, full, ranges)
        if not fits:
            raise ProfileError(f"--shape {name}:{','.join(map(str, shape))} at --batch {profile.batch}: input "
                               f"'{name}' takes shapes {spans} (the model's profiles)")
