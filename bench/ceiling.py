"""One instance against its ceilings, all in ONE run (issue: batch-1 throughput):

  in-process best     bench/inprocess.py, 1/2/4 contexts at batch 32, inputs on the
                      host and already on the GPU: the best items/s
  null model          bench/null_model.py, a Python-backend model that does no work:
                      what the backend itself passes per second, one instance
  trtpool variants    sync and pipelined, 1/2/4 contexts, inputs kept on the GPU or
                      copied to the host by Triton; batch-1 clients over CUDA shared
                      memory at --concurrency, each with Triton's per-stage times

then, for the best variant: plain gRPC beside CUDA shm and p50/p99 at 50% and 90%
of its peak rate; batch-32 clients for the variants --batch32 names (sync and
the best pipelined by default); and optionally a py-spy profile of one stub
under load (--profile-variant, --native). Writes the figures and the ratios
the issue asks for.

    python bench/ceiling.py --runtime torch --precision fp16 --out bench/results/h200/ceiling.json

With --runtime onnxruntime it runs on a CPU machine (no CUDA shared memory),
which is how its logic is checked without a GPU.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tritonclient.grpc import model_config_pb2 as mc  # noqa: E402

from bench.gpu_serving import INPUTS, add_model, example_options, measure  # noqa: E402
from bench.record import default_out, provenance, write_json  # noqa: E402
from bench.stub_profile import stub_profile  # noqa: E402
from tests.harness.server import TritonServer  # noqa: E402
from trtpool_builder.examples import write_example  # noqa: E402
from trtpool_builder.folder.model_folder import read_config, write_config  # noqa: E402

# name: (contexts, mode, extra parameters)
VARIANTS = {
    "sync_c1": (1, "sync", {}),
    "pipe_c1": (1, "pipelined", {}),
    "pipe_c2": (2, "pipelined", {}),
    "pipe_c4": (4, "pipelined", {}),
    "pipe_c1_t4": (1, "pipelined", {"response_threads": "4"}),
    "pipe_c2_t4": (2, "pipelined", {"response_threads": "4"}),
    "pipe_c2_hostin": (2, "pipelined", {"FORCE_CPU_ONLY_INPUT_TENSORS": "yes"}),
}
# The null model taking its inputs where Triton leaves them (on the GPU, as trtpool
# does), and answering through response senders: the ceiling of any design that
# answers after execute() has returned, from 1 and from 8 threads.
NULLS = {
    "null": {},
    "null_gpuin": {"FORCE_CPU_ONLY_INPUT_TENSORS": "no"},
    "null_send8": {"answer": "send", "send_threads": "8"},
    "null_send8_gpuin": {"answer": "send", "send_threads": "8", "FORCE_CPU_ONLY_INPUT_TENSORS": "no"},
}


def add_null_model(repo: Path, like: str, name: str, **parameters: str) -> None:
    """The null model with `like`'s inputs and outputs, batching and instance kind."""
    template = read_config(repo / like)
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=template.max_batch_size)
    config.input.extend(template.input)
    config.output.extend(template.output)
    config.dynamic_batching.CopyFrom(template.dynamic_batching)
    config.instance_group.add(kind=template.instance_group[0].kind, count=1)
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    (repo / name / "1").mkdir(parents=True)
    shutil.copyfile(ROOT / "bench" / "null_model.py", repo / name / "1" / "model.py")
    write_config(repo / name, config)


def inprocess_best(args, onnx: Path, scratch: Path, contexts: str = "1,2,4") -> dict:
    """bench/inprocess.py at batch 32 with 1, 2 and 4 contexts, inputs on the host and on the GPU."""
    runs = {}
    for where in ("host", "device") if args.runtime == "torch" else ("host",):
        out = scratch / f"inprocess_{where}.json"
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "inprocess.py"),
                "--runtime",
                args.runtime,
                "--model",
                args.example,
                "--onnx",
                str(onnx),
                "--precision",
                args.precision,
                "--contexts",
                contexts,
                "--batches",
                "32",
                "--seconds",
                "2",
                "--inputs",
                where,
                "--image-size",
                str(args.image_size),
                "--output",
                str(out),
            ],
            check=True,
        )
        runs[where] = [
            {k: r[k] for k in ("contexts", "batch", "items_per_s")} for r in json.loads(out.read_text())["results"]
        ]
    best = max((row for rows in runs.values() for row in rows), key=lambda r: r["items_per_s"])
    return {"runs": runs, "best": best}


def profiled(server: TritonServer, model: str, args, out: Path, **load) -> dict:
    """A measurement (by default batch-1 clients over args.shm) while py-spy samples the
    model's stub (all threads; with --native, the C/C++ frames too: the stub's own IPC
    and copies)."""
    with stub_profile(server, model, out, native=args.native) as outcome:
        if "error" not in outcome:
            outcome["measurement"] = measure(
                server, model, inputs=INPUTS[args.example], **{"concurrency": args.concurrency, "shm": args.shm, **load}
            )
    return outcome


def arguments(doc: str) -> argparse.ArgumentParser:
    """The options ceiling.py and host_path.py share: the model, the batch-1 clients, the profile."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", choices=("torch", "onnxruntime"), default="torch")
    parser.add_argument("--precision", default="fp16")
    parser.add_argument("--example", choices=tuple(INPUTS), default="resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--concurrency", type=int, default=64, help="batch-1 clients")
    parser.add_argument("--profile", type=Path, help="write a py-spy profile (raw stacks) of a stub here")
    parser.add_argument("--native", action="store_true", help="profile native frames too")
    return parser


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--nulls", default=",".join(NULLS))
    parser.add_argument(
        "--batch32",
        default="sync_c1,best_pipelined",
        help="variants measured with batch-32 clients; best_pipelined: the best pipelined one",
    )
    parser.add_argument("--profile-variant", default="best_pipelined", help="a variant, best or best_pipelined")
    parser.add_argument("--out", type=Path, default=default_out("ceiling.json"))
    args = parser.parse_args()
    args.shm = "cuda" if args.runtime == "torch" else "none"
    variants = args.variants.split(",")
    nulls = {name: NULLS[name] for name in args.nulls.split(",")}
    report: dict = {
        "benchmark": "ceiling",
        **provenance(),
        "runtime": args.runtime,
        "precision": args.precision,
        "example": args.example,
        "concurrency": args.concurrency,
        "shm": args.shm,
    }

    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        onnx = write_example(args.example, scratch / f"{args.example}.onnx", **example_options(args.example, args))
        report["inprocess"] = inprocess_best(args, onnx, scratch)
        print(f"in-process best: {report['inprocess']['best']}", flush=True)
        repo = scratch / "repo"
        for name in variants:
            contexts, mode, parameters = VARIANTS[name]
            add_model(repo, onnx, name, args.example, args, contexts=contexts, mode=mode, parameters=parameters)
        for name, parameters in nulls.items():
            add_null_model(repo, variants[0], name, **parameters)
        server = TritonServer(repo, scratch / "server.log").start(timeout=600)
        inputs = INPUTS[args.example]
        try:
            batch1 = {
                name: measure(server, name, concurrency=args.concurrency, shm=args.shm, inputs=inputs)
                for name in (*nulls, *variants)
            }
            report["batch1"] = batch1
            measured = [n for n in variants if "infer_per_s" in batch1[n]]
            best = max(measured, key=lambda n: batch1[n]["infer_per_s"])
            pipelined = [n for n in measured if VARIANTS[n][1] == "pipelined"]
            best_pipelined = max(pipelined, key=lambda n: batch1[n]["infer_per_s"], default=best)
            peak = batch1[best]["infer_per_s"]
            report["best"], report["best_pipelined"] = best, best_pipelined
            report["best_plain_grpc"] = measure(server, best, concurrency=args.concurrency, inputs=inputs)
            chosen = {"best": best, "best_pipelined": best_pipelined}
            batch32 = [chosen.get(name, name) for name in args.batch32.split(",")]
            report["batch32"] = {
                name: measure(server, name, concurrency=8, batch=32, shm=args.shm, inputs=inputs)
                for name in dict.fromkeys(batch32)
                if name in variants
            }
            report["latency"] = {
                f"{share:.0%}": measure(server, best, rate=peak * share, shm=args.shm, interval_ms=3000, inputs=inputs)
                for share in (0.5, 0.9)
            }
            if args.profile:
                target = chosen.get(args.profile_variant, args.profile_variant)
                report["profile"] = profiled(server, target, args, args.profile)
        finally:
            server.stop()
            report["server_log_tail"] = server.log_tail(40)

    inprocess = report["inprocess"]["best"]["items_per_s"]
    null_rates = [report["batch1"][name].get("infer_per_s") for name in ("null", "null_gpuin") if name in nulls]
    null = max((n for n in null_rates if n), default=None)  # the higher ceiling: the stricter ratio
    served = report["batch1"][report["best"]]["infer_per_s"]

    def rate(name: str) -> float | None:
        return report["batch1"].get(name, {}).get("infer_per_s")

    def ratio(top: float | None, bottom: float | None) -> float | None:
        return round(top / bottom, 3) if top and bottom else None

    best32 = max((row.get("infer_per_s") or 0 for row in report["batch32"].values()), default=None)
    at90 = report["latency"]["90%"]
    report.update(
        {
            "served_batch1_infer_per_s": served,
            "null_model_infer_per_s": null,
            "inprocess_best_items_per_s": inprocess,
            "ratios": {
                "served_over_min_inprocess_null": ratio(served, min(inprocess, null) if null else None),
                "batch32_over_inprocess": ratio(best32, inprocess),
                "pipelined_best_over_one_context": ratio(rate(report["best_pipelined"]), rate("pipe_c1")),
                "best_over_sync_one_context": ratio(served, rate("sync_c1")),
                "p99_over_p50_at_90pct": round(at90["p99_ms"] / at90["p50_ms"], 2) if "p99_ms" in at90 else None,
            },
        }
    )
    write_json(args.out, report)
    print(
        json.dumps(
            {
                k: report[k]
                for k in (
                    "served_batch1_infer_per_s",
                    "null_model_infer_per_s",
                    "inprocess_best_items_per_s",
                    "best",
                    "best_pipelined",
                    "ratios",
                )
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
