"""trtpool-tune's search, objectives and config rendering on synthetic measurements (no server):
which points the search measures, what it chooses, and what a candidate's config.pbtxt holds."""
from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from trtpool_builder.folder.model_folder import read_config
from trtpool import parameters
from trtpool_ops.tune import gpu_memory
from trtpool_ops.tune.cli import build_space, parser, stop_on_signal, write_front
from trtpool_ops.tune.runner import BudgetSpent, Runner
from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.objective import Objective
from trtpool_ops.tune.perf import sheltered
from trtpool_ops.tune.search import Search
from trtpool_ops.tune.space import Axis, Candidate, Space, render

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


def test_an_elastic_twin_holding_more_memory_than_its_fixed_pool_is_not_taken():
    fixed = figures("pipelined", 4, 1000, 9.0, 2000)
    elastic = Measurement(ELASTIC_4, 990, 4.5, 9.0, gpu_memory_bytes=2400 << 20)
    assert Objective().choose([fixed, elastic]).measurement is fixed
    leaner = replace(elastic, gpu_memory_bytes=1500 << 20)
    assert Objective().choose([fixed, leaner]).measurement is leaner
    # The least memory decides fewest-resources; the leaner elastic pool is that too.
    assert Objective("fewest-resources").choose([fixed, leaner]).reason.startswith("the least GPU memory (1500 MiB)")


def figures(label: str, contexts: int, infer: float, p99: float, memory_mib: int | None = None) -> Measurement:
    return Measurement(Candidate(label, contexts), infer, p99 / 2, p99,
                       gpu_memory_bytes=None if memory_mib is None else memory_mib << 20)


def test_objectives_choose_as_documented():
    measured = [figures("sync", 1, 900, 4.0), figures("sync", 4, 1000, 9.0), figures("pipelined", 2, 960, 6.0)]
    assert Objective().choose(measured).measurement.infer_per_s == 1000
    bound = Objective("p99", p99_ms=6.5).choose(measured)
    assert bound.met and bound.measurement.candidate == Candidate("pipelined", 2)
    fewest = Objective("fewest-contexts", within=0.05).choose(measured)   # the former name still works
    assert fewest.measurement.candidate == Candidate("pipelined", 2)   # 960 >= 950; sync 1's 900 is not
    missed = Objective("p99", p99_ms=1.0).choose(measured)
    assert not missed.met and missed.measurement.p99_ms == 4.0 and "closest" in missed.reason


def test_fewest_resources_takes_the_least_gpu_memory_where_every_candidate_has_a_figure():
    measured = [figures("sync", 1, 900, 4.0, 1500), figures("pipelined", 4, 1000, 9.0, 2600),
                figures("pipelined", 2, 970, 6.0, 2100), figures("sync", 2, 960, 6.0, 1900)]
    choice = Objective("fewest-resources", within=0.05).choose(measured)
    # Within 5% of 1000: pipelined 4, pipelined 2, sync 2 (all 2 contexts or more); sync 2 holds the least.
    assert choice.measurement.candidate == Candidate("sync", 2)
    assert choice.reason.startswith("the least GPU memory (1900 MiB)")


def test_fewest_resources_falls_back_to_the_fewest_contexts_where_a_memory_figure_is_missing():
    measured = [figures("pipelined", 4, 1000, 9.0, 1200), figures("pipelined", 2, 970, 6.0, None),
                figures("sync", 2, 980, 6.0, 1900), figures("sync", 1, 900, 4.0, 100)]
    choice = Objective("fewest-resources", within=0.05).choose(measured)
    # pipelined 4 holds the least memory, but pipelined 2's figure is missing: contexts decide, and of
    # the two with 2 contexts the faster; sync 1 (least of all) is more than 5% below the best.
    assert choice.measurement.candidate == Candidate("sync", 2)
    assert choice.reason.startswith("the fewest contexts (2)") and "GPU memory was not read" in choice.reason


def test_gpu_memory_is_summed_over_the_gpus_and_absent_without_one():
    metrics = ('# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes\n'
               'nv_gpu_memory_used_bytes{gpu_uuid="GPU-a"} 1048576\n'
               'nv_gpu_memory_used_bytes{gpu_uuid="GPU-b"} 2097152\n'
               'nv_gpu_memory_total_bytes{gpu_uuid="GPU-a"} 9e10\n')
    assert gpu_memory.used_bytes(metrics) == 3 << 20
    assert gpu_memory.used_bytes('nv_inference_count{model="m",version="1"} 4\n') is None
    record = figures("sync", 1, 10, 1.0, 3).as_dict()
    assert record["gpu_memory_mib"] == 3.0 and figures("sync", 1, 10, 1.0).as_dict()["gpu_memory_mib"] is None


def test_a_point_over_the_p99_bound_scores_below_any_within_it_of_half_its_throughput():
    objective = Objective("p99", p99_ms=5.0)
    assert objective.score(figures("sync", 1, 1000, 10.0)) < objective.score(figures("sync", 1, 501, 5.0))


def test_the_instances_axis_sets_every_instance_groups_count():
    grouped = mc.ModelConfig(name="m", backend="trtpool")
    grouped.instance_group.add(kind=mc.ModelInstanceGroup.KIND_GPU, count=1, gpus=[0])
    grouped.instance_group.add(kind=mc.ModelInstanceGroup.KIND_GPU, count=2, gpus=[1])
    config = render(grouped, Candidate("sync", 1, (("instances", "4"),)))
    assert [(g.kind, g.count, list(g.gpus)) for g in config.instance_group] == [
        (mc.ModelInstanceGroup.KIND_GPU, 4, [0]), (mc.ModelInstanceGroup.KIND_GPU, 4, [1])]
    assert [g.count for g in grouped.instance_group] == [1, 2]   # the user's config is untouched
    bare = render(mc.ModelConfig(name="m", backend="trtpool"), Candidate("sync", 1, (("instances", "3"),)))
    assert [(g.kind, g.count) for g in bare.instance_group] == [(mc.ModelInstanceGroup.KIND_AUTO, 3)]


def test_instances_is_an_ordered_axis_that_starts_at_the_served_count():
    args = parser().parse_args(["folder", "--modes", "sync", "--contexts", "1", "--instances", "4,1,2",
                                "--queue-delays", "100", "--preferred", "keep"])
    served = {"max_batch_size": 8, "instance_group": [{"kind": "KIND_GPU", "count": 2}]}
    [*_, instances] = build_space(args, served, has_process=False).axes
    assert instances == Axis("instances", ("1", "2", "4"), "2") and instances.ordered
    [*_, alone] = build_space(args, {"max_batch_size": 8}, has_process=False).axes
    assert alone.start == "1"   # Triton's default: one instance


def test_render_sets_only_the_candidates_fields():
    base = mc.ModelConfig(name="m", backend="trtpool", max_batch_size=32)
    base.dynamic_batching.preferred_batch_size.extend([8, 32])
    base.dynamic_batching.max_queue_delay_microseconds = 100
    for key, value in {"min_contexts": "1", "max_contexts": "4", "runtime": "auto",
                       "shrink_after_idle_seconds": "300"}.items():
        base.parameters[key].string_value = value
    config = render(base, Candidate("decoupled", 2, (("max_batch_size", "16"), ("queue_delay_us", "500"))))
    assert config.model_transaction_policy.decoupled
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params == {"contexts": "2", "mode": "decoupled", "runtime": "auto", "batch_wait_microseconds": "500"}
    assert config.max_batch_size == 16 and list(config.dynamic_batching.preferred_batch_size) == [8]
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    elastic = render(base, ELASTIC_4)
    assert {k: v.string_value for k, v in elastic.parameters.items() if "contexts" in k or "idle" in k} == {
        "min_contexts": "1", "max_contexts": "4", "shrink_after_idle_seconds": "300"}   # the folder's policy kept
    plain = render(base, Candidate("pipelined", 1, (("preferred_batch_size", "none"),)))
    assert not plain.HasField("model_transaction_policy") and not plain.dynamic_batching.preferred_batch_size
    assert list(base.dynamic_batching.preferred_batch_size) == [8, 32]   # the user's config is untouched


def test_a_decoupled_point_without_queue_delay_waits_the_schedulers_least():
    """Queue delay 0 in decoupled mode: trtpool's scheduler takes a batch wait of 1 us at least (the
    2026-12-04 H200 grid's decoupled points at 0 did not load before this)."""
    base = mc.ModelConfig(name="tiny", backend="trtpool", max_batch_size=8)
    config = render(base, Candidate("decoupled", 1, (("queue_delay_us", "0"),)))
    assert config.dynamic_batching.max_queue_delay_microseconds == 0
    loaded = parameters.load(json_format.MessageToDict(config, preserving_proto_field_name=True),
                              Path("/models/tiny/1"), "cpu")
    assert loaded.batch_wait_us == 1


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


def test_the_engine_host_axis_is_searched_with_the_instance_count_for_sync_candidates():
    args = parser().parse_args(["folder", "--modes", "sync,pipelined", "--contexts", "2", "--instances", "1,4",
                                "--engine-host", "on,off", "--queue-delays", "100", "--preferred", "keep"])
    served = {"max_batch_size": 8, "parameters": {"engine_host": {"string_value": "off"}}}
    space = build_space(args, served, has_process=False)
    host = next(axis for axis in space.axes if axis.name == "engine_host")
    assert host == Axis("engine_host", ("on", "off"), "off") and not host.ordered   # each value tried
    assert {(c.setting("engine_host"), c.setting("instances")) for c in space.grid()} == {
        ("on", "1"), ("on", "4"), ("off", "1"), ("off", "4")}
    base = mc.ModelConfig(name="m", backend="trtpool", max_batch_size=8)
    hosted = render(base, Candidate("sync", 2, (("engine_host", "on"), ("instances", "4"))))
    assert hosted.parameters["engine_host"].string_value == "on" and hosted.instance_group[0].count == 4
    # the host serves sync instances only: a pipelined candidate runs without one (a valid config)
    pipelined = render(base, Candidate("pipelined", 2, (("engine_host", "on"),)))
    assert pipelined.parameters["engine_host"].string_value == "off"
    for config in (hosted, pipelined):
        parameters.load(json_format.MessageToDict(config, preserving_proto_field_name=True), Path("/m/1"), "cpu")
