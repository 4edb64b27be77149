"""A unary front whose decoupled target's stub is SIGKILLed with requests in it, no watchdog
running (issue 37, item 15). The requests inside the dead stub are never answered (Triton's:
test_dead_decoupled_stub.py), and the front's BLS calls for them never return. Before the
front bounded its calls, each such call held the front's execute for good: the front answered
nothing more, not even once the target was reloaded, and the server's stop found the front's
in-flight inferences. Now the front gives up on each call after forward_timeout_seconds with
UNAVAILABLE naming the target, serves again once the target is reloaded, and holds no
inference at the stop.

The stop itself still waits out --exit-timeout-secs: the dead stub's model never finishes
unloading (docs/operations.md), and the front's own unload waits for the BLS threads its lost
calls hold (python_backend r24.10 ~ModelInstanceState: thread_pool_->wait()). Both are Triton's.
"""
from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.doubles.flaky_runtime import SLOW, SLOW_SECONDS
from tests.harness.clients import http_input
from tests.harness.repository import FLAKY_RUNTIME, add_example, set_parameters
from trtpool_builder.examples.tiny import tiny_reference
from trtpool_builder.folder.front import make_front_folder

TARGET, FRONT = "tiny_dec", "tiny_dec_unary"
FORWARD_TIMEOUT_S = 3.0
IN_FLIGHT = 6           # one context: the first slow batch runs, the others wait inside the stub
CLIENT_TIMEOUT_S = FORWARD_TIMEOUT_S + 30.0   # the client's own bound: the front must answer well before
EXIT_TIMEOUT_S = 5
GAVE_UP = f"model '{TARGET}' (this front's forward_to target) sent no answer within {FORWARD_TIMEOUT_S:g} s"
# A request that reached the target only after the kill (a second batch of the front) is refused at once.
DEAD = f"Stub process '{TARGET}_0' is not healthy"


@pytest.fixture(scope="module")
def server(start_server, tmp_path_factory):
    base = tmp_path_factory.mktemp("front_dead_target")
    repo = base / "repo"
    add_example(repo, base / "onnx", "tiny", TARGET, contexts="1", mode="decoupled", runtime=FLAKY_RUNTIME)
    # A batching delay that gathers the test's requests into one batch of the front: its execute
    # forwards them all at once, before the kill.
    front = make_front_folder(repo, TARGET, max_queue_delay_microseconds=50_000)
    set_parameters(front, forward_timeout_seconds=f"{FORWARD_TIMEOUT_S:g}")
    return start_server(repo, "--model-control-mode=explicit", "--load-model=*",
                        f"--exit-timeout-secs={EXIT_TIMEOUT_S}")


def _through_front(url: str, x: np.ndarray) -> np.ndarray | InferenceServerException:
    """The front's answer to one request: its output, or its error."""
    client = httpclient.InferenceServerClient(url, connection_timeout=CLIENT_TIMEOUT_S,
                                              network_timeout=CLIENT_TIMEOUT_S)
    try:
        return client.infer(FRONT, [http_input("INPUT0", x, "FP32")]).as_numpy("OUTPUT0")
    except InferenceServerException as exc:
        return exc
    finally:
        client.close()


def _slow(i: int) -> np.ndarray:
    x = np.full((1, 16), float(i), np.float32)
    x[0, 1] = SLOW   # each batch with it takes SLOW_SECONDS longer
    return x


def _reload(url: str) -> None:
    client = httpclient.InferenceServerClient(url, network_timeout=60)
    try:
        client.unload_model(TARGET)
        client.load_model(TARGET)
    finally:
        client.close()  # an open connection would hold the server's stop for its exit timeout


def _killed_under_load(server) -> tuple[list[np.ndarray | InferenceServerException], float]:
    """IN_FLIGHT slow requests through the front, the target's stub killed while they are inside
    it; (the answers, how long the last took)."""
    pid = server.stub_pid(TARGET)
    assert pid is not None
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        started = time.monotonic()
        calls = [pool.submit(_through_front, server.http_url, _slow(i)) for i in range(IN_FLIGHT)]
        time.sleep(SLOW_SECONDS / 2)  # the requests are inside the target's stub, the first batch running
        os.kill(pid, signal.SIGKILL)
        answers = [call.result() for call in calls]
    return answers, time.monotonic() - started


def test_a_front_gives_up_on_a_dead_target_serves_again_once_it_is_reloaded_and_holds_no_stop(server):
    answers, took = _killed_under_load(server)
    errors = [a for a in answers if isinstance(a, InferenceServerException)]
    gave_up = [e for e in errors if GAVE_UP in e.message() and e.status() == "503"]
    assert gave_up, f"the kill caught no request inside the stub: nothing was tested ({errors})"
    assert all(e in gave_up or DEAD in e.message() for e in errors), [str(e) for e in errors]
    assert took < FORWARD_TIMEOUT_S + SLOW_SECONDS + 5, f"answered in {took:.1f} s"

    _reload(server.http_url)
    x = np.ones((2, 16), np.float32)
    answer = _through_front(server.http_url, x)
    assert not isinstance(answer, InferenceServerException), f"after the reload: {answer}"
    np.testing.assert_allclose(answer, tiny_reference(x), rtol=1e-5, atol=1e-5)

    server.stop()
    assert server.process.returncode != -signal.SIGKILL, "the stop outlasted the harness's grace"
    log = server.log_text()
    assert "Waiting for in-flight requests to complete." in log
    assert f"Model '{FRONT}' (version 1) has" not in log, \
        [line for line in log.splitlines() if "in-flight inferences" in line]
