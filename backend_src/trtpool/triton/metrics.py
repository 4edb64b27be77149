"""trtpool's custom metrics on Triton's metrics endpoint (pb_utils.MetricFamily).

Counters are kept here and handed to Triton in one flush every ``metrics_interval_ms`` (every
batch when 0, and once more at unload): each update is a round trip from the stub to the
server. With an engine host the counts are the host's, published by one instance.
Every metric and its labels: docs/design/metrics.md.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from trtpool.engine.pool import ContextStats, PoolStats
from trtpool.triton.pb_api import Metric, MetricFamily, MetricFamilyType

# trtpool's own counters: key -> name, description.
COUNTERS = {
    "busy": ("trtpool_context_busy_us_total", "Microseconds each execution context spent running batches"),
    "runs": ("trtpool_context_runs_total", "Batches run by each execution context"),
    "failures": ("trtpool_context_failures_total", "Runs that failed and caused the context to be rebuilt"),
    "wait": ("trtpool_queue_wait_us_total", "Microseconds batches waited for a free execution context"),
    "batches": ("trtpool_batches_total", "Batches executed, by batch size"),
    "request_wait": ("trtpool_request_wait_us_total", "Microseconds decoupled requests waited in trtpool's queue"),
    "workers_lost": ("trtpool_workers_lost_total", "Decoupled worker threads that died and were replaced"),
}
# The pool's size (gauges) and an elastic pool's changes (counters): PoolStats field -> name, description.
SIZE_GAUGES = {
    "current": ("trtpool_contexts", "Execution contexts that exist now"),
    "minimum": ("trtpool_contexts_min", "The fewest execution contexts the pool keeps"),
    "maximum": ("trtpool_contexts_max", "The most execution contexts the pool may hold"),
}
# A thin instance's own counts (engine_host on), each instance adding its own to the model's series
# whoever publishes the host's totals: the key in its counts (HostClient.counts) -> name, description.
INSTANCE_COUNTERS = {
    "starts": (
        "trtpool_host_starts_total",
        "Engine host: hosts started for the model by its instances (above 1: restarts)",
    ),
    "runs": ("trtpool_host_runs_total", "Engine host: batches the instances sent to it"),
    "round_trip_us": (
        "trtpool_host_round_trip_us_total",
        "Engine host: microseconds from an instance sending a batch to the host's answer",
    ),
}
CHANGE_COUNTERS = {
    "grown": ("trtpool_contexts_grown_total", "Execution contexts an elastic pool added under load"),
    "shrunk": ("trtpool_contexts_shrunk_total", "Idle execution contexts an elastic pool closed"),
    "grow_failures": ("trtpool_context_create_failures_total", "Execution contexts an elastic pool could not make"),
}


class PoolMetrics:
    def __init__(self, metric_family: MetricFamilyType, model_name: str) -> None:
        counter = metric_family.COUNTER
        self._family = metric_family
        self._fetch: Any = None
        self._rebase = False  # the engine host's totals are a new baseline (_adopt)
        self._model = model_name
        self._counters = {
            key: metric_family(name=name, description=text, kind=counter) for key, (name, text) in COUNTERS.items()
        }
        self._size = {
            field: metric_family(name=name, description=text, kind=metric_family.GAUGE)
            for field, (name, text) in SIZE_GAUGES.items()
        }
        self._changes = {
            field: metric_family(name=name, description=text, kind=counter)
            for field, (name, text) in CHANGE_COUNTERS.items()
        }
        self._stage_time = metric_family(
            name="trtpool_stage_us_total",
            kind=counter,
            description=(
                "Microseconds per stage of a model with a process file: pre and post (process.py, summed over "
                "requests), queue (batches waiting for a free context), engine (contexts running)"
            ),
        )
        self._stage_failures = metric_family(
            name="trtpool_stage_failures_total",
            kind=counter,
            description=("Requests that process.py's preprocess refused (pre) or whose postprocess failed (post)"),
        )
        self._stage_ns: Counter[str] = Counter()
        self._stage_failed: Counter[str] = Counter()
        self._metrics: dict[tuple, Metric] = {}
        self._gauges: dict[tuple, float] = {}  # (id(family), labels) -> the value last set
        self._published: dict[tuple, int] = {}
        self._flush_lock = threading.Lock()  # one flush at a time
        self._counts_lock = threading.Lock()  # the request path's counters
        self._batch_sizes: Counter[int] = Counter()
        self._request_wait_us = 0
        self._lost_workers = 0
        self._stats: PoolStats | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start_hosted(self, fetch: Any, interval_ms: int, own_counts: Callable[[], dict[str, int]] = dict) -> None:
        """Publish an engine host's totals: `fetch()` returns them (Host.stats) or None. `own_counts()`:
        this instance's running totals by INSTANCE_COUNTERS key (HostClient.counts), which it publishes
        itself."""
        self._fetch = fetch
        self._own_counts = own_counts
        self._own_published: Counter[str] = Counter()
        self._own_families = {
            key: self._family(name=name, kind=self._family.COUNTER, description=text)
            for key, (name, text) in INSTANCE_COUNTERS.items()
        }
        self._host_pid: int | None = None  # the host whose totals this instance publishes
        self._host_gauges: dict[str, MetricFamily] | None = None
        self._host_last = (0, 0)  # busy_ns, uptime_ns at the previous flush
        self._thread = threading.Thread(
            target=self._flush_every, args=(max(interval_ms, 100) / 1000,), name="trtpool-metrics", daemon=True
        )
        self._thread.start()

    def _adopt(self) -> None:
        """This instance's own counts (INSTANCE_COUNTERS); the host's snapshot as this instance's totals,
        when this instance is its publisher."""
        for key, total in self._own_counts().items():  # this instance's own: no publisher, host or rebase applies
            if total > self._own_published[key]:
                self._metric(self._own_families[key]).increment(total - self._own_published[key])
                self._own_published[key] = total
        snapshot = self._fetch()
        if not snapshot or not snapshot.get("publisher"):
            self._stats = None
            self._host_pid = None
            return
        if snapshot["host_pid"] != self._host_pid:  # a new host counts from 0: so do its deltas
            self._published.clear()
            self._host_pid = snapshot["host_pid"]
        # Taking over from another publisher: its totals were published already, so they are only
        # remembered as the baseline (nothing counted twice).
        self._rebase = bool(snapshot.get("takeover"))
        pool = dict(snapshot["pool"])
        contexts = {int(index): ContextStats(**values) for index, values in pool.pop("contexts").items()}
        self._stats = PoolStats(contexts, **pool)
        with self._counts_lock:
            self._batch_sizes = Counter({int(size): n for size, n in snapshot["batch_sizes"].items()})
            self._stage_ns = Counter(snapshot["stage_ns"])
            self._stage_failed = Counter(snapshot["stage_failed"])
        gauges = self._host_families()
        self._set(gauges["depth"], snapshot["queue_depth"])
        self._set(gauges["connections"], snapshot["connections"])
        for messages, count in snapshot["merged"].items():
            self._advance(gauges["merged"], count, messages=str(messages))
        running = set(snapshot["running"])
        for index in contexts:
            self._set(gauges["in_flight"], int(index in running), context=str(index))
        busy, uptime = snapshot["busy_ns"], snapshot["uptime_ns"]
        last_busy, last_uptime = self._host_last
        if uptime > last_uptime and not self._rebase:
            self._set(gauges["busy"], round((busy - last_busy) / (uptime - last_uptime), 4))
        self._host_last = (busy, uptime)

    def _host_families(self) -> dict[str, MetricFamily]:
        if self._host_gauges is None:
            family = self._family
            self._host_gauges = {
                "depth": family(
                    name="trtpool_host_queue_depth",
                    kind=family.GAUGE,
                    description="Engine host: requests waiting for a worker",
                ),
                "connections": family(
                    name="trtpool_host_connections",
                    kind=family.GAUGE,
                    description="Engine host: the instances connected to it",
                ),
                "merged": family(
                    name="trtpool_host_merged_batches_total",
                    kind=family.COUNTER,
                    description="Engine host: batches by how many instances' batches they merged",
                ),
                "in_flight": family(
                    name="trtpool_context_in_flight",
                    kind=family.GAUGE,
                    description="Engine host: batches running on each execution context now",
                ),
                "busy": family(
                    name="trtpool_host_busy_share",
                    kind=family.GAUGE,
                    description="Engine host: share of the last interval with a batch running",
                ),
            }
        return self._host_gauges

    def start(self, stats: PoolStats, interval_ms: int) -> None:
        """Flush the pool's `stats` and the recorded counters every interval_ms (0: after every batch)."""
        self._stats = stats
        if interval_ms > 0:
            self._thread = threading.Thread(
                target=self._flush_every, args=(interval_ms / 1000,), name="trtpool-metrics", daemon=True
            )
            self._thread.start()

    def record_batch(self, batch_size: int) -> None:
        with self._counts_lock:
            self._batch_sizes[batch_size] += 1

    def record_queue_wait(self, wait_ns: int) -> None:
        """Nanoseconds that requests (one batch's, summed) waited in the decoupled queue."""
        with self._counts_lock:
            self._request_wait_us += wait_ns // 1000

    def record_stage(self, stage: str, ns: int, ok: bool) -> None:
        """One request's pre or post stage (trtpool.process.stages)."""
        with self._counts_lock:
            self._stage_ns[stage] += ns
            if not ok:
                self._stage_failed[stage] += 1

    def record_worker_lost(self) -> None:
        with self._counts_lock:
            self._lost_workers += 1

    def after_work(self) -> None:
        """Called after each batch (decoupled) or execute (sync): flushes when no thread does."""
        if self._thread is None:
            self.flush()

    def flush(self) -> None:
        if self._fetch is not None:
            self._adopt()
        stats = self._stats
        if stats is None:
            return
        with self._counts_lock:
            batch_sizes, request_wait_us, lost = dict(self._batch_sizes), self._request_wait_us, self._lost_workers
            stage_ns, stage_failed = dict(self._stage_ns), dict(self._stage_failed)
        with self._flush_lock:
            for index, context in list(stats.contexts.items()):
                label = str(index)
                self._advance(self._counters["busy"], context.busy_ns // 1000, context=label)
                self._advance(self._counters["runs"], context.runs, context=label)
                self._advance(self._counters["failures"], context.failures, context=label)
            self._advance(self._counters["wait"], stats.wait_ns // 1000)
            for size, count in batch_sizes.items():
                self._advance(self._counters["batches"], count, batch_size=str(size))
            self._advance(self._counters["request_wait"], request_wait_us)
            self._advance(self._counters["workers_lost"], lost)
            for field, family in self._size.items():
                self._set(family, getattr(stats, field))
            for field, family in self._changes.items():
                self._advance(family, getattr(stats, field))
            if stage_ns:  # only a model with a process file has stages
                stage_ns.update(queue=stats.wait_ns, engine=sum(c.busy_ns for c in stats.contexts.values()))
                for stage, ns in stage_ns.items():
                    self._metric(self._stage_time, stage=stage)  # listed from the first flush, at 0 too
                    self._advance(self._stage_time, ns // 1000, stage=stage)
                for stage, count in stage_failed.items():
                    self._advance(self._stage_failures, count, stage=stage)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()

    def _flush_every(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.flush()

    def _metric(self, family: MetricFamily, **labels: str) -> Metric:
        key = (id(family), *sorted(labels.items()))
        if key not in self._metrics:
            self._metrics[key] = family.Metric(labels={"model": self._model, **labels})
        return self._metrics[key]

    def _set(self, family: MetricFamily, value: float, **labels: str) -> None:
        """A gauge, set only when it changed (each set is a round trip to the server)."""
        key = (id(family), *sorted(labels.items()))
        if self._gauges.get(key) != value:
            self._metric(family, **labels).set(value)
            self._gauges[key] = value

    def _advance(self, family: MetricFamily, total: int, **labels: str) -> None:
        """Counters only go up: add what the running total gained since the last flush (on a rebase,
        the total is only remembered)."""
        key = (id(family), *sorted(labels.items()))
        if self._rebase:
            self._published[key] = total
            return
        delta = total - self._published.get(key, 0)
        if delta > 0:
            self._metric(family, **labels).increment(delta)
            self._published[key] = total
