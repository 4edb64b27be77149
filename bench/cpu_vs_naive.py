"""trtpool against the naive Python-backend model on this CPU machine, side by side.

One server holds trtpool (sync, pipelined) and bench/naive_model.py over the
same ONNX file (the ResNet-50-shaped example at 3x64x64); perf_analyzer over
gRPC at one concurrency measures trtpool and the naive model in turn, the order
swapped every round (bench/paired.py), once for each trtpool mode. Then, with the
server stopped, the batching ceiling: trtpool's sync runtime driven in process
at batch 1..16 against the naive model's own loop (a default ONNX Runtime
session, fresh arrays, one request at a time). Its best over the naive loop is
the most any batching server could gain over the naive model on this machine. Each round's
throughput and p99 ratios are taken within the round: on a noisy 2-core
machine a ratio holds where an absolute figure does not.

    .venv/bin/python bench/cpu_vs_naive.py --rounds 6 --out bench/results/cpu_vs_naive.json
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cpu_serving import MODELS, build_repository, inprocess_throughput  # noqa: E402
from bench.paired import alternate, arguments, compared  # noqa: E402
from bench.record import provenance, write_json  # noqa: E402
from tests.harness.server import TritonServer  # noqa: E402
from trtpool import parameters  # noqa: E402
from trtpool.runtimes import load_runtime  # noqa: E402
from trtpool_builder.examples import get_example, write_example  # noqa: E402
from trtpool_builder.folder.model_folder import read_config  # noqa: E402


def ratios(rows: dict[str, list[dict]], first: str, second: str) -> dict:
    """Per round: first's throughput and p99 over second's; their medians."""
    throughput = compared(rows[first], rows[second], "infer_per_s")
    p99 = compared(rows[first], rows[second], "p99_us")
    return {
        "throughput_per_round": throughput["per_round"],
        "throughput_median": throughput["median"],
        "p99_per_round": p99["per_round"],
        "p99_median": p99["median"],
    }


def naive_loop(onnx: Path, inputs: dict[str, np.ndarray], seconds: float) -> float:
    """bench/naive_model.py's execute without a server: items/s of one request at a time."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    session.run(None, inputs)
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        session.run(None, {name: np.array(array) for name, array in inputs.items()})
        runs += 1
    return runs / (time.perf_counter() - start)


def batching_ceiling(repo: Path, onnx: Path, image_size: int, seconds: float) -> dict:
    """trtpool's sync runtime in process at several batches, against the naive loop at batch 1."""
    from google.protobuf import json_format

    config = json_format.MessageToDict(read_config(repo / MODELS["sync"]), preserving_proto_field_name=True)
    config["max_batch_size"] = int(config["max_batch_size"])
    example = get_example("resnet50")
    trtpool = {}
    for batch in (1, 4, 8, 16):
        runtime = load_runtime(parameters.load(config, repo / MODELS["sync"] / "1", "cpu"))
        inputs = example.sample_inputs(batch, image_size=image_size)
        trtpool[batch] = round(inprocess_throughput(runtime, 1, inputs, seconds)["items_per_s"], 1)
        runtime.close()
        print(f"in-process trtpool sync runtime, batch {batch}: {trtpool[batch]} items/s", flush=True)
    naive = round(naive_loop(onnx, example.sample_inputs(1, image_size=image_size), seconds), 1)
    print(f"in-process naive loop, batch 1: {naive} items/s", flush=True)
    return {
        "seconds": seconds,
        "trtpool_runtime_items_per_s_by_batch": trtpool,
        "naive_loop_items_per_s": naive,
        "best_batched_over_naive_loop": round(max(trtpool.values()) / naive, 3),
    }


def main() -> None:
    parser = arguments(__doc__, "cpu_vs_naive.json", concurrency=16)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--contexts", type=int, default=2)
    parser.add_argument("--modes", default="sync,pipelined")
    parser.add_argument("--inprocess-seconds", type=float, default=5.0)
    args = parser.parse_args()
    record = {
        "benchmark": "cpu_vs_naive",
        **provenance(),
        "model": f"resnet50-shaped, input 3x{args.image_size}x{args.image_size}, fp32, ONNX Runtime CPU",
        "contexts": args.contexts,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "modes": {},
    }
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        onnx = write_example("resnet50", base / "resnet50.onnx", image_size=args.image_size)
        profiles = get_example("resnet50").serving_profiles(image_size=args.image_size)
        build_repository(base / "repo", onnx, profiles, args.contexts)
        server = TritonServer(base / "repo", base / "server.log").start()
        try:
            for mode in args.modes.split(","):
                rows = alternate(
                    server, (MODELS[mode], MODELS["naive"]), args.rounds, args.concurrency, args.interval_ms
                )
                record["modes"][mode] = {"rows": rows, "over_naive": ratios(rows, MODELS[mode], MODELS["naive"])}
                print(mode, record["modes"][mode]["over_naive"], flush=True)
        finally:
            server.stop()
        record["batching_ceiling"] = batching_ceiling(base / "repo", onnx, args.image_size, args.inprocess_seconds)
    write_json(args.out, record)


if __name__ == "__main__":
    main()
