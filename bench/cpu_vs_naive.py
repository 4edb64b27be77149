"""trtpool against the naive Python-backend model on this CPU machine, side by side.

One server holds trtpool (sync, pipelined) and bench/naive_model.py over the
same ONNX file (the ResNet-50-shaped example at 3x64x64); perf_analyzer over
gRPC at one concurrency measures trtpool and the naive model in turn, the order
swapped every round (bench/paired.py), once for each trtpool mode (`sync_split`:
sync with each lone batch run as one sub-batch per context). Each round's
throughput and p99 ratios are taken within the round: on a noisy 2-core
machine a ratio holds where an absolute figure does not.

    .venv/bin/python bench/cpu_vs_naive.py --rounds 6 --out bench/results/cpu_vs_naive.json
"""
from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cpu_serving import MODELS, build_repository  # noqa: E402
from bench.paired import alternate, arguments  # noqa: E402
from bench.record import provenance, write_json  # noqa: E402
from tests.harness.repository import set_parameters  # noqa: E402
from tests.harness.server import TritonServer  # noqa: E402
from trtpool_builder.examples import get_example, write_example  # noqa: E402
from trtpool_builder.model_folder import ServingOptions, make_model_folder  # noqa: E402

SYNC_SPLIT = "trtpool_sync_split"


def ratios(rows: dict[str, list[dict]], first: str, second: str) -> dict:
    """Per round: first's throughput and p99 over second's; their medians."""
    throughput = [a["infer_per_s"] / b["infer_per_s"] for a, b in zip(rows[first], rows[second])]
    p99 = [a["p99_us"] / b["p99_us"] for a, b in zip(rows[first], rows[second])]
    return {"throughput_per_round": [round(r, 3) for r in throughput], "throughput_median": round(statistics.median(throughput), 3),
            "p99_per_round": [round(r, 3) for r in p99], "p99_median": round(statistics.median(p99), 3)}


def main() -> None:
    parser = arguments(__doc__, "cpu_vs_naive.json", concurrency=16)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--contexts", type=int, default=2)
    parser.add_argument("--modes", default="sync,sync_split,pipelined")
    args = parser.parse_args()
    record = {"benchmark": "cpu_vs_naive", **provenance(),
              "model": f"resnet50-shaped, input 3x{args.image_size}x{args.image_size}, fp32, ONNX Runtime CPU",
              "contexts": args.contexts, "concurrency": args.concurrency, "rounds": args.rounds, "modes": {}}
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        onnx = write_example("resnet50", base / "resnet50.onnx", image_size=args.image_size)
        profiles = get_example("resnet50").serving_profiles(image_size=args.image_size)
        build_repository(base / "repo", onnx, profiles, args.contexts)
        split = make_model_folder(base / "repo", SYNC_SPLIT, onnx, profiles,
                                  ServingOptions(contexts=str(args.contexts), instance_kind="cpu"))
        set_parameters(split, sub_batches=str(args.contexts))
        models = {**MODELS, "sync_split": SYNC_SPLIT}
        server = TritonServer(base / "repo", base / "server.log").start()
        try:
            for mode in args.modes.split(","):
                rows = alternate(server, (models[mode], MODELS["naive"]), args.rounds, args.concurrency,
                                 args.interval_ms)
                record["modes"][mode] = {"rows": rows, "over_naive": ratios(rows, models[mode], MODELS["naive"])}
                print(mode, record["modes"][mode]["over_naive"], flush=True)
        finally:
            server.stop()
    write_json(args.out, record)


if __name__ == "__main__":
    main()
