"""A model whose Python backend stub process is killed (kill -9), as tritonserver 2.51 handles it.

What 2.51 does (python_backend r24.10, core r24.10; README "Recovering from a
dead stub"): requests to the instance fail about a second later with "Stub
process '<instance>' is not healthy."; the model and the server stay READY;
nothing restarts the stub, and a plain load of the unchanged model keeps it dead.

Once a request has failed on the dead stub, the old model is never freed:
its unload never completes and tritonserver's exit waits out its exit timeout
and returns 1 ("Exit timeout expired").

What trtpool adds, asserted here: trtpool-health reports the model DEAD within
a few seconds while its neighbours stay alive; unload + load brings it back;
trtpool-serve's watchdog does that by itself and requests succeed again, or
with --on-dead-stub=exit stops the server and exits 3 for a supervisor.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from tests.harness.clients import TINY_TOLERANCE, grpc_input, http_input
from tests.harness.docs import command_argv, quoted_command
from tests.harness.repository import add_example
from tests.harness.serve_command import ServeCommand, trtpool_serve, watchdog_metrics
from tests.harness.server import SHM, free_port
from trtpool_builder.examples.tiny import tiny_reference
from trtpool_builder.folder.front import make_front_folder
from trtpool_builder.folder.model_folder import read_config, write_config

TRTPOOL_HEALTH = Path(sys.executable).parent / "trtpool-health"
EXIT_TIMEOUT = "--exit-timeout-secs=3"
LEAKED_MODEL_EXIT = "failed to stop server: Internal - Exit timeout expired"
DEAD_WITHIN_S = 5.0       # trtpool-health names the dead model this soon after the kill
RELOADED_WITHIN_S = 20.0  # the watchdog (checking every second) has reloaded it this soon


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    """tiny with two instances (two stubs), tiny_decoupled (probed over a gRPC stream), its unary front,
    and tiny2."""
    base = tmp_path_factory.mktemp("dead_stub")
    repo, cache = base / "repo", base / "onnx"
    tiny = add_example(repo, cache, "tiny", contexts="1")
    config = read_config(tiny)
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=2)
    write_config(tiny, config)
    add_example(repo, cache, "tiny", "tiny_decoupled", contexts="1", mode="decoupled")
    make_front_folder(repo, "tiny_decoupled")
    add_example(repo, cache, "tiny", "tiny2", contexts="1")
    return repo


def stubs_of(serve: ServeCommand, repo: Path, model: str) -> list[psutil.Process]:
    """The live stub processes of `model`: `triton_python_backend_stub <repo>/<model>/1/model.py ...`."""
    server = [p for p in psutil.Process(serve.process.pid).children() if p.name() == "tritonserver"]
    found = []
    for child in server[0].children():
        try:
            command = child.cmdline()
        except psutil.NoSuchProcess:   # a zombie, or gone since the listing
            continue
        if "triton_python_backend_stub" in command[0] and command[1].startswith(f"{repo / model}/"):
            found.append(child)
    return found


def health(url: str) -> tuple[int, str]:
    done = subprocess.run([str(TRTPOOL_HEALTH), "--url", url, "--timeout", "5"], capture_output=True, text=True,
                          timeout=60)
    return done.returncode, done.stdout + done.stderr


def infer(url: str, seed: int) -> tuple[np.ndarray, np.ndarray | str]:
    x = np.random.default_rng(seed).standard_normal((1, 16)).astype(np.float32)
    with grpcclient.InferenceServerClient(url) as client:
        try:
            return x, client.infer("tiny", [grpc_input("INPUT0", x, "FP32")], client_timeout=30).as_numpy("OUTPUT0")
        except InferenceServerException as exc:
            return x, str(exc)


class Load:
    """Clients sending tiny requests until stopped; every answer kept with its time."""

    def __init__(self, url: str, clients: int = 2) -> None:
        self.url, self.results, self.stop = url, [], threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(clients)]
        for thread in self.threads:
            thread.start()

    def run(self, offset: int) -> None:
        seed = offset * 1_000_000
        while not self.stop.is_set():
            x, y = infer(self.url, seed)
            self.results.append((time.monotonic(), x, y))
            seed += 1

    def finish(self) -> list[tuple[float, np.ndarray, np.ndarray | str]]:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        return self.results


def assert_answers_correct(results) -> None:
    for _, x, y in results:
        if not isinstance(y, str):
            np.testing.assert_allclose(y, tiny_reference(x), **TINY_TOLERANCE)


def test_without_the_watchdog_the_model_stays_ready_and_fails_until_reloaded(repository, tmp_path):
    log = tmp_path / "server.log"
    serve = trtpool_serve(repository, log, "--watch-interval=0", EXIT_TIMEOUT)
    try:
        serve.wait_for("[serve] ready:")
        assert health(serve.ports.grpc_url)[0] == 0
        assert len(stubs_of(serve, repository, "tiny")) == 2
        # One instance only: the other may still answer, so all of tiny's stubs go.
        for stub in stubs_of(serve, repository, "tiny"):
            stub.send_signal(signal.SIGKILL)
        killed = time.monotonic()

        code, report = health(serve.ports.grpc_url)
        assert time.monotonic() - killed < DEAD_WITHIN_S
        assert code == 1, report
        assert "tiny: DEAD (" in report and "is not healthy" in report
        assert "tiny2: alive" in report and "tiny_decoupled: alive" in report

        # Tritonserver 2.51's own view: READY, and every request fails about a second later.
        with httpclient.InferenceServerClient(serve.ports.http_url) as client:
            assert client.is_model_ready("tiny") and client.is_server_ready() and client.is_server_live()
        start = time.monotonic()
        _, answer = infer(serve.ports.grpc_url, 0)
        assert isinstance(answer, str) and "Stub process 'tiny_0_" in answer and "is not healthy" in answer
        assert 0.5 < time.monotonic() - start < 5
        with grpcclient.InferenceServerClient(serve.ports.grpc_url) as client:
            client.load_model("tiny")          # unchanged model: a config update, the dead stubs stay
        assert isinstance(infer(serve.ports.grpc_url, 1)[1], str)

        for action in ("unload", "load"):      # the documented recovery, as docs/operations.md quotes it
            curl = quoted_command(f"curl -X POST localhost:8000/v2/repository/models/<model>/{action}",
                                  "docs/operations.md")
            done = subprocess.run([*command_argv(curl, {"localhost:8000": serve.ports.http_url, "<model>": "tiny"}),
                                   "--silent", "--show-error", "--write-out", "\n%{http_code}"], capture_output=True, text=True, timeout=300)
            assert done.returncode == 0 and done.stdout.endswith("\n200"), done.stdout + done.stderr
        assert_answers_correct([(0, *infer(serve.ports.grpc_url, seed)) for seed in range(5)])
        assert all(not isinstance(infer(serve.ports.grpc_url, seed)[1], str) for seed in range(5))
        assert health(serve.ports.grpc_url)[0] == 0
        [prefix] = re.findall(r"shm-region-prefix-name=(\S+)", serve.output())
        assert sorted(SHM.glob(prefix + "*")), "trtpool-serve's prefix names the stubs' regions"
    finally:
        code = serve.stop()
    # The unclean exit left the regions; trtpool-serve removed them.
    assert not sorted(SHM.glob(prefix + "*"))
    assert "[serve] removed the shared-memory regions tritonserver left in /dev/shm" in serve.output()
    assert code == 1 and LEAKED_MODEL_EXIT in log.read_text(), "the old tiny was freed after all?"
    # The terminal says why it waits and what the status means.
    assert "[serve] 2 stub process(es) died: Triton 2.51 cannot unload their models, so it waits the whole 3 s" \
        in serve.output()
    assert "[serve] tritonserver exited with status 1: a model did not unload within the exit timeout" \
        in serve.output()


def test_the_watchdog_reloads_a_model_whose_stub_died_under_load(repository, tmp_path):
    log = tmp_path / "server.log"
    metrics_port = free_port()
    serve = trtpool_serve(repository, log, "--watch-interval=1", "--probe-timeout=5", EXIT_TIMEOUT,
                          f"--watch-metrics-port={metrics_port}")
    try:
        serve.wait_for("[serve] watchdog:")
        time.sleep(2.5)                        # the watchdog has seen every stub alive
        load = Load(serve.ports.grpc_url)
        time.sleep(1)
        [victim, survivor] = stubs_of(serve, repository, "tiny")
        os.kill(victim.pid, signal.SIGKILL)    # one of two instances: the probe may not notice, the tracker does
        killed = time.monotonic()
        serve.wait_for("[serve] model tiny: dead (a stub process died); reloading it", timeout=RELOADED_WITHIN_S)
        serve.wait_for("[serve] model tiny: reloaded, serving again", timeout=RELOADED_WITHIN_S)
        reloaded = time.monotonic()
        assert reloaded - killed < RELOADED_WITHIN_S
        time.sleep(2)
        results = load.finish()
        # The operator's signal: one death of tiny, reloaded, not dead now; the other models untouched.
        seen = watchdog_metrics(metrics_port)
        assert seen['trtpool_watchdog_deaths_total{model="tiny"}'] == 1
        assert seen['trtpool_watchdog_recoveries_total{model="tiny",outcome="reloaded"}'] == 1
        assert seen['trtpool_watchdog_model_dead{model="tiny"}'] == 0
        assert not any('model="tiny2"' in series for series in seen)
        assert seen["trtpool_watchdog_checks_total"] >= 3
    finally:
        code = serve.stop()

    assert_answers_correct(results)
    after = [y for t, _, y in results if t > reloaded + 0.5]
    assert after and all(not isinstance(y, str) for y in after), [y for y in after if isinstance(y, str)][:3]
    failures = [y for _, _, y in results if isinstance(y, str)]
    expected = ("is not healthy", "has no available versions", "Failed to obtain the health mutex")
    assert all(any(text in y for text in expected) for y in failures), failures[:5]
    assert not victim.is_running() or victim.status() == psutil.STATUS_ZOMBIE
    if any("is not healthy" in y for y in failures):
        assert code == 1 and LEAKED_MODEL_EXIT in log.read_text()
    print(f"requests {len(results)}, failed during the {reloaded - killed:.1f} s to reload: {len(failures)}")


def test_the_watchdog_can_stop_the_server_for_a_supervisor_to_restart(repository, tmp_path):
    serve = trtpool_serve(repository, tmp_path / "server.log", "--watch-interval=1", "--on-dead-stub=exit",
                          EXIT_TIMEOUT)
    try:
        serve.wait_for("[serve] watchdog:")
        time.sleep(2.5)
        [stub] = stubs_of(serve, repository, "tiny2")
        stub.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        assert serve.process.wait(RELOADED_WITHIN_S) == 3
        assert time.monotonic() - killed < RELOADED_WITHIN_S
        serve.wait_for("model tiny2: dead (a stub process died); stopping the server", timeout=5)
    finally:
        serve.stop()


def probe_count(url: str, model: str) -> int:
    with grpcclient.InferenceServerClient(url) as client:
        [stats] = client.get_inference_statistics(model, as_json=True)["model_stats"]
    return int(stats["inference_stats"]["success"].get("count", 0))


def test_the_watchdog_reloads_a_decoupled_target_and_leaves_its_front_alone(repository, tmp_path):
    """The front is probed after its target and not while the target is dead: the target is
    reloaded within the watch interval and a probe, and the front (never reloaded) answers again."""
    serve = trtpool_serve(repository, tmp_path / "server.log", "--watch-interval=1", "--probe-timeout=10",
                          EXIT_TIMEOUT)
    try:
        serve.wait_for("[serve] watchdog:")
        url = serve.ports.grpc_url
        deadline = time.monotonic() + 60
        while probe_count(url, "tiny_decoupled_unary") < 2:   # two rounds: every stub seen alive
            assert time.monotonic() < deadline, serve.output()
            time.sleep(0.2)
        [front_stub] = stubs_of(serve, repository, "tiny_decoupled_unary")
        [stub] = stubs_of(serve, repository, "tiny_decoupled")
        stub.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        serve.wait_for("[serve] model tiny_decoupled: dead (a stub process died); reloading it",
                       timeout=RELOADED_WITHIN_S)
        serve.wait_for("[serve] model tiny_decoupled: reloaded, serving again", timeout=RELOADED_WITHIN_S)
        assert time.monotonic() - killed < RELOADED_WITHIN_S
        x = np.random.default_rng(7).standard_normal((2, 16)).astype(np.float32)
        with httpclient.InferenceServerClient(serve.ports.http_url) as client:
            y = client.infer("tiny_decoupled_unary", [http_input("INPUT0", x, "FP32")]).as_numpy("OUTPUT0")
        np.testing.assert_allclose(y, tiny_reference(x), **TINY_TOLERANCE)
        assert "model tiny_decoupled_unary: dead" not in serve.output()
        assert stubs_of(serve, repository, "tiny_decoupled_unary") == [front_stub]   # the same process
    finally:
        serve.stop()
