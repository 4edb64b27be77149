"""trtpool-tune's runner: points measured one after another within the budget."""
from __future__ import annotations

import pytest

from tests.unit.trtpool_ops.tune.test_search import THROUGHPUT
from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.runner import BudgetSpent, Runner
from trtpool_ops.tune.space import Candidate


class Timed:
    """Measures nothing: every point takes `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def measure(self, c: Candidate) -> Measurement:
        return Measurement(c, 100.0, 1.0, 2.0, seconds=self.seconds)


def test_the_budget_stops_before_a_point_that_would_not_fit():
    runner = Runner(Timed(40.0), THROUGHPUT, budget_s=60.0, total=5)
    runner(Candidate("sync", 1))               # the first point always runs
    runner.deadline -= 40.0                    # as if it had taken its 40 s: 20 s left
    with pytest.raises(BudgetSpent):
        runner(Candidate("sync", 2))
    assert len(runner.measured) == 1
