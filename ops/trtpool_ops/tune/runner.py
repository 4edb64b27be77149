"""Points measured one after another within the budget, each announced on a progress line."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from typing import Protocol

from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.objective import Objective
from trtpool_ops.tune.perf import summary
from trtpool_ops.tune.space import Candidate


class BudgetSpent(Exception):
    pass


class Measures(Protocol):
    def measure(self, candidate: Candidate) -> Measurement: ...

    def measure_together(self, candidates: Sequence[Candidate]) -> Iterator[Measurement]: ...


def say(message: str) -> None:
    print(f"[tune] {message}", flush=True)


class Runner:
    """Measures candidates within the budget, with a progress line per point."""

    def __init__(self, measurer: Measures, objective: Objective, budget_s: float, total: int) -> None:
        self.measurer, self.objective = measurer, objective
        self.begun = time.monotonic()
        self.deadline = self.begun + budget_s
        self.measured: list[Measurement] = []
        self.left = lambda: total - len(self.measured)

    def best(self) -> Measurement | None:
        scored = [(score, m) for m in self.measured if (score := self.objective.score(m)) is not None]
        return max(scored, key=lambda pair: pair[0])[1] if scored else None

    def __call__(self, candidate: Candidate) -> Measurement:
        self._announce(f"measuring {candidate.label}")
        return self._record(self.measurer.measure(candidate))

    def together(self, candidates: Sequence[Candidate]) -> None:
        """The candidates loaded in one server and measured in turn (the grid's --grid-together)."""
        self._announce(f"loading {len(candidates)} points in one server: " + ", ".join(c.label for c in candidates))
        for measurement in self.measurer.measure_together(candidates):
            self._record(measurement)

    def _announce(self, what: str) -> None:
        """The progress line, or BudgetSpent where the budget cannot take another point."""
        left_s = self.deadline - time.monotonic()
        expected = statistics.mean(m.seconds for m in self.measured) if self.measured else 0.0
        if left_s <= 0 or expected > left_s:
            raise BudgetSpent()
        best = self.best()
        so_far = (
            f"best so far {best.candidate.label}: {best.infer_per_s:.1f} infer/s p99 {best.p99_ms:.2f} ms"
            if best
            else "no best yet"
        )
        say(
            f"point {len(self.measured) + 1} (done {len(self.measured)}, at most {self.left()} left) "
            f"{what} | {so_far} | {left_s / 60:.1f} min of budget left"
        )

    def _record(self, measurement: Measurement) -> Measurement:
        self.measured.append(measurement)
        if measurement.ok:
            say(
                f"  {measurement.candidate.label}: {measurement.infer_per_s:.1f} infer/s, "
                f"p50 {measurement.p50_ms:.2f} ms, p99 {measurement.p99_ms:.2f} ms ({measurement.seconds:.0f} s)"
            )
        else:
            say(f"  {measurement.candidate.label} failed: {summary(measurement.error)}")
        return measurement
