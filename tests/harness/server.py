"""Start a real tritonserver (from the set-up's .triton/) on free loopback ports.

Used by the tests' fixtures and by the benchmarks. The server runs in its own
process group so that stopping it also stops its Python backend stubs.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRITONSERVER = ROOT / ".triton" / "bin" / "tritonserver"
PERF_ANALYZER = ROOT / ".triton" / "bin" / "perf_analyzer"


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerFailed(RuntimeError):
    pass


class LoopbackEndpoints:
    """The client addresses of something listening on loopback HTTP and gRPC ports."""

    http_port: int
    grpc_port: int

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


class TritonServer(LoopbackEndpoints):
    def __init__(self, repository: Path, log_path: Path, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        self.repository = repository
        self.log_path = log_path
        self.args = args
        self.env = env or {}
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.process: subprocess.Popen | None = None

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, timeout: float = 300.0) -> "TritonServer":
        if not TRITONSERVER.exists():
            raise ServerFailed(f"{TRITONSERVER} is missing: run scripts/setup.sh first")
        command = [
            str(TRITONSERVER), f"--model-repository={self.repository}",
            "--http-address=127.0.0.1", f"--http-port={self.http_port}",
            "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}", "--allow-metrics=true",
            *self.args,
        ]
        log = open(self.log_path, "wb")
        # The stub's sys.path is the serving python3's plus its working directory
        # (it ignores PYTHONPATH): run from the repository so that it finds tests.doubles.
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **self.env}, cwd=ROOT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(f"tritonserver exited with {self.process.returncode}:\n{self.log_tail()}")
            if self.ready():
                return self
            time.sleep(0.25)
        self.stop()
        raise ServerFailed(f"tritonserver not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    def stop(self, grace: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        group = os.getpgid(self.process.pid)
        os.killpg(group, signal.SIGINT)
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            self.process.wait()
        try:  # stubs left behind in the group
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 200) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as reply:
            return reply.read().decode()

    def metric_total(self, name: str, model: str, **labels: str) -> float:
        """The sum of a metric's series for one model (and the given labels)."""
        wanted = [f'model="{model}"', *(f'{k}="{v}"' for k, v in labels.items())]
        return sum(float(line.rsplit(" ", 1)[1]) for line in self.metrics().splitlines()
                   if line.startswith(name + "{") and all(w in line for w in wanted))

    def wait_for_metric(self, name: str, model: str, at_least: float, timeout: float = 10.0,
                        **labels: str) -> float:
        """trtpool hands its metrics to Triton every metrics_interval_ms: poll."""
        deadline = time.monotonic() + timeout
        while (total := self.metric_total(name, model, **labels)) < at_least and time.monotonic() < deadline:
            time.sleep(0.1)
        return total
