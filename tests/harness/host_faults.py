"""An engine host SIGKILLed under load, as the CPU and GPU tests both run it: clients keep sending,
the host is killed, and every request must be answered (right, or UNAVAILABLE naming the host
within 5 s of the kill) with right answers back within 10 s."""
from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.harness.server import TritonServer

ANSWERED_WITHIN_S = 5.0
SERVING_AGAIN_WITHIN_S = 10.0


@dataclass
class KilledUnderLoad:
    host: int  # the killed host's pid
    killed: float  # time.monotonic() of the kill
    log: list[tuple[float, float, object]] = field(default_factory=list)  # (sent, answered, array or error)

    def failed(self) -> list[tuple[float, float, InferenceServerException]]:
        return [(sent, done, answer) for sent, done, answer in self.log if not isinstance(answer, np.ndarray)]

    def right_answers(self) -> list[np.ndarray]:
        return [answer for _, _, answer in self.log if isinstance(answer, np.ndarray)]


def kill_host_under_load(server: TritonServer, model: str,
                         infer: Callable[[grpcclient.InferenceServerClient], np.ndarray],
                         clients: int = 6) -> KilledUnderLoad:
    """`clients` threads call `infer` in a loop; after a second the model's host is SIGKILLed; the
    load stops once a request sent after the kill was answered right (asserted within 10 s)."""
    (host,) = server.host_pids(model)
    record = KilledUnderLoad(host, 0.0)
    stop = threading.Event()

    def load() -> None:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        while not stop.is_set():
            sent = time.monotonic()
            try:
                answer: object = infer(client)
            except InferenceServerException as exc:
                answer = exc
            record.log.append((sent, time.monotonic(), answer))
        client.close()

    threads = [threading.Thread(target=load) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        record.killed = time.monotonic()
        os.kill(host, signal.SIGKILL)
        deadline = record.killed + SERVING_AGAIN_WITHIN_S
        while not any(sent > record.killed and isinstance(a, np.ndarray) for sent, _, a in record.log):
            assert time.monotonic() < deadline, f"no right answer within {SERVING_AGAIN_WITHIN_S} s of the kill"
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(40)
    assert not any(thread.is_alive() for thread in threads), "a request was never answered"
    failed = record.failed()
    assert failed, "the killed host held no request"
    for sent, done, error in failed:
        assert error.status() == "StatusCode.UNAVAILABLE", error
        assert f"engine host of model '{model}'" in error.message() and "went away" in error.message(), error
        assert done - max(sent, record.killed) < ANSWERED_WITHIN_S
    (new_host,) = server.host_pids(model)
    assert new_host != host
    return record
