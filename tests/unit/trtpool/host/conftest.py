"""Engine hosts started from the test process (no tritonserver): the test process stands in
for the server (its pid is the host's server_pid) and its threads for the instances."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.harness.repository import add_example, set_parameters
from trtpool_builder.folder.load_check import as_triton_hands_it
from trtpool_builder.folder.model_folder import read_config

HOST_COMMAND = ["-m", "trtpool.host"]


def host_processes() -> list[psutil.Process]:
    """Engine hosts that this test process started and that have not yet exited."""
    return [child for child in psutil.Process().children() if _is_running_host(child)]


def _is_running_host(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE and process.cmdline()[1:3] == HOST_COMMAND
    except psutil.NoSuchProcess:   # it exited (and was reaped) between the listing and this look
        return False


def abstract_host_sockets() -> list[str]:
    return [line.split()[-1] for line in Path("/proc/net/unix").read_text().splitlines()[1:]
            if line.split()[-1].startswith("@trtpool-host-")]


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("host-onnx")


@pytest.fixture
def make_spec(tmp_path, onnx_cache):
    """make_spec(name, **parameters) -> the host spec of a tiny model folder with those parameters."""
    def make(name: str = "tiny", **parameters: str) -> dict:
        folder = add_example(tmp_path / "repo", onnx_cache, "tiny", name, contexts="2")
        if parameters:
            set_parameters(folder, **parameters)
        return {"model_config": as_triton_hands_it(read_config(folder)), "version_dir": str(folder / "1"),
                "device": "cpu", "server_pid": os.getpid()}
    return make


@pytest.fixture(autouse=True)
def no_host_left_behind() -> Iterator[None]:
    """Every host a test starts ends once its instances have gone, and takes its socket with it."""
    before = set(abstract_host_sockets())
    yield
    wait_until(lambda: not host_processes(), 10, f"engine hosts still running: {host_processes()}")
    wait_until(lambda: set(abstract_host_sockets()) <= before, 5, "a host's socket outlived it")
