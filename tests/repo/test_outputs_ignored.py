"""What the tools write by default stays out of git's way (issue 37): trtpool-tune's report folder
and config.tuned.pbtxt are ignored, and no benchmark script writes over a tracked record under
bench/results/ unless --out names it."""
from __future__ import annotations

import ast
import subprocess

import pytest

from bench.record import default_out
from tests.harness.docs import ROOT

BENCH_SCRIPTS = sorted((ROOT / "bench").glob("*.py"))


def _ignored(path: str) -> bool:
    return subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0


def _tracked(path: str) -> bool:
    return subprocess.run(["git", "ls-files", "--error-unmatch", path], cwd=ROOT, capture_output=True).returncode == 0


@pytest.mark.parametrize("path", ["trtpool-tune-tiny/report.md", "trtpool-tune-resnet50/tune.png",
                                  "model_repository/tiny/config.tuned.pbtxt", "repo/vad/config.tuned.pbtxt"])
def test_trtpool_tunes_outputs_are_ignored(path):
    assert _ignored(path)


def test_a_benchmark_runs_default_output_is_ignored_and_no_record():
    assert _tracked("bench/results/elastic_cpu.json")     # the record docs/benchmarks.md cites
    out = default_out("elastic_cpu.json")
    assert _ignored(str(out.relative_to(ROOT))) and not _tracked(str(out.relative_to(ROOT)))


def _path_defaults(script) -> list[str]:
    """The source of each add_argument(..., type=Path, default=...) default in the script."""
    found = []
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            keywords = {k.arg: k.value for k in node.keywords}
            if ast.unparse(keywords.get("type", ast.Constant(None))) == "Path" and "default" in keywords:
                found.append(ast.unparse(keywords["default"]))
    return found


@pytest.mark.parametrize("script", BENCH_SCRIPTS, ids=lambda p: p.name)
def test_no_benchmark_writes_a_tracked_record_by_default(script):
    """bench/elastic.py as docs/benchmarks.md quotes it replaced bench/results/elastic_cpu.json."""
    defaults = _path_defaults(script)
    assert all(d.startswith("default_out(") for d in defaults), f"{script.name}: {defaults}"
