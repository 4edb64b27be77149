"""The configurations trtpool-tune chooses among, and each one's config.pbtxt.

A candidate is a mode, a context count and a value on each further axis (queue
delay, preferred batch sizes, ...), and, where it is elastic, min_contexts (its
pool then grows from that to its contexts). Its config is the user's config.pbtxt
with only those fields changed, through Triton's own protobuf classes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

# decoupled: reached by gRPC streaming clients; decoupled-front: by unary clients through
# the front trtpool-model --unary-front writes (forward_to).
MODES = ("sync", "pipelined", "decoupled", "decoupled-front")
KEEP = "keep"  # an axis value: the field as the user's config has it
POOL_SIZES = ("contexts", "min_contexts", "max_contexts")
ELASTIC_POLICY = ("grow_after_wait_microseconds", "shrink_after_idle_seconds")  # refused beside a fixed pool
ELASTIC = "min_contexts"  # a candidate's setting: an elastic pool from this many up to its contexts
ELASTIC_MIN = 1


@dataclass(frozen=True, order=True)
class Candidate:
    mode: str
    contexts: int
    settings: tuple[tuple[str, str], ...] = ()  # (axis name, value), sorted by name

    def setting(self, name: str) -> str | None:
        return dict(self.settings).get(name)

    def with_setting(self, name: str, value: str) -> Candidate:
        return Candidate(self.mode, self.contexts, tuple(sorted({**dict(self.settings), name: value}.items())))

    @property
    def label(self) -> str:
        return " ".join([self.mode, f"contexts={self.contexts}", *(f"{k}={v}" for k, v in self.settings)])

    def as_dict(self) -> dict:
        return {"mode": self.mode, "contexts": self.contexts, **dict(self.settings)}

    @classmethod
    def from_dict(cls, fields: dict) -> Candidate:
        """The inverse of as_dict (a candidate read back from tune.json)."""
        rest = {k: str(v) for k, v in fields.items() if k not in ("mode", "contexts")}
        return cls(fields["mode"], int(fields["contexts"]), tuple(sorted(rest.items())))


def _set_parameter(config: mc.ModelConfig, key: str, value: str) -> None:
    config.parameters[key].string_value = value


def _queue_delay(config: mc.ModelConfig, value: str) -> None:
    """Triton's batcher wait; in decoupled mode trtpool's scheduler fills its batches itself
    (batch_wait_microseconds), so both are set, the scheduler's to its least wait (1 us) for 0."""
    config.dynamic_batching.max_queue_delay_microseconds = int(value)
    if config.model_transaction_policy.decoupled:
        _set_parameter(config, "batch_wait_microseconds", str(max(1, int(value))))


def _preferred(config: mc.ModelConfig, value: str) -> None:
    del config.dynamic_batching.preferred_batch_size[:]
    if value != "none":
        sizes = sorted({int(s) for s in value.split(",")})
        config.dynamic_batching.preferred_batch_size.extend(s for s in sizes if s <= config.max_batch_size)


def _max_batch(config: mc.ModelConfig, value: str) -> None:
    config.max_batch_size = int(value)
    kept = [s for s in config.dynamic_batching.preferred_batch_size if s <= config.max_batch_size]
    del config.dynamic_batching.preferred_batch_size[:]
    config.dynamic_batching.preferred_batch_size.extend(kept)


def _instances(config: mc.ModelConfig, value: str) -> None:
    """Triton's instance count (each instance a stub process with its own engine and pool): every
    group of the config gets it; a config without groups gets one of Triton's default kind."""
    if not config.instance_group:
        config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_AUTO)
    for group in config.instance_group:
        group.count = int(value)


def _engine_host(config: mc.ModelConfig, value: str) -> None:
    """engine_host for a sync candidate; the host serves sync instances only, so other modes run
    without one whatever the axis says (their candidates then differ only in name)."""
    sync = config.parameters["mode"].string_value == "sync"
    _set_parameter(config, "engine_host", value if sync else "off")


def _elastic(config: mc.ModelConfig, value: str) -> None:
    """An elastic pool from `value` contexts up to the candidate's count (min_contexts, max_contexts)."""
    _set_parameter(config, "max_contexts", config.parameters["contexts"].string_value)
    del config.parameters["contexts"]
    _set_parameter(config, "min_contexts", value)


@dataclass(frozen=True)
class AxisKind:
    apply: Callable[[mc.ModelConfig, str], None]
    ordered: bool  # numeric: searched by stepping to neighbours; else every value is tried
    batching: bool  # only for a model that batches (max_batch_size > 0)


AXES: dict[str, AxisKind] = {
    "max_batch_size": AxisKind(_max_batch, True, True),
    "preferred_batch_size": AxisKind(_preferred, False, True),
    "queue_delay_us": AxisKind(_queue_delay, True, True),
    "cuda_graphs": AxisKind(lambda c, v: _set_parameter(c, "cuda_graphs", v), False, False),
    "preprocess_threads": AxisKind(lambda c, v: _set_parameter(c, "preprocess_threads", v), True, False),
    "preprocess_processes": AxisKind(lambda c, v: _set_parameter(c, "preprocess_processes", v), True, False),
    "instances": AxisKind(_instances, True, False),
    "engine_host": AxisKind(_engine_host, False, False),
    # Not an axis of the grid: the search's last step (Search.elastic_range) sets it.
    ELASTIC: AxisKind(_elastic, True, False),
}


def elastic_twin(candidate: Candidate) -> Candidate | None:
    """The candidate with an elastic pool of ELASTIC_MIN..its contexts, where one can differ from it:
    not for sync (one batch at a time never waits for a context, so its pool never grows), not
    for a single context, not for a candidate that is elastic already."""
    if candidate.mode == "sync" or candidate.contexts <= ELASTIC_MIN or candidate.setting(ELASTIC) is not None:
        return None
    return candidate.with_setting(ELASTIC, str(ELASTIC_MIN))


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[str, ...]  # numeric axes ascending
    start: str  # where the search starts: the user's value where it is one of them

    @property
    def ordered(self) -> bool:
        return AXES[self.name].ordered and KEEP not in self.values


@dataclass(frozen=True)
class Space:
    modes: tuple[str, ...]
    contexts: tuple[int, ...]  # ascending
    axes: tuple[Axis, ...] = ()

    def at(self, mode: str, contexts: int) -> Candidate:
        """A point of the first stage: every further axis at its starting value."""
        return Candidate(mode, contexts, tuple(sorted((a.name, a.start) for a in self.axes)))

    def grid(self) -> list[Candidate]:
        names = [a.name for a in self.axes]
        return [
            Candidate(mode, contexts, tuple(sorted(zip(names, values, strict=True))))
            for mode, contexts in itertools.product(self.modes, self.contexts)
            for values in itertools.product(*(a.values for a in self.axes))
        ]

    def as_dict(self) -> dict:
        return {
            "modes": list(self.modes),
            "contexts": list(self.contexts),
            **{a.name: list(a.values) for a in self.axes},
            "grid_size": len(self.grid()),
        }


def render(base: mc.ModelConfig, candidate: Candidate) -> mc.ModelConfig:
    """The user's config with the candidate's mode, its pool (fixed, or elastic with the folder's growth
    and idle policy) and its axis values."""
    config = mc.ModelConfig()
    config.CopyFrom(base)
    for key in (*POOL_SIZES, *(() if candidate.setting(ELASTIC) else ELASTIC_POLICY)):
        if key in config.parameters:
            del config.parameters[key]
    _set_parameter(config, "contexts", str(candidate.contexts))
    decoupled = candidate.mode.startswith("decoupled")
    _set_parameter(config, "mode", "decoupled" if decoupled else candidate.mode)
    if decoupled or config.HasField("model_transaction_policy"):
        config.model_transaction_policy.decoupled = decoupled
    for name, value in candidate.settings:
        if value != KEEP:
            AXES[name].apply(config, value)
    return config
