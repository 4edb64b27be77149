"""perf_analyzer under the client profile: its command, one run that can be stopped at
any moment without leaving its shared-memory regions behind, and its CSV report."""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trtpool_ops.locate import given_executable
from trtpool_ops.shm import SHM
from trtpool_ops.tune.profile import ClientProfile

ENV = "TRTPOOL_PERF_ANALYZER"
# Room for the outputs in shared memory (perf_analyzer's default, 100 kB, is less than a
# batch of 32 ResNet-50 logits).
OUTPUT_SHM_BYTES = 64 << 20
UNSTABLE = "Failed to obtain stable measurement"  # perf_analyzer's windows did not agree
REQUEST_FAILED = re.compile(r"Thread \[\d+\] had error: ")  # the server answered a request with an error
FAILURE = re.compile(r"error|failed", re.IGNORECASE)
# -v prints a line per measurement window; the figures are the mean of the last three (those that agreed).
WINDOW_LINE = re.compile(r"Pass \[\d+\] throughput: ([0-9.eE+-]+) infer/sec")
AVERAGED_WINDOWS = 3


class PerfFailed(RuntimeError):
    """perf_analyzer gave no figures. The message: the cause, what to do where that is known, then
    (after a blank line) the end of perf_analyzer's output."""


def summary(error: str) -> str:
    """An error's lines before its first blank line (its cause and fix, not the log after them)."""
    return "; ".join(line.strip() for line in error.split("\n\n", 1)[0].splitlines() if line.strip())


def failure(code: int | None, text: str, profile: ClientProfile) -> str:
    """Why perf_analyzer failed, from its output: the server's answer to a request where it refused
    one, else its last line that says error or failed; and the likely fix."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    refused = [REQUEST_FAILED.split(line, 1)[1] for line in lines if REQUEST_FAILED.search(line)]
    said = [line for line in lines if FAILURE.search(line)]
    cause = (
        f"the server refused a request: {refused[0]}"
        if refused
        else said[-1]
        if said
        else lines[-1]
        if lines
        else "no output"
    )
    message = f"perf_analyzer exited {code}: {cause}"
    if refused and profile.generated_data:
        message += (
            "\nperf_analyzer made these inputs itself (" + (profile.input_data or "random") + " data), and "
            "they may not be valid for this model (a sample rate, token ids, an index): give real "
            "ones with --input-data FILE.json (perf_analyzer's JSON input format)"
        )
    elif refused:
        message += f"\ncheck the inputs in --input-data {profile.input_data} against the model's"
    return message + "\n\nperf_analyzer's output ends:\n" + "\n".join(lines[-8:])


@dataclass(frozen=True)
class Reading:
    """perf_analyzer's CSV row ('Inferences/Second', 'p50 latency', 'p99 latency' in us) and the
    infer/s of each window its figures average: how far apart they were is the point's noise."""

    row: dict[str, float]
    windows: tuple[float, ...]


def averaged_windows(text: str) -> tuple[float, ...]:
    """The infer/s of the windows perf_analyzer's figures average, from its -v output."""
    return tuple(float(m.group(1)) for m in WINDOW_LINE.finditer(text))[-AVERAGED_WINDOWS:]


@dataclass(frozen=True)
class Window:
    """How long perf_analyzer measures: windows of interval_ms until `stability` percent agree."""

    interval_ms: int = 2000
    max_trials: int = 6
    stability: int = 20


def find_perf_analyzer(given: str | None, tritonserver: str) -> str:
    """--perf-analyzer, else $TRTPOOL_PERF_ANALYZER, else the one beside the tritonserver found
    (the set-up's .triton/bin/), else perf_analyzer on PATH."""
    found = (
        given_executable(given, "--perf-analyzer", ENV)
        or shutil.which(str(Path(tritonserver).with_name("perf_analyzer")))
        or shutil.which("perf_analyzer")
    )
    if found is None:
        raise ValueError(
            f"no perf_analyzer beside {tritonserver} nor on PATH: run scripts/setup.sh, or set "
            f"{ENV}=/path/to/perf_analyzer (or pass --perf-analyzer)"
        )
    return found


def command(
    perf_analyzer: str, model: str, url: str, profile: ClientProfile, streaming: bool, window: Window, report: Path
) -> list[str]:
    load = (
        ["--request-rate-range", f"{profile.request_rate:g}", "--async"]
        if profile.request_rate
        else ["--concurrency-range", str(profile.concurrency)]
    )
    shm = (
        ["--shared-memory", profile.shm, "--output-shared-memory-size", str(OUTPUT_SHM_BYTES)]
        if profile.shm != "none"
        else []
    )
    data = ["--input-data", profile.input_data] if profile.input_data else []
    return [
        perf_analyzer,
        "-m",
        model,
        "-u",
        url,
        "-i",
        profile.protocol,
        "-b",
        str(profile.batch),
        *load,
        *shm,
        *(["--streaming"] if streaming else []),
        *[a for s in profile.shapes for a in ("--shape", s)],
        *data,
        "--measurement-interval",
        str(window.interval_ms),
        "--max-trials",
        str(window.max_trials),
        "--stability-percentage",
        str(window.stability),
        "-v",
        "-f",
        str(report),
    ]


def _regions(tensors: list[str]) -> set[Path]:
    """perf_analyzer's system shared-memory regions: an output's name, an input's name_<stream>_<step>."""
    names = {t: re.compile(re.escape(t) + r"(_\d+_\d+)?") for t in tensors}
    return {p for p in SHM.iterdir() if any(pattern.fullmatch(p.name) for pattern in names.values())}


@contextmanager
def sheltered() -> Iterator[None]:
    """Clean-up that a Ctrl-C (or SIGTERM) must not cut short: one arriving meanwhile is held back
    and raised as KeyboardInterrupt once the clean-up is done."""
    held: list[int] = []
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, _frame: held.append(signum)) for s in stops}
    try:
        yield
    finally:
        for stop_signal, handler in previous.items():
            signal.signal(stop_signal, handler)
    if held:
        raise KeyboardInterrupt


def stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGINT (perf_analyzer waits for its requests in flight and unlinks its regions), SIGKILL after `grace`."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def run(argv: list[str], tensors: list[str], log: Path, timeout: float, profile: ClientProfile) -> Reading:
    """One run and its Reading. Whatever happens (an error, a timeout, Ctrl-C), perf_analyzer is
    stopped and the regions it made are gone."""
    report = Path(argv[argv.index("-f") + 1])
    before = _regions(tensors)
    with log.open("w") as out:
        # Its own session: a Ctrl-C in the terminal reaches trtpool-tune, which stops it in order.
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        with sheltered():
            stop(process)
            for region in _regions(tensors) - before:
                region.unlink(missing_ok=True)
    text = log.read_text(errors="replace")
    if code is None:
        raise PerfFailed(f"perf_analyzer did not finish within {timeout:.0f} s")
    if code != 0 or not report.exists():
        raise PerfFailed(failure(code, text, profile))
    with report.open() as handle:
        rows = [{k: float(v) for k, v in row.items() if k and v not in (None, "")} for row in csv.DictReader(handle)]
    if not rows:
        raise PerfFailed("perf_analyzer wrote no measurement: " + text[-500:])
    return Reading(rows[0], averaged_windows(text))
