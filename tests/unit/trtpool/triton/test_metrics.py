"""trtpool.triton.metrics.PoolMetrics against the pb_utils double's metric families, which (as Triton's)
share a series between instances by name and labels: the families it makes (those
docs/reference/metrics.md lists, of the kinds it says), the values each flush hands over, an
engine host's totals and gauges published by one instance at a time (PoolMetrics._adopt), and
the last flush at finalize."""
from __future__ import annotations

import re

from tests.harness.docs import ROOT
from trtpool.triton.metrics import PoolMetrics
from trtpool.engine.pool import ContextStats, PoolStats

PAGE = ROOT / "docs" / "reference" / "metrics.md"
HOSTED = {"trtpool_host_queue_depth", "trtpool_host_merged_batches_total", "trtpool_context_in_flight",
          "trtpool_host_busy_share", "trtpool_host_connections"}
STARTS = "trtpool_host_starts_total"   # every thin instance's own: made when it starts publishing a host
OWN = {STARTS, "trtpool_host_runs_total", "trtpool_host_round_trip_us_total"}


def listed() -> dict[str, str]:
    """The backend's metrics on the reference page, with their kinds."""
    section = PAGE.read_text().split("## The backend's")[1].split("\n## ")[0]
    return {name: kind.upper() for name, kind in re.findall(r"^\| `(trtpool_\w+)` \| (counter|gauge) \|", section,
                                                            re.MULTILINE)}


def value(pb_utils, name: str, model: str = "m", **labels: str) -> float:
    """The series of family `name` with exactly these labels (and the model's), as the endpoint shows it."""
    return pb_utils._families[name].series[tuple(sorted({"model": model, **labels}.items()))]


def kinds(pb_utils) -> dict[str, str]:
    return {name: family.kind.name for name, family in pb_utils._families.items()}


def stats(runs: int = 0, busy_ns: int = 0, wait_ns: int = 0, current: int = 2) -> PoolStats:
    return PoolStats({0: ContextStats(runs=runs, busy_ns=busy_ns), 1: ContextStats(runs=1, busy_ns=2_000)},
                     wait_ns=wait_ns, acquisitions=runs + 1, current=current, minimum=1, maximum=4, grown=1)


def test_the_families_are_those_the_reference_page_lists_with_their_kinds(pb_utils):
    expected = listed()
    assert len(expected) == 23
    plain = PoolMetrics(pb_utils.MetricFamily, "m")   # kept: its families go with it
    assert kinds(pb_utils) == {name: kind for name, kind in expected.items() if name not in HOSTED | OWN}
    host = {"now": None}
    hosted = PoolMetrics(pb_utils.MetricFamily, "m")
    hosted.start_hosted(lambda: host["now"], 60_000)
    hosted.flush()   # no snapshot: nothing published, and no host family made yet but its own counts'
    assert not HOSTED & set(kinds(pb_utils)) and OWN <= set(kinds(pb_utils))
    host["now"] = snapshot(0, 0, 0)
    hosted.flush()   # this instance publishes the host's totals: the host's families too
    assert kinds(pb_utils) == expected
    for metrics in (plain, hosted):
        metrics.close()


def test_a_flush_hands_over_what_grew_since_the_last(pb_utils):
    pool = stats(runs=3, busy_ns=7_000_000, wait_ns=5_000)
    metrics = PoolMetrics(pb_utils.MetricFamily, "m")
    metrics.start(pool, 0)   # 0: a flush after every batch, from after_work
    metrics.record_batch(4)
    metrics.record_batch(4)
    metrics.record_batch(1)
    metrics.record_queue_wait(3_500_000)
    metrics.record_worker_lost()
    metrics.after_work()
    assert value(pb_utils, "trtpool_context_runs_total", context="0") == 3
    assert value(pb_utils, "trtpool_context_busy_us_total", context="0") == 7_000
    assert value(pb_utils, "trtpool_context_busy_us_total", context="1") == 2
    assert value(pb_utils, "trtpool_queue_wait_us_total") == 5
    assert value(pb_utils, "trtpool_batches_total", batch_size="4") == 2
    assert value(pb_utils, "trtpool_batches_total", batch_size="1") == 1
    assert value(pb_utils, "trtpool_request_wait_us_total") == 3_500
    assert value(pb_utils, "trtpool_workers_lost_total") == 1
    assert [value(pb_utils, name) for name in ("trtpool_contexts", "trtpool_contexts_min", "trtpool_contexts_max")] \
        == [2, 1, 4]
    assert value(pb_utils, "trtpool_contexts_grown_total") == 1
    assert ("trtpool_stage_us_total" not in pb_utils._families
            or not pb_utils._families["trtpool_stage_us_total"].series)   # no process file, no stages

    pool.contexts[0].runs, pool.current = 5, 1   # two more runs; a context closed
    metrics.record_batch(4)
    metrics.after_work()
    metrics.after_work()   # nothing new: nothing added twice
    assert value(pb_utils, "trtpool_context_runs_total", context="0") == 5
    assert value(pb_utils, "trtpool_batches_total", batch_size="4") == 3
    assert value(pb_utils, "trtpool_contexts") == 1
    metrics.close()


def test_stages_are_listed_from_the_first_flush(pb_utils):
    metrics = PoolMetrics(pb_utils.MetricFamily, "m")
    metrics.start(stats(busy_ns=4_000_000, wait_ns=9_000), 0)
    metrics.record_stage("pre", 2_000_000, ok=True)
    metrics.record_stage("pre", 1_000_000, ok=False)
    metrics.record_stage("post", 0, ok=True)
    metrics.after_work()
    assert value(pb_utils, "trtpool_stage_us_total", stage="pre") == 3_000
    assert value(pb_utils, "trtpool_stage_us_total", stage="post") == 0   # listed, at 0
    assert value(pb_utils, "trtpool_stage_us_total", stage="queue") == 9
    assert value(pb_utils, "trtpool_stage_us_total", stage="engine") == 4_002   # both contexts' busy time
    assert value(pb_utils, "trtpool_stage_failures_total", stage="pre") == 1
    metrics.close()


def snapshot(busy_ns: int, uptime_ns: int, merged: int, publisher: bool = True, takeover: bool = False,
             running: tuple = (), host_pid: int = 41) -> dict:
    """An engine host's totals as Host.stats hands them to one of its instances."""
    return {"publisher": publisher, "takeover": takeover, "host_pid": host_pid, "connections": 2,
            "pool": {"contexts": {"0": {"runs": merged, "busy_ns": busy_ns, "failures": 0, "rebuilds": 0},
                                  "1": {"runs": 0, "busy_ns": 0, "failures": 0, "rebuilds": 0}},
                     "wait_ns": 0, "acquisitions": merged, "current": 2, "minimum": 2, "maximum": 2,
                     "grown": 0, "shrunk": 0, "grow_failures": 0},
            "running": list(running), "batch_sizes": {"1": merged}, "stage_ns": {}, "stage_failed": {},
            "queue_depth": 3, "merged": {"2": merged}, "busy_ns": busy_ns, "uptime_ns": uptime_ns}


def test_a_hosts_gauges_restart_their_interval_when_another_instance_takes_over(pb_utils):
    """Two instances of one model, one engine host: the first publishes its totals; once its
    connection goes, the second takes over. The busy share is of the interval since the publisher's
    last flush, so the one taking over sets none from an interval it did not see, and adds nothing
    to the counters (the first published those totals already)."""
    host = {"first": snapshot(0, 0, 0), "second": snapshot(0, 0, 0, publisher=False)}
    first, second = PoolMetrics(pb_utils.MetricFamily, "m"), PoolMetrics(pb_utils.MetricFamily, "m")
    first.start_hosted(lambda: host["first"], 60_000)   # no flush on their own within the test
    second.start_hosted(lambda: host["second"], 60_000)
    first.flush()
    host["first"] = snapshot(busy_ns=500, uptime_ns=1_000, merged=10, running=(1,))
    first.flush()
    second.flush()   # not the publisher: hands over nothing
    assert value(pb_utils, "trtpool_host_busy_share") == 0.5
    assert value(pb_utils, "trtpool_host_queue_depth") == 3
    assert value(pb_utils, "trtpool_host_connections") == 2
    assert [value(pb_utils, "trtpool_context_in_flight", context=c) for c in ("0", "1")] == [0, 1]
    assert value(pb_utils, "trtpool_host_merged_batches_total", messages="2") == 10
    assert value(pb_utils, "trtpool_batches_total", batch_size="1") == 10

    host["first"] = snapshot(busy_ns=1_900, uptime_ns=3_000, merged=30, publisher=False)
    host["second"] = snapshot(busy_ns=1_900, uptime_ns=3_000, merged=30, takeover=True, running=(0,))
    first.flush()
    second.flush()   # 70% busy since the first's last flush: not an interval the second saw
    assert value(pb_utils, "trtpool_host_busy_share") == 0.5
    assert value(pb_utils, "trtpool_host_merged_batches_total", messages="2") == 10
    assert value(pb_utils, "trtpool_batches_total", batch_size="1") == 10
    assert [value(pb_utils, "trtpool_context_in_flight", context=c) for c in ("0", "1")] == [1, 0]

    host["second"] = snapshot(busy_ns=2_150, uptime_ns=4_000, merged=34)
    second.flush()   # from the takeover's totals on: a quarter busy, four more batches
    assert value(pb_utils, "trtpool_host_busy_share") == 0.25
    assert value(pb_utils, "trtpool_host_merged_batches_total", messages="2") == 14
    assert value(pb_utils, "trtpool_batches_total", batch_size="1") == 14
    first.close()
    second.close()


def test_the_hosts_totals_are_counted_once_across_publishers_and_host_restarts(pb_utils):
    state = {"a": snapshot(0, 100, 100), "b": snapshot(0, 100, 100, publisher=False)}
    first, second = PoolMetrics(pb_utils.MetricFamily, "m"), PoolMetrics(pb_utils.MetricFamily, "m")
    first.start_hosted(lambda: state["a"], 60_000)
    second.start_hosted(lambda: state["b"], 60_000)
    first.flush()
    second.flush()
    assert value(pb_utils, "trtpool_batches_total", batch_size="1") == 100
    # the first instance's connection went; the second takes over: 110 in all, not 210
    state["a"], state["b"] = snapshot(0, 110, 110, publisher=False), snapshot(0, 110, 110, takeover=True)
    first.flush()
    second.flush()
    state["b"] = snapshot(0, 120, 120)
    second.flush()
    # the 10 run during the hand-over are not seen, none twice
    assert value(pb_utils, "trtpool_batches_total", batch_size="1") == 120 - 10
    # the host restarts and counts from 0: its batches add to the series
    state["b"] = snapshot(0, 7, 7, host_pid=42)
    second.flush()
    assert value(pb_utils, "trtpool_batches_total", batch_size="1") == 110 + 7
    for metrics in (first, second):
        metrics.close()


def test_the_hosts_started_are_counted_by_the_instances_that_started_them(pb_utils):
    """trtpool_host_starts_total: each instance adds the hosts its own launcher started, whoever
    publishes the host's totals and whichever host runs now; above 1, the host was restarted."""
    started = {"a": 1, "b": 0}
    state = {"a": snapshot(0, 0, 0), "b": snapshot(0, 0, 0, publisher=False)}
    first, second = PoolMetrics(pb_utils.MetricFamily, "m"), PoolMetrics(pb_utils.MetricFamily, "m")
    first.start_hosted(lambda: state["a"], 60_000, lambda: {"starts": started["a"]})
    second.start_hosted(lambda: state["b"], 60_000, lambda: {"starts": started["b"]})
    for metrics in (first, second, first):
        metrics.flush()
    assert value(pb_utils, STARTS) == 1
    # the host dies; the second instance starts the next one, and the first's connection to it is younger
    started["b"] = 1
    state["a"] = snapshot(0, 0, 0, publisher=False, host_pid=42)
    state["b"] = snapshot(0, 5, 5, takeover=True, host_pid=42)
    for metrics in (second, first, second):
        metrics.flush()
    assert value(pb_utils, STARTS) == 2
    state["a"] = state["b"] = None   # no host answers now: the count stands
    for metrics in (first, second):
        metrics.flush()
    assert value(pb_utils, STARTS) == 2
    for metrics in (first, second):
        metrics.close()


def test_each_instance_adds_its_own_round_trips_to_the_models_series(pb_utils):
    """trtpool_host_runs_total and trtpool_host_round_trip_us_total: every thin instance adds what its own
    counts gained since its last flush, whether or not it publishes the host's totals."""
    own = {"a": {"runs": 3, "round_trip_us": 900}, "b": {"runs": 2, "round_trip_us": 500}}
    state = {"a": snapshot(0, 0, 0), "b": snapshot(0, 0, 0, publisher=False)}
    first, second = PoolMetrics(pb_utils.MetricFamily, "m"), PoolMetrics(pb_utils.MetricFamily, "m")
    first.start_hosted(lambda: state["a"], 60_000, lambda: own["a"])
    second.start_hosted(lambda: state["b"], 60_000, lambda: own["b"])
    for metrics in (first, second):
        metrics.flush()
    assert value(pb_utils, "trtpool_host_runs_total") == 5
    assert value(pb_utils, "trtpool_host_round_trip_us_total") == 1_400
    own["b"] = {"runs": 4, "round_trip_us": 1_100}
    state["b"] = None   # no host answers this one now: its own counts still go out
    for metrics in (first, second, second):
        metrics.flush()
    assert value(pb_utils, "trtpool_host_runs_total") == 7
    assert value(pb_utils, "trtpool_host_round_trip_us_total") == 2_000
    for metrics in (first, second):
        metrics.close()


def test_finalize_stops_the_flushing_thread_and_hands_over_the_rest(pb_utils):
    metrics = PoolMetrics(pb_utils.MetricFamily, "m")
    metrics.start(stats(runs=2), 60_000)   # the thread would flush in a minute
    metrics.record_batch(8)
    thread = metrics._thread
    assert thread.is_alive() and "trtpool_batches_total" not in {
        name for name, family in pb_utils._families.items() if family.series}
    metrics.close()
    assert not thread.is_alive()
    assert value(pb_utils, "trtpool_batches_total", batch_size="8") == 1
    assert value(pb_utils, "trtpool_context_runs_total", context="0") == 2
