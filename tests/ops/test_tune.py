"""trtpool-tune as a user runs it, on the tiny example: real tritonservers, the real perf_analyzer.

The measurement windows are short (the figures are not asserted: only what is written,
what is left running, and the errors)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from matplotlib import pyplot
from PIL import Image

from tests.harness.clients import TINY_TOLERANCE, grpc_input
from tests.harness.docs import command_argv, quoted_command
from tests.harness.repository import add_example
from tests.harness.server import SHM, TRITONSERVER, TritonServer
from trtpool_builder.examples.tiny import tiny_reference
from trtpool_ops.tune import report
from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.space import Candidate

TRTPOOL_TUNE = Path(sys.executable).parent / "trtpool-tune"
# Short windows, a loose stability bound: a few seconds a point on two shared cores.
WINDOW = ("--interval-ms", "500", "--max-trials", "3", "--stability", "60")
QUICK = (*WINDOW, "--concurrency", "2")


@pytest.fixture
def tiny(tmp_path) -> Path:
    """A fresh tiny model folder (the tuner writes beside its config)."""
    return add_example(tmp_path / "repo", tmp_path / "onnx", "tiny", contexts="1")


def run(argv: list[str], tmp_path: Path) -> subprocess.Popen:
    """A trtpool-tune command line with its scratch under tmp_path (so its processes can be told
    from any other) and its report in tmp_path/out."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "TRTPOOL_TRITONSERVER": str(TRITONSERVER)}
    return subprocess.Popen([*argv, "--out", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)


def tune(folder: Path, tmp_path: Path, *args: str) -> subprocess.Popen:
    return run([str(TRTPOOL_TUNE), str(folder), *args], tmp_path)


def finished(process: subprocess.Popen, timeout: float = 240) -> str:
    output, _ = process.communicate(timeout=timeout)
    return output


def ours(tmp_path: Path) -> list[str]:
    """Command lines of the processes working under tmp_path (servers, stubs, perf_analyzer)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(tmp_path) in cmdline and "trtpool-tune" not in cmdline.split(" ", 1)[0]:
                found.append(cmdline)
    return found


def regions() -> set[str]:
    """/dev/shm entries trtpool-tune's servers (prefix triton_trtpool_tune_) or its system-shm client
    (the tiny model's tensor names) make."""
    return {p.name for p in SHM.iterdir() if p.name.startswith(("triton_trtpool_tune_", "INPUT0_", "OUTPUT0"))}


def test_a_tune_writes_its_report_plot_and_a_config_that_serves(tiny, tmp_path):
    """docs/how-to/tune.md's command (its mode and context axes, 5 minutes of budget), with two queue
    delays and short measurement windows."""
    original = (tiny / "config.pbtxt").read_text()
    quoted = command_argv(quoted_command(".venv/bin/trtpool-tune", "docs/how-to/tune.md"),
                          {".venv/bin/trtpool-tune": str(TRTPOOL_TUNE), "model_repository/tiny": str(tiny)})
    output = finished(run([*quoted, *WINDOW, "--queue-delays", "100,1000", "--preferred", "keep"], tmp_path))
    assert "[tune] point 1 (done 0, at most" in output and "min of budget left" in output, output
    record = json.loads((tmp_path / "out" / "tune.json").read_text())
    measured = record["measurements"]
    assert record["stopped"] == "done" and record["met"], output
    assert 1 <= len(measured) <= record["space"]["grid_size"] + 1 and record["space"]["grid_size"] == 8  # + elastic
    assert all("infer_per_s" in m and "gpu_memory_mib" in m for m in measured), measured
    assert record["chosen"]["label"] in {m["label"] for m in measured}
    table = (tmp_path / "out" / "report.md").read_text()
    assert "| p99 ms | GPU MiB |" in table
    assert all(f"| {m['label']} |" in table for m in measured)
    with Image.open(tmp_path / "out" / "tune.png") as image:
        assert image.format == "PNG" and image.size[0] > 400
    assert (tiny / "config.pbtxt").read_text() == original        # never over the original without a flag
    tuned = (tiny / "config.tuned.pbtxt").read_text()
    _says_what_next_and_how_sure(record, output, table, tiny)
    assert f'string_value: "{record["chosen"]["config"]["mode"]}"' in tuned

    # The tuned config loads and answers as the model should.
    served = tmp_path / "served"
    shutil.copytree(tiny, served / "tiny")
    shutil.move(served / "tiny" / "config.tuned.pbtxt", served / "tiny" / "config.pbtxt")
    server = TritonServer(served, tmp_path / "served.log").start()
    try:
        x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            result = client.infer("tiny", [grpc_input("INPUT0", x, "FP32")])
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), tiny_reference(x), **TINY_TOLERANCE)
    finally:
        server.stop()


def _says_what_next_and_how_sure(record: dict, output: str, table: str, folder: Path) -> None:
    """Issue 37: the terminal and report.md say that Triton serves the choice only once it is
    config.pbtxt and the model is reloaded; each point has the throughput of the windows its figure
    averages, and the choice is said to be within noise of exactly the points it does not surely beat;
    tune.png's points carry their row numbers."""
    next_step = f"Triton reads only config.pbtxt, so the choice in {folder / 'config.tuned.pbtxt'} is not served yet"
    assert f"[tune] next: {next_step}" in output and next_step in table, output
    assert "POST /v2/repository/models/tiny/load" in table
    measured, chosen = record["measurements"], record["chosen"]
    assert all(len(m["windows_infer_per_s"]) == 3 and m["spread"] >= 0 for m in measured), measured
    assert all(f"| {min(m['windows_infer_per_s']):.1f}–{max(m['windows_infer_per_s']):.1f} |" in table
               for m in measured), table

    def overlap(a: dict, b: dict) -> bool:
        return min(a["windows_infer_per_s"]) <= max(b["windows_infer_per_s"]) and \
            min(b["windows_infer_per_s"]) <= max(a["windows_infer_per_s"])
    rivals = [m["label"] for m in measured if m["label"] != chosen["label"] and (
        abs(m["infer_per_s"] - chosen["infer_per_s"]) <= record["noise"] * chosen["infer_per_s"] or overlap(m, chosen))]
    said = (f"within noise of {len(rivals)} other point(s): " + "; ".join(rivals) if rivals
            else "leads every other point by more than the noise")
    assert said in record["noise_note"] and said in table and said in output, (rivals, record["noise_note"])

    points = [Measurement(Candidate.from_dict(m["config"]), m["infer_per_s"], m["p50_ms"], m["p99_ms"])
              for m in measured]
    figure = report.draw(pyplot, points, None, "tiny", None)
    assert [t.get_text() for t in figure.axes[0].texts] == [
        f"#{i} {m['config']['mode']}, {m['config']['contexts']} ctx" for i, m in enumerate(measured, 1)]
    pyplot.close(figure)


def test_ctrl_c_mid_run_leaves_nothing_running_and_writes_what_was_measured(tiny, tmp_path):
    before = regions()
    process = tune(tiny, tmp_path, *QUICK, "--shm", "system", "--modes", "sync,pipelined,decoupled",
                   "--contexts", "1,2,4")
    deadline = time.monotonic() + 180
    # SIGINT while perf_analyzer drives the second point, its system shared memory open.
    while not any("perf_analyzer" in c and "point-2" in c for c in ours(tmp_path)):
        assert time.monotonic() < deadline and process.poll() is None, process.stdout.read()
        time.sleep(0.1)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    output = finished(process, 90)
    assert process.returncode == 130, output
    assert "interrupted" in output
    assert ours(tmp_path) == []
    assert regions() - before == set()
    record = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert record["stopped"] == "interrupted" and len(record["measurements"]) == 1, output


def test_a_folder_that_does_not_load_is_refused_with_the_load_error(tiny, tmp_path):
    config = tiny / "config.pbtxt"
    config.write_text(config.read_text().replace('string_value: "sync"', 'string_value: "turbo"'))
    output = finished(tune(tiny, tmp_path, *QUICK))
    assert f"trtpool-tune: error: {tiny} does not load:" in output
    assert "parameter 'mode': 'turbo' is not accepted; expected one of sync, pipelined, decoupled" in output
    assert "Traceback" not in output and ours(tmp_path) == []


@pytest.mark.parametrize("flags, message", [
    (("--shape", "INPUT0:17"), "--shape INPUT0:17: input 'INPUT0' expects dims [16]"),
    (("--shape", "IMAGE:16"), "--shape IMAGE: model 'tiny' has no input 'IMAGE'; its inputs are INPUT0"),
    (("--batch", "65"), "--batch 65: model 'tiny' takes batches up to max_batch_size 64"),
])
def test_a_client_profile_the_model_cannot_take_names_the_input_and_shape(tiny, tmp_path, flags, message):
    process = tune(tiny, tmp_path, *QUICK, *flags)
    output = finished(process)
    assert process.returncode == 2 and message in output, output
    assert "Traceback" not in output and not (tiny / "config.tuned.pbtxt").exists()


def test_a_p99_bound_no_configuration_meets_is_said_with_the_closest(tiny, tmp_path):
    process = tune(tiny, tmp_path, *QUICK, "--objective", "p99", "--p99-ms", "0.001", "--modes", "sync",
                   "--contexts", "1", "--queue-delays", "100", "--preferred", "keep")
    output = finished(process)
    assert process.returncode == 1, output
    assert "no configuration measured met p99 <= 0.001 ms; the closest is sync contexts=1" in output
    assert "no configuration written" in output and not (tiny / "config.tuned.pbtxt").exists()
    record = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert not record["met"] and record["chosen"]["label"].startswith("sync contexts=1")


def test_fewest_resources_measures_the_elastic_range_after_the_best_pool(tiny, tmp_path):
    """One pipelined point of 2 contexts, then the search's elastic step: the same with 1..2 contexts,
    served by a real server. Without a GPU there is no memory figure, so the context count decides."""
    process = tune(tiny, tmp_path, *QUICK, "--objective", "fewest-resources", "--modes", "pipelined",
                   "--contexts", "2", "--queue-delays", "100", "--preferred", "keep")
    output = finished(process)
    assert process.returncode == 0, output
    record = json.loads((tmp_path / "out" / "tune.json").read_text())
    configs = [m["config"] for m in record["measurements"]]
    assert configs == [{"mode": "pipelined", "contexts": 2, "preferred_batch_size": "keep", "queue_delay_us": "100"},
                       {"mode": "pipelined", "contexts": 2, "min_contexts": "1", "preferred_batch_size": "keep",
                        "queue_delay_us": "100"}], output
    assert all("infer_per_s" in m for m in record["measurements"]), record["measurements"]
    if all(m["gpu_memory_mib"] is None for m in record["measurements"]):
        assert "the context count decided" in record["reason"], record["reason"]
    tuned = (tiny / "config.tuned.pbtxt").read_text()
    assert ('key: "min_contexts"' in tuned) == ("min_contexts" in record["chosen"]["config"]), tuned


def test_a_grid_loaded_side_by_side_measures_every_point_in_fewer_servers(tiny, tmp_path):
    """--grid --grid-together 3 over a 6-point space (modes x Triton instance counts): two servers of
    three models each, every point measured and marked as measured beside the others; the instance
    counts load (each a separate stub of the tiny model)."""
    process = tune(tiny, tmp_path, *QUICK, "--grid", "--grid-together", "3", "--modes", "sync,pipelined,decoupled",
                   "--contexts", "1", "--queue-delays", "100", "--preferred", "keep", "--instances", "1,2")
    output = finished(process)
    assert process.returncode == 0, output
    assert output.count("points in one server") == 2, output
    record = json.loads((tmp_path / "out" / "tune.json").read_text())
    measured = record["measurements"]
    assert record["space"]["grid_size"] == 6 and len(measured) == 6 and record["grid_together"] == 3, output
    assert {(m["config"]["mode"], m["config"]["instances"]) for m in measured} == {
        (mode, count) for mode in ("sync", "pipelined", "decoupled") for count in ("1", "2")}
    assert all(m.get("infer_per_s", 0) > 0 for m in measured), measured
    assert all("measured beside 2 other point(s) loaded in one server" in m["note"] for m in measured), measured
    assert all(m["gpu_memory_mib"] is None for m in measured)   # the server's reading is theirs together
    assert ours(tmp_path) == []


def test_grid_together_without_the_grid_is_refused(tiny, tmp_path):
    process = tune(tiny, tmp_path, *QUICK, "--grid-together", "2")
    output = finished(process)
    assert process.returncode == 2, output
    assert "trtpool-tune: error: --grid-together loads the grid's points side by side; it needs --grid" in output
