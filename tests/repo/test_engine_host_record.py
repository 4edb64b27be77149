"""bench/engine_host_record.py: issue 36's record merged from a loan's runs, and the committed record it made."""
from __future__ import annotations

import json
from pathlib import Path

from bench.engine_host_record import record
from tests.harness.docs import ROOT

H200 = ROOT / "bench" / "results" / "h200"


def run_file(path: Path, concurrency: int, rows: dict[str, float], memory: dict[str, dict]) -> Path:
    case = {
        "date": "2026-12-06 04:00:00 UTC",
        "command": f"python3 bench/engine_host.py --case resnet50 --concurrency {concurrency}",
        "machine": {"cpus": 16},
        "by_concurrency": {"none": {v: {str(concurrency): {"infer_per_s": r, "p99_ms": 9.0}} for v, r in rows.items()}},
        "gpu_memory_mib": memory,
    }
    path.write_text(json.dumps({"cases": {"resnet50": case}}))
    return path


def test_each_variant_is_its_best_row_over_the_runs_and_names_where_it_came_from(tmp_path):
    low = run_file(tmp_path / "a.json", 64, {"host_x6": 5000.0, "now_x2": 3700.0, "null_x6": 9000.0},
                   {"host_x6": {"after_load": 850}, "now_x2": {"after_load": 1660}, "now_x1": {"after_load": 830}})
    high = run_file(tmp_path / "b.json", 256, {"host_x6": 6400.0, "now_x2": 3600.0, "null_x6": 8800.0},
                    {"host_x6": {"after_load": 860}, "now_x2": {"after_load": 1670}})
    made = record([low, high], ceiling=None)
    best = made["cases"]["resnet50"]["best"]["none"]
    assert (best["host_x6"]["run"], best["host_x6"]["concurrency"]) == ("b.json", 256)
    assert (best["now_x2"]["run"], best["now_x2"]["concurrency"]) == ("a.json", 64)
    assert made["resnet50_b1_grpc_host"] == 6400.0 and made["resnet50_b1_grpc_now"] == 3700.0
    assert made["resnet50_b1_grpc_host_over_now"] == round(6400 / 3700, 3)
    assert made["gpu_memory_mib_host_x6"] == {"resnet50": {"after_load": 860}}  # from the run of its best row
    assert made["same_run"] == {"a.json": {}, "b.json": {}}  # these runs carry no ratios of their own


def test_the_committed_record_is_what_the_script_makes_from_the_runs_it_names():
    committed = json.loads((H200 / "engine_host.json").read_text())
    runs = [H200 / run["run"] for case in committed["cases"].values() for run in case["runs"]]
    made = record(list(dict.fromkeys(runs)), ceiling=H200 / "engine_host_seventh.json")
    assert {k: v for k, v in committed.items() if k != "note"} == json.loads(json.dumps(made))
    assert made["jpeg_inprocess_ceiling_from"].startswith("engine_host_seventh.json")
