"""Real engine host processes serving ONNX Runtime, driven by HostClients in this process
(each client stands in for one Triton instance; tests/e2e/test_engine_host.py runs them
under tritonserver)."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from tests.harness.server import ROOT
from tests.unit.trtpool.host.conftest import host_processes, wait_until
from trtpool.errors import ConfigError, InvalidInput, Unavailable
from trtpool.host import launch, wire
from trtpool.host.client import HostClient
from trtpool.host.launch import Launcher
from trtpool.host.slab import Slab


def reference(spec: dict) -> ort.InferenceSession:
    return ort.InferenceSession(str(Path(spec["version_dir"]) / "model.onnx"), providers=["CPUExecutionProvider"])


def attach(spec: dict, count: int) -> list[HostClient]:
    clients = [HostClient(Launcher(spec)) for _ in range(count)]
    with ThreadPoolExecutor(count) as pool:   # at once: the kernel picks the one that starts the host
        list(pool.map(HostClient.attach, clients))
    return clients


def close(clients: list[HostClient]) -> None:
    for client in clients:
        client.close()


def batch(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    return {"INPUT0": rng.standard_normal((rows, 16)).astype(np.float32)}


def test_instances_share_one_host_whose_merged_batches_match_onnxruntime(make_spec):
    spec = make_spec(batch_wait_microseconds="20000")
    clients = attach(spec, 3)
    session = reference(spec)
    try:
        assert len({c.host_pid for c in clients}) == 1 and len(host_processes()) == 1
        assert [s.name for s in clients[0].signature.inputs] == ["INPUT0"]

        def work(client: HostClient, seed: int) -> float:
            rng = np.random.default_rng(seed)
            worst = 0.0
            for _ in range(15):
                requests = [batch(rng, int(rng.integers(1, 6))) for _ in range(int(rng.integers(1, 4)))]
                for request, answer in zip(requests, client.run(requests, [False] * len(requests))):
                    expected = session.run(None, request)[0]
                    worst = max(worst, float(np.abs(answer["OUTPUT0"] - expected).max()))
            return worst
        began = time.monotonic_ns()
        with ThreadPoolExecutor(3) as pool:
            worst = max(pool.map(work, clients, range(3)))
        elapsed_us = (time.monotonic_ns() - began) // 1000
        assert worst <= 1e-5   # the same ONNX Runtime in another process, other batch compositions
        stats = clients[0].stats()
        assert max(int(size) for size in stats["batch_sizes"]) <= 64
        assert any(int(messages) >= 2 for messages in stats["merged"]), stats["merged"]   # across instances
        assert stats["connections"] == 3 and stats["queue_depth"] == 0
        # each instance's own counts for its metrics: its 15 runs (one of them started the host), and their
        # round trips, within its time in work() and above one batch wait of 20 ms (each run waits in a
        # merged batch's window of up to 20 ms; the three send again at once, so each is near 20 ms)
        counts = [c.counts() for c in clients]
        assert [c["runs"] for c in counts] == [15] * 3 and sum(c["starts"] for c in counts) == 1
        assert all(20_000 <= c["round_trip_us"] <= elapsed_us for c in counts), (counts, elapsed_us)
    finally:
        close(clients)


def test_a_request_the_engine_refuses_fails_alone(make_spec):
    clients = attach(make_spec(), 1)
    try:
        good = batch(np.random.default_rng(0), 2)
        answers = clients[0].run([good, {"INPUT0": np.zeros((1, 15), np.float32)}], [False, False])
        assert answers[0]["OUTPUT0"].shape == (2, 4)
        assert isinstance(answers[1], InvalidInput) and "input 'INPUT0'" in str(answers[1])
    finally:
        close(clients)


def test_a_killed_host_fails_what_it_held_then_a_new_one_serves(make_spec):
    clients = attach(make_spec(), 2)
    first_host = clients[0].host_pid
    results: list[tuple[float, object]] = []
    stop = threading.Event()

    def load(client: HostClient) -> None:
        rng = np.random.default_rng()
        while not stop.is_set():
            answer = client.run([batch(rng, 4)], [False])[0]
            results.append((time.monotonic(), answer))
    threads = [threading.Thread(target=load, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        killed_at = time.monotonic()
        os.kill(first_host, signal.SIGKILL)
        wait_until(lambda: any(t > killed_at and isinstance(a, dict) for t, a in results), 10,
                   "a right answer after the host was killed")
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
            assert not thread.is_alive()   # every run came back
        failures = [(t, a) for t, a in results if not isinstance(a, dict)]
        assert failures, "the killed host held no batch"
        for at, error in failures:
            assert isinstance(error, Unavailable) and "went away" in str(error), error
            assert at - killed_at < 5
        whole = re.compile(rf"the engine host of model 'tiny' \(pid {first_host}\) went away while it held this "
                           r"request \(the peer (closed|reset) the connection( \((Broken pipe|Connection reset by peer)\))?; "
                           r"it was killed by SIGKILL\); it is being restarted: retry")
        assert any(whole.fullmatch(str(error)) for _, error in failures)   # the starter knows how it ended
        assert {c.host_pid for c in clients} - {first_host}, "no new host"
    finally:
        stop.set()
        close(clients)


def _raw(address: bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    sock.settimeout(10)
    return sock


@pytest.mark.parametrize("frame", [
    struct.pack("<I", wire.MAX_MESSAGE_BYTES + 1),   # oversized
    struct.pack("<I", 5) + b"nope!",                 # not JSON
    struct.pack("<I", 14) + b'{"op":"dance"}',       # an unknown op
    struct.pack("<I", 25) + b'{"op":"run","id":1,"requests":[{"inputs":[]}]}'[:25],  # cut inside the JSON
])
def test_a_bad_message_drops_its_connection_and_nothing_else(make_spec, frame):
    spec = make_spec()
    clients = attach(spec, 1)
    try:
        sock = _raw(clients[0].launcher.address)
        sock.sendall(frame)
        reply, _ = wire.receive(sock)
        assert reply["op"] == "error" and reply["error"]
        with pytest.raises(wire.ConnectionClosed):
            wire.receive(sock)
        sock.close()
        answer = clients[0].run([batch(np.random.default_rng(1), 3)], [False])[0]
        assert answer["OUTPUT0"].shape == (3, 4)
    finally:
        close(clients)


def test_a_descriptor_outside_the_slab_is_refused(make_spec):
    clients = attach(make_spec(), 1)
    try:
        sock = _raw(clients[0].launcher.address)
        slab = Slab.create(4096, "test")
        wire.send(sock, {"op": "run", "id": 1, "requests": [
            {"inputs": [["INPUT0", "TYPE_FP32", [1, 16], 1 << 30, 64]]}]}, (slab.fd,))
        reply, _ = wire.receive(sock)
        assert reply["op"] == "error" and "outside the 4,096-byte slab" in reply["error"]
        sock.close()
        slab.close()
        assert clients[0].run([batch(np.random.default_rng(2), 1)], [False])[0]["OUTPUT0"].shape == (1, 4)
    finally:
        close(clients)


def test_a_host_on_the_cpu_refuses_a_device_slab_saying_why(make_spec):
    """GPU inputs travel to a GPU host through CUDA IPC (trtpool.host.device_slab); a host on
    the CPU has no device memory to export: it says so, and the connection serves on."""
    clients = attach(make_spec(), 1)
    try:
        sock = _raw(clients[0].launcher.address)
        wire.send(sock, {"op": "hello", "pid": os.getpid()})
        assert wire.receive(sock)[0]["op"] == "ready"
        wire.send(sock, {"op": "device_slab", "bytes": 4096})
        reply, _ = wire.receive(sock)
        assert reply == {"op": "device_slab",
                         "refused": "model 'tiny' runs on the CPU (cpu): GPU inputs come through host memory"}
        slab = Slab.create(4096, "test")
        wire.send(sock, {"op": "run", "id": 1, "requests": [{"inputs": [["INPUT0", "TYPE_FP32", [1, 16], 0, 64]]}]},
                  (slab.fd,))
        reply, _ = wire.receive(sock)
        assert reply["op"] == "answer" and reply["answers"][0]["outputs"][0][0] == "OUTPUT0"
        sock.close()
        slab.close()
    finally:
        close(clients)


@pytest.mark.parametrize("message, error", [
    ({"op": "device_slab", "bytes": "a lot"}, "a device slab's 'bytes' must be an integer from 1 to"),
    ({"op": "device_slab", "bytes": 1 << 40}, "a device slab's 'bytes' must be an integer from 1 to"),
    ({"op": "device_slab", "bytes": 0}, "got 0"),
    ({"op": "run", "id": 1, "requests": [{"inputs": [], "device_inputs": [["INPUT0", "TYPE_FP32", [1, 16], 0, 64]]}]},
     "a run named device inputs before a device slab was asked for"),
])
def test_a_bad_device_slab_message_drops_its_connection_alone(make_spec, message, error):
    clients = attach(make_spec(), 1)
    try:
        sock = _raw(clients[0].launcher.address)
        slab = Slab.create(4096, "test")
        wire.send(sock, message, (slab.fd,) if message["op"] == "run" else ())
        reply, _ = wire.receive(sock)
        assert reply["op"] == "error" and error in reply["error"]
        with pytest.raises(wire.ConnectionClosed):
            wire.receive(sock)
        sock.close()
        slab.close()
        assert clients[0].run([batch(np.random.default_rng(3), 2)], [False])[0]["OUTPUT0"].shape == (2, 4)
    finally:
        close(clients)


INSTANCE_SCRIPT = """
import json, sys
import numpy as np
from trtpool.host.client import HostClient
from trtpool.host.launch import Launcher
client = HostClient(Launcher(json.loads(sys.argv[1])))
client.attach()
print("attached", flush=True)
while True:
    client.run([{"INPUT0": np.ones((8, 16), np.float32)}], [False])
"""


def test_an_instance_that_dies_is_dropped_and_the_others_go_on(make_spec):
    spec = make_spec()
    clients = attach(spec, 1)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    other = subprocess.Popen([sys.executable, "-c", INSTANCE_SCRIPT, json.dumps(spec)], stdout=subprocess.PIPE,
                             env=env, cwd=ROOT)
    try:
        assert other.stdout.readline().strip() == b"attached"
        wait_until(lambda: clients[0].stats()["connections"] == 2, 5, "the second instance connected")
        time.sleep(0.3)   # it is running batches
        other.kill()
        other.wait()
        wait_until(lambda: clients[0].stats()["connections"] == 1, 5, "the host dropped the dead instance")
        answer = clients[0].run([batch(np.random.default_rng(3), 2)], [False])[0]
        assert answer["OUTPUT0"].shape == (2, 4)
    finally:
        other.kill()
        close(clients)


def test_the_host_ends_with_its_last_instance(make_spec):
    clients = attach(make_spec(), 2)
    host = clients[0].host_pid
    clients[0].close()
    time.sleep(1.0)
    assert host in [p.pid for p in host_processes()]   # one instance is still there
    clients[1].close()
    wait_until(lambda: not host_processes(), 5, "the host ended after the last instance")


def test_a_model_that_fails_to_load_is_each_instances_load_error(make_spec):
    spec = make_spec()
    model = Path(spec["version_dir"]) / "model.onnx"
    model.write_bytes(model.read_bytes()[:200])
    clients = [HostClient(Launcher(spec)) for _ in range(2)]
    for client in clients:
        with pytest.raises(ConfigError, match="cannot be loaded by ONNX Runtime"):
            client.attach()
    close(clients)


def test_a_host_that_keeps_dying_is_not_started_without_end(make_spec, monkeypatch):
    launcher = Launcher(make_spec())
    for _ in range(launch.MAX_STARTS):
        launcher._count_start()
    with pytest.raises(Unavailable, match=f"started {launch.MAX_STARTS} times in 60 s"):
        launcher._count_start()
    real = time.monotonic
    monkeypatch.setattr(launch.time, "monotonic", lambda: real() + launch.START_WINDOW_S + 1)
    launcher._count_start()   # the window has passed


def test_a_changed_config_or_model_file_gets_a_host_of_its_own(make_spec):
    spec = make_spec()
    address = Launcher(spec).address
    assert Launcher(dict(spec)).address == address
    changed = json.loads(json.dumps(spec))
    changed["model_config"]["parameters"]["contexts"]["string_value"] = "1"
    assert Launcher(changed).address != address
    assert Launcher({**spec, "device": "cuda:1"}).address != address
    model = Path(spec["version_dir"]) / "model.onnx"
    os.utime(model, ns=(1, 1))
    assert Launcher(spec).address != address


def test_an_instance_that_stops_reading_is_dropped_and_the_others_are_served(make_spec):
    """A peer that sends a run, then floods the host without reading its answers: the host's sends to
    it give up (SEND_TIMEOUT_S) and its connection is dropped; the other instance is served all along."""
    clients = attach(make_spec(), 1)
    try:
        stalled = _raw(clients[0].launcher.address)
        wire.send(stalled, {"op": "hello", "pid": os.getpid()})
        wire.receive(stalled)
        for _ in range(20_000):   # replies pile up in the socket until the host's send blocks
            try:
                stalled.send(struct.pack("<I", 14) + b'{"op":"stats"}')
            except OSError:
                break
        rng = np.random.default_rng(5)
        start = time.monotonic()
        for _ in range(20):
            answer = clients[0].run([batch(rng, 2)], [False])[0]
            assert isinstance(answer, dict), answer
        wait_until(lambda: clients[0].stats()["connections"] == 1, 25, "the stalled instance was not dropped")
        assert time.monotonic() - start < 30
        stalled.close()
    finally:
        close(clients)


def _memfds(pid: int) -> int:
    fds = Path(f"/proc/{pid}/fd")
    return sum(1 for fd in fds.iterdir() if os.readlink(fd).startswith("/memfd:"))


def test_slabs_that_grow_do_not_pile_up_in_the_host(make_spec):
    clients = attach(make_spec(), 1)
    try:
        host = clients[0].host_pid
        rng = np.random.default_rng(6)
        clients[0].run([batch(rng, 1)], [False])
        held = _memfds(host)   # the input and output slabs in use
        for count in (300, 700, 1500):   # 4 KiB a request: the input slab grows to 2, 4, 8 MiB
            answers = clients[0].run([batch(rng, 64) for _ in range(count)], [False] * count)
            assert all(isinstance(a, dict) for a in answers)
        assert _memfds(host) <= held   # each replaced slab given back (its mapping with its last view)
    finally:
        close(clients)


def test_the_host_logs_to_the_servers_stderr_beside_the_servers_own_lines(make_spec, tmp_path):
    """Its log lines outlive the instance that started it (whose stderr pipe ends with it): they are
    written to the stderr that the starter shares with tritonserver, here a stand-in server's file
    opened without O_APPEND (as `2> file` opens it). One file description, one offset: the host's
    lines and the server's, written before and after them, are all there (a file opened again
    through /proc/PID/fd/2 has an offset of its own, and the server's next lines overwrote the
    host's)."""
    server_stderr = tmp_path / "server.stderr"
    with server_stderr.open("w") as stderr:
        server = subprocess.Popen(
            ["sh", "-c", "i=0; while [ $i -lt 300 ]; do echo server line $i >&2; i=$((i+1)); sleep 0.01; done"],
            stderr=stderr,
        )
        try:
            client = HostClient(Launcher({**make_spec(), "server_pid": server.pid}, log_fd=stderr.fileno()))
            client.attach()
            host = client.host_pid
            client.close()
            server.wait(timeout=30)
        finally:
            server.kill()
    text = server_stderr.read_text()
    assert f"INFO trtpool engine host [tiny] engine host: model 'tiny' loaded in pid {host}" in text
    assert [line for line in text.splitlines() if line.startswith("server line")] == [
        f"server line {i}" for i in range(300)
    ]
