"""Sync mode's execute as a plain call against the same execute as a coroutine.

One server, two models over the same ONNX file, 1 context, sync mode, ONNX
Runtime on the CPU: `plain` is trtpool as shipped; `coroutine` is
bench/coroutine_model.py, trtpool's model.py with `async def execute`, which
the Python backend's stub runs on its event-loop thread (a thread hop per
execute). perf_analyzer over gRPC, the two measured in turn, the order
swapped every round (ABBA), ratios pair by pair.

    .venv/bin/python bench/sync_execute.py --rounds 8 --out bench/results/cpu_sync_execute.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.perf import perf_analyzer  # noqa: E402
from tests.harness.server import TritonServer  # noqa: E402
from trtpool_builder.examples import get_example, write_example  # noqa: E402
from trtpool_builder.model_folder import ServingOptions, make_model_folder, read_config, write_config  # noqa: E402

MODELS = ("plain", "coroutine")


def build_repository(repo: Path, example: str, onnx: Path) -> None:
    options = ServingOptions(runtime="onnxruntime", contexts="1", mode="sync", instance_kind="cpu")
    profiles = get_example(example).serving_profiles()
    make_model_folder(repo, "plain", onnx, profiles, options)
    make_model_folder(repo, "coroutine", onnx, profiles, options)
    config = read_config(repo / "coroutine")
    config.backend = "python"  # the same model.py, loaded from the model's folder
    write_config(repo / "coroutine", config)
    shutil.copyfile(ROOT / "bench" / "coroutine_model.py", repo / "coroutine" / "1" / "model.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", default="tiny", help="a small model makes the per-execute cost visible")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "cpu_sync_execute.json")
    args = parser.parse_args()

    rows: dict[str, list[dict]] = {model: [] for model in MODELS}
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        repo = base / "repo"
        build_repository(repo, args.example, write_example(args.example, base / "model.onnx"))
        server = TritonServer(repo, base / "server.log").start()
        try:
            for round_index in range(args.rounds):
                order = MODELS if round_index % 2 == 0 else MODELS[::-1]
                for model in order:
                    [row] = perf_analyzer(model, server.grpc_url, concurrency=str(args.concurrency),
                                          interval_ms=args.interval_ms, max_trials=10,
                                          extra=("--stability-percentage", "30"))
                    rows[model].append({"infer_per_s": row["Inferences/Second"], "p99_us": row["p99 latency"]})
                    print(f"round {round_index} {model:9s} {row['Inferences/Second']:8.1f} infer/s "
                          f"p99 {row['p99 latency'] / 1000:6.1f} ms", flush=True)
        finally:
            server.stop()

    ratios = [p["infer_per_s"] / c["infer_per_s"] for p, c in zip(rows["plain"], rows["coroutine"])]
    record = {
        "benchmark": "sync_execute",
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": platform.processor()},
        "model": f"{args.example} example, fp32, ONNX Runtime CPU, 1 context, sync mode",
        "concurrency": args.concurrency,
        "rounds": rows,
        "plain_over_coroutine_throughput": {"per_round": [round(r, 3) for r in ratios],
                                            "median": round(statistics.median(ratios), 3),
                                            "rounds_plain_faster": sum(r > 1 for r in ratios)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record["plain_over_coroutine_throughput"]))


if __name__ == "__main__":
    main()
