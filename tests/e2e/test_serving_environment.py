"""The environment the Python backend's stub runs in.

tritonserver 2.51's stub reads numpy 2 arrays wrongly (a float32 vector comes
back as its first element repeated; request tensors arrive corrupted), so a
trtpool model refuses to load there, naming the cause, instead of serving wrong
numbers. The stub takes the python3 first on PATH, which TRTPOOL_SERVING_BIN
sets: here a venv layered over the project's, with numpy 2 in front.
"""
from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.harness.repository import add_example

NUMPY2 = "numpy==2.2.6"


def purelib(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())


@pytest.fixture(scope="module")
def numpy2_bin(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("numpy2") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = purelib(venv / "bin" / "python3")
    fetched = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:",
                              "--target", str(site), NUMPY2], capture_output=True, text=True)
    if fetched.returncode != 0:
        pytest.skip(f"cannot install {NUMPY2} from the package index: {fetched.stderr[-300:]}")
    # Everything else (onnxruntime, trtpool) from the project's venv, behind numpy 2.
    (site / "zz-project.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return venv / "bin"


def test_a_numpy2_stub_refuses_to_load_with_the_cause(numpy2_bin, start_server, tmp_path):
    repo = tmp_path / "repo"
    add_example(repo, tmp_path / "onnx", "tiny", contexts="1")
    server = start_server(repo, "--exit-on-error=false", "--strict-readiness=false",
                          env={"TRTPOOL_SERVING_BIN": str(numpy2_bin)})
    client = httpclient.InferenceServerClient(server.http_url)
    [entry] = [m for m in client.get_model_repository_index() if m["name"] == "tiny"]
    assert entry["state"] == "UNAVAILABLE"
    reason = entry["reason"]
    assert "mishandles numpy arrays" in reason and "numpy 2.2.6" in reason, reason
    assert "came back as" in reason and "numpy<2" in reason, reason
    assert client.is_server_live()
