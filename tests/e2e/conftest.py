"""One real tritonserver for the end-to-end tests, serving the examples, the
flaky double and models that must fail to load."""
from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.harness.repository import add_broken_models, build_test_repository
from tests.harness.server import TritonServer

GOOD_MODELS = ("tiny", "tiny_flaky", "tiny_autocomplete", "resnet50", "bert_base", "tiny_decoupled",
               "tiny_decoupled_unary", "tiny_decoupled_flaky", "tiny_small_queue", "tiny_pipelined",
               "tiny_pipelined_flaky", "sequence_sync", "sequence_pipelined", "sequence_decoupled")


@dataclass
class Served:
    server: TritonServer
    http: httpclient.InferenceServerClient
    grpc: grpcclient.InferenceServerClient
    broken: dict[str, str]


@pytest.fixture(scope="session")
def served(start_server, tmp_path_factory) -> Served:
    base = tmp_path_factory.mktemp("e2e")
    repo = build_test_repository(base / "repo", base / "onnx")
    broken = add_broken_models(repo, base / "onnx")
    server = start_server(repo, "--exit-on-error=false", "--strict-readiness=false")
    http = httpclient.InferenceServerClient(server.http_url, concurrency=16)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    deadline = time.monotonic() + 120
    while not all(http.is_model_ready(m) for m in GOOD_MODELS):
        assert time.monotonic() < deadline, f"models not ready: {server.log_tail()}"
        time.sleep(0.5)
    yield Served(server, http, grpc, broken)
    http.close()
    grpc.close()
