"""Shared fixtures: a real tritonserver per test session (or per test where a
test needs its own), tritonclient HTTP and gRPC clients, and the server log
attached to the report of any test that fails while a server runs."""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.harness, tests.doubles

from tests.harness.server import TritonServer  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report carries the log of every server started and not yet stopped: the
    session's and the test's own (a fixture's server is stopped after the report is made)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for server in TritonServer.RUNNING:
            report.sections.append((f"tritonserver log ({server.repository})", server.log_tail(300)))


@pytest.fixture(scope="session")
def start_server(tmp_path_factory) -> Iterator[Callable[..., TritonServer]]:
    """start_server(repository, *args, env=None) -> a ready TritonServer, stopped at session end."""
    started: list[TritonServer] = []

    def start(repository: Path, *args: str, env: dict[str, str] | None = None) -> TritonServer:
        log = tmp_path_factory.mktemp("tritonserver") / "server.log"
        server = TritonServer(repository, log, args, env).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
