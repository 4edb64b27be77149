"""A decoupled model's stub killed (SIGKILL) with requests in it, on one tritonserver 2.51
beside a plain Python-backend decoupled model (issue 29, docs/operations.md "Recovering from
a dead stub"): Triton answers none of the requests that were inside the dead stub, for the
plain model (asserted here) as for trtpool's (a fault probe: 17-22 per kill). Their response senders lived in the stub; nothing else holds
them (python_backend r24.10 has no restart for decoupled instances), so neither trtpool nor its
watchdog, a separate process, can answer them. Requests sent after the kill are answered,
with the stub's 'is not healthy' error. A client's own timeout, then a resend once the model
is reloaded, is the workaround. The unary front's BLS call waits for a request lost inside the
dead stub the same way, so the front bounds it (test_front_dead_target.py).

And each killed stub is a zombie child of tritonserver, which only tritonserver, its parent, can
reap (trtpool-serve is tritonserver's parent, not the stubs'): it does when the model's unload
completes, but once a request has failed on the dead stub the old model is never freed
(docs/operations.md), and its zombie stays until the server exits.
"""
from __future__ import annotations

import os
import queue
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.harness.python_model import python_model, tensor
from tests.harness.repository import add_example
from tests.harness.server import TritonServer, process_state
from tests.harness.streams import StreamClient

IN_FLIGHT = 8
WAIT_S = 10.0       # the plain model answers each request 3 s after it arrives
SLOW_ECHO = '''
import threading, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender, x = request.get_response_sender(), pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            def answer(sender=sender, x=x):
                time.sleep(3)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            threading.Thread(target=answer, daemon=True).start()
        return None
'''
MODELS = ("plain_decoupled", "tiny_decoupled")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("dead_decoupled")
    repo = base / "repo"
    python_model(repo, "plain_decoupled", SLOW_ECHO, [tensor("INPUT0", "FP32", [-1, 16])],
                 [tensor("OUTPUT0", "FP32", [-1, 16])], extra="model_transaction_policy { decoupled: true }")
    add_example(repo, base / "onnx", "tiny", "tiny_decoupled", contexts="1", mode="decoupled")
    server = TritonServer(repo, base / "server.log", ("--model-control-mode=explicit", "--load-model=*",
                                                      "--exit-timeout-secs=3")).start()
    yield server
    server.stop()


def _zombies(server: TritonServer) -> list[int]:
    """tritonserver's children that exited and were not reaped."""
    children = [int(p) for p in Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
                .read_text().split()]
    return [pid for pid in children if (process_state(pid) or ("",))[0] == "Z"]


def _killed_in_flight(server: TritonServer, model: str, requests: int) -> tuple[int, int]:
    """Send `requests` on one stream, kill the model's stub while they run; (answers in WAIT_S, the pid)."""
    pid = server.stub_pid(model)
    assert pid is not None
    x = np.ones((1, 16), np.float32)
    stream = StreamClient(server.grpc_url)
    try:
        for i in range(requests):
            stream.send(model, {"INPUT0": x}, str(i))
        time.sleep(0.5)  # the requests reach the stub (the plain model holds each for 3 s)
        os.kill(pid, signal.SIGKILL)
        answered = 0
        deadline = time.monotonic() + WAIT_S
        while answered < requests and time.monotonic() < deadline:
            try:
                stream.collect(1, timeout=max(0.1, deadline - time.monotonic()))
                answered += 1
            except queue.Empty:
                break
    finally:
        stream.close()
    return answered, pid


def test_requests_inside_a_killed_decoupled_stub_are_not_answered_plain_model_too(server):
    answered, pid = _killed_in_flight(server, "plain_decoupled", IN_FLIGHT)
    assert answered < IN_FLIGHT, "every request in the dead stub was answered: fixed upstream? " \
                                 "Then update docs/operations.md"
    assert "is not healthy" in _failed_request(server, "plain_decoupled")  # after the kill: answered, an error


def _failed_request(server: TritonServer, model: str) -> str:
    """The error a request sent to `model` after its stub died gets."""
    with StreamClient(server.grpc_url) as stream:
        stream.send(model, {"INPUT0": np.ones((1, 16), np.float32)}, "after")
        answers = stream.collect(1, timeout=WAIT_S)
    assert answers.errors, answers.outputs
    return str(answers.errors[0])


def test_a_killed_stub_stays_a_zombie_until_its_model_is_freed(server):
    """Killed stubs are zombies of tritonserver; an unload that completes reaps them, but once a
    request failed on the dead stub the old model is never freed and its zombie stays."""
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        for model in MODELS:  # fresh stubs (an earlier test killed one)
            client.unload_model(model)
            client.load_model(model)
        killed = {}
        for model in MODELS:
            killed[model] = server.stub_pid(model)
            assert killed[model] is not None, model
            os.kill(killed[model], signal.SIGKILL)
        time.sleep(2)
        assert set(killed.values()) <= set(_zombies(server)), (killed, _zombies(server))
        assert "is not healthy" in _failed_request(server, "plain_decoupled")
        for model in MODELS:  # a reload starts new stubs
            client.unload_model(model)
            client.load_model(model)
        assert all(server.stub_pid(model) not in (None, killed[model]) for model in MODELS)
        time.sleep(2)
        zombies = _zombies(server)
        assert killed["tiny_decoupled"] not in zombies, "reaped when its model's unload completed"
        assert killed["plain_decoupled"] in zombies, "the failed request holds the old model, and its zombie"
    finally:
        client.close()
