"""trtpool-tune's search on synthetic measurements (no server): which points it measures, and that
it finds the grid's best with a fraction of its points."""
from __future__ import annotations

import itertools

import pytest

from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.objective import Objective
from trtpool_ops.tune.search import Search
from trtpool_ops.tune.space import Axis, Candidate, Space

THROUGHPUT = Objective()


def synthetic(table: dict, elastic: float = 1.0) -> callable:
    """A measure function from {(mode, contexts): infer/s}, times a factor per queue delay, and times
    `elastic` for an elastic pool."""
    delays = {"0": 0.9, "100": 1.0, "500": 1.2, "2000": 0.8}

    def measure(c: Candidate) -> Measurement:
        value = table.get((c.mode, c.contexts))
        if value is None:
            return Measurement(c, error="did not load")
        value *= delays.get(c.setting("queue_delay_us") or "100", 1.0) * (elastic if c.setting("min_contexts") else 1)
        return Measurement(c, value, 1.0, 1000 / value)
    return measure


def run(space: Space, table: dict, objective: Objective = THROUGHPUT) -> tuple[Search, list[Measurement]]:
    search = Search(space, synthetic(table), objective, noise=0.05)
    return search, search.run()


def points(measured: list[Measurement]) -> set[tuple[str, int]]:
    return {(m.candidate.mode, m.candidate.contexts) for m in measured}


def test_a_mode_stops_at_its_knee():
    space = Space(("sync",), (1, 2, 4, 8))
    _, measured = run(space, {("sync", 1): 100, ("sync", 2): 180, ("sync", 4): 182, ("sync", 8): 400})
    # 4 gained under 5% over 2: 8 is beyond the knee and never measured (even though it would win).
    assert points(measured) == {("sync", 1), ("sync", 2), ("sync", 4)}


def test_a_mode_that_loses_at_two_context_counts_is_dropped():
    table = {("sync", c): 100.0 * c for c in (1, 2, 4, 8)} | {("pipelined", c): 40.0 * c for c in (1, 2, 4, 8)}
    _, measured = run(Space(("sync", "pipelined"), (1, 2, 4, 8)), table)
    assert {c for m, c in points(measured) if m == "pipelined"} == {1, 2}
    assert {c for m, c in points(measured) if m == "sync"} == {1, 2, 4, 8}


def test_a_point_that_fails_stops_its_mode():
    table = {("sync", 1): 100, ("sync", 2): 150, ("decoupled", 1): 110}   # decoupled 2 does not load
    search, measured = run(Space(("sync", "decoupled"), (1, 2, 4)), table)
    assert ("decoupled", 4) not in points(measured)
    assert [m for m in measured if not m.ok][0].candidate.mode == "decoupled"
    assert search.best() == Candidate("sync", 2)


@pytest.mark.parametrize("start, best", [("100", "500"), ("2000", "500"), ("0", "500")])
def test_queue_delay_climbs_to_the_best_from_any_start(start, best):
    space = Space(("sync",), (1, 2), (Axis("queue_delay_us", ("0", "100", "500", "2000"), start),))
    search, measured = run(space, {("sync", 1): 100, ("sync", 2): 150})
    assert search.best().setting("queue_delay_us") == best
    assert len(measured) < len(space.grid())


def test_search_matches_the_grid_best_with_a_third_of_its_points():
    modes, contexts = ("sync", "pipelined", "decoupled"), (1, 2, 4, 8)
    peak = {"sync": 2, "pipelined": 4, "decoupled": 2}
    height = {"sync": 300, "pipelined": 400, "decoupled": 250}
    table = {(m, c): height[m] * (1 - 0.1 * abs(c - peak[m])) for m, c in itertools.product(modes, contexts)}
    space = Space(modes, contexts, (Axis("queue_delay_us", ("0", "100", "500", "2000"), "100"),
                                    Axis("preferred_batch_size", ("keep", "none"), "keep")))
    _, measured = run(space, table)
    grid = [synthetic(table)(c) for c in space.grid()]
    best_grid = max(grid, key=lambda m: m.infer_per_s)
    best_search = THROUGHPUT.choose(measured).measurement
    assert best_search.infer_per_s == pytest.approx(best_grid.infer_per_s)
    assert len(measured) <= len(grid) / 3


def test_left_never_grows_and_ends_at_zero():
    table = {("sync", c): 100.0 * c for c in (1, 2, 4)} | {("pipelined", c): 50.0 * c for c in (1, 2, 4)}
    space = Space(("sync", "pipelined"), (1, 2, 4), (Axis("queue_delay_us", ("0", "100", "500"), "100"),))
    seen = []
    search = Search(space, lambda c: (seen.append(search.left()), synthetic(table)(c))[1], THROUGHPUT)
    search.run()
    assert seen == sorted(seen, reverse=True) and search.left() == 0
    assert seen[0] == 3 * 2 + 2 + 1   # stage 1's grid, the queue delay's other values, the elastic step


PIPELINED_PEAKS_AT_4 = {("sync", c): 100.0 * c ** 0.5 for c in (1, 2, 4)} | {("pipelined", 1): 150, ("pipelined", 2): 260,
                                                                          ("pipelined", 4): 400}
ELASTIC_4 = Candidate("pipelined", 4, (("min_contexts", "1"),))


@pytest.mark.parametrize("factor, taken", [(0.98, True), (0.9, False)])
def test_the_elastic_range_is_one_more_point_taken_only_within_the_noise(factor, taken):
    space = Space(("sync", "pipelined"), (1, 2, 4))
    search = Search(space, synthetic(PIPELINED_PEAKS_AT_4, elastic=factor), THROUGHPUT, noise=0.05)
    measured = search.run()
    assert [m.candidate for m in measured if m.candidate.setting("min_contexts")] == [ELASTIC_4]
    # sync 1 and 2, pipelined 1, 2 and 4 (sync lost at two counts), then the elastic point last
    assert measured[-1].candidate == ELASTIC_4 and len(measured) == 6
    choice = THROUGHPUT.choose(measured)
    assert choice.measurement.candidate == (ELASTIC_4 if taken else Candidate("pipelined", 4))
    assert ("as an elastic pool of 1 to 4 contexts" in choice.reason) == taken


def test_the_elastic_range_is_not_tried_for_sync_or_one_context_or_when_turned_off():
    sync_best = {("sync", c): 100.0 * c for c in (1, 2)} | {("pipelined", c): 40.0 * c for c in (1, 2)}
    _, measured = run(Space(("sync", "pipelined"), (1, 2)), sync_best)
    assert not any(m.candidate.setting("min_contexts") for m in measured)
    _, measured = run(Space(("pipelined",), (1,)), {("pipelined", 1): 100})
    assert len(measured) == 1
    search = Search(Space(("sync", "pipelined"), (1, 2, 4)), synthetic(PIPELINED_PEAKS_AT_4), THROUGHPUT,
                    elastic=False)
    assert not any(m.candidate.setting("min_contexts") for m in search.run()) and search.left() == 0
