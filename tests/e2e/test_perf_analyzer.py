"""A short perf_analyzer run against a served model: it measures, without errors; the README's
perf_analyzer and client commands, as quoted, against the same server."""
from __future__ import annotations

import re
import subprocess

import pytest

from tests.harness.docs import command_argv, quoted_command
from tests.harness.perf import perf_analyzer
from tests.harness.server import ROOT


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_perf_analyzer_measures_tiny(served, protocol):
    url = served.server.grpc_url if protocol == "grpc" else served.server.http_url
    [row] = perf_analyzer("tiny", url, protocol=protocol, concurrency="4", interval_ms=1000)
    assert row["Inferences/Second"] > 0
    assert row["p99 latency"] > 0
    stdout = row["_stdout"]
    assert "error" not in stdout.lower(), stdout


def test_the_readmes_perf_analyzer_command_runs(served):
    """The README's load-test line, as pasted in the checkout, on this server's gRPC port."""
    command = command_argv(quoted_command(".triton/bin/perf_analyzer"), {"127.0.0.1:8001": served.server.grpc_url})
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Concurrency: 4, throughput:" in done.stdout, done.stdout


def test_the_readmes_client_command_answers(served):
    """The README's client line (scripts/client.py), as pasted in the checkout, on this server's gRPC port."""
    command = command_argv(quoted_command(".venv/bin/python scripts/client.py --protocol grpc --url 127.0.0.1:8001 "
                                          "--model resnet50"),
                           {"127.0.0.1:8001": served.server.grpc_url})
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.match(r"\w+: shape \[1, \d+\] dtype float32 first values \[", done.stdout), done.stdout
