"""The watchdog's probes reach a model with a process file without counting as stage failures:
its zeros are no JPEG, and each refused probe used to count in trtpool_stage_failures_total every
watch interval with no traffic at all. Real refusals still count. A real trtpool-serve (watchdog
on), a real server's /metrics."""
from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.harness.pipelines import SMALL_RESNET, add_mode
from tests.harness.serve_command import trtpool_serve, watchdog_metrics
from tests.harness.server import free_port, metric_total
from trtpool_builder.examples.repo import make_example_folder
from trtpool_builder.folder.front import make_front_folder

FAILURES = "trtpool_stage_failures_total"
MODELS = ("resnet50_jpeg", "resnet50_jpeg_decoupled")
TRTPOOL_HEALTH = Path(sys.executable).parent / "trtpool-health"


def wait_for_checks(port: int, at_least: float, timeout: float = 120.0) -> float:
    deadline = time.monotonic() + timeout
    while (checks := watchdog_metrics(port).get("trtpool_watchdog_checks_total", 0)) < at_least:
        assert time.monotonic() < deadline, f"the watchdog made {checks} checks, not {at_least}"
        time.sleep(0.2)
    return checks


def server_metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return reply.read().decode()


def test_probes_are_no_stage_failures_and_refused_requests_still_are(tmp_path):
    repo = tmp_path / "repo"
    jpeg = make_example_folder(repo, "resnet50_jpeg", "onnx", SMALL_RESNET).folder
    add_mode(jpeg, "decoupled", "resnet50_jpeg_decoupled")
    make_front_folder(repo, "resnet50_jpeg_decoupled")   # the front forwards the probes it gets
    watch_port = free_port()
    serve = trtpool_serve(repo, tmp_path / "server.log", "--watch-interval=0.5", f"--watch-metrics-port={watch_port}")
    try:
        serve.wait_for("[serve] ready: 3 model(s) serving", timeout=300)
        serve.wait_for("[serve] watchdog: every", timeout=30)   # its metrics are served from here on
        checks = wait_for_checks(watch_port, 6)  # each check probes every model
        health = subprocess.run([str(TRTPOOL_HEALTH), "--url", serve.ports.grpc_url], capture_output=True,
                                text=True, timeout=60)
        assert health.returncode == 0, health
        assert [line for line in health.stdout.splitlines() if line.endswith(": alive (answered)")] == [
            f"{model}: alive (answered)" for model in (*MODELS, "resnet50_jpeg_decoupled_unary")], health.stdout
        with grpcclient.InferenceServerClient(serve.ports.grpc_url) as client:
            image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
            image.set_data_from_numpy(np.array([[b"not a JPEG"]], dtype=np.object_))
            with pytest.raises(InferenceServerException, match="preprocess\\(\\) refused input 'IMAGE' element \\[0\\]: "):
                client.infer("resnet50_jpeg", [image])
        deadline = time.monotonic() + 30
        while metric_total(server_metrics(serve.ports.metrics_port), FAILURES, "resnet50_jpeg", stage="pre") < 1:
            assert time.monotonic() < deadline, server_metrics(serve.ports.metrics_port)
            time.sleep(0.2)
        wait_for_checks(watch_port, checks + 6)
        time.sleep(2)   # trtpool hands its counts to Triton every metrics_interval_ms (1 s)
        metrics = server_metrics(serve.ports.metrics_port)
        assert metric_total(metrics, FAILURES, "resnet50_jpeg", stage="pre") == 1, metrics
        assert metric_total(metrics, FAILURES, "resnet50_jpeg_decoupled") == 0, metrics
        assert "trtpool_watchdog_deaths_total" not in str(watchdog_metrics(watch_port))
    finally:
        assert serve.stop() == 0
