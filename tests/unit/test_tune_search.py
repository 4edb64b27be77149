"""trtpool-tune's search, objectives and config rendering on synthetic measurements (no server):
which points the search measures, what it chooses, and what a candidate's config.pbtxt holds."""
from __future__ import annotations

import itertools
import os
import signal
import time

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from trtpool_builder.model_folder import read_config
from trtpool_ops.tune.cli import stop_on_signal, write_front
from trtpool_ops.tune.runner import BudgetSpent, Runner
from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.objective import Objective
from trtpool_ops.tune.perf import sheltered
from trtpool_ops.tune.search import Search
from trtpool_ops.tune.space import Axis, Candidate, Space, render

THROUGHPUT = Objective()


def synthetic(table: dict) -> callable:
    """A measure function from {(mode, contexts): infer/s}, times a factor per queue delay."""
    delays = {"0": 0.9, "100": 1.0, "500": 1.2, "2000": 0.8}

    def measure(c: Candidate) -> Measurement:
        value = table.get((c.mode, c.contexts))
        if value is None:
            return Measurement(c, error="did not load")
        value *= delays.get(c.setting("queue_delay_us") or "100", 1.0)
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
    assert seen[0] == 3 * 2 + 2


def figures(label: str, contexts: int, infer: float, p99: float) -> Measurement:
    return Measurement(Candidate(label, contexts), infer, p99 / 2, p99)


def test_objectives_choose_as_documented():
    measured = [figures("sync", 1, 900, 4.0), figures("sync", 4, 1000, 9.0), figures("pipelined", 2, 960, 6.0)]
    assert Objective().choose(measured).measurement.infer_per_s == 1000
    bound = Objective("p99", p99_ms=6.5).choose(measured)
    assert bound.met and bound.measurement.candidate == Candidate("pipelined", 2)
    fewest = Objective("fewest-contexts", within=0.05).choose(measured)
    assert fewest.measurement.candidate == Candidate("pipelined", 2)   # 960 >= 950; sync 1's 900 is not
    missed = Objective("p99", p99_ms=1.0).choose(measured)
    assert not missed.met and missed.measurement.p99_ms == 4.0 and "closest" in missed.reason


def test_a_point_over_the_p99_bound_scores_below_any_within_it_of_half_its_throughput():
    objective = Objective("p99", p99_ms=5.0)
    assert objective.score(figures("sync", 1, 1000, 10.0)) < objective.score(figures("sync", 1, 501, 5.0))


def test_render_sets_only_the_candidates_fields():
    base = mc.ModelConfig(name="m", backend="trtpool", max_batch_size=32)
    base.dynamic_batching.preferred_batch_size.extend([8, 32])
    base.dynamic_batching.max_queue_delay_microseconds = 100
    for key, value in {"min_contexts": "1", "max_contexts": "4", "runtime": "auto"}.items():
        base.parameters[key].string_value = value
    config = render(base, Candidate("decoupled", 2, (("max_batch_size", "16"), ("queue_delay_us", "500"))))
    assert config.model_transaction_policy.decoupled
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params == {"contexts": "2", "mode": "decoupled", "runtime": "auto", "batch_wait_microseconds": "500"}
    assert config.max_batch_size == 16 and list(config.dynamic_batching.preferred_batch_size) == [8]
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    plain = render(base, Candidate("pipelined", 1, (("preferred_batch_size", "none"),)))
    assert not plain.HasField("model_transaction_policy") and not plain.dynamic_batching.preferred_batch_size
    assert list(base.dynamic_batching.preferred_batch_size) == [8, 32]   # the user's config is untouched


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


def test_a_decoupled_front_choice_comes_with_its_front(tmp_path):
    base = mc.ModelConfig(name="m", backend="trtpool", max_batch_size=8)
    base.input.add(name="x", data_type=mc.TYPE_FP32, dims=[4])
    base.output.add(name="y", data_type=mc.TYPE_FP32, dims=[2])
    front = write_front(tmp_path, "m", render(base, Candidate("decoupled-front", 2)))
    assert front == tmp_path / "m_unary"
    config = read_config(front)
    assert config.parameters["forward_to"].string_value == "m" and not config.model_transaction_policy.decoupled
    assert [t.name for t in config.input] == ["x"] and [t.name for t in config.output] == ["y"]
    assert not (tmp_path / "m").exists()   # only the front: the model's config is config.tuned.pbtxt


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_during_clean_up_is_held_until_it_is_done(stop_signal):
    """A Ctrl-C while a server is being stopped must neither cut the stop short nor be lost."""
    previous = {s: signal.signal(s, stop_on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with sheltered():
                os.kill(os.getpid(), stop_signal)
                time.sleep(0.05)   # the handler has run by now
                done.append("the rest of the clean-up")
        assert done == ["the rest of the clean-up"]
        assert signal.getsignal(signal.SIGINT) is stop_on_signal
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
