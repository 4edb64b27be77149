"""A TensorRT engine served through an engine host, over the TensorRT and CUDA doubles
(tests/doubles/host_with_doubles.py): the host's code path for TensorRT, in CI. The doubles
prove nothing about TensorRT itself (tests/unit/doubles/test_tensorrt_double.py holds them to the
real bindings; what ran on real TensorRT is in the README)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tests.doubles.engines import linear_model, linear_reference, write_engine
from tests.doubles.tensorrt_double import engine_bytes
from tests.harness.repository import set_parameters
from tests.harness.server import ROOT
from trtpool.host.client import HostClient
from trtpool.host.launch import Launcher
from trtpool.model.sidecar import TensorInfo
from trtpool_builder.folder.load_check import as_triton_hands_it
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config

TRT_VERSION = "10.16.1.11"
K, N = 4, 3
PROFILES = [{"x": ((1, K), (4, K), (16, K))}]
RNG = np.random.default_rng(0)
W = RNG.standard_normal((K, N)).astype(np.float32)
B = RNG.standard_normal(N).astype(np.float32)


def start_host_with_doubles(spec: dict) -> subprocess.Popen:
    """Bind the host's address as the first instance would, and start the doubles' host on it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(Launcher(spec).address)
    listener.listen(8)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    process = subprocess.Popen([sys.executable, "-m", "tests.doubles.host_with_doubles", TRT_VERSION],
                               stdin=subprocess.PIPE, pass_fds=(listener.fileno(),), env=env, cwd=ROOT)
    process.stdin.write(json.dumps({**spec, "listen_fd": listener.fileno()}).encode())
    process.stdin.close()
    listener.close()
    return process


def test_a_tensorrt_engine_takes_the_host_path_with_the_doubles(tmp_path):
    engine = write_engine(tmp_path / "built", engine_bytes(linear_model(W, B), PROFILES), PROFILES,
                          [TensorInfo("x", "float32", (-1, K))],
                          [TensorInfo("y", "float32", (-1, N)), TensorInfo("top", "int64", (-1,))],
                          module="tensorrt", version=TRT_VERSION)
    folder = make_model_folder(tmp_path / "repo", "linear", engine, options=ServingOptions(contexts="2"))
    set_parameters(folder, engine_host="on")
    spec = {"model_config": as_triton_hands_it(read_config(folder)), "version_dir": str(folder / "1"),
            "device": "cuda:0", "server_pid": os.getpid()}
    host = start_host_with_doubles(spec)
    clients = [HostClient(Launcher(spec)) for _ in range(2)]
    try:
        for client in clients:
            client.attach()
        assert {c.host_pid for c in clients} == {host.pid}
        assert [s.name for s in clients[0].signature.outputs] == ["y", "top"]

        def work(client: HostClient, seed: int) -> None:
            rng = np.random.default_rng(seed)
            for _ in range(10):
                # one request a run goes to the device by DMA straight from the host's page-locked
                # input slab; several go through staging (small runs: trtpool.gpu.host_upload)
                count = int(rng.integers(1, 4))
                requests = [{"x": rng.standard_normal((int(rng.integers(1, 6)), K)).astype(np.float32)}
                            for _ in range(count)]
                for request, answer in zip(requests, client.run(requests, [False] * count), strict=True):
                    expected = linear_reference(request["x"], W, B)
                    np.testing.assert_allclose(answer["y"], expected["y"], rtol=1e-5, atol=1e-5)
                    np.testing.assert_array_equal(answer["top"], expected["top"])
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(work, clients, range(2)))
    finally:
        for client in clients:
            client.close()
        host.wait(10)
    assert host.returncode == 0   # it ended with its last instance
