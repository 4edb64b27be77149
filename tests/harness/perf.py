"""Run the real perf_analyzer (from the set-up's .triton/) and read its CSV report."""
from __future__ import annotations

import csv
import subprocess
import tempfile
from pathlib import Path

from tests.harness.server import PERF_ANALYZER


class PerfAnalyzerFailed(RuntimeError):
    pass


def perf_analyzer(model: str, url: str, *, protocol: str = "grpc", concurrency: str = "1",
                  interval_ms: int = 2000, max_trials: int = 10, extra: tuple[str, ...] = (),
                  timeout: float = 600) -> list[dict[str, float]]:
    """One CSV row per concurrency level: 'Inferences/Second', 'p99 latency' (us), ..."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.csv"
        command = [
            str(PERF_ANALYZER), "-m", model, "-u", url, "-i", protocol,
            *(() if "--request-rate-range" in extra else ("--concurrency-range", concurrency)),
            "--measurement-interval", str(interval_ms),
            "--max-trials", str(max_trials), "-f", str(report), *extra,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0 or not report.exists():
            raise PerfAnalyzerFailed(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        with report.open() as handle:
            rows = [{k: float(v) for k, v in row.items() if k and v not in (None, "")} for row in csv.DictReader(handle)]
        for row in rows:
            row["_stdout"] = done.stdout  # type: ignore[assignment]
        return rows
