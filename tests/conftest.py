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

_running: list[TritonServer] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and _running:
        for server in _running:
            report.sections.append((f"tritonserver log ({server.repository})", server.log_tail(300)))


@pytest.fixture(scope="session")
def start_server(tmp_path_factory) -> Iterator[Callable[..., TritonServer]]:
    """start_server(repository, *args, env=None) -> a ready TritonServer, stopped at session end."""
    started: list[TritonServer] = []

    def start(repository: Path, *args: str, env: dict[str, str] | None = None) -> TritonServer:
        log = tmp_path_factory.mktemp("tritonserver") / "server.log"
        server = TritonServer(repository, log, args, env).start()
        started.append(server)
        _running.append(server)
        return server

    yield start
    for server in started:
        server.stop()
        if server in _running:
            _running.remove(server)


def stop_server(server: TritonServer) -> None:
    server.stop()
    if server in _running:
        _running.remove(server)
