"""Probed models still let the server stop: SIGINT, then gone within seconds, exit 0, no region left.

Triton 2.51 keeps a decoupled model UNLOADING for good once a gRPC stream was
cancelled around its final response, and its exit then waits out the exit
timeout and returns 1 with the model's shared-memory region left in /dev/shm.
The liveness probe (trtpool-health, trtpool-serve's watchdog) cancelled its
stream after every answer, and wedged the server in about one run of three
after 21 probes. Here every mode is probed many times, by the watchdog, by
trtpool-health and in process, and by a plain stream; then the server must stop cleanly.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.harness.clients import TINY_TOLERANCE
from tests.harness.repository import add_example
from tests.harness.serve_command import trtpool_serve
from tests.harness.server import SHM, process_state
from tests.harness.streams import run_on_stream
from trtpool_builder.examples.tiny import tiny_reference
from trtpool_builder.folder.front import make_front_folder
from trtpool_ops.health import check

TRTPOOL_HEALTH = Path(sys.executable).parent / "trtpool-health"
MODELS = ("tiny", "tiny_pipelined", "tiny_decoupled", "tiny_decoupled_unary")
PROBES = 25  # in-process rounds of trtpool-health's check, every model each
WATCHDOG_ROUNDS = 10  # the watchdog's probes of the decoupled model, at least
STOPPED_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("shutdown")
    repo, cache = base / "repo", base / "onnx"
    add_example(repo, cache, "tiny", contexts="1")
    add_example(repo, cache, "tiny", "tiny_pipelined", contexts="1", mode="pipelined")
    add_example(repo, cache, "tiny", "tiny_decoupled", contexts="1", mode="decoupled")
    make_front_folder(repo, "tiny_decoupled")
    return repo


def successes(url: str, model: str) -> int:
    with grpcclient.InferenceServerClient(url) as client:
        [stats] = client.get_inference_statistics(model, as_json=True)["model_stats"]
    return int(stats["inference_stats"]["success"].get("count", 0))


def test_probed_models_let_the_server_stop_cleanly(repository, tmp_path):
    prefix = f"trtpool_shutdown_{uuid.uuid4().hex[:12]}_"
    log = tmp_path / "server.log"
    serve = trtpool_serve(
        repository,
        log,
        "--watch-interval=0.2",
        "--probe-timeout=30",
        f"--backend-config=python,shm-region-prefix-name={prefix}",
    )
    try:
        serve.wait_for("[serve] watchdog:", timeout=300)
        url = serve.ports.grpc_url
        assert sorted(SHM.glob(prefix + "*")), "the stubs' regions carry the prefix"
        for _ in range(3):
            done = subprocess.run([str(TRTPOOL_HEALTH), "--url", url], capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
            assert all(f"{model}: alive (answered)" in done.stdout for model in MODELS), done.stdout
        for _ in range(PROBES):
            results = check(url, MODELS, timeout=30)
            assert all(r.alive and r.detail == "answered" for r in results), results
        x = np.random.default_rng(0).standard_normal((3, 1, 16)).astype(np.float32)
        answers = run_on_stream(url, "tiny_decoupled", {f"r{i}": {"INPUT0": x[i]} for i in range(3)})
        for i in range(3):
            np.testing.assert_allclose(answers.outputs[f"r{i}"]["OUTPUT0"], tiny_reference(x[i]), **TINY_TOLERANCE)
        deadline = time.monotonic() + 120
        probed = 3 + PROBES + WATCHDOG_ROUNDS + 3
        while successes(url, "tiny_decoupled") < probed and time.monotonic() < deadline:
            time.sleep(0.2)
        assert successes(url, "tiny_decoupled") >= probed
    finally:
        started = time.monotonic()
        code = serve.stop(timeout=120)
        took = time.monotonic() - started
    assert code == 0, serve.output()
    assert took < STOPPED_WITHIN_S, f"stopping took {took:.1f} s"
    assert "Exit timeout expired" not in log.read_text()
    assert not sorted(SHM.glob(prefix + "*"))


def children(pid: int) -> list[int]:
    found = ((int(p.name), process_state(int(p.name))) for p in Path("/proc").iterdir() if p.name.isdigit())
    return [child for child, state in found if state is not None and state[1] == pid]


def ended(pid: int) -> bool:
    state = process_state(pid)
    return state is None or state[0] == "Z"


def test_a_killed_serve_command_takes_its_tritonserver_and_stubs_with_it(repository, tmp_path):
    """SIGKILL leaves trtpool-serve no handler to run: the server it started must still end
    (it runs in a process group of its own, so nothing else would stop it), and its stubs with it."""
    prefix = f"trtpool_orphan_{uuid.uuid4().hex[:12]}_"
    serve = trtpool_serve(
        repository, tmp_path / "server.log", f"--backend-config=python,shm-region-prefix-name={prefix}"
    )
    server = None
    try:
        serve.wait_for("[serve] watchdog:", timeout=300)
        [server] = children(serve.process.pid)
        stubs = children(server)
        assert stubs and sorted(SHM.glob(prefix + "*")), "the models' stubs and regions are up"
        os.kill(serve.process.pid, signal.SIGKILL)
        serve.process.wait(10)
        deadline = time.monotonic() + 60
        while not all(ended(pid) for pid in (server, *stubs)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ended(server), "tritonserver outlived trtpool-serve"
        assert all(ended(pid) for pid in stubs), "a stub outlived trtpool-serve"
        assert not sorted(SHM.glob(prefix + "*"))
    finally:
        if not ended(serve.process.pid):
            serve.stop()
        if server is not None and not ended(server):  # this test failed: stop what it left
            os.killpg(server, signal.SIGKILL)


SYS_TGKILL = 234  # x86-64 (asm/unistd_64.h)
_LIBC = ctypes.CDLL(None, use_errno=True)


def signal_thread(pid: int, tid: int, signum: int) -> None:
    """Send `signum` to one thread of `pid`, as the kernel may when it picks a thread of its own."""
    if _LIBC.syscall(SYS_TGKILL, pid, tid, signum) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {signum})")


def test_a_signal_taken_by_another_thread_still_stops_the_server(repository, tmp_path):
    """The kernel hands a process's signal to any thread that does not block it. Python runs the handler
    only in the main thread and only between bytecodes, so a main thread blocked in waitpid would never see
    a SIGINT that the watchdog's thread took (the flake of 2026-12-06: no handler ran, killed after 120 s)."""
    serve = trtpool_serve(repository, tmp_path / "server.log", "--watch-interval=0.2")
    try:
        serve.wait_for("Ctrl-C stops the server.", timeout=300)
        pid = serve.process.pid
        others = sorted(int(task.name) for task in Path(f"/proc/{pid}/task").iterdir() if int(task.name) != pid)
        assert others, "trtpool-serve runs threads beside its main one (its output relay, the watchdog)"
        signal_thread(pid, others[-1], signal.SIGINT)
        code = serve.process.wait(STOPPED_WITHIN_S)
    finally:
        serve.stop(timeout=30)
    assert code == 0, serve.output()
    assert "[serve] stopping tritonserver" in serve.output()
