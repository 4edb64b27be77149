"""trtpool-tune on a real third-party model (issue 37): silero VAD, three inputs, two of them with
variable dimensions, and an int64 sample rate that perf_analyzer's random data gets wrong. Real
tritonservers and the real perf_analyzer, as tests/ops/test_tune.py runs them."""
from __future__ import annotations

import json

import pytest

from tests.corpus.fetch import fetch
from tests.corpus.manifest import SILERO_IF
from tests.corpus.test_accuracy_scalar import vad_folder
from tests.ops.test_tune import QUICK, finished, tune

pytestmark = pytest.mark.corpus_runtime

ONE_POINT = (*QUICK, "--modes", "sync", "--contexts", "1", "--queue-delays", "100", "--preferred", "keep")
OPT_SHAPES = "--shape input:1,576 --shape state:2,1,128"   # the folder's profile: opt 1x576 and 2x1x128


def test_a_point_refused_for_generated_data_says_why_and_what_to_give(tmp_path):
    folder = vad_folder(fetch((SILERO_IF,))[SILERO_IF.name], tmp_path / "repo")
    process = tune(folder, tmp_path, *ONE_POINT)
    output = finished(process)
    # No --shape: every input with variable dimensions at once, from the profile, and said.
    assert f"[tune] inputs without --shape are measured at the model's opt shapes: {OPT_SHAPES}" in output, output
    record = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert record["client"]["shapes"] == ["input:1,576", "state:2,1,128"]
    cause = "perf_analyzer exited 99: the server refused a request: the model rejected the input: "
    fix = "give real ones with --input-data FILE.json (perf_analyzer's JSON input format)"
    failed = next(line for line in output.splitlines() if " failed: " in line)
    assert cause in failed and fix in failed, output
    report = (tmp_path / "out" / "report.md").read_text()
    assert cause in report and fix in report, report

    # The fix as given: real inputs (sr 16000) in perf_analyzer's JSON; the point measures.
    data = tmp_path / "vad.json"
    data.write_text(json.dumps({"data": [{"input": {"content": [0.0] * 576, "shape": [1, 576]},
                                          "state": {"content": [0.0] * 256, "shape": [2, 1, 128]},
                                          "sr": [16000]}]}))
    process = tune(folder, tmp_path, *ONE_POINT, "--input-data", str(data))
    output = finished(process)
    assert process.returncode == 0, output
    assert json.loads((tmp_path / "out" / "tune.json").read_text())["measurements"][0]["infer_per_s"] > 0
