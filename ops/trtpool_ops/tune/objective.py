"""What "best" means: the highest throughput, the highest under a p99 bound, or the
fewest resources (the least GPU memory, else the fewest contexts) within a fraction
of the best throughput."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.space import ELASTIC, elastic_twin

FEWEST = "fewest-resources"
ALIASES = {"fewest-contexts": FEWEST}  # its first name, when it went by the context count alone
OBJECTIVES = ("throughput", "p99", FEWEST, *ALIASES)


@dataclass(frozen=True)
class Choice:
    measurement: Measurement | None
    met: bool  # False: no point met the objective's bound; `measurement` is the closest
    reason: str


@dataclass(frozen=True)
class Objective:
    name: str = "throughput"
    p99_ms: float | None = None  # the bound, objective p99
    within: float = 0.05  # objective fewest-resources: this fraction below the best
    noise: float = 0.05  # an elastic pool this close to its fixed pool's throughput takes its place

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", ALIASES.get(self.name, self.name))

    def describe(self) -> str:
        if self.name == "p99":
            return f"highest throughput with p99 <= {self.p99_ms:g} ms"
        if self.name == FEWEST:
            return f"least GPU memory (else fewest contexts) within {self.within:.0%} of the highest throughput"
        return "highest throughput"

    def _bound_ms(self) -> float:
        """The p99 bound of objective p99 (the command line requires one with it)."""
        assert self.p99_ms is not None
        return self.p99_ms

    def meets(self, m: Measurement) -> bool:
        return m.ok and (self.name != "p99" or m.p99_ms <= self._bound_ms())

    def score(self, m: Measurement) -> float | None:
        """What the search climbs (None: the point failed). Under a p99 bound a point over it
        counts at most half its throughput, less the further over it is, so the search still
        moves towards the bound from a space where nothing meets it yet."""
        if not m.ok:
            return None
        if self.name == "p99" and m.p99_ms > self._bound_ms():
            return m.infer_per_s * self._bound_ms() / m.p99_ms / 2
        return m.infer_per_s

    def rivals(self, chosen: Measurement, measured: Sequence[Measurement]) -> list[Measurement]:
        """The other points meeting the objective that the choice does not surely beat: their throughput
        within the noise of its, or their windows overlapping its. A repeat run may choose one of them."""
        return [
            m
            for m in measured
            if m is not chosen
            and self.meets(m)
            and (abs(m.infer_per_s - chosen.infer_per_s) <= self.noise * chosen.infer_per_s or m.overlaps(chosen))
        ]

    def choose(self, measured: Sequence[Measurement]) -> Choice:
        choice = self.pick(measured)
        return self.elastic_instead(choice, measured) if choice.met else choice

    def elastic_instead(self, choice: Choice, measured: Sequence[Measurement]) -> Choice:
        """The chosen fixed pool's elastic twin (1 up to its contexts) where it was measured, meets the
        objective, serves within the noise of it and (where both have a figure) holds no more GPU memory
        beyond the noise: at its peak it serves as well, and it gives contexts back when the load falls."""
        fixed = choice.measurement
        assert fixed is not None  # a choice that met the objective has its measurement
        twin = elastic_twin(fixed.candidate)
        found = [m for m in measured if m.candidate == twin and self.meets(m)]
        if not found:
            return choice
        elastic = found[0]
        more_memory = (
            elastic.gpu_memory_bytes is not None
            and fixed.gpu_memory_bytes is not None
            and elastic.gpu_memory_bytes > fixed.gpu_memory_bytes * (1 + self.noise)
        )
        if elastic.infer_per_s < fixed.infer_per_s * (1 - self.noise) or more_memory:
            return choice
        return Choice(
            elastic,
            True,
            f"{choice.reason}, as an elastic pool of {elastic.candidate.setting(ELASTIC)} "
            f"to {elastic.candidate.contexts} contexts ({elastic.infer_per_s:.1f} infer/s, "
            f"within {self.noise:.0%} of the fixed pool's {fixed.infer_per_s:.1f})",
        )

    def pick(self, measured: Sequence[Measurement]) -> Choice:
        ok = [m for m in measured if m.ok]
        if not ok:
            return Choice(None, False, "no configuration was measured successfully")
        fastest = max(ok, key=lambda m: m.infer_per_s)
        if self.name == "throughput":
            return Choice(fastest, True, "the highest throughput measured")
        if self.name == FEWEST:
            return self.fewest(ok, fastest)
        meeting = [m for m in ok if self.meets(m)]
        if meeting:
            return Choice(
                max(meeting, key=lambda m: m.infer_per_s),
                True,
                f"the highest throughput with p99 <= {self.p99_ms:g} ms",
            )
        closest = min(ok, key=lambda m: m.p99_ms)
        return Choice(
            closest,
            False,
            f"no configuration measured met p99 <= {self.p99_ms:g} ms; the closest "
            f"is {closest.candidate.label} at p99 {closest.p99_ms:.2f} ms",
        )

    def fewest(self, ok: Sequence[Measurement], fastest: Measurement) -> Choice:
        """Among the points within `within` of the fastest: the least GPU memory where every one of them
        has a figure, else the fewest contexts (the higher throughput between equals)."""
        floor = fastest.infer_per_s * (1 - self.within)
        near = [m for m in ok if m.infer_per_s >= floor]
        serving = f"serving at least {floor:.1f} infer/s, {1 - self.within:.0%} of the best {fastest.infer_per_s:.1f}"
        if all(m.gpu_memory_bytes is not None for m in near):
            pick = min(near, key=lambda m: (m.gpu_memory_bytes, m.candidate.contexts, -m.infer_per_s))
            return Choice(pick, True, f"the least GPU memory ({pick.gpu_memory_mib:g} MiB) {serving}")
        pick = min(near, key=lambda m: (m.candidate.contexts, -m.infer_per_s))
        return Choice(
            pick,
            True,
            f"the fewest contexts ({pick.candidate.contexts}) {serving}; GPU memory was not "
            "read for every one of them, so the context count decided",
        )
