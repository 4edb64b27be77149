"""The watchdog's findings as Prometheus metrics: the one signal that an instance died and
whether it was recovered. Tritonserver 2.51 cannot give it (a model whose stub died stays
READY, and the dead stub's own trtpool_* series simply stop), so trtpool-serve serves these
on a port of its own (--watch-metrics-port):

    trtpool_watchdog_deaths_total{model}               a model found dead (a stub process died, or no answer)
    trtpool_watchdog_recoveries_total{model,outcome}   what followed: reloaded | reload_failed | server_stopped
    trtpool_watchdog_model_dead{model}                 1 from a death until the model is reloaded, else 0
    trtpool_watchdog_checks_total                      rounds of checks made (the watchdog itself is alive)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

OUTCOMES = ("reloaded", "reload_failed", "server_stopped")


class WatchMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._deaths = Counter(
            "trtpool_watchdog_deaths",
            "Models found dead: a stub process died or no answer",
            ["model"],
            registry=self.registry,
        )
        self._recoveries = Counter(
            "trtpool_watchdog_recoveries",
            "What followed a death: " + ", ".join(OUTCOMES),
            ["model", "outcome"],
            registry=self.registry,
        )
        self._dead = Gauge(
            "trtpool_watchdog_model_dead",
            "1 from a death until the model is reloaded",
            ["model"],
            registry=self.registry,
        )
        self._checks = Counter("trtpool_watchdog_checks", "Rounds of liveness checks made", registry=self.registry)

    def serve(self, address: str, port: int) -> None:
        """Serve /metrics on `address:port` from a daemon thread."""
        start_http_server(port, addr=address, registry=self.registry)

    def checked(self) -> None:
        self._checks.inc()

    def died(self, model: str) -> None:
        self._deaths.labels(model=model).inc()
        self._dead.labels(model=model).set(1)

    def followed(self, model: str, outcome: str) -> None:
        self._recoveries.labels(model=model, outcome=outcome).inc()
        if outcome == "reloaded":
            self._dead.labels(model=model).set(0)
