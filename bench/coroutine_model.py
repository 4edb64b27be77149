"""trtpool's own model.py with a coroutine `execute`, for bench/sync_execute.py.

A Python-backend model (backend: "python") that is trtpool's TritonPythonModel
in every respect but one: execute() is `async def`, so the stub runs each call
on its event-loop thread and waits for it, which is what trtpool's sync mode
did before its execute became a plain call.
"""

import importlib.util
from pathlib import Path

import trtpool

_spec = importlib.util.spec_from_file_location("trtpool_entry", Path(trtpool.__file__).parents[1] / "model.py")
_entry = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_entry)


class TritonPythonModel(_entry.TritonPythonModel):
    async def execute(self, requests):
        return super().execute(requests)
