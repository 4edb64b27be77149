"""An engine host's totals published by one instance at a time (trtpool.triton.metrics.PoolMetrics._adopt),
with a metric family that, as Triton's does, shares a series between instances by name and labels."""
from __future__ import annotations

from trtpool.triton.metrics import PoolMetrics


class Family:
    """Triton's pb_utils.MetricFamily as the instances see it: one series per name and labels."""

    COUNTER, GAUGE = "counter", "gauge"
    series: dict = {}

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.name = name

    def Metric(self, labels: dict) -> "Series":  # noqa: N802 - pb_utils' name
        return Family.series.setdefault((self.name, tuple(sorted(labels.items()))), Series())


class Series:
    value = 0.0

    def increment(self, delta: float) -> None:
        self.value += delta

    def set(self, value: float) -> None:
        self.value = value


def snapshot(host_pid: int, batches: int, publisher: bool, takeover: bool = False) -> dict:
    return {"publisher": publisher, "takeover": takeover, "host_pid": host_pid, "connections": 2,
            "pool": {"contexts": {"0": {"runs": batches, "busy_ns": 0, "failures": 0, "rebuilds": 0}},
                     "wait_ns": 0, "acquisitions": batches, "current": 1, "minimum": 1, "maximum": 1,
                     "grown": 0, "shrunk": 0, "grow_failures": 0},
            "running": [], "batch_sizes": {"1": batches}, "stage_ns": {}, "stage_failed": {},
            "queue_depth": 0, "merged": {"1": batches}, "busy_ns": 0, "uptime_ns": batches}


def batches_total() -> float:
    return Family.series[("trtpool_batches_total", (("batch_size", "1"), ("model", "m")))].value


def test_the_hosts_totals_are_counted_once_across_publishers_and_host_restarts():
    Family.series.clear()
    state = {"a": snapshot(1, 100, True), "b": snapshot(1, 100, False)}
    first, second = PoolMetrics(Family, "m"), PoolMetrics(Family, "m")
    first.start_hosted(lambda: state["a"], 60_000)
    second.start_hosted(lambda: state["b"], 60_000)
    first.flush()
    second.flush()
    assert batches_total() == 100
    # the first instance's connection went; the second takes over: 110 in all, not 210
    state["a"], state["b"] = snapshot(1, 110, False), snapshot(1, 110, True, takeover=True)
    first.flush()
    second.flush()
    state["b"] = snapshot(1, 120, True)
    second.flush()
    assert batches_total() == 120 - 10   # the 10 run during the hand-over are not seen, none twice
    # the host restarts and counts from 0: its batches add to the series
    state["b"] = snapshot(2, 7, True)
    second.flush()
    assert batches_total() == 110 + 7
    for metrics in (first, second):
        metrics.close()
