"""Three tritonservers serving one repository behind a real nginx, clients only through nginx.

One replica is killed (SIGKILL, its whole process group) while HTTP and gRPC
clients send requests: with the clients' retries no request is lost or answered
wrong. Every replica's /metrics is scraped, including the series that the
HorizontalPodAutoscaler of deploy/ scales on. This is the single-host shape of
the Kubernetes deployment: nginx = the Service, each tritonserver = a pod.
"""
from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml
from tritonclient.utils import InferenceServerException

from tests.harness.balancer import Balancer
from tests.harness.clients import TINY_TOLERANCE, grpc_input, http_input
from tests.harness.repository import add_example
from tests.harness.server import ROOT, TritonServer
from trtpool_builder.examples.tiny import tiny_reference

REPLICAS = 3
REQUESTS_PER_CLIENT = 120
CLIENTS_PER_PROTOCOL = 2
KILL_AFTER = 60          # answered requests before one replica is killed
ATTEMPTS = 4             # the clients' retries: a request fails only if all fail
ADAPTER_VALUES = ROOT / "deploy" / "prometheus-adapter-values.yaml"


@pytest.fixture(scope="module")
def cluster(start_server, tmp_path_factory) -> tuple[list[TritonServer], Balancer]:
    base = tmp_path_factory.mktemp("replicas")
    repo = base / "repo"
    add_example(repo, base / "onnx", "tiny", contexts="1")
    with ThreadPoolExecutor(REPLICAS) as pool:
        replicas = list(pool.map(lambda _: start_server(repo, "--exit-timeout-secs=5"), range(REPLICAS)))
    balancer = Balancer(base / "nginx", replicas).start()
    yield replicas, balancer
    balancer.stop()


def with_retries(call: Callable[[], np.ndarray], retried: list[str]) -> np.ndarray:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call()
        except (InferenceServerException, ConnectionError, OSError) as exc:
            if attempt == ATTEMPTS:
                raise
            retried.append(str(exc))
    raise AssertionError("unreachable")


def http_client(balancer: Balancer, x: np.ndarray) -> Callable[[], np.ndarray]:
    def call() -> np.ndarray:
        client = httpclient.InferenceServerClient(balancer.http_url, network_timeout=30)
        try:
            return client.infer("tiny", [http_input("INPUT0", x, "FP32")]).as_numpy("OUTPUT0")
        finally:
            client.close()
    return call


def grpc_client(client: grpcclient.InferenceServerClient, x: np.ndarray) -> Callable[[], np.ndarray]:
    return lambda: client.infer("tiny", [grpc_input("INPUT0", x, "FP32")], client_timeout=30).as_numpy("OUTPUT0")


def metric(text: str, name: str, model: str = "tiny") -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and f'model="{model}"' in line)


def kill_group(server: TritonServer) -> None:
    os.killpg(os.getpgid(server.process.pid), signal.SIGKILL)
    server.process.wait(10)


def test_killing_a_replica_under_load_loses_no_request(cluster):
    replicas, balancer = cluster
    victim = replicas[0]
    answered, retried = [0], []
    lock, kill_now = threading.Lock(), threading.Event()
    scraped_before_kill: list[str] = []

    def run(protocol: str, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
        rng = np.random.default_rng(seed)
        grpc = grpcclient.InferenceServerClient(balancer.grpc_url) if protocol == "grpc" else None
        pairs = []
        for _ in range(REQUESTS_PER_CLIENT):
            x = rng.standard_normal((1 + int(rng.integers(0, 4)), 16)).astype(np.float32)
            call = grpc_client(grpc, x) if grpc else http_client(balancer, x)
            pairs.append((x, with_retries(call, retried)))
            with lock:
                answered[0] += 1
                if answered[0] == KILL_AFTER:
                    kill_now.set()
        if grpc:
            grpc.close()
        return pairs

    with ThreadPoolExecutor(2 * CLIENTS_PER_PROTOCOL) as pool:
        jobs = [pool.submit(run, protocol, seed) for seed, protocol in
                enumerate(["http", "grpc"] * CLIENTS_PER_PROTOCOL)]
        assert kill_now.wait(120), "the clients did not get going"
        scraped_before_kill.append(victim.metrics())
        kill_group(victim)
        results = [pair for job in jobs for pair in job.result()]

    assert victim.process.returncode == -signal.SIGKILL
    assert len(results) == 2 * CLIENTS_PER_PROTOCOL * REQUESTS_PER_CLIENT
    for x, y in results:
        np.testing.assert_allclose(y, tiny_reference(x), **TINY_TOLERANCE)
    # The balancer spread the load: the victim had served, and so did every survivor.
    assert metric(scraped_before_kill[0], "nv_inference_request_success") > 0
    survivors = [r.metrics() for r in replicas[1:]]
    served = [metric(text, "nv_inference_request_success") for text in survivors]
    assert all(count > 0 for count in served), served
    print(f"answered {len(results)}; retried by the clients: {len(retried)}; per survivor {served}")


def test_every_replica_exports_the_autoscaling_series(cluster):
    """The prometheus-adapter rule in deploy/ reads series that each replica really exports."""
    replicas, _ = cluster
    [rule] = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
    names = set(re.findall(r"\b(nv_[a-z_]+)\{", rule["metricsQuery"]))
    assert names == {"nv_inference_queue_duration_us", "nv_inference_request_success"}
    for replica in replicas:
        if replica.process.poll() is not None:
            continue  # the one killed above
        text = replica.metrics()
        for name in names:
            assert re.search(rf'^{name}{{[^}}]*model="tiny"', text, re.M), f"{name} missing on {replica.metrics_url}"
        # Average queue microseconds per request, the HPA's target: a real, finite number.
        requests = max(1.0, metric(text, "nv_inference_request_success"))
        queue_us = metric(text, "nv_inference_queue_duration_us") / requests
        assert 0 <= queue_us < 10_000_000
