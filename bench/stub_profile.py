"""py-spy samples of one model's stub process while a load runs (bench/ceiling.py,
bench/host_path.py, bench/pipeline.py): raw stacks, one line per stack and its count."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.harness.server import TritonServer


@contextmanager
def stub_profile(
    server: TritonServer,
    model: str,
    out: Path,
    *,
    native: bool = False,
    gil: bool = False,
    idle: bool = False,
    seconds: int = 12,
    pid: int | None = None,
) -> Iterator[dict]:
    """Samples `model`'s stub (every thread) for `seconds` while the block runs; the yielded dict
    gets the outcome. native: the C/C++ frames too (py-spy then pauses the process at each
    sample); gil: only the samples of the thread holding the GIL (where a stub's one core goes);
    idle: waiting threads' samples too (where each thread waits);
    pid: another process of the model's to sample instead (its engine host)."""
    outcome: dict = {"model": model, "profile": str(out)}
    pid = pid or server.stub_pid(model)
    if pid is None or shutil.which("py-spy") is None:
        outcome["error"] = "no stub process or no py-spy"
        yield outcome
        return
    sampling = ["--native"] if native else ["--nonblocking"]
    recorder = subprocess.Popen(
        [
            "py-spy",
            "record",
            "--threads",
            *sampling,
            *(["--gil"] if gil else []),
            *(["--idle"] if idle else []),
            "--format",
            "raw",
            "--rate",
            "200",
            "--duration",
            str(seconds),
            "--pid",
            str(pid),
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1)
    try:
        yield outcome
    finally:
        _, err = recorder.communicate(timeout=seconds + 60)
        outcome["py_spy"] = err[-500:]
