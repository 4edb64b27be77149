"""Points measured one after another within the budget, each announced on a progress line."""
from __future__ import annotations

import statistics
import time
from typing import Protocol

from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.objective import Objective
from trtpool_ops.tune.space import Candidate


class BudgetSpent(Exception):
    pass


class Measures(Protocol):
    def measure(self, candidate: Candidate) -> Measurement: ...


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
        scored = [m for m in self.measured if self.objective.score(m) is not None]
        return max(scored, key=self.objective.score) if scored else None

    def __call__(self, candidate: Candidate) -> Measurement:
        left_s = self.deadline - time.monotonic()
        expected = statistics.mean(m.seconds for m in self.measured) if self.measured else 0.0
        if left_s <= 0 or expected > left_s:
            raise BudgetSpent()
        best = self.best()
        so_far = (f"best so far {best.candidate.label}: {best.infer_per_s:.1f} infer/s p99 {best.p99_ms:.2f} ms"
                  if best else "no best yet")
        say(f"point {len(self.measured) + 1} (done {len(self.measured)}, at most {self.left()} left) "
            f"measuring {candidate.label} | {so_far} | {left_s / 60:.1f} min of budget left")
        measurement = self.measurer.measure(candidate)
        self.measured.append(measurement)
        if measurement.ok:
            say(f"  {measurement.infer_per_s:.1f} infer/s, p50 {measurement.p50_ms:.2f} ms, "
                f"p99 {measurement.p99_ms:.2f} ms ({measurement.seconds:.0f} s)")
        else:
            say(f"  failed: {measurement.error.splitlines()[0] if measurement.error else ''}")
        return measurement
