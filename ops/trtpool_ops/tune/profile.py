"""The client profile trtpool-tune measures under, and the check that the model can take it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from trtpool.errors import ConfigError
from trtpool.model.shapes import parse_profile

PROTOCOLS = ("grpc", "http")
TRANSPORTS = ("none", "system", "cuda")


class ProfileError(ValueError):
    """The client profile is one the model cannot take."""


@dataclass(frozen=True)
class ClientProfile:
    batch: int = 1
    concurrency: int = 1
    request_rate: float | None = None  # requests/s, open loop; replaces concurrency
    protocol: str = "grpc"
    shm: str = "none"
    shapes: tuple[str, ...] = ()  # perf_analyzer's NAME:D1,D2 (no batch dimension)
    input_data: str | None = None  # zero, random, or a JSON file

    @property
    def generated_data(self) -> bool:
        """Whether perf_analyzer makes the inputs itself (random, or zeros) rather than reading a file."""
        return self.input_data in (None, "zero", "random")

    def as_dict(self) -> dict:
        load = {"request_rate": self.request_rate} if self.request_rate else {"concurrency": self.concurrency}
        return {
            "batch": self.batch,
            **load,
            "protocol": self.protocol,
            "shm": self.shm,
            "shapes": list(self.shapes),
            "input_data": self.input_data,
        }

    def shape_of(self) -> dict[str, tuple[int, ...]]:
        shapes = {}
        for text in self.shapes:
            name, sep, dims = text.rpartition(":")
            try:
                shapes[name] = tuple(int(d) for d in dims.split(","))
            except ValueError:
                raise ProfileError(
                    f"--shape {text}: expected NAME:D1,D2,... (the dimensions after the batch "
                    "dimension), e.g. input_ids:128"
                ) from None
            if not sep or not name:
                raise ProfileError(f"--shape {text}: expected NAME:D1,D2,..., e.g. input_ids:128")
        return shapes


def _fits(dims: Sequence[int], shape: Sequence[int]) -> bool:
    return len(dims) == len(shape) and all(d in (-1, s) for d, s in zip(dims, shape, strict=True))


def _ranges(config: dict[str, Any]) -> list[dict]:
    text = config.get("parameters", {}).get("profile", {}).get("string_value", "")
    try:
        return [parse_profile(p) for p in text.split(";") if p.strip()]
    except ConfigError:
        return []  # the model loaded, so the backend took it; nothing to check against here


def _in_some_profile(name: str, full: tuple[int, ...], ranges: list[dict]) -> tuple[bool, str]:
    spans = [r[name] for r in ranges if name in r]
    fits = not spans or any(
        len(s.min) == len(full) and all(a <= v <= b for a, v, b in zip(s.min, full, s.max, strict=False)) for s in spans
    )
    text = " or ".join("x".join(map(str, s.min)) + " to " + "x".join(map(str, s.max)) for s in spans)
    return fits, text


def _dims(shape: Sequence[int]) -> str:
    return ",".join(map(str, shape))


def _opt_shape(name: str, dims: list[int], ranges: list[dict], batched: bool) -> tuple[int, ...] | None:
    """The input's shape after the batch dimension at its first profile's opt (what the model was
    built for); None where no profile names it."""
    span = next((r[name] for r in ranges if name in r), None)
    if span is None:
        return None
    shape = tuple(span.opt[1:] if batched else span.opt)
    return shape if _fits(dims, shape) else None


def _filled(
    profile: ClientProfile, inputs: dict[str, list[int]], ranges: list[dict], batched: bool
) -> dict[str, tuple[int, ...]]:
    """A shape for each input with variable dimensions that --shape leaves out, from the model's
    profile; ProfileError naming every input the profile gives none, with an example for all at once."""
    given = profile.shape_of()
    missing = [n for n, dims in inputs.items() if n not in given and -1 in dims] if profile.generated_data else []
    filled = {n: _opt_shape(n, inputs[n], ranges, batched) for n in missing}
    lacking = [n for n, shape in filled.items() if shape is None]
    if lacking:
        example = " ".join(f"--shape {n}:{_dims(filled[n] or [max(d, 1) for d in inputs[n]])}" for n in missing)
        raise ProfileError(
            "input(s) " + ", ".join(f"'{n}' {inputs[n]}" for n in lacking) + " have variable "
            f"dimensions and the model's profile gives no shape for them: give one for each "
            f"input, e.g. {example}"
        )
    return {n: shape for n, shape in filled.items() if shape is not None}


def check(profile: ClientProfile, config: dict[str, Any], model: str) -> ClientProfile:
    """The profile as measured: every input with variable dimensions that --shape leaves out takes
    its opt shape from the model's profile. ProfileError names the input (or the batch) and what the
    model expects."""
    max_batch = int(config.get("max_batch_size", 0))
    if max_batch == 0 and profile.batch > 1:
        raise ProfileError(f"--batch {profile.batch}: model '{model}' does not batch (max_batch_size 0); use --batch 1")
    if max_batch and profile.batch > max_batch:
        raise ProfileError(f"--batch {profile.batch}: model '{model}' takes batches up to max_batch_size {max_batch}")
    inputs = {spec["name"]: [int(d) for d in spec.get("dims", [])] for spec in config.get("input", [])}
    for name in profile.shape_of():
        if name not in inputs:
            raise ProfileError(
                f"--shape {name}: model '{model}' has no input '{name}'; its inputs are {', '.join(sorted(inputs))}"
            )
    ranges = _ranges(config)
    filled = _filled(profile, inputs, ranges, bool(max_batch))
    measured = replace(profile, shapes=(*profile.shapes, *(f"{n}:{_dims(shape)}" for n, shape in filled.items())))
    for name, shape in measured.shape_of().items():
        if not _fits(inputs[name], shape):
            raise ProfileError(
                f"--shape {name}:{_dims(shape)}: input '{name}' expects dims {inputs[name]} "
                "(after the batch dimension; -1 takes any size)"
            )
        full = (profile.batch, *shape) if max_batch else shape
        fits, spans = _in_some_profile(name, full, ranges)
        if not fits:
            raise ProfileError(
                f"--shape {name}:{_dims(shape)} at --batch {profile.batch}: input "
                f"'{name}' takes shapes {spans} (the model's profiles)"
            )
    return measured
