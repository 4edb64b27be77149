"""Start a real tritonserver (from the set-up's .triton/) on free loopback ports.

Used by the tests' fixtures and by the benchmarks. The server runs in its own
process group so that stopping it also stops its Python backend stubs.

Shared memory: the Python backend makes one region per stub in /dev/shm,
named <prefix><uuid> (prefix "triton_<backend>_backend_shm_region_" by
default, python_be.cc), and only the server unlinks them, on a clean exit
(shm_manager.cc): a server killed outright leaves them behind. Each server
here gets a prefix of its own (--backend-config=python,shm-region-prefix-name,
which applies to Python-based backends such as trtpool), and its regions are
removed once it is gone, whichever way it went.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRITONSERVER = ROOT / ".triton" / "bin" / "tritonserver"
PERF_ANALYZER = ROOT / ".triton" / "bin" / "perf_analyzer"
# The stub runs isolated from PYTHONPATH but has its working directory on its
# path: the servers run from here, where the test doubles and their entry point
# registration (trtpool.runtimes) lie.
DOUBLES = ROOT / "tests" / "doubles"
SHM = Path("/dev/shm")
STUB = "triton_python_backend_stub"
TEST_SHM_PREFIX = "trtpool_test_"   # every test server's Python backend regions begin so (a prefix each)
DEATH_LINES = ("Signal (6) received.", "Signal (11) received.")  # tritonserver's log as it aborts or segfaults


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port free now and not handed out before by this process: the kernel can give a
    just-released port again at once, and two endpoints of one server on one port fail its start.
    (A suspect, not a proven cause, for a CI run in which a trtpool-serve test's HTTP port refused
    connections after 'ready'.)"""
    for _ in range(1000):
        with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no loopback port that this process has not handed out in 1000 tries "
                       f"({len(_HANDED_OUT)} handed out)")


class ServerFailed(RuntimeError):
    pass


def rss_bytes(pid: int) -> int:
    """A process's resident memory (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)


def process_state(pid: int) -> tuple[str, int] | None:
    """A process's state letter (Z: exited, not yet reaped) and parent pid; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def metric_total(metrics: str, name: str, model: str, **labels: str) -> float:
    """The sum of a metric's series in Prometheus text `metrics` for one model (and the given labels)."""
    wanted = [f'model="{model}"', *(f'{k}="{v}"' for k, v in labels.items())]
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(name + "{") and all(w in line for w in wanted))


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
    RUNNING: list["TritonServer"] = []  # started and not yet killed: a failing test's report shows their logs

    def __init__(self, repository: Path, log_path: Path, args: tuple[str, ...] = (),
                 env: dict[str, str | None] | None = None) -> None:
        """`env` is laid over this process's environment; a None value removes that variable."""
        self.repository = repository
        self.log_path = log_path
        self.args = args
        self.env = env or {}
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.shm_prefix = f"{TEST_SHM_PREFIX}{uuid.uuid4().hex[:12]}_"
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
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
            *self.args,
        ]
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={k: v for k, v in {**os.environ, **self.env}.items() if v is not None}, cwd=DOUBLES,
        )
        TritonServer.RUNNING.append(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.kill()
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
        """SIGINT (Triton's clean shutdown), SIGKILL after `grace` seconds."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        """A forced exit: SIGKILL the server and its stubs, then remove what they left in /dev/shm."""
        if self.process is None:
            return
        try:  # the server's process group: itself and the stubs it started
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        deadline = time.monotonic() + 10
        while self.stub_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        for region in self.shm_regions():
            region.unlink(missing_ok=True)
        if self in TritonServer.RUNNING:
            TritonServer.RUNNING.remove(self)

    def shm_regions(self) -> list[Path]:
        """This server's shared-memory regions in /dev/shm."""
        return sorted(SHM.glob(self.shm_prefix + "*"))

    def stub_pids(self, model: str | None = None) -> list[int]:
        """The Python backend stub processes of this server (one per model instance, plus
        one while a model's config is auto-completed): they carry its region prefix. Of one
        model: its command line names the model's folder."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                except OSError:  # gone meanwhile
                    continue
                if len(cmdline) > 2 and cmdline[0].endswith(STUB.encode()) and \
                        cmdline[2].startswith(self.shm_prefix.encode()) and \
                        (model is None or f"/{model}/".encode() in b"\0".join(cmdline)):
                    pids.append(int(entry.name))
        return pids

    def host_pids(self, model: str | None = None) -> list[int]:
        """The engine hosts (trtpool.host) of this server's models, or of one model: their command
        line is python -m trtpool.host MODEL DEVICE SERVER_PID."""
        pids = []
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (entry / "cmdline").read_bytes().decode().split("\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if (cmdline[1:3] == ["-m", "trtpool.host"] and len(cmdline) > 5 and state != "Z"
                    and cmdline[5] == str(self.process.pid) and model in (None, cmdline[3])):
                pids.append(int(entry.name))
        return pids

    def stub_pid(self, model: str) -> int | None:
        """A stub of `model`'s instances."""
        return next(iter(self.stub_pids(model)), None)

    def rss_bytes(self) -> int:
        """The server process's resident memory (its stubs not included)."""
        return rss_bytes(self.process.pid)

    def stubs_rss_bytes(self) -> int:
        return sum(rss_bytes(pid) for pid in self.stub_pids())

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 200) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as reply:
            return reply.read().decode()

    def metric_total(self, name: str, model: str, **labels: str) -> float:
        return metric_total(self.metrics(), name, model, **labels)

    def wait_for_metric(self, name: str, model: str, at_least: float, timeout: float = 10.0,
                        **labels: str) -> float:
        """trtpool hands its metrics to Triton every metrics_interval_ms: poll."""
        deadline = time.monotonic() + timeout
        while (total := self.metric_total(name, model, **labels)) < at_least and time.monotonic() < deadline:
            time.sleep(0.1)
        return total
