"""A real nginx (Debian's, unpacked by scripts/setup.sh) balancing HTTP and gRPC over replicas.

The configuration is deploy/nginx/trtpool.conf.template, rendered with the
replicas' ports; every path nginx writes is under the test's folder.
"""
from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from string import Template

from tests.harness.server import ROOT, LoopbackEndpoints, TritonServer, free_port

NGINX = ROOT / ".triton" / "bin" / "nginx"
TEMPLATE = ROOT / "deploy" / "nginx" / "trtpool.conf.template"
UPSTREAM = "        server {address} max_fails=1 fail_timeout=30s;"


def render(prefix: Path, replicas: Sequence[TritonServer], http_port: int, grpc_port: int) -> str:
    return Template(TEMPLATE.read_text()).substitute(
        prefix=prefix,
        http_listen=f"127.0.0.1:{http_port}",
        grpc_listen=f"127.0.0.1:{grpc_port}",
        http_servers="\n".join(UPSTREAM.format(address=r.http_url) for r in replicas),
        grpc_servers="\n".join(UPSTREAM.format(address=r.grpc_url) for r in replicas),
    )


class Balancer(LoopbackEndpoints):
    def __init__(self, prefix: Path, replicas: Sequence[TritonServer]) -> None:
        self.prefix = prefix
        self.http_port, self.grpc_port = free_port(), free_port()
        prefix.mkdir(parents=True, exist_ok=True)
        self.config = prefix / "nginx.conf"
        self.config.write_text(render(prefix, replicas, self.http_port, self.grpc_port))
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 10.0) -> "Balancer":
        command = [str(NGINX), "-p", str(self.prefix), "-c", str(self.config), "-e", "stderr",
                   "-g", "daemon off;"]
        check = subprocess.run([*command, "-t"], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                        stderr=open(self.prefix / "error.log", "wb"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, (self.prefix / "error.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", self.http_port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"nginx not listening after {timeout:g} s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
