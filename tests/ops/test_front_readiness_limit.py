"""Why a front loads READY whatever its target's state (issue 22): Triton's own limit,
shown with a plain Python-backend model on the same tritonserver.

A Python-backend model cannot report itself not ready once loaded, so the only way
for a front to be not READY while its target is not would be to fail its own load,
which it could decide only by asking, while it initialises, whether the target is
ready. The one such question the stub has, pb_utils.is_model_ready, is refused
while the server starts ("Server not ready"): the server is not ready until every
model has loaded, the front among them. A front that waited for its target at load
would wait out its timeout at every server start."""
from __future__ import annotations

from pathlib import Path

MODEL = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        try:
            answer = pb_utils.is_model_ready("asker")
        except Exception as exc:
            answer = f"refused: {exc}"
        pb_utils.Logger.log_error(f"is_model_ready while loading: {answer}")

    def execute(self, requests):
        return []
'''
CONFIG = '''name: "asker"
backend: "python"
max_batch_size: 0
input [{ name: "X", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "Y", data_type: TYPE_FP32, dims: [1] }]
'''


def test_a_model_cannot_ask_whether_another_is_ready_while_the_server_starts(start_server, tmp_path: Path):
    version = tmp_path / "repo" / "asker" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(MODEL)
    (version.parent / "config.pbtxt").write_text(CONFIG)
    server = start_server(tmp_path / "repo")
    log = server.log_text()
    assert "is_model_ready while loading: refused: Failed to check model readiness" in log, log
    assert "Server not ready" in log
