"""trtpool's custom metrics on Triton's metrics endpoint (pb_utils.MetricFamily).

    trtpool_context_busy_us_total{model,context}   time each context spent running
    trtpool_context_runs_total{model,context}      batches each context ran
    trtpool_context_failures_total{model,context}  runs that broke a context (rebuilt)
    trtpool_queue_wait_us_total{model}             time batches waited for a free context
    trtpool_batches_total{model,batch_size}        executed batches by size
    trtpool_request_wait_us_total{model}           decoupled mode: time requests waited in trtpool's queue
"""
from __future__ import annotations

import threading
from typing import Any

from trtpool.pool import PoolStats


class PoolMetrics:
    def __init__(self, metric_family: Any, model_name: str) -> None:
        counter = metric_family.COUNTER
        self._model = model_name
        self._busy = metric_family(name="trtpool_context_busy_us_total",
                                   description="Microseconds each execution context spent running batches", kind=counter)
        self._runs = metric_family(name="trtpool_context_runs_total",
                                   description="Batches run by each execution context", kind=counter)
        self._failures = metric_family(name="trtpool_context_failures_total",
                                       description="Runs that failed and caused the context to be rebuilt", kind=counter)
        self._wait = metric_family(name="trtpool_queue_wait_us_total",
                                   description="Microseconds batches waited for a free execution context", kind=counter)
        self._batches = metric_family(name="trtpool_batches_total",
                                      description="Batches executed, by batch size", kind=counter)
        self._request_wait = metric_family(name="trtpool_request_wait_us_total",
                                           description="Microseconds decoupled requests waited in trtpool's queue",
                                           kind=counter)
        self._metrics: dict[tuple, Any] = {}
        self._published: dict[tuple, int] = {}
        self._lock = threading.Lock()

    def _metric(self, family: Any, **labels: str) -> Any:
        key = (id(family), *sorted(labels.items()))
        if key not in self._metrics:
            self._metrics[key] = family.Metric(labels={"model": self._model, **labels})
        return self._metrics[key]

    def _advance(self, family: Any, total: int, **labels: str) -> None:
        """Counters only go up: add what the running total gained since last time."""
        key = (id(family), *sorted(labels.items()))
        delta = total - self._published.get(key, 0)
        if delta > 0:
            self._metric(family, **labels).increment(delta)
            self._published[key] = total

    def record_batch(self, batch_size: int) -> None:
        with self._lock:
            self._metric(self._batches, batch_size=str(batch_size)).increment(1)

    def record_queue_wait(self, wait_ns: int) -> None:
        with self._lock:
            self._metric(self._request_wait).increment(wait_ns // 1000)

    def publish(self, stats: PoolStats) -> None:
        with self._lock:
            for index, context in list(stats.contexts.items()):
                label = str(index)
                self._advance(self._busy, context.busy_ns // 1000, context=label)
                self._advance(self._runs, context.runs, context=label)
                self._advance(self._failures, context.failures, context=label)
            self._advance(self._wait, stats.wait_ns // 1000)
