"""One real tritonserver for the reliability suite, serving the repository of
tests/harness/reliability_repo.py. Its stubs get a HOME of their own, which
test_stub_files checks they leave untouched."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.reliability_repo import CI_MARKERS, build_reliability_repository
from tests.harness.server import TritonServer


@dataclass
class Reliability:
    server: TritonServer
    repo: Path
    cache: Path
    home: Path


@pytest.fixture(scope="session")
def reliability(start_server, tmp_path_factory) -> Reliability:
    base = tmp_path_factory.mktemp("reliability")
    repo = build_reliability_repository(base / "repo", base / "onnx")
    home = base / "home"
    home.mkdir()
    # A model whose worker is stuck (test_worker_kill's known defect) must not hold the exit for long.
    server = start_server(repo, "--exit-timeout-secs=10",
                          env={"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
                               **dict.fromkeys(CI_MARKERS)})  # as on a user's machine: see test_stub_files
    return Reliability(server, repo, base / "onnx", home)
