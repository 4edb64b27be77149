"""Issue 15, item 6: ONNX Runtime 1.29+ starts telemetry in every process that
makes a session: a device id and an event store under $HOME/.cache (or
$XDG_CACHE_HOME), and uploads. trtpool's stubs must leave the home untouched.

ONNX Runtime keeps quiet where it sees a CI system (CI=true, ...): both the
control and the server run without those markers, as on a user's machine."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.harness.reliability_repo import CI_MARKERS


def files_under(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_onnxruntime_itself_writes_under_home(tmp_path, reliability):
    """The control: without trtpool's setting, one session writes there."""
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME", *CI_MARKERS)}
    model = reliability.cache / "tiny.onnx"
    subprocess.run([sys.executable, "-c", f"import onnxruntime; onnxruntime.InferenceSession({str(model)!r})"],
                   env={**env, "HOME": str(tmp_path)}, check=True, timeout=120)
    assert any("onnxruntime" in name for name in files_under(tmp_path)), files_under(tmp_path)


def test_served_models_write_nothing_under_home(reliability):
    """The reliability server's stubs ran with this HOME. Ready (strict readiness):
    every model loaded, so each stub has made its ONNX Runtime sessions."""
    assert reliability.server.ready()
    assert files_under(reliability.home) == []
