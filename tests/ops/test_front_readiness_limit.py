"""Why a front loads READY whatever its target's state (issue 22): Triton's own limit,
shown with a plain Python-backend model on the same tritonserver.

A Python-backend model cannot report itself not ready once loaded, so the only way
for a front to be not READY while its target is not would be to fail its own load,
which it could decide only by asking, while it initialises, whether the target is
ready. The one such question the stub has, pb_utils.is_model_ready, gets no answer
while the server starts, in one of two ways:

- it is refused ("Server not ready"): the server is not ready until every model has
  loaded, the front among them. A front that waited for its target at load would
  wait out its timeout at every server start;
- now and then tritonserver itself aborts (boost::interprocess::lock_exception, seen
  in CI on a loaded 2-core machine): in python_backend's ProcessMessage
  (src/python_be.cc) the server's side waits on a mutex inside the stub's message,
  which the stub frees as soon as it has the answer; re-locking freed memory throws
  from a destructor. Every model-control call from a stub (load_model,
  unload_model, is_model_ready) goes that way, which is a second reason trtpool
  makes none.
"""
from __future__ import annotations

import re
from pathlib import Path

from tests.harness.python_model import python_model, tensor
from tests.harness.server import ServerFailed, TritonServer

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
REFUSED = "is_model_ready while loading: refused: Failed to check model readiness"
ABORTED = "boost::interprocess::lock_exception"


def test_a_model_cannot_ask_whether_another_is_ready_while_the_server_starts(tmp_path: Path):
    python_model(tmp_path / "repo", "asker", MODEL, [tensor("X", "FP32", [1])], [tensor("Y", "FP32", [1])])
    server = TritonServer(tmp_path / "repo", tmp_path / "server.log")
    try:
        server.start()
    except ServerFailed:
        pass
    finally:
        server.stop()
    log = server.log_text()
    assert not re.search(r"is_model_ready while loading: (True|False)", log), log
    assert (REFUSED in log and "Server not ready" in log) or ABORTED in log, log
