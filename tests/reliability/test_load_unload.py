"""Load/unload cycles in explicit model-control mode: every unload ends the model's
stub processes and removes their shared-memory regions, and the server's memory
does not grow from cycle to cycle. And a forced exit (SIGKILL) leaves Triton's
regions in /dev/shm, which the harness removes."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.harness.clients import TINY_TOLERANCE, http_input
from tests.harness.server import TritonServer
from tests.harness.streams import run_on_stream
from trtpool_builder.examples.tiny import tiny_reference

MODELS = ("tiny_dec", "tiny_dec_unary", "tiny_sync")  # a front loads after its target, unloads before it
CYCLES = 6
# The server's resident memory may settle during the first cycles (allocator pools,
# gRPC and HTTP buffers); from the second cycle on, growth beyond this is a leak.
RSS_GROWTH_LIMIT = 8 * 2**20  # seen: about 0.1 MiB per cycle, 40 MiB in all


def wait_until(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


@pytest.fixture(scope="module")
def explicit(start_server, reliability) -> TritonServer:
    return start_server(reliability.repo, "--model-control-mode=explicit")


def check_serving(server: TritonServer, client: httpclient.InferenceServerClient, seed: int) -> None:
    x = np.random.default_rng(seed).standard_normal((3, 16)).astype(np.float32)
    for model in ("tiny_sync", "tiny_dec_unary"):
        result = client.infer(model, [http_input("INPUT0", x, "FP32")])
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), tiny_reference(x), **TINY_TOLERANCE)
    answers = run_on_stream(server.grpc_url, "tiny_dec", {"0": {"INPUT0": x}}, timeout=30)
    np.testing.assert_allclose(answers.outputs["0"]["OUTPUT0"], tiny_reference(x), **TINY_TOLERANCE)


def test_load_unload_cycles_release_stubs_regions_and_memory(explicit):
    client = httpclient.InferenceServerClient(explicit.http_url)
    rss = []
    try:
        for cycle in range(CYCLES):
            for model in MODELS:
                client.load_model(model)
            check_serving(explicit, client, seed=cycle)
            assert len(explicit.stub_pids()) >= len(MODELS)
            for model in reversed(MODELS):
                client.unload_model(model)
            assert wait_until(lambda: not explicit.stub_pids()), f"cycle {cycle}: stubs left {explicit.stub_pids()}"
            assert wait_until(lambda: not explicit.shm_regions()), f"cycle {cycle}: {explicit.shm_regions()}"
            rss.append(explicit.rss_bytes())
    finally:
        client.close()
    growth = rss[-1] - rss[1]
    assert growth < RSS_GROWTH_LIMIT, f"server RSS per cycle (MiB): {[round(r / 2**20, 1) for r in rss]}"


def test_a_forced_exit_leaves_regions_that_the_harness_removes(start_server, reliability):
    server = start_server(reliability.repo, "--model-control-mode=explicit", "--load-model=tiny_sync")
    assert server.shm_regions() and server.stub_pids()
    os.kill(server.process.pid, signal.SIGKILL)  # the server alone, as the kernel's OOM killer would
    server.process.wait()
    # Only the server unlinks the regions (python_backend src/shm_manager.cc, ~SharedMemoryManager).
    assert server.shm_regions(), "Triton removed its regions after all: the harness clean-up has nothing to do"
    server.kill()
    assert server.shm_regions() == []
    assert server.stub_pids() == []
