"""Clients that send their tensors in the request (issue 23), all in ONE run:

  in-process      bench/inprocess.py at batch 32, inputs on the host (and, with torch,
                  on the GPU) at each context count the served variants use
  served          trtpool variants (sync, pipelined; contexts) and the null model
                  (bench/null_model.py, host inputs, answers returned) in one server:
                  batch-32 clients over system shared memory, batch-1 clients over
                  plain gRPC (the tensor in the request body); with torch also the
                  same clients over CUDA shared memory, so that the GPU path is
                  measured beside the host path in the same run
  profile         optionally py-spy (--native: C/C++ frames too) on the best
                  variant's stub under the batch-32 system-shm load

Each measurement carries Triton's per-stage times (queue, compute_input,
compute_infer, compute_output, µs per request) and requests per execute. The
record's headline keys, and the ratios the issue sets goals for:

  inprocess_host_b32_items_per_s    in-process, host inputs, batch 32, at the
                                    contexts of the best system-shm variant
  served_system_shm_b32_infer_per_s that variant, batch-32 clients, system shm
  served_grpc_b1_infer_per_s        the best variant, batch-1 clients, plain gRPC
  null_grpc_b1_infer_per_s          the null model, same clients

    python bench/host_path.py --runtime torch --precision fp16 --out bench/results/h200/host_path.json
    (or in two device calls: --inprocess-only --out /tmp/inprocess.json, then
     --inprocess-from /tmp/inprocess.json --out ...)
    .venv/bin/python bench/host_path.py --runtime onnxruntime --image-size 64 --concurrency 16 \\
        --variants sync_c1,pipe_c2 --interval-ms 4000 --stability 50 --out bench/results/host_path_cpu.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ceiling import VARIANTS, add_null_model, arguments, inprocess_best, profiled  # noqa: E402
from bench.gpu_serving import INPUTS, add_model, example_options, measure  # noqa: E402
from bench.record import default_out, provenance, write_json  # noqa: E402
from tests.harness.server import TritonServer  # noqa: E402
from trtpool_builder.examples import write_example  # noqa: E402

NULL = "null"
B32_CLIENTS = 8  # batch-32 clients in flight, as in the ceiling stage


def rate(row: dict) -> float | None:
    return row.get("infer_per_s")


def ratio(top: float | None, bottom: float | None) -> float | None:
    return round(top / bottom, 3) if top and bottom else None


def served(server: TritonServer, variants: list[str], args) -> dict:
    """Every measurement of the served section, by transport and client batch."""
    common = {"inputs": INPUTS[args.example], "interval_ms": args.interval_ms, "stability": args.stability}
    report: dict = {"system_shm_b32": {}, "grpc_b1": {}}
    for name in variants:
        report["system_shm_b32"][name] = measure(
            server, name, concurrency=B32_CLIENTS, batch=32, shm="system", **common
        )
    for name in (NULL, *variants):
        report["grpc_b1"][name] = measure(server, name, concurrency=args.concurrency, **common)
    if args.runtime == "torch":  # the GPU path beside it, same server, same run
        report["cuda_shm_b32"] = {
            name: measure(server, name, concurrency=B32_CLIENTS, batch=32, shm="cuda", **common) for name in variants
        }
        report["cuda_shm_b1"] = {
            name: measure(server, name, concurrency=args.concurrency, shm="cuda", **common) for name in variants
        }
    return report


def headline(report: dict, variants: list[str]) -> dict:
    """The issue's keys and ratios from one run's figures."""
    host = {row["contexts"]: row["items_per_s"] for row in report["inprocess"]["runs"]["host"]}
    b32, b1 = report["served"]["system_shm_b32"], report["served"]["grpc_b1"]
    by_variant = {
        name: {
            "contexts": VARIANTS[name][0],
            "system_shm_b32": rate(b32[name]),
            "inprocess_host_b32_same_contexts": host.get(VARIANTS[name][0]),
            "system_shm_b32_over_inprocess_host": ratio(rate(b32[name]), host.get(VARIANTS[name][0])),
            "grpc_b1": rate(b1[name]),
            "grpc_b1_over_null": ratio(rate(b1[name]), rate(b1[NULL])),
        }
        for name in variants
    }
    best32 = max(variants, key=lambda n: rate(b32[n]) or 0)
    best1 = max(variants, key=lambda n: rate(b1[n]) or 0)
    figures = {
        "best_system_shm_b32_variant": best32,
        "best_grpc_b1_variant": best1,
        "inprocess_host_b32_items_per_s": host.get(VARIANTS[best32][0]),
        "served_system_shm_b32_infer_per_s": rate(b32[best32]),
        "served_grpc_b1_infer_per_s": rate(b1[best1]),
        "null_grpc_b1_infer_per_s": rate(b1[NULL]),
        "by_variant": by_variant,
    }
    null = figures["null_grpc_b1_infer_per_s"]
    figures["ratios"] = {
        "system_shm_b32_over_inprocess_host_same_contexts": by_variant[best32]["system_shm_b32_over_inprocess_host"],
        "grpc_b1_over_null": ratio(figures["served_grpc_b1_infer_per_s"], null),
        # Where the model itself is slower than the null model (ONNX Runtime on a CPU),
        # the lower of the two ceilings is the one batch-1 clients can reach.
        "grpc_b1_over_min_null_inprocess_host": ratio(
            figures["served_grpc_b1_infer_per_s"], min(null or 0, max(host.values())) or None
        ),
    }
    if "cuda_shm_b32" in report["served"]:
        cuda32, cuda1 = report["served"]["cuda_shm_b32"], report["served"]["cuda_shm_b1"]
        figures["cuda_shm"] = {name: {"b32": rate(cuda32[name]), "b1": rate(cuda1[name])} for name in variants}
    return figures


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--interval-ms", type=int, default=1500, help="perf_analyzer's measurement window")
    parser.add_argument(
        "--stability",
        type=int,
        help="perf_analyzer's stability percentage from the start "
        "(default: its own 10, then 25 with longer windows); for a loaded machine",
    )
    parser.add_argument(
        "--profile-clients",
        choices=("b32_system_shm", "b1_grpc"),
        default="b32_system_shm",
        help="the load the profile is taken under",
    )
    parser.add_argument("--variants", default="sync_c1,pipe_c2,pipe_c4", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument(
        "--inprocess-only",
        action="store_true",
        help="measure and write the in-process section alone (a device call of its own)",
    )
    parser.add_argument(
        "--inprocess-from",
        type=Path,
        metavar="JSON",
        help="take the in-process section from an earlier --inprocess-only run's file",
    )
    parser.add_argument("--out", type=Path, default=default_out("host_path.json"))
    args = parser.parse_args()
    if args.runtime == "onnxruntime":
        args.precision = "fp32"  # ONNX Runtime runs the file's own types
    args.shm = "system"  # what ceiling.profiled measures under
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; expected some of {', '.join(VARIANTS)}")
    contexts = ",".join(str(c) for c in sorted({VARIANTS[name][0] for name in variants}))
    report: dict = {
        "benchmark": "host_path",
        **provenance(),
        "runtime": args.runtime,
        "precision": args.precision,
        "example": args.example,
        "image_size": args.image_size,
        "batch1_clients": args.concurrency,
        "batch32_clients": B32_CLIENTS,
        "variants": {n: VARIANTS[n] for n in variants},
    }
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        onnx = write_example(args.example, scratch / f"{args.example}.onnx", **example_options(args.example, args))
        if args.inprocess_from:
            report["inprocess"] = json.loads(args.inprocess_from.read_text())["inprocess"]
            report["inprocess_from"] = str(args.inprocess_from)
        else:
            report["inprocess"] = inprocess_best(args, onnx, scratch, contexts)
        print(f"in-process: {report['inprocess']['best']}", file=sys.stderr, flush=True)
        if args.inprocess_only:
            write_json(args.out, report)
            return
        repo = scratch / "repo"
        for name in variants:
            count, mode, parameters = VARIANTS[name]
            add_model(repo, onnx, name, args.example, args, contexts=count, mode=mode, parameters=parameters)
        add_null_model(repo, variants[0], NULL)
        server = TritonServer(repo, scratch / "server.log").start(timeout=600)
        try:
            report["served"] = served(server, variants, args)
            report.update(headline(report, variants))
            write_json(args.out, report)  # the figures are safe before the profile runs
            if args.profile:
                if args.profile_clients == "b32_system_shm":
                    target, load = report["best_system_shm_b32_variant"], {"concurrency": B32_CLIENTS, "batch": 32}
                else:
                    target, load = report["best_grpc_b1_variant"], {"shm": "none"}
                report["profile"] = profiled(server, target, args, args.profile, stability=args.stability, **load)
        finally:
            server.stop()
            report["server_log_tail"] = server.log_tail(40)
            write_json(args.out, report)
    print(
        json.dumps(
            {
                k: report.get(k)
                for k in (
                    "inprocess_host_b32_items_per_s",
                    "served_system_shm_b32_infer_per_s",
                    "served_grpc_b1_infer_per_s",
                    "null_grpc_b1_infer_per_s",
                    "ratios",
                    "cuda_shm",
                )
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
