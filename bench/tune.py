"""trtpool-tune against an exhaustive grid over the same space, same model, same client
profile, in one run (issue 30). Per case:

1. the grid: `trtpool-tune --grid` measures every point of the space once;
2. the search: `trtpool-tune` (highest throughput) with the same flags;
3. the search under a p99 bound: the median p99 of the grid's points (about half meet it);
4. side by side in one server, ABBA rounds: the search's choice against the grid's best
   (goal: within 5%); and the p99 choice measured again against its bound.

    .venv/bin/python bench/tune.py --cases tiny-b1-grpc,resnet50-b1-grpc --image-size 32 --out bench/results/tune.json

One case per run, the runs merged into one record (the H200 stages tune-resnet50, tune-bert):

    python3 bench/tune.py --cases resnet50-b1-grpc ... --out A.json --merge-into tune.json
    python3 bench/tune.py --cases bert_base-b32-cudashm ... --out B.json --merge-into tune.json
    python3 bench/tune.py --merge A.json B.json --merge-into tune.json     # the same, afterwards

A case's grid in a call of its own (a larger space on the H200, whose calls last 10 minutes at
most), its points loaded side by side, 18 to a server (trtpool-tune --grid-together), then the
search and the re-measures in the next call, the grid read back:

    python3 bench/tune.py --cases resnet50-b1-grpc ... --grid-flags "--grid-together 18" \
        --grid-record /tmp/grid.json --grid-only
    python3 bench/tune.py --cases resnet50-b1-grpc ... --grid-record /tmp/grid.json --out A.json

Writes, per case, chosen_infer_per_s and grid_best_infer_per_s (as each run measured
them), measurements_used, grid_measurements, and the ABBA and p99 re-measures.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gpu_serving import add_model  # noqa: E402
from bench.paired import compared  # noqa: E402
from bench.record import default_out, provenance, write_json  # noqa: E402
from tests.harness.server import TRITONSERVER  # noqa: E402
from trtpool_builder.examples import write_example  # noqa: E402
from trtpool_builder.folder.model_folder import read_config  # noqa: E402
from trtpool_ops.tune import perf  # noqa: E402
from trtpool_ops.tune.measure import Measurer, figures, serving  # noqa: E402
from trtpool_ops.tune.profile import ClientProfile  # noqa: E402
from trtpool_ops.tune.space import Candidate  # noqa: E402

BERT_128 = ("--shape", "input_ids:128", "--shape", "attention_mask:128", "--input-data", "zero")


@dataclass(frozen=True)
class Case:
    example: str
    client: tuple[str, ...]


CASES = {
    "tiny-b1-grpc": Case("tiny", ("--batch", "1", "--concurrency", "4")),
    "resnet50-b1-grpc": Case("resnet50", ("--batch", "1", "--concurrency", "8")),
    "resnet50-b32-cudashm": Case("resnet50", ("--batch", "32", "--concurrency", "4", "--shm", "cuda")),
    "bert_base-b1-grpc": Case("bert_base", ("--batch", "1", "--concurrency", "16", *BERT_128)),
    "bert_base-b32-cudashm": Case("bert_base", ("--batch", "32", "--concurrency", "4", "--shm", "cuda", *BERT_128)),
}


def example_options(example: str, args: argparse.Namespace) -> dict:
    """The example's size: ResNet-50's image size; BERT's layers and hidden size where given (a small
    BERT for a dry run on a CPU)."""
    if example == "resnet50":
        return {"image_size": args.image_size}
    if example == "bert_base" and args.bert_layers:
        return {"num_layers": args.bert_layers, "hidden": args.bert_hidden, "num_heads": max(1, args.bert_hidden // 64)}
    return {}


def merged(into: Path, records: list[dict]) -> dict:
    """The tune record at `into` (if any) with the cases of `records` added or replaced; each case
    keeps its own run's provenance (date, command, runtime, flags), the top level the latest run's."""
    base = json.loads(into.read_text()) if into.exists() else {"benchmark": "tune", "cases": {}}
    for record in records:
        run = {k: v for k, v in record.items() if k != "cases"}
        base.update(run)
        base["cases"].update({name: {**case, "run": case.get("run", run)} for name, case in record["cases"].items()})
    return base


def tune(folder: Path, out: Path, flags: list[str]) -> dict:
    """One trtpool-tune run (as a user runs it); its tune.json."""
    env = {**os.environ, "TRTPOOL_TRITONSERVER": str(TRITONSERVER)}
    command = [sys.executable, "-m", "trtpool_ops.tune.cli", str(folder), "--out", str(out), *flags]
    print("$", " ".join(command[2:]), flush=True)
    process = subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = process.communicate()
    except KeyboardInterrupt:
        # A Ctrl-C (or the H200 stage's timeout, which signals the child and then its group) reaches
        # trtpool-tune too: let it stop its server and perf_analyzer and write what it measured, rather
        # than killing it as subprocess.run would; a second SIGINT must not cut that wait short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(process.communicate()[0], flush=True)
        raise
    print("\n".join(line for line in output.splitlines() if not line.startswith("[tune] point")), flush=True)
    if not (out / "tune.json").exists():
        raise SystemExit(f"trtpool-tune wrote no tune.json (exit {process.returncode})")
    return json.loads((out / "tune.json").read_text())


def side_by_side(folder: Path, record: dict, named: dict[str, Candidate], rounds: int, scratch: Path) -> dict:
    """The candidates served by one server, measured in turn with the order reversed every round."""
    served = read_config(folder)
    client = record["client"]
    profile = ClientProfile(
        client["batch"],
        client.get("concurrency", 1),
        client.get("request_rate"),
        client["protocol"],
        client["shm"],
        tuple(client["shapes"]),
        client["input_data"],
    )
    tensors = [t.name for t in (*served.input, *served.output)]
    # Longer windows than the search's, and more of them: a re-measure that settles.
    window = perf.Window(max(1000, 2 * record["window"]["interval_ms"]), 8, record["window"]["stability"])
    measurer = Measurer(
        folder,
        served,
        tensors,
        profile,
        window,
        str(TRITONSERVER),
        perf.find_perf_analyzer(None, str(TRITONSERVER)),
        scratch,
    )
    models = measurer.stage_all(scratch / "repo", named)
    rows: dict[str, list[dict]] = {name: [] for name in named}
    with serving(str(TRITONSERVER), scratch / "repo", scratch / "server.log") as server:
        for round_index in range(rounds):
            order = list(named) if round_index % 2 == 0 else list(named)[::-1]
            for name in order:
                where = scratch / f"{name}-{round_index}"
                where.mkdir()
                try:
                    reading = measurer.drive(server, models[name], named[name].mode == "decoupled", where)
                except perf.PerfFailed as exc:  # kept as a failed round (compared() leaves it out)
                    rows[name].append({"error": str(exc)[-300:]})
                    print(f"  round {round_index} {name:10s} failed: {exc}", flush=True)
                    continue
                m = figures(named[name], reading, 0)
                rows[name].append({"infer_per_s": round(m.infer_per_s, 1), "p99_ms": round(m.p99_ms, 3)})
                print(
                    f"  round {round_index} {name:10s} {m.infer_per_s:9.1f} infer/s p99 {m.p99_ms:.2f} ms", flush=True
                )
    return rows


def with_transport(client: tuple[str, ...], shm: str | None) -> list[str]:
    """The case's client flags, its --shm replaced by `shm` where one is given."""
    if shm is None:
        return list(client)
    flags = list(client)
    if "--shm" in flags:
        at = flags.index("--shm")
        del flags[at : at + 2]
    return [*flags, "--shm", shm]


def grid_best_under(grid: dict, bound: float) -> dict | None:
    meeting = [m for m in grid["measurements"] if "p99_ms" in m and m["p99_ms"] <= bound]
    return max(meeting, key=lambda m: m["infer_per_s"]) if meeting else None


def run_case(name: str, case: Case, args: argparse.Namespace, base: Path, keep: Callable[[dict], None]) -> dict:
    """The case's grid, search, ABBA re-measure and p99 run; `keep` writes the result so far after the
    grid and search and again after the ABBA rounds (a run stopped by its cap keeps what finished)."""
    repo = base / name
    onnx = write_example(case.example, base / f"{name}.onnx", **example_options(case.example, args))
    add_model(repo, onnx, case.example, case.example, args, contexts=1, mode="sync")
    folder = repo / case.example
    flags = [*with_transport(case.client, args.shm), *args.tune_flags.split()]
    grid = measured_grid(folder, flags, args, base / f"{name}-grid")
    if args.grid_only:
        return {}
    searched = tune(folder, base / f"{name}-search", flags)
    if not (searched["chosen"] and grid["chosen"]):
        raise SystemExit(f"{name}: no point measured successfully (tune.json of each run under {base})")
    result = {
        "example": case.example,
        "client": searched["client"],
        "space": searched["space"],
        "chosen": searched["chosen"],
        "grid_best": grid["chosen"],
        "chosen_infer_per_s": searched["chosen"]["infer_per_s"],
        "grid_best_infer_per_s": grid["chosen"]["infer_per_s"],
        "measurements_used": searched["measurements_used"],
        "grid_measurements": grid["measurements_used"],
        "search_minutes": searched["minutes"],
        "grid_minutes": grid["minutes"],
        "grid_together": grid.get("grid_together"),
        "grid_date": grid["date"],
        "search_stopped": searched["stopped"],
        "grid_stopped": grid["stopped"],
        "search_measurements": searched["measurements"],
        "grid": grid["measurements"],
    }
    keep(result)
    chosen, best = Candidate.from_dict(searched["chosen"]["config"]), Candidate.from_dict(grid["chosen"]["config"])
    print(f"{name}: ABBA, chosen {chosen.label} against grid best {best.label}", flush=True)
    rows = side_by_side(folder, searched, {"chosen": chosen, "grid_best": best}, args.rounds, base / f"{name}-abba")
    ratio = compared(rows["chosen"], rows["grid_best"], "infer_per_s")
    result["abba"] = {
        "rounds": rows,
        "chosen_over_grid_best": ratio,
        "median": ratio["median"],
        "within_5_percent": ratio["median"] is not None and ratio["median"] >= 0.95,
        "same_configuration": chosen == best,
    }
    keep(result)
    if name in args.p99_cases.split(","):
        result["p99_bound"] = p99_case(name, folder, flags, grid, args, base)
        keep(result)
    return result


def measured_grid(folder: Path, flags: list[str], args: argparse.Namespace, scratch: Path) -> dict:
    """The case's grid (trtpool-tune --grid with --grid-flags): read back from --grid-record where an
    earlier run of the same case kept it there, else measured now (and kept there)."""
    record = args.grid_record
    if record and record.exists() and not args.grid_only:
        grid = json.loads(record.read_text())
        print(f"the grid measured earlier ({grid['date']}, {grid['measurements_used']} points): {record}", flush=True)
        return grid
    grid = tune(folder, scratch, [*flags, "--grid", *args.grid_flags.split()])
    if record:
        write_json(record, grid)
    return grid


def p99_case(name: str, folder: Path, flags: list[str], grid: dict, args: argparse.Namespace, base: Path) -> dict:
    """trtpool-tune under the median p99 of the grid's points, its choice measured again."""
    bound = round(statistics.median(m["p99_ms"] for m in grid["measurements"] if "p99_ms" in m), 3)
    bounded = tune(folder, base / f"{name}-p99", [*flags, "--objective", "p99", "--p99-ms", str(bound)])
    p99_check: dict = {
        "bound_ms": bound,
        "met_in_search": bounded["met"],
        "grid_best_under_bound": grid_best_under(grid, bound),
        "chosen": bounded["chosen"],
        "measurements_used": bounded["measurements_used"],
    }
    if bounded["met"]:
        again = side_by_side(
            folder,
            bounded,
            {"p99_chosen": Candidate.from_dict(bounded["chosen"]["config"])},
            args.rounds,
            base / f"{name}-p99-again",
        )
        p99s = [r["p99_ms"] for r in again["p99_chosen"] if "p99_ms" in r]
        median = statistics.median(p99s) if p99s else None
        p99_check.update(
            {
                "measured_again": again["p99_chosen"],
                "median_p99_ms_again": median,
                "meets_bound_again": median is not None and median <= bound,
            }
        )
    return p99_check


def keep(args: argparse.Namespace, record: dict, name: str, result: dict) -> None:
    """The case's result so far into --out (and --merge-into)."""
    record["cases"][name] = result
    write_json(args.out, record)
    if args.merge_into:
        write_json(args.merge_into, merged(args.merge_into, [{**record, "cases": {name: result}}]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--cases", default="tiny-b1-grpc,resnet50-b1-grpc", help=f"comma-separated, of {', '.join(CASES)}"
    )
    parser.add_argument(
        "--p99-cases",
        default="tiny-b1-grpc,resnet50-b1-grpc",
        help="the cases that also get the p99-bound run and its re-measure",
    )
    parser.add_argument(
        "--runtime",
        choices=("onnxruntime", "torch"),
        default="onnxruntime",
        help="torch: GPU instances, fp16 (the H200)",
    )
    parser.add_argument("--precision", default="fp16", help="the torch runtime's precision")
    parser.add_argument("--image-size", type=int, default=32, help="ResNet-50's input size")
    parser.add_argument(
        "--shm",
        choices=("none", "system", "cuda"),
        help="replace the cases' transport (e.g. system for the CUDA-shm cases on a machine without a GPU)",
    )
    parser.add_argument("--rounds", type=int, default=4, help="ABBA rounds of the side-by-side re-measure")
    parser.add_argument(
        "--tune-flags",
        default="--contexts 1,2,4 --queue-delays 100,2000 --preferred keep,none "
        "--interval-ms 1000 --max-trials 4 --stability 30 --budget 20",
        help="the space and measuring flags every trtpool-tune run of a case takes",
    )
    parser.add_argument(
        "--grid-flags",
        default="",
        help="flags only the grid's run takes, e.g. --grid-together 18 (its points loaded side by "
        "side, 18 to a server)",
    )
    parser.add_argument(
        "--grid-record",
        type=Path,
        metavar="JSON",
        help="one case: keep the grid's tune.json here, or read it back from here where it exists",
    )
    parser.add_argument(
        "--grid-only",
        action="store_true",
        help="measure the case's grid into --grid-record and stop (the rest in a later run)",
    )
    parser.add_argument("--bert-layers", type=int, help="BERT's layers (default: BERT-base's 12; fewer for a dry run)")
    parser.add_argument(
        "--bert-hidden", type=int, default=128, help="BERT's hidden size with --bert-layers (a head per 64)"
    )
    parser.add_argument("--out", type=Path, default=default_out("tune.json"))
    parser.add_argument(
        "--merge-into",
        type=Path,
        metavar="JSON",
        help="also merge this run's cases into JSON as each finishes (other cases there are kept): "
        "one record from runs of one case each",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="run nothing: merge these records' cases into --merge-into",
    )
    args = parser.parse_args()
    if args.merge:
        if not args.merge_into:
            parser.error("--merge needs --merge-into")
        write_json(args.merge_into, merged(args.merge_into, [json.loads(p.read_text()) for p in args.merge]))
        print(f"merged {len(args.merge)} record(s) into {args.merge_into}")
        return
    unknown = set(args.cases.split(",")) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; expected some of {', '.join(CASES)}")
    if (args.grid_record and "," in args.cases) or (args.grid_only and not args.grid_record):
        parser.error("--grid-record takes one case; --grid-only needs --grid-record")
    record = {
        "benchmark": "tune",
        **provenance(),
        "runtime": args.runtime,
        "tune_flags": args.tune_flags,
        "shm_override": args.shm,
        "cases": {},
    }
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.cases.split(","):
            run_case(name, CASES[name], args, Path(scratch), functools.partial(keep, args, record, name))
    if args.grid_only:
        print(f"the grid is kept in {args.grid_record}")
        return
    summary = {
        name: {
            k: case[k]
            for k in ("chosen_infer_per_s", "grid_best_infer_per_s", "measurements_used", "grid_measurements")
        }
        | {"abba_median": case["abba"]["median"]}
        for name, case in record["cases"].items()
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
