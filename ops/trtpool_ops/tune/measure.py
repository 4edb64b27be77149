"""One point: tritonserver on a scratch repository holding the user's folder (linked, with
the candidate's config.pbtxt), driven by perf_analyzer under the client profile.

Each point gets a fresh server, so no point inherits another's memory, threads or
warm caches. Whatever ends a point (its figures, an error, Ctrl-C), the server's
process group is stopped and its shared-memory regions are removed before the
next step.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from trtpool_builder.folder.front import make_front_folder
from trtpool_builder.folder.model_folder import read_config, write_config
from trtpool_ops.command import ServeOptions, tritonserver_command
from trtpool_ops.repository import model_states
from trtpool_ops.serve import kill_group, start, wait_live
from trtpool_ops.server_log import start_errors
from trtpool_ops.shm import own_prefix, prefix_flag, remove_regions
from trtpool_ops.tune import gpu_memory, perf
from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.profile import ClientProfile
from trtpool_ops.tune.space import Candidate, render

CONFIGS = ("config.pbtxt", "config.tuned.pbtxt")
STOP_GRACE_S = 15.0
UNSETTLED = ("READY", "LOADING", "UNLOADING")  # a model still live in the repository index


class LoadFailed(RuntimeError):
    """A model of the scratch repository did not load; the message is Triton's reason."""


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stage(repo: Path, folder: Path, name: str, config: mc.ModelConfig, front: bool = False) -> str:
    """repo/name: links to everything in `folder` but its config, and `config`; with `front`, the
    unary front beside it. Returns the model a client calls."""
    target = repo / name
    target.mkdir(parents=True)
    for entry in folder.iterdir():
        if entry.name not in CONFIGS:
            (target / entry.name).symlink_to(entry.resolve())
    staged = mc.ModelConfig()
    staged.CopyFrom(config)
    staged.name = name
    write_config(target, staged)
    return make_front_folder(repo, name).name if front else name


@dataclass
class Server:
    """A tritonserver on loopback ports, its regions under a prefix of its own."""

    process: subprocess.Popen
    grpc_port: int
    http_port: int
    prefix: str
    metrics_port: int

    def url(self, protocol: str) -> str:
        return f"127.0.0.1:{self.grpc_port if protocol == 'grpc' else self.http_port}"


@contextmanager
def serving(
    tritonserver: str, repo: Path, log: Path, timeout: float = 600.0, load_threads: int = 4
) -> Iterator[Server]:
    """Every model of `repo` loaded (`load_threads` at a time, Triton's default 4) and READY, or
    LoadFailed with Triton's reason; stopped on the way out."""
    prefix = own_prefix((), tool="tune")
    assert prefix is not None  # no flags that set one: always a fresh prefix
    options = ServeOptions(
        repo,
        (),
        "127.0.0.1",
        free_port(),
        free_port(),
        free_port(),
        passthrough=(prefix_flag(prefix), "--exit-timeout-secs=10", f"--model-load-thread-count={load_threads}"),
    )
    with log.open("wb") as out:
        process = start(tritonserver_command(tritonserver, options), out)
    server = Server(process, options.grpc_port, options.http_port, prefix, options.metrics_port)
    try:
        if wait_live(process, server.url("grpc"), timeout) != "live":
            lines = log.read_text(errors="replace").splitlines()
            raise LoadFailed(f"tritonserver did not start (status {process.poll()}):\n{start_errors(lines)}")
        with grpcclient.InferenceServerClient(server.url("grpc")) as client:
            failed = [s for s in model_states(client) if s.state != "READY"]
        if failed:
            raise LoadFailed(
                "\n".join(f"model '{s.name}': {s.reason.split(chr(10) * 2)[0] or s.state}" for s in failed)
            )
        yield server
    finally:
        shut_down(server)


def unload_all(server: Server, timeout: float = STOP_GRACE_S) -> None:
    """Triton's own unload of every model (its stubs finalize and unlink their regions), waited for, so
    that the SIGINT after it finds no model live and the server exits at once: on SIGINT with models
    live, Triton unloads them and then checks once a second, about a second lost a point."""
    deadline = time.monotonic() + timeout
    try:
        with grpcclient.InferenceServerClient(server.url("grpc")) as client:
            for state in model_states(client):
                if state.state == "READY":
                    client.unload_model(state.name, client_timeout=timeout)
            while time.monotonic() < deadline and any(s.state in UNSETTLED for s in model_states(client)):
                time.sleep(0.05)
    except InferenceServerException:
        pass  # the SIGINT and the group kill that follow stop it anyway


def shut_down(server: Server) -> None:
    """Every model unloaded (unload_all), SIGINT, the group killed after STOP_GRACE_S, then whatever
    regions are left under the server's prefix removed."""
    with perf.sheltered():
        if server.process.poll() is None:
            unload_all(server)
            server.process.send_signal(signal.SIGINT)
            with suppress(subprocess.TimeoutExpired):
                server.process.wait(STOP_GRACE_S)
        kill_group(server.process)
        server.process.wait()
        remove_regions(server.prefix)


def served_config(tritonserver: str, folder: Path, scratch: Path) -> dict[str, Any]:
    """The folder loaded as it is: the config Triton serves (auto-complete filled in), or LoadFailed."""
    repo = scratch / "as-given"
    stage(repo, folder, folder.name, read_config(folder))
    with (
        serving(tritonserver, repo, scratch / "as-given.log") as server,
        grpcclient.InferenceServerClient(server.url("grpc")) as client,
    ):
        return client.get_model_config(folder.name, as_json=True)["config"]


class Measurer:
    """Measures candidates of one model folder under one client profile."""

    def __init__(
        self,
        folder: Path,
        base: mc.ModelConfig,
        tensors: list[str],
        profile: ClientProfile,
        window: perf.Window,
        tritonserver: str,
        perf_analyzer: str,
        scratch: Path,
    ) -> None:
        self.folder, self.base, self.tensors = folder, base, tensors
        self.profile, self.window = profile, window
        self.tritonserver, self.perf_analyzer, self.scratch = tritonserver, perf_analyzer, scratch
        self.count = 0

    def perf_timeout(self) -> float:
        return self.window.interval_ms / 1000 * self.window.max_trials * 3 + 60

    def drive(self, server: Server, model: str, streaming: bool, where: Path) -> perf.Reading:
        argv = perf.command(
            self.perf_analyzer,
            model,
            server.url(self.profile.protocol),
            self.profile,
            streaming,
            self.window,
            where / "perf.csv",
        )
        return perf.run(argv, self.tensors, where / "perf.log", self.perf_timeout(), self.profile)

    def stage_all(self, repo: Path, candidates: Mapping[str, Candidate]) -> dict[str, str]:
        """Each candidate under its own name in one repository; {name: the model its clients call}."""
        return {
            name: stage(repo, self.folder, name, render(self.base, c), c.mode == "decoupled-front")
            for name, c in candidates.items()
        }

    def measure(self, candidate: Candidate) -> Measurement:
        self.count += 1
        where = self.scratch / f"point-{self.count}"
        begun = time.monotonic()
        try:
            [model] = self.stage_all(where / "repo", {self.folder.name: candidate}).values()
            with serving(self.tritonserver, where / "repo", where / "server.log") as server:
                reading, note = self.settled(server, model, candidate.mode == "decoupled", where)
                memory = gpu_memory.read(f"127.0.0.1:{server.metrics_port}")
        except (LoadFailed, perf.PerfFailed) as exc:
            return Measurement(candidate, seconds=time.monotonic() - begun, error=str(exc))
        finally:
            shutil.rmtree(where / "repo", ignore_errors=True)
        return replace(figures(candidate, reading, time.monotonic() - begun), note=note, gpu_memory_bytes=memory)

    def measure_together(self, candidates: Sequence[Candidate]) -> Iterator[Measurement]:
        """The candidates loaded side by side in one server and measured in turn, each yielded as it is
        done: one server start for them all (--grid-together). A point's seconds are its measurement
        plus an even share of the start; no GPU memory per point (the server's reading is theirs
        together). Where they do not all load, each is measured on its own server, so a point that
        fails fails alone."""
        self.count += 1
        where = self.scratch / f"points-{self.count}"
        begun = time.monotonic()
        named = {f"{self.folder.name}_{i}": c for i, c in enumerate(candidates)}
        beside = f"measured beside {len(candidates) - 1} other point(s) loaded in one server"
        try:
            models = self.stage_all(where / "repo", named)
            with serving(
                self.tritonserver,
                where / "repo",
                where / "server.log",
                load_threads=min(len(named), os.cpu_count() or 4),
            ) as server:
                start_share = (time.monotonic() - begun) / len(named)
                for name, candidate in named.items():
                    (where / name).mkdir()
                    point_begun = time.monotonic()
                    try:
                        reading, note = self.settled(server, models[name], candidate.mode == "decoupled", where / name)
                    except perf.PerfFailed as exc:
                        yield Measurement(candidate, seconds=start_share, error=str(exc))
                        continue
                    seconds = start_share + time.monotonic() - point_begun
                    yield replace(figures(candidate, reading, seconds), note="; ".join(filter(None, (beside, note))))
        except LoadFailed:
            yield from (self.measure(candidate) for candidate in candidates)
        finally:
            shutil.rmtree(where / "repo", ignore_errors=True)

    def settled(self, server: Server, model: str, streaming: bool, where: Path) -> tuple[perf.Reading, str]:
        """perf_analyzer's reading; where its windows did not agree (a busy machine), once more with windows
        twice as long and a criterion twice as loose (said in the point's note)."""
        try:
            return self.drive(server, model, streaming, where), ""
        except perf.PerfFailed as exc:
            if perf.UNSTABLE not in str(exc):
                raise
        first = self.window
        self.window = replace(first, interval_ms=2 * first.interval_ms, stability=min(2 * first.stability, 80))
        try:
            return self.drive(server, model, streaming, where), (
                f"measured again with {self.window.interval_ms} ms windows, stability {self.window.stability}%"
            )
        finally:
            self.window = first


def figures(candidate: Candidate, reading: perf.Reading, seconds: float) -> Measurement:
    """perf_analyzer's inferences/s (requests/s x client batch), latencies (us -> ms) and windows."""
    row = reading.row
    return Measurement(
        candidate,
        row["Inferences/Second"],
        row["p50 latency"] / 1000,
        row["p99 latency"] / 1000,
        seconds,
        windows=reading.windows,
    )
