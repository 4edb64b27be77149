"""CPU serving benchmark (ONNX Runtime default runtime), all in one run:

1. a perf_analyzer concurrency sweep over gRPC against trtpool in sync mode,
   pipelined mode, decoupled mode (gRPC streaming) and a naive Python-backend
   model (each request alone, fresh allocations, no pool), one server, same ONNX file;
2. the same runtime driven in-process through the pool at the batch sizes the
   server formed at saturation, for the served / in-process ratio.

    .venv/bin/python bench/cpu_serving.py --image-size 64 --contexts 2 --out bench/results/cpu_serving.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from google.protobuf import json_format  # noqa: E402
from tritonclient.grpc import model_config_pb2 as mc  # noqa: E402

from bench.inprocess import items_per_s, timed, warm_up  # noqa: E402
from bench.record import default_out, provenance, write_json  # noqa: E402
from tests.harness.perf import perf_analyzer  # noqa: E402
from tests.harness.server import TritonServer  # noqa: E402
from trtpool import parameters  # noqa: E402
from trtpool.engine.pool import ContextPool  # noqa: E402
from trtpool.runtimes import load_runtime  # noqa: E402
from trtpool_builder.examples import get_example, write_example  # noqa: E402
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config, write_config  # noqa: E402

MODELS = {"sync": "trtpool_sync", "pipelined": "trtpool_pipelined", "decoupled": "trtpool_decoupled", "naive": "naive"}
TRTPOOL_MODES = ("sync", "pipelined", "decoupled")


def build_repository(repo: Path, onnx: Path, profiles: tuple[str, ...], contexts: int) -> None:
    for mode in TRTPOOL_MODES:
        make_model_folder(
            repo, MODELS[mode], onnx, profiles, ServingOptions(contexts=str(contexts), mode=mode, instance_kind="cpu")
        )
    naive = repo / MODELS["naive"]
    (naive / "1").mkdir(parents=True)
    shutil.copyfile(onnx, naive / "1" / "model.onnx")
    shutil.copyfile(ROOT / "bench" / "naive_model.py", naive / "1" / "model.py")
    config = read_config(repo / MODELS["sync"])
    plain = mc.ModelConfig(name=MODELS["naive"], backend="python", max_batch_size=config.max_batch_size)
    plain.input.extend(config.input)
    plain.output.extend(config.output)
    plain.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    write_config(naive, plain)


def batch_histogram(metrics: str, model: str) -> dict[int, float]:
    counts: dict[int, float] = {}
    for line in metrics.splitlines():
        if line.startswith("trtpool_batches_total{") and f'model="{model}"' in line:
            size = int(line.split('batch_size="')[1].split('"')[0])
            counts[size] = float(line.rsplit(" ", 1)[1])
    return counts


def mean_batch(before: dict[int, float], after: dict[int, float]) -> float:
    delta = {s: after.get(s, 0) - before.get(s, 0) for s in after}
    batches = sum(delta.values())
    return sum(s * n for s, n in delta.items()) / batches if batches else 0.0


def inprocess_throughput(runtime, workers: int, inputs: dict, seconds: float) -> dict:
    """The runtime driven through the pool by `workers` threads, no server in between."""
    pool = ContextPool(runtime, workers)
    parts = {name: [array] for name, array in inputs.items()}
    warm_up(pool, parts)
    batch = next(iter(inputs.values())).shape[0]
    result = timed(pool, parts, seconds)
    return {"items_per_s": items_per_s(result, batch), **result}


def sweep(server: TritonServer, levels: list[int], interval_ms: int, stability: int) -> dict:
    results: dict = {}
    for kind, model in MODELS.items():
        extra = ("--stability-percentage", str(stability), *(("--streaming",) if kind == "decoupled" else ()))
        rows = []
        for level in levels:
            before = batch_histogram(server.metrics(), model)
            [row] = perf_analyzer(model, server.grpc_url, concurrency=str(level), interval_ms=interval_ms, extra=extra)
            after = batch_histogram(server.metrics(), model)
            rows.append(
                {
                    "concurrency": level,
                    "infer_per_s": row["Inferences/Second"],
                    "p50_us": row["p50 latency"],
                    "p99_us": row["p99 latency"],
                    "mean_batch": round(mean_batch(before, after), 2) if kind != "naive" else 1.0,
                }
            )
            print(
                f"{kind:9s} c={level:3d} {row['Inferences/Second']:9.1f} infer/s  "
                f"p99 {row['p99 latency'] / 1000:8.1f} ms  batch {rows[-1]['mean_batch']}",
                flush=True,
            )
        results[kind] = rows
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--contexts", type=int, default=2)
    parser.add_argument("--levels", default="1,2,4,8,16")
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--inprocess-seconds", type=float, default=5.0)
    parser.add_argument(
        "--stability",
        type=int,
        default=20,
        help="perf_analyzer's --stability-percentage (its default 10 rarely settles on 2 shared cores)",
    )
    parser.add_argument("--out", type=Path, default=default_out("cpu_serving.json"))
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]

    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        onnx = write_example("resnet50", base / "resnet50.onnx", image_size=args.image_size)
        profiles = get_example("resnet50").serving_profiles(image_size=args.image_size)
        repo = base / "repo"
        build_repository(repo, onnx, profiles, args.contexts)
        server = TritonServer(repo, base / "server.log").start()
        try:
            served = sweep(server, levels, args.interval_ms, args.stability)
        finally:
            server.stop()

        saturated = {kind: rows[-1] for kind, rows in served.items()}
        inprocess = []
        for kind in TRTPOOL_MODES:
            # The runtime as that model's config builds it (threads per context follow the mode).
            config = json_format.MessageToDict(read_config(repo / MODELS[kind]), preserving_proto_field_name=True)
            config["max_batch_size"] = int(config["max_batch_size"])
            runtime = load_runtime(parameters.load(config, repo / MODELS[kind] / "1", "cpu"))
            # sync: one batch in flight per instance -> one worker; the others: one per context.
            workers = 1 if kind == "sync" else args.contexts
            batch = max(1, round(saturated[kind]["mean_batch"]))
            inputs = get_example("resnet50").sample_inputs(batch, image_size=args.image_size)
            result = inprocess_throughput(runtime, workers, inputs, args.inprocess_seconds)
            inprocess.append({"for": kind, "workers": workers, "batch": batch, **result})
            print(
                f"in-process ({kind} config) workers={workers} batch={batch}: {result['items_per_s']:.1f} items/s",
                flush=True,
            )

    def inproc(kind: str) -> float:
        return next(r["items_per_s"] for r in inprocess if r["for"] == kind)

    ratios = {}
    for kind in TRTPOOL_MODES:
        ratios[f"{kind}_served_over_inprocess"] = saturated[kind]["infer_per_s"] / inproc(kind)
        ratios[f"{kind}_over_naive_throughput"] = saturated[kind]["infer_per_s"] / saturated["naive"]["infer_per_s"]
        ratios[f"{kind}_over_naive_p99"] = saturated[kind]["p99_us"] / saturated["naive"]["p99_us"]
    record = {
        "benchmark": "cpu_serving",
        **provenance(),
        "model": f"resnet50-shaped, input 3x{args.image_size}x{args.image_size}, fp32, ONNX Runtime CPU",
        "contexts": args.contexts,
        "stability_percentage": args.stability,
        "served_grpc": served,
        "inprocess": inprocess,
        "ratios_at_saturation": {k: round(v, 3) for k, v in ratios.items()},
    }
    write_json(args.out, record)
    print(json.dumps(record["ratios_at_saturation"], indent=2))


if __name__ == "__main__":
    main()
