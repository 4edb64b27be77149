"""trtpool-tune: find the configuration that serves a model folder best, on this machine,
under your clients' profile.

    trtpool-tune MODEL_FOLDER [--batch 1] [--concurrency 8 | --request-rate R] [--protocol grpc|http]
                 [--shm none|system|cuda] [--shape NAME:DIMS ...] [--objective throughput|p99|fewest-resources]
                 [--budget MINUTES]

Each point measured is a real tritonserver on a scratch repository (links to the
folder's files, the candidate's config.pbtxt) driven by perf_analyzer. It searches
rather than measuring every combination (docs/how-to/tune.md says how), writes the chosen
configuration beside the original as config.tuned.pbtxt (--write-config: over
config.pbtxt, the original kept as config.pbtxt.orig), and under --out a report
(report.md), the raw measurements (tune.json) and a plot of throughput against p99
(tune.png). Ctrl-C stops it; what was measured is written.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from trtpool_builder.folder.front import make_front_folder
from trtpool_builder.folder.model_folder import read_config, write_config
from trtpool_ops.locate import find_tritonserver
from trtpool_ops.tune import perf, report
from trtpool_ops.tune.measure import LoadFailed, Measurer, served_config
from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.objective import OBJECTIVES, Objective
from trtpool_ops.tune.profile import PROTOCOLS, TRANSPORTS, ClientProfile, ProfileError, check
from trtpool_ops.tune.runner import BudgetSpent, Runner, say
from trtpool_ops.tune.search import Search
from trtpool_ops.tune.space import AXES, KEEP, MODES, Axis, Space, render

EXIT_BAD_INPUT, EXIT_BOUND_NOT_MET, EXIT_INTERRUPTED = 2, 1, 130
# The further axes' flags (argparse destinations) and the axes they set.
AXIS_FLAGS = {
    "max_batch_sizes": "max_batch_size",
    "preferred": "preferred_batch_size",
    "queue_delays": "queue_delay_us",
    "cuda_graphs": "cuda_graphs",
    "preprocess_threads": "preprocess_threads",
    "preprocess_processes": "preprocess_processes",
    "instances": "instances",
    "engine_host": "engine_host",
}


def _list(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trtpool-tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("folder", type=Path, metavar="MODEL_FOLDER", help="a model folder (config.pbtxt, 1/...)")
    client = p.add_argument_group("client profile (what perf_analyzer sends)")
    client.add_argument("--batch", type=int, default=1, help="the clients' batch size (default 1)")
    load = client.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    load.add_argument("--request-rate", type=float, help="requests/s, open loop (instead of --concurrency)")
    client.add_argument("--protocol", choices=PROTOCOLS, default="grpc")
    client.add_argument(
        "--shm",
        choices=TRANSPORTS,
        default="none",
        help="tensors in system or CUDA shared memory (default: in the request)",
    )
    client.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:DIMS",
        help="an input's shape after the batch dimension, e.g. input_ids:128 (repeat per input)",
    )
    client.add_argument("--input-data", metavar="zero|random|FILE", help="perf_analyzer's --input-data")
    goal = p.add_argument_group("objective")
    goal.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="throughput",
        help="fewest-resources: the least GPU memory (else the fewest contexts) within --within of "
        "the best throughput; fewest-contexts is its former name",
    )
    goal.add_argument("--p99-ms", type=float, help="the p99 bound of --objective p99")
    goal.add_argument(
        "--within",
        type=float,
        default=0.05,
        help="--objective fewest-resources: this fraction below the best throughput (default 0.05)",
    )
    space = p.add_argument_group("the space searched (comma-separated values)")
    space.add_argument(
        "--modes",
        type=_list,
        help=f"of {', '.join(MODES)} (default: sync, pipelined and "
        "decoupled over gRPC (streaming clients), decoupled-front over HTTP)",
    )
    space.add_argument("--contexts", type=_list, default=("1", "2", "4", "8"), help="default 1,2,4,8")
    space.add_argument(
        "--queue-delays",
        type=_list,
        default=("0", "100", "500", "2000"),
        help="max_queue_delay_microseconds (and decoupled mode's batch_wait_microseconds); default 0,100,500,2000",
    )
    space.add_argument(
        "--preferred",
        type=_list,
        default=(KEEP, "none"),
        help="preferred batch sizes: 'keep' (the config's), 'none', or sizes joined by '+', "
        "e.g. keep,none,8+32 (default keep,none)",
    )
    space.add_argument("--max-batch-sizes", type=_list, default=(), help="default: as configured")
    space.add_argument("--cuda-graphs", type=_list, default=(), help="on,off (TensorRT); default: as configured")
    space.add_argument("--preprocess-threads", type=_list, default=(), help="with a process.py; default: as configured")
    space.add_argument(
        "--preprocess-processes",
        type=_list,
        default=None,
        help="with a process.py; default 0,2 where the folder has 1/process.py",
    )
    space.add_argument(
        "--instances",
        type=_list,
        default=(),
        help="Triton instances (instance_group count: each a stub with its own engine); default: as configured",
    )
    space.add_argument(
        "--engine-host",
        type=_list,
        default=(),
        help="on,off: whether sync instances forward to one engine host process (searched with "
        "--instances: more instances then add request handling, not model copies); "
        "default: as configured",
    )
    how = p.add_argument_group("measuring")
    how.add_argument("--budget", type=float, default=30.0, metavar="MINUTES", help="stop searching after this")
    how.add_argument("--interval-ms", type=int, default=2000, help="perf_analyzer's measurement window")
    how.add_argument("--max-trials", type=int, default=6, help="perf_analyzer's windows at most per point")
    how.add_argument(
        "--stability",
        type=int,
        default=20,
        help="perf_analyzer's --stability-percentage (its default 10 rarely settles on a busy machine)",
    )
    how.add_argument(
        "--noise", type=float, default=0.05, help="a gain below this fraction counts as none (default 0.05)"
    )
    how.add_argument("--grid", action="store_true", help="measure every point of the space instead of searching")
    how.add_argument(
        "--grid-together",
        type=int,
        default=1,
        metavar="N",
        help="with --grid: load N points at a time into one server and measure them in turn (one "
        "server start for N points; they share the server and its GPU, so no GPU memory per "
        "point); default 1, a server each as the search does",
    )
    how.add_argument(
        "--elastic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the search's last step: the best pipelined or decoupled point with an elastic pool of 1 "
        "up to its contexts, one more point, taken where it serves within --noise (default on; "
        "not part of --grid)",
    )
    out = p.add_argument_group("output")
    out.add_argument("--out", type=Path, help="report folder (default ./trtpool-tune-<model>)")
    out.add_argument(
        "--write-config",
        action="store_true",
        help="write the choice over config.pbtxt (the original kept as config.pbtxt.orig)",
    )
    p.add_argument("--tritonserver", help="default: $TRTPOOL_TRITONSERVER, the set-up's, or from PATH")
    p.add_argument("--perf-analyzer", help="default: $TRTPOOL_PERF_ANALYZER, the one beside tritonserver, or PATH")
    return p


def model_face(base: mc.ModelConfig, served: dict[str, Any]) -> mc.ModelConfig:
    """The user's config, with the inputs, outputs and batch size auto-complete filled in where
    it leaves them out (a unary front needs them written)."""
    if not base.input:
        json_format.ParseDict(
            {k: served[k] for k in ("input", "output", "max_batch_size") if k in served},
            base,
            ignore_unknown_fields=True,
        )
    return base


def current(axis: str, served: dict[str, Any]) -> str | None:
    """The served config's value on an axis, as the axis writes it."""
    batching = served.get("dynamic_batching") or {}
    params = {k: v.get("string_value", "") for k, v in served.get("parameters", {}).items()}
    return {
        "max_batch_size": str(served.get("max_batch_size", "")),
        "queue_delay_us": str(batching.get("max_queue_delay_microseconds", 0)),
        "preferred_batch_size": KEEP,
        "instances": str((served.get("instance_group") or [{}])[0].get("count", 1)),
    }.get(axis, params.get(axis))


def build_space(args: argparse.Namespace, served: dict[str, Any], has_process: bool) -> Space:
    modes = args.modes or (
        ("sync", "pipelined", "decoupled") if args.protocol == "grpc" else ("sync", "pipelined", "decoupled-front")
    )
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"--modes {','.join(unknown)}: expected some of {', '.join(MODES)}")
    if "decoupled" in modes and args.protocol != "grpc":
        raise ValueError(
            "--modes decoupled needs gRPC streaming clients (--protocol grpc); HTTP clients reach a "
            "decoupled model through its unary front: --modes decoupled-front"
        )
    try:
        contexts = sorted({int(c) for c in args.contexts})
    except ValueError:
        raise ValueError(f"--contexts {','.join(args.contexts)}: expected whole numbers 1 to 64") from None
    if not contexts or not 1 <= contexts[0] <= contexts[-1] <= 64:
        raise ValueError(f"--contexts {','.join(args.contexts)}: expected whole numbers 1 to 64")
    batches = int(served.get("max_batch_size", 0)) > 0
    if args.preprocess_processes is None:
        args.preprocess_processes = ("0", "2") if has_process else ()
    axes = []
    for flag, name in AXIS_FLAGS.items():
        values = tuple(v.replace("+", ",") for v in getattr(args, flag))
        if not values or (AXES[name].batching and not batches):
            continue
        if AXES[name].ordered and KEEP not in values:
            try:
                values = tuple(str(v) for v in sorted({int(v) for v in values}))
            except ValueError:
                raise ValueError(f"--{flag.replace('_', '-')} {','.join(values)}: expected whole numbers") from None
        now = current(name, served)
        axes.append(Axis(name, values, now if now is not None and now in values else values[0]))
    return Space(tuple(modes), tuple(contexts), tuple(axes))


def write_choice(folder: Path, config: mc.ModelConfig, over: bool) -> Path:
    """config.tuned.pbtxt beside the original, or over it with the original kept as config.pbtxt.orig."""
    if not over:
        path = folder / "config.tuned.pbtxt"
        path.write_text(text_format.MessageToString(config))
        return path
    shutil.copyfile(folder / "config.pbtxt", folder / "config.pbtxt.orig")
    return write_config(folder, config)


def write_front(out: Path, name: str, config: mc.ModelConfig) -> Path:
    """The unary front of a decoupled choice, as trtpool-model --unary-front writes it: out/<name>_unary."""
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / name).mkdir()
        write_config(Path(scratch) / name, config)
        made = make_front_folder(Path(scratch), name)
        target = out / made.name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(made, target)
    return target


def measured_profile(profile: ClientProfile, served: dict[str, Any], model: str) -> ClientProfile:
    """The client profile checked against the served config, with the shapes it takes from the
    model's profile said."""
    measured = check(profile, served, model)
    added = measured.shapes[len(profile.shapes) :]
    if added:
        say("inputs without --shape are measured at the model's opt shapes: " + " ".join(f"--shape {s}" for s in added))
    return measured


def record_of(
    args: argparse.Namespace,
    profile: ClientProfile,
    objective: Objective,
    space: Space,
    measured: Sequence[Measurement],
    stopped: str,
    minutes: float,
) -> tuple[dict[str, Any], Any]:
    choice = objective.choose(measured)
    record = {
        "tool": "trtpool-tune",
        "model": args.folder.name,
        "folder": str(args.folder),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "client": profile.as_dict(),
        "objective": objective.describe(),
        "p99_bound_ms": objective.p99_ms,
        "space": space.as_dict(),
        "noise": args.noise,
        "window": {"interval_ms": args.interval_ms, "max_trials": args.max_trials, "stability": args.stability},
        "strategy": "grid" if args.grid else "search",
        "elastic_step": args.elastic and not args.grid,
        "grid_together": args.grid_together if args.grid else None,
        "stopped": stopped,
        "minutes": round(minutes, 2),
        "measurements_used": len(measured),
        "measurements": [m.as_dict() for m in measured],
        "pareto": [m.as_dict() for m in report.pareto(measured)],
        "chosen": choice.measurement.as_dict() if choice.measurement else None,
        "met": choice.met,
        "reason": choice.reason,
    }
    return record, choice


def tune(args: argparse.Namespace) -> int:
    folder = args.folder = args.folder.resolve()
    if not (folder / "config.pbtxt").is_file():
        raise ValueError(f"{folder}: no config.pbtxt; MODEL_FOLDER is one model's folder (config.pbtxt, 1/...)")
    objective = Objective(args.objective, args.p99_ms, args.within, args.noise)
    if args.grid_together < 1:
        raise ValueError(f"--grid-together {args.grid_together}: expected a whole number of at least 1")
    if args.grid_together > 1 and not args.grid:
        raise ValueError("--grid-together loads the grid's points side by side; it needs --grid")
    if args.objective == "p99" and not args.p99_ms:
        raise ValueError("--objective p99 needs --p99-ms, the bound in milliseconds")
    profile = ClientProfile(
        args.batch, args.concurrency, args.request_rate, args.protocol, args.shm, tuple(args.shape), args.input_data
    )
    tritonserver = find_tritonserver(args.tritonserver)
    perf_analyzer = perf.find_perf_analyzer(args.perf_analyzer, tritonserver)
    out = (args.out or Path(f"trtpool-tune-{folder.name}")).resolve()
    with tempfile.TemporaryDirectory(prefix="trtpool-tune-") as scratch:
        say(f"loading {folder} as it is")
        try:
            served = served_config(tritonserver, folder, Path(scratch))
        except LoadFailed as exc:
            raise ValueError(f"{folder} does not load:\n{exc}") from None
        profile = measured_profile(profile, served, folder.name)
        space = build_space(args, served, any(folder.glob("*/process.py")))
        base = model_face(read_config(folder), served)
        tensors = [t["name"] for t in (*served.get("input", []), *served.get("output", []))]
        window = perf.Window(args.interval_ms, args.max_trials, args.stability)
        measurer = Measurer(folder, base, tensors, profile, window, tritonserver, perf_analyzer, Path(scratch))
        grid = space.grid()
        say(f"space: {space.as_dict()}; objective: {objective.describe()}; budget {args.budget:g} min")
        runner = Runner(measurer, objective, args.budget * 60, len(grid))
        search = Search(space, runner, objective, args.noise, args.elastic and not args.grid)
        if not args.grid:
            runner.left = search.left
        stopped = "done"
        try:
            if args.grid:
                for first in range(0, len(grid), args.grid_together):
                    runner.together(grid[first : first + args.grid_together])
            else:
                search.run()
        except BudgetSpent:
            stopped = "budget"
            say(f"budget of {args.budget:g} min spent: stopping with what is measured")
        except KeyboardInterrupt:
            stopped = "interrupted"
            say("interrupted: the server and perf_analyzer are stopped; writing what was measured")
        return finish(args, profile, objective, space, base, runner, stopped, out)


def finish(
    args: argparse.Namespace,
    profile: ClientProfile,
    objective: Objective,
    space: Space,
    base: mc.ModelConfig,
    runner: Runner,
    stopped: str,
    out: Path,
) -> int:
    record, choice = record_of(
        args, profile, objective, space, runner.measured, stopped, (time.monotonic() - runner.begun) / 60
    )
    if choice.measurement is not None and choice.met:
        path = write_choice(args.folder, render(base, choice.measurement.candidate), args.write_config)
        record["config"] = str(path)
        say(
            f"chosen: {choice.measurement.candidate.label}, {choice.measurement.infer_per_s:.1f} infer/s, "
            f"p99 {choice.measurement.p99_ms:.2f} ms ({choice.reason}); written to {path}"
        )
        record["noise_note"] = report.noise_note(objective.rivals(choice.measurement, runner.measured), args.noise)
        record["next"] = report.next_steps(args.folder.name, path, args.write_config)
        say(record["noise_note"])
        say(f"next: {record['next']}")
        if choice.measurement.candidate.mode == "decoupled-front":
            front = write_front(out, args.folder.name, render(base, choice.measurement.candidate))
            record["front"] = str(front)
            say(
                f"unary clients reach the chosen decoupled model through its front: copy {front} into the "
                "repository beside the model"
            )
    else:
        say(choice.reason if choice.measurement is None else f"{choice.reason}; no configuration written")
    for path in report.write(out, record, runner.measured, choice.measurement, objective.p99_ms):
        say(f"wrote {path}")
    if stopped == "interrupted":
        return EXIT_INTERRUPTED
    return 0 if choice.met else EXIT_BOUND_NOT_MET


def stop_on_signal(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # Ctrl-C and SIGTERM stop it cleanly, also where its parent started it with SIGINT ignored
    # (a background job of a script): KeyboardInterrupt unwinds every server and perf_analyzer.
    signal.signal(signal.SIGINT, stop_on_signal)
    signal.signal(signal.SIGTERM, stop_on_signal)
    try:
        return tune(args)
    except (ValueError, ProfileError) as exc:
        print(f"trtpool-tune: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("trtpool-tune: interrupted before any point was measured; nothing left running", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
