"""Finds models whose stubs died, then reloads them or has the server restarted."""

from __future__ import annotations

import threading
from collections.abc import Callable

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from trtpool_ops.probe import probe_model
from trtpool_ops.repository import front_target, model_states, reload_model
from trtpool_ops.stubs import StubTracker
from trtpool_ops.watch_metrics import WatchMetrics

ON_DEAD_STUB = ("reload", "exit")
STUB_DIED = "a stub process died"


class Watchdog:
    """`on_dead` "reload": unload and load the model (its old instances leak until the
    server exits: see repository.reload_model); "exit": call `exit_server`, for a
    supervisor (Kubernetes) to restart the whole server cleanly."""

    def __init__(
        self,
        url: str,
        server_pid: int,
        say: Callable[[str], None],
        probe_timeout: float = 10.0,
        on_dead: str = "reload",
        exit_server: Callable[[], None] = lambda: None,
        metrics: WatchMetrics | None = None,
    ) -> None:
        self.url = url
        self.metrics = metrics or WatchMetrics()
        self.stubs = StubTracker(server_pid)
        self.say = say
        self.probe_timeout = probe_timeout
        self.on_dead = on_dead
        self.exit_server = exit_server

    def dead_models(self) -> dict[str, str]:
        """READY models that lost a stub or do not answer, with the reason.

        Fronts (parameter forward_to) are probed after the other models, and not at
        all while their target is dead: a front only forwards, its probe would wait
        on the dead target, and it answers again once the target is reloaded."""
        with grpcclient.InferenceServerClient(self.url) as client:
            ready = {s.name for s in model_states(client) if s.state == "READY"}
            targets = {model: front_target(client, model) for model in ready}
        dead = {m: STUB_DIED for m in self.stubs.dead_models() & ready}
        for model in sorted(ready - set(dead), key=lambda m: (targets[m] is not None, m)):
            if targets[model] in dead:
                continue
            result = probe_model(self.url, model, self.probe_timeout)
            if not result.alive:  # the probe may see a gone stub before the tracker does
                dead[model] = STUB_DIED if result.stub_died else result.detail
        # A target whose stub died while its front was probed: the target is the one to reload.
        for model in self.stubs.dead_models() & ready:
            dead.setdefault(model, STUB_DIED)
        return {model: reason for model, reason in dead.items() if targets[model] not in dead}

    def recover(self, dead: dict[str, str]) -> None:
        for model in dead:
            self.metrics.died(model)
        if self.on_dead == "exit":
            self.say("; ".join(f"model {m}: dead ({r})" for m, r in sorted(dead.items())) + "; stopping the server")
            for model in dead:
                self.metrics.followed(model, "server_stopped")
            self.exit_server()
            return
        with grpcclient.InferenceServerClient(self.url) as client:
            for model, reason in sorted(dead.items()):
                self.say(f"model {model}: dead ({reason}); reloading it")
                try:
                    reload_model(client, model)
                except InferenceServerException as exc:
                    self.say(f"model {model}: reload failed: {exc}")
                    self.metrics.followed(model, "reload_failed")
                    continue
                self.stubs.forget(model)
                self.metrics.followed(model, "reloaded")
                self.say(f"model {model}: reloaded, serving again")

    def run(self, interval: float, stop: threading.Event) -> None:
        while not stop.wait(interval):
            try:
                dead = self.dead_models()
                self.metrics.checked()
            except InferenceServerException as exc:
                self.say(f"watchdog: server not answering: {exc}")
                continue
            if dead and not stop.is_set():
                self.recover(dead)
                if self.on_dead == "exit":
                    return
