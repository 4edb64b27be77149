"""Run the serve command (trtpool-serve, or scripts/serve.sh) as a user would, reading its terminal."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.server import ROOT, TRITONSERVER, LoopbackEndpoints, free_port

TRTPOOL_SERVE = Path(sys.executable).parent / "trtpool-serve"


@dataclass(frozen=True)
class Ports(LoopbackEndpoints):
    http_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)


def environment(changes: dict[str, str | None]) -> dict[str, str]:
    merged = {**os.environ, **changes}
    return {key: value for key, value in merged.items() if value is not None}


class ServeCommand:
    def __init__(self, command: list[str], ports: Ports, env: dict[str, str | None] | None = None) -> None:
        """`env` adds to (or, with None values, removes from) the test's environment."""
        self.ports = ports
        self.lines: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            start_new_session=True,
            env=environment({"TRTPOOL_TRITONSERVER": str(TRITONSERVER), **(env or {})}))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float = 120.0) -> float:
        """Seconds until a line holding `text` appeared (at once if one already has)."""
        start = time.monotonic()
        while not any(text in line for line in self.lines):
            remaining = start + timeout - time.monotonic()
            if remaining <= 0 or (self.process.poll() is not None and self._new.empty()):
                raise AssertionError(f"no line with {text!r} after {time.monotonic() - start:.1f} s:\n{self.output()}")
            try:
                self._new.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                pass
        return time.monotonic() - start

    def stop(self, timeout: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait()


def trtpool_serve(repo: Path, log: Path, *args: str, env: dict[str, str | None] | None = None) -> ServeCommand:
    ports = Ports()
    return ServeCommand([str(TRTPOOL_SERVE), "--repo", str(repo), "--log", str(log),
                         "--http-port", str(ports.http_port), "--grpc-port", str(ports.grpc_port),
                         "--metrics-port", str(ports.metrics_port), *args], ports, env)


def serve_sh(env: dict[str, str], *args: str) -> ServeCommand:
    """scripts/serve.sh with the ports (and MODELS etc.) in its environment."""
    ports = Ports()
    port_env = {"HTTP_PORT": str(ports.http_port), "GRPC_PORT": str(ports.grpc_port),
                "METRICS_PORT": str(ports.metrics_port)}
    return ServeCommand(["bash", str(ROOT / "scripts" / "serve.sh"), *args], ports, {**port_env, **env})


def watchdog_metrics(port: int) -> dict[str, float]:
    """The watchdog's Prometheus series, by name and labels as the text format writes them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("trtpool_watchdog_")}
