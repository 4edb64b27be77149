"""The backend's code against an earlier revision of it, served side by side in turn.

Each round starts a tritonserver on one model (the tiny example by default:
16 -> 4 floats, so what one execute() costs shows) with trtpool's code from
this checkout, then one with trtpool's code from REVISION (a git worktree),
the order swapped every round, and measures each with perf_analyzer over
gRPC. The stub imports trtpool from its working directory first (the
harness's note in tests/harness/server.py), so the earlier code is served by
starting its server in a folder whose `trtpool` is the worktree's. Each round
also times execute()'s own Python work in process, in a fresh Python started
in the same folder: BatchRunner.run over 16 batch-1 requests of the model,
microseconds per run (no server, no pb_utils). The backend's entry point
(model.py) is REVISION's too: its server gets a backend directory whose
trtpool/model.py is the worktree's.

    .venv/bin/python bench/code_ab.py --base HEAD~1 --rounds 6 --out bench/results/cpu_code_ab.json

Where there is no git (a GPU machine given a copy of the tree), --base-dir names
a folder holding the earlier revision's backend_src/trtpool instead (made here
with `git archive REV backend_src/trtpool | tar -x -C DIR`); --runtime torch,
--shm cuda and --batch serve and load the model as the GPU stages do:

    python bench/code_ab.py --base-dir .whl/base-REV --runtime torch --example resnet50 --shm cuda \
        --batch 32 --concurrency 8 --mode pipelined --contexts 2 --rounds 2 --out cuda_shm_ab.json
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tests.harness.server as harness  # noqa: E402
from bench.gpu_serving import INPUTS, add_model, example_options, measure  # noqa: E402
from bench.paired import arguments, compared  # noqa: E402
from bench.record import provenance, write_json  # noqa: E402
from trtpool_builder.examples import write_example  # noqa: E402


def served(repo: Path, scratch: Path, workdir: Path, args: argparse.Namespace, server_args: tuple[str, ...]) -> dict:
    """One server whose stubs start in `workdir`, measured once."""
    harness.DOUBLES = workdir  # the stub's working directory, first on its import path
    server = harness.TritonServer(repo, scratch / "server.log", server_args).start(
        timeout=600
    )  # a GPU model loads slowly
    try:
        load = {"concurrency": args.concurrency, "batch": args.batch, "shm": args.shm, "inputs": INPUTS[args.example]}
        measure(server, "model", **load)  # warm-up, not counted
        return measure(server, "model", interval_ms=args.interval_ms, **load)
    finally:
        server.stop()


def time_runner(model_dir: Path, runs: int = 4000) -> float:
    """Microseconds per BatchRunner.run of 16 batch-1 requests (trtpool from the working directory)."""
    sys.path.insert(0, os.getcwd())
    from trtpool import parameters
    from trtpool.engine.answer import Kept
    from trtpool.engine.batching import BatchRunner
    from trtpool.engine.pool import ContextPool
    from trtpool.runtimes.onnxruntime import OnnxRuntime

    cfg = parameters.load(
        {"name": "model", "max_batch_size": 64, "parameters": {"profile": {"string_value": "INPUT0=1x16:16x16:64x16"}}},
        model_dir,
        "cpu",
    )
    runner = BatchRunner(ContextPool(OnnxRuntime(cfg, model_dir / "model.onnx"), 1))
    requests = [{"INPUT0": np.full((1, 16), i, np.float32)} for i in range(16)]

    for _ in range(runs // 20):  # a Kept responder copies the outputs: what a response costs, roughly
        runner.run(requests, [Kept() for _ in requests], detach=True)
    start = time.perf_counter()
    for _ in range(runs):
        runner.run(requests, [Kept() for _ in requests], detach=True)
    return (time.perf_counter() - start) / runs * 1e6


def timed_in(workdir: Path, model_dir: Path) -> float:
    found = subprocess.run(
        [sys.executable, __file__, "--time-runner", str(model_dir)],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(found.stdout.strip())


def imported_from(workdir: Path) -> str:
    """Where a Python started in `workdir` (as the stub is) finds trtpool."""
    found = subprocess.run(
        [sys.executable, "-c", "import trtpool.engine.batching as s; print(s.__file__)"],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.strip()


@contextlib.contextmanager
def earlier_code(args: argparse.Namespace, scratch: Path) -> Iterator[tuple[str, Path]]:
    """The earlier revision's name and its trtpool package: --base-dir as given, or a
    git worktree of --base for as long as the comparison runs."""
    if args.base_dir:
        yield args.base_dir.resolve().name, (args.base_dir / "backend_src" / "trtpool").resolve()
        return
    revision = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    worktree = scratch / "base"
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(worktree), revision], cwd=ROOT, check=True, capture_output=True
    )
    try:
        yield revision, worktree / "backend_src" / "trtpool"
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False)


def main() -> None:
    parser = arguments(__doc__, "cpu_code_ab.json", concurrency=16)
    parser.add_argument("--base", help="the git revision to serve against this checkout")
    parser.add_argument("--base-dir", type=Path, help="or a folder holding that revision's backend_src/trtpool")
    parser.add_argument("--runtime", choices=("onnxruntime", "torch"), default="onnxruntime")
    parser.add_argument("--precision", default="fp16", help="torch: fp16 or fp32")
    parser.add_argument("--image-size", type=int, default=224, help="resnet50")
    parser.add_argument("--shm", choices=("none", "system", "cuda"), default="none")
    parser.add_argument("--batch", type=int, default=1, help="the clients' batch")
    parser.add_argument("--contexts", type=int, default=1)
    parser.add_argument("--mode", default="sync")
    parser.add_argument("--time-runner", type=Path, help=argparse.SUPPRESS)  # the in-process timing, in a child
    args = parser.parse_args()
    if args.time_runner:
        print(f"{time_runner(args.time_runner):.1f}")
        return
    if bool(args.base) == bool(args.base_dir):
        parser.error("give one of --base (a git revision) and --base-dir (a folder)")
    if args.runtime == "onnxruntime":
        args.precision = "fp32"  # the file's own types
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        with earlier_code(args, scratch) as (revision, package):
            base_dir = scratch / "base_workdir"
            base_dir.mkdir()
            (base_dir / "trtpool").symlink_to(package)
            base_args: tuple[str, ...] = ()
            if (package.parent / "model.py").is_file():  # the revision's model.py too (a --base-dir may lack it)
                backends = scratch / "base_backends"
                (backends / "trtpool").mkdir(parents=True)
                (backends / "python").symlink_to(harness.TRITONSERVER.parent.parent / "backends" / "python")
                (backends / "trtpool" / "model.py").symlink_to(package.parent / "model.py")
                base_args = (f"--backend-directory={backends}",)
            workdirs = {"checkout": harness.DOUBLES, revision: base_dir}
            server_args = {"checkout": (), revision: base_args}
            sources = {name: imported_from(workdir) for name, workdir in workdirs.items()}
            onnx = write_example(args.example, scratch / "model.onnx", **example_options(args.example, args))
            tiny_dir = scratch / "tiny" / "1"
            tiny_dir.mkdir(parents=True)
            write_example("tiny", tiny_dir / "model.onnx")
            add_model(scratch / "repo", onnx, "model", args.example, args, contexts=args.contexts, mode=args.mode)
            rows: dict[str, list[dict]] = {name: [] for name in workdirs}
            for round_index in range(args.rounds):
                order = list(workdirs) if round_index % 2 == 0 else list(workdirs)[::-1]
                for name in order:
                    rows[name].append(served(scratch / "repo", scratch, workdirs[name], args, server_args[name]))
                    rows[name][-1]["runner_us_per_16"] = round(timed_in(workdirs[name], tiny_dir), 1)
                    print(
                        f"round {round_index} {name}: {rows[name][-1].get('infer_per_s')} infer/s, "
                        f"runner {rows[name][-1]['runner_us_per_16']} us per 16 requests",
                        flush=True,
                    )
    record = {
        "benchmark": "code_ab",
        **provenance(),
        "base": revision,
        "sources": sources,
        "example": args.example,
        "runtime": args.runtime,
        "precision": args.precision,
        "shm": args.shm,
        "batch": args.batch,
        "contexts": args.contexts,
        "mode": args.mode,
        "concurrency": args.concurrency,
        "rounds": rows,
        "checkout_over_base_throughput": compared(
            rows["checkout"], rows[revision], "infer_per_s", faster="rounds_checkout_faster"
        ),
        "checkout_over_base_runner_time": compared(rows["checkout"], rows[revision], "runner_us_per_16"),
    }
    write_json(args.out, record)
    print(record["checkout_over_base_throughput"], record["checkout_over_base_runner_time"])


if __name__ == "__main__":
    main()
