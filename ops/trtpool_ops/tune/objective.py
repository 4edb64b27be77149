"""What "best" means: the highest throughput, the highest under a p99 bound, or the
fewest contexts within a fraction of the best throughput."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trtpool_ops.tune.measurement import Measurement

OBJECTIVES = ("throughput", "p99", "fewest-contexts")


@dataclass(frozen=True)
class Choice:
    measurement: Measurement | None
    met: bool           # False: no point met the objective's bound; `measurement` is the closest
    reason: str


@dataclass(frozen=True)
class Objective:
    name: str = "throughput"
    p99_ms: float | None = None     # the bound, objective p99
    within: float = 0.05            # objective fewest-contexts: this fraction below the best

    def describe(self) -> str:
        if self.name == "p99":
            return f"highest throughput with p99 <= {self.p99_ms:g} ms"
        if self.name == "fewest-contexts":
            return f"fewest contexts within {self.within:.0%} of the highest throughput"
        return "highest throughput"

    def meets(self, m: Measurement) -> bool:
        return m.ok and (self.name != "p99" or m.p99_ms <= self.p99_ms)

    def score(self, m: Measurement) -> float | None:
        """What the search climbs (None: the point failed). Under a p99 bound a point over it
        counts at most half its throughput, less the further over it is, so the search still
        moves towards the bound from a space where nothing meets it yet."""
        if not m.ok:
            return None
        if self.name == "p99" and m.p99_ms > self.p99_ms:
            return m.infer_per_s * self.p99_ms / m.p99_ms / 2
        return m.infer_per_s

    def choose(self, measured: Sequence[Measurement]) -> Choice:
        ok = [m for m in measured if m.ok]
        if not ok:
            return Choice(None, False, "no configuration was measured successfully")
        fastest = max(ok, key=lambda m: m.infer_per_s)
        if self.name == "throughput":
            return Choice(fastest, True, "the highest throughput measured")
        if self.name == "fewest-contexts":
            floor = fastest.infer_per_s * (1 - self.within)
            near = [m for m in ok if m.infer_per_s >= floor]
            pick = min(near, key=lambda m: (m.candidate.contexts, -m.infer_per_s))
            return Choice(pick, True, f"the fewest contexts ({pick.candidate.contexts}) serving at least "
                                      f"{floor:.1f} infer/s, {1 - self.within:.0%} of the best {fastest.infer_per_s:.1f}")
        meeting = [m for m in ok if self.meets(m)]
        if meeting:
            return Choice(max(meeting, key=lambda m: m.infer_per_s), True,
                          f"the highest throughput with p99 <= {self.p99_ms:g} ms")
        closest = min(ok, key=lambda m: m.p99_ms)
        return Choice(closest, False, f"no configuration measured met p99 <= {self.p99_ms:g} ms; the closest "
                                      f"is {closest.candidate.label} at p99 {closest.p99_ms:.2f} ms")
