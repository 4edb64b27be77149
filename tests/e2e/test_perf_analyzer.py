"""A short perf_analyzer run against a served model: it measures, without errors."""
from __future__ import annotations

import pytest

from tests.harness.perf import perf_analyzer


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_perf_analyzer_measures_tiny(served, protocol):
    url = served.server.grpc_url if protocol == "grpc" else served.server.http_url
    [row] = perf_analyzer("tiny", url, protocol=protocol, concurrency="4", interval_ms=1000)
    assert row["Inferences/Second"] > 0
    assert row["p99 latency"] > 0
    stdout = row["_stdout"]
    assert "error" not in stdout.lower(), stdout
