"""Issue 36: the engine host against today's best arrangement, side by side on one server.

    jpeg       resnet50_jpeg (JPEG in, top-5 out): host_xN (sync instances forwarding to one
               engine host, N instances) against now_x6 (today's record arrangement: 6 sync
               instances, one context each, batches up to 64) and the null JPEG model with 6
               instances; perf_analyzer's batch-1 gRPC clients sending JPEG files
    ceiling    (f) one process, no Triton: K threads serving batches of JPEG files through the
               host's own code (ModelInstance.serve on a hosted instance of K contexts)
    resnet50, bert_base
               the tensor path: host_xN against today's sync instances (now_x1, now_x2), batch-1
               clients over plain gRPC and, on a GPU, CUDA shared memory; with --host-gpu-inputs
               also host_ipc_xN over CUDA shared memory (the inputs reach the host by CUDA IPC); and
               null_xN (bench/null_model.py with as many instances as the largest host_xN): what
               Triton's Python backend itself passes with these inputs, the yardstick for the goals
    tiny       the same on the CPU (ONNX Runtime), for engine_host: auto's CPU decision

The JPEG files (jpeg, ceiling): the bench's, of mixed sizes; with --file-set small, 500x375 ones as
issue 36's stand-alone probe took (bench/jpeg_probe.py makes both).

Variants are measured in turn at each concurrency, the order reversed every level; each
variant's best concurrency is its figure. GPU memory (nvidia-smi, per process: the model's
stubs plus its host) after load and after the variant's last measurement. Every run merges its
case's figures into --out (a record of several calls).

    .venv/bin/python bench/engine_host.py --case tiny --out bench/results/engine_host_cpu.json
    python3 bench/engine_host.py --runtime torch --case jpeg --out $OUT/engine_host.json   # bench/gpu/h200.sh
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import gpu_memory  # noqa: E402
from bench.ceiling import add_null_model  # noqa: E402
from bench.gpu_serving import INPUTS, add_model, measure, model_processes  # noqa: E402
from bench.jpeg_probe import FILE_SETS, file_set  # noqa: E402
from bench.pipeline import NULL_JPEG_MODEL, GpuUtilization, perf_row, write_input_data  # noqa: E402
from bench.record import provenance, write_json  # noqa: E402
from tests.harness.pipelines import add_mode, as_request, set_process_settings  # noqa: E402
from tests.harness.python_model import python_model, tensor  # noqa: E402
from tests.harness.repository import set_parameters  # noqa: E402
from tests.harness.server import TritonServer  # noqa: E402
from trtpool_builder.examples import write_example  # noqa: E402
from trtpool_builder.examples.repo import make_example_folder  # noqa: E402
from trtpool_builder.folder.load_check import as_triton_hands_it  # noqa: E402
from trtpool_builder.folder.model_folder import read_config, write_config  # noqa: E402

IPC = "host_ipc_"  # the host variants whose CUDA-shm inputs stay on the GPU (--host-gpu-inputs)
JPEG_BATCH = 64  # today's record batches up to 64 files (README)
KEYS = {  # the headline keys: (case, variant family, transport)
    "resnet50_b1_grpc": ("resnet50", "none"),
    "resnet50_b1_cudashm": ("resnet50", "cuda"),
    "bert_b1_grpc": ("bert_base", "none"),
    "bert_b1_cudashm": ("bert_base", "cuda"),
    "tiny_b1_grpc": ("tiny", "none"),
}


def gpu(args: argparse.Namespace) -> bool:
    return args.runtime == "torch"


def set_instances(folder: Path, count: int, kind: str) -> None:
    from tritonclient.grpc import model_config_pb2 as mc

    config = read_config(folder)
    del config.instance_group[:]
    config.instance_group.add(
        kind=mc.ModelInstanceGroup.KIND_GPU if kind == "gpu" else mc.ModelInstanceGroup.KIND_CPU, count=count
    )
    config.dynamic_batching.max_queue_delay_microseconds = 100
    write_config(folder, config)


# --- the JPEG case ------------------------------------------------------------------------


def jpeg_folder(repo: Path, args: argparse.Namespace) -> Path:
    """resnet50_jpeg at --image-size, batches up to 64 files, on the runtime asked for."""
    side = args.image_size
    folder = make_example_folder(repo, "resnet50_jpeg", "onnx", {"image_size": side}).folder
    config = read_config(folder)
    config.max_batch_size = JPEG_BATCH
    config.dynamic_batching.preferred_batch_size[:] = [32, JPEG_BATCH]
    write_config(folder, config)
    set_parameters(folder, profile=f"input=1x3x{side}x{side}:32x3x{side}x{side}:{JPEG_BATCH}x3x{side}x{side}")
    if gpu(args):
        set_parameters(folder, runtime="torch", model_file="model.onnx", precision=args.precision)
    return folder


def host_shapes(args: argparse.Namespace) -> list[tuple[str, int, dict[str, str]]]:
    """(name's tail, instances, the host's parameters) of each host variant: x6, or x6_c2_w500
    where several --host-contexts or --host-batch-waits are swept (each with each)."""
    shapes = []
    for count in args.host_instances:
        for contexts in args.host_contexts:
            for wait in args.host_batch_waits:
                tail = f"x{count}" + (f"_c{contexts}" if len(args.host_contexts) > 1 else "")
                tail += f"_w{wait}" if len(args.host_batch_waits) > 1 else ""
                parameters = {"contexts": str(contexts), "engine_host": "on"}
                if wait:
                    parameters["batch_wait_microseconds"] = str(wait)
                shapes.append((tail, count, parameters))
    return shapes


def build_jpeg(repo: Path, args: argparse.Namespace) -> dict[str, str]:
    """The host variants, and (unless --profile-host) today's arrangement and the null model."""
    jpeg = jpeg_folder(repo, args)
    kind = "gpu" if gpu(args) else "cpu"
    variants = {}
    for tail, count, parameters in host_shapes(args):
        name = f"host_{tail}"
        hosted = add_mode(jpeg, "sync", f"jpeg_{name}", **parameters)
        set_instances(hosted, count, kind)
        if args.host_decoder:
            set_process_settings(hosted, decoder=args.host_decoder, decoder_backends=args.host_decoder_backends)
        variants[name] = f"jpeg_{name}"
    if args.profile_host:
        shutil.rmtree(jpeg)
        return variants
    set_instances(add_mode(jpeg, "sync", "jpeg_now_x6", contexts="1", engine_host="off"), 6, kind)
    variants["now_x6"] = "jpeg_now_x6"
    python_model(
        repo,
        "null_x6",
        NULL_JPEG_MODEL,
        [tensor("IMAGE", "BYTES", [1])],
        [tensor("LABELS", "BYTES", [5]), tensor("SCORES", "FP32", [5])],
        max_batch_size=32,
        extra="dynamic_batching { max_queue_delay_microseconds: 100 }\ninstance_group { kind: KIND_CPU count: 6 }",
    )
    variants["null_x6"] = "null_x6"
    shutil.rmtree(jpeg)  # only the variants load
    return variants


# --- the tensor cases ---------------------------------------------------------------------


def build_tensor(repo: Path, args: argparse.Namespace) -> dict[str, str]:
    onnx = repo.parent / f"{args.case}.onnx"
    write_example(args.case, onnx, **({"image_size": args.image_size} if args.case == "resnet50" else {}))
    # Triton copies CUDA-shm inputs to host memory for the thin instances: they hold no CUDA context.
    arrangements = [
        (f"host_{tail}", count, host | {"FORCE_CPU_ONLY_INPUT_TENSORS": "yes"})
        for tail, count, host in host_shapes(args)
    ]
    if args.host_gpu_inputs:  # CUDA-shm inputs stay on the GPU and reach the host by CUDA IPC
        arrangements += [
            (f"{IPC}{tail}", count, host | {"FORCE_CPU_ONLY_INPUT_TENSORS": "no"})
            for tail, count, host in host_shapes(args)
        ]
    arrangements += [(f"now_x{count}", count, {"contexts": "1", "engine_host": "off"}) for count in (1, 2)]
    variants = {}
    for name, count, parameters in arrangements:
        add_model(
            repo,
            onnx,
            f"{args.case}_{name}",
            args.case,
            args,
            contexts=int(parameters.pop("contexts")),
            mode="sync",
            instances=count,
            parameters=parameters,
        )
        variants[name] = f"{args.case}_{name}"
    # Triton's own ceiling for these inputs: the null Python-backend model, as many instances as the host's
    # largest arrangement, inputs copied to host memory as for host_xN.
    largest = max(args.host_instances)
    null = f"{args.case}_null_x{largest}"
    add_null_model(repo, variants["now_x1"], null, FORCE_CPU_ONLY_INPUT_TENSORS="yes")
    set_instances(repo / null, largest, "gpu" if gpu(args) else "cpu")
    variants[f"null_x{largest}"] = null
    return variants


# --- measuring ----------------------------------------------------------------------------


def processes_of(server: TritonServer, model: str) -> list[int]:
    """The model's stubs and its engine host."""
    processes = model_processes(server, model)
    return processes["stubs"] + processes["host"]


def memory_mib(server: TritonServer, model: str) -> int | None:
    held = gpu_memory.by_process()
    return sum(held[pid][1] for pid in processes_of(server, model) if pid in held) if held else None


def point(
    server: TritonServer,
    model: str,
    concurrency: int,
    transport: str,
    args: argparse.Namespace,
    input_data: Path | None,
) -> dict:
    if input_data is not None:
        return perf_row(server.grpc_url, model, concurrency, input_data, args.interval_ms)
    return measure(
        server,
        model,
        concurrency=concurrency,
        shm=transport,
        inputs=INPUTS[args.case],
        interval_ms=args.interval_ms,
        stability=args.stability,
    )


def measure_all(
    server: TritonServer, variants: dict[str, str], args: argparse.Namespace, input_data: Path | None
) -> dict:
    transports = [t for t in args.transports if t == "none" or (gpu(args) and input_data is None)]
    table: dict = {t: {v: {} for v in variants} for t in transports}
    memory = {v: {"after_load": memory_mib(server, m)} for v, m in variants.items()}
    turn = 0
    interrupted = None
    try:
        for transport in transports:
            for concurrency in args.concurrency:
                order = list(variants) if turn % 2 == 0 else list(variants)[::-1]
                turn += 1
                for variant in order:
                    if transport == "none" and variant.startswith(IPC):  # the same as host_x over plain gRPC
                        continue
                    with GpuUtilization() as utilization:
                        row = point(server, variants[variant], concurrency, transport, args, input_data)
                    row["gpu_utilization_percent"] = utilization.mean
                    table[transport][variant][str(concurrency)] = row
                    memory[variant]["under_load"] = memory_mib(server, variants[variant])
    except KeyboardInterrupt:  # a time limit's SIGINT (timeout -s INT): keep what was measured
        interrupted = f"interrupted at {transport}, {concurrency} clients, {variant}"
        print(interrupted, flush=True)
    best = {
        t: {v: max(rows.values(), key=lambda r: r.get("infer_per_s", 0.0)) for v, rows in by_variant.items() if rows}
        for t, by_variant in table.items()
    }
    return {"by_concurrency": table, "best": best, "gpu_memory_mib": memory, "interrupted": interrupted}


def family_best(best: dict[str, dict], family: str) -> tuple[str | None, dict]:
    """The best variant whose name starts with `family` (host_ or now_), and its row."""
    candidates = {v: row for v, row in best.items() if v.startswith(family) and "infer_per_s" in row}
    if not candidates:
        return None, {}
    name = max(candidates, key=lambda v: candidates[v]["infer_per_s"])
    return name, candidates[name]


def headline(case: str, result: dict) -> dict:
    figures = {}
    for transport, best in result["best"].items():
        host_name, host = family_best(best, "host_")
        now_name, now = family_best(best, "now_")
        key = (
            "jpeg"
            if case == "jpeg"
            else next((k for k, (c, t) in KEYS.items() if c == case and t == transport), f"{case}_{transport}")
        )
        if case == "jpeg":
            figures |= {
                "jpeg_host_infer_per_s": host.get("infer_per_s"),
                "jpeg_now_infer_per_s": now.get("infer_per_s"),
                "jpeg_host_p99_ms": host.get("p99_ms"),
                "jpeg_now_p99_ms": now.get("p99_ms"),
                "jpeg_host_best": host_name,
                "jpeg_null_x6_infer_per_s": best.get("null_x6", {}).get("infer_per_s"),
            }
        else:
            figures |= {
                f"{key}_host": host.get("infer_per_s"),
                f"{key}_now": now.get("infer_per_s"),
                f"{key}_host_best": host_name,
                f"{key}_now_best": now_name,
            }
            null_name, null = family_best(best, "null_")
            if null:  # what Triton's Python backend passes with these inputs and no work: the yardstick
                figures |= {f"{key}_null": null["infer_per_s"], f"{key}_null_best": null_name}
                if host.get("infer_per_s"):
                    figures[f"{key}_host_over_null"] = round(host["infer_per_s"] / null["infer_per_s"], 3)
        if host.get("infer_per_s") and now.get("infer_per_s"):
            figures[f"{key}_host_over_now"] = round(host["infer_per_s"] / now["infer_per_s"], 3)
    memory = result["gpu_memory_mib"]
    six = next((v for v in memory if v == "host_x6"), None)
    if six:
        figures[f"gpu_memory_mib_host_x6_{case}"] = memory[six]
    if "now_x1" in memory:
        figures[f"gpu_memory_mib_one_instance_{case}"] = memory["now_x1"]
    return figures


def served(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        repo.mkdir()
        variants = build_jpeg(repo, args) if args.case == "jpeg" else build_tensor(repo, args)
        input_data = None
        if args.case == "jpeg":
            input_data = write_input_data(Path(scratch) / "files.json", file_set(args.file_set, args.files))
        server_args = ("--cuda-memory-pool-byte-size=0:2147483648",) if gpu(args) else ()
        server = TritonServer(repo, Path(scratch) / "server.log", server_args).start(timeout=900)
        try:
            if args.profile_host:
                return {"variants": variants, "host_profile": profile_host(server, variants, args, input_data)}
            result = measure_all(server, variants, args, input_data)
        finally:
            server.stop()
    return {"variants": variants, **result, **headline(args.case, result)}


def profile_host(
    server: TritonServer, variants: dict[str, str], args: argparse.Namespace, input_data: Path | None
) -> dict:
    """py-spy's samples of the first variant's engine host, the thread holding the GIL only, while
    perf_analyzer loads it at the first concurrency: where the host's one GIL goes. With
    --profile-waits, two more windows: every thread of the host, waiting ones too, then of one
    front stub (where each thread waits)."""
    from bench.stub_profile import stub_profile

    model = next(iter(variants.values()))
    point(server, model, args.concurrency[0], "none", args, input_data)  # warm: kernels, graphs
    host = server.host_pids(model)[0]
    windows = {"host_gil": (Path(args.profile_host), {"gil": True, "pid": host})}
    if args.profile_waits:
        stem = Path(args.profile_waits)
        windows["host_waits"] = (stem.with_name(f"{stem.stem}_host{stem.suffix}"), {"idle": True, "pid": host})
        windows["stub_waits"] = (stem.with_name(f"{stem.stem}_stub{stem.suffix}"), {"idle": True})
    outcomes = {}
    for name, (out, how) in windows.items():
        with stub_profile(server, model, out, seconds=12, **how) as outcome:
            outcome["measurement"] = point(server, model, args.concurrency[0], "none", args, input_data)
        outcomes[name] = outcome
    return outcomes


# --- (f): the in-process ceiling ----------------------------------------------------------


class _Count:
    """A responder that counts answers."""

    def __init__(self, tally: dict) -> None:
        self.tally = tally

    def send(self, outputs) -> None:
        self.tally["ok"] += 1

    def fail(self, error) -> None:
        self.tally["failed"] += 1
        self.tally["error"] = str(error)

    def cancelled(self) -> bool:
        return False


@contextmanager
def self_profile(out: Path | None, seconds: float, waits: bool = False) -> Iterator[dict]:
    """py-spy's samples of this process (the thread holding the GIL) while the block
    runs, into `out` (raw stacks); nothing when `out` is None. The samples over rate x seconds is
    the share of the time the GIL was held. waits: every thread's samples, waiting ones too."""
    outcome: dict = {}
    if out is None:
        yield outcome
        return
    rate = 100
    beside = Path(sys.executable).parent / "py-spy"  # the venv's, where its bin is not on PATH
    recorder = subprocess.Popen(
        [
            *(
                str(beside) if beside.exists() else "py-spy",
                "record",
                "--threads",
                "--idle" if waits else "--gil",
                "--nonblocking",
                "--format",
                "raw",
                "--rate",
                str(rate),
            ),
            *("--duration", str(max(1, int(seconds) - 1)), "--pid", str(os.getpid()), "--output", str(out)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield outcome
    finally:
        _, err = recorder.communicate(timeout=seconds + 120)
        samples = sum(int(line.rpartition(" ")[2]) for line in out.read_text().splitlines()) if out.exists() else 0
        outcome.update(
            file=str(out), samples=samples, gil_held_share=round(samples / (rate * max(1, int(seconds) - 1)), 3)
        )
        outcome["py_spy"] = err[-300:]


def served_in_threads(
    instance, files: list[bytes], threads: int, args: argparse.Namespace, profile: Path | None, waits: bool
) -> dict:
    """Images/s of `threads` threads serving random batches of `files` on `instance` for --seconds."""
    tally = {"ok": 0, "failed": 0}
    stop = threading.Event()

    def loop(seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            chosen = rng.integers(0, len(files), args.ceiling_batch)
            requests = [as_request("IMAGE", files[i]) for i in chosen]
            instance.serve(requests, [_Count(tally) for _ in requests], inline=True)

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    start = time.monotonic()
    for worker in workers:
        worker.start()
    with self_profile(profile, args.seconds, waits) as outcome, GpuUtilization() as busy:
        time.sleep(args.seconds)
    stop.set()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - start
    return {
        "images_per_s": round(tally["ok"] / elapsed, 1),
        "images": tally["ok"],
        "gpu_busy_percent": busy.mean,
        "failed": tally["failed"],
        "error": tally.get("error"),
        **({"profile": outcome} if outcome else {}),
    }


def ceiling(args: argparse.Namespace) -> dict:
    """K threads, each serving batches of --ceiling-batch JPEG files through one hosted ModelInstance
    of K contexts (decode, crop, engine and postprocess as the host runs them), for --seconds at
    each of Python's --switch-intervals (how long a thread may hold the GIL while another waits)."""
    from trtpool.instance import ModelInstance

    files = file_set(args.file_set, args.files)
    with tempfile.TemporaryDirectory() as scratch:
        folder = jpeg_folder(Path(scratch) / "repo", args)
        if args.host_decoder:
            set_process_settings(folder, decoder=args.host_decoder, decoder_backends=args.host_decoder_backends)
        device = "cuda:0" if gpu(args) else "cpu"
        results = {}
        profile = args.profile or args.profile_waits
        for threads in args.ceiling_threads:
            set_parameters(folder, contexts=str(threads))
            stage_ns: Counter[str] = Counter()
            instance = ModelInstance(
                as_triton_hands_it(read_config(folder)),
                folder / "1",
                device,
                on_stage=lambda stage, ns, ok: stage_ns.update({stage: ns}),
                hosted=True,
            )
            # warm-up: the first batches build kernels and graphs
            instance.serve(
                [as_request("IMAGE", f) for f in files[: args.ceiling_batch]],
                [_Count({"ok": 0, "failed": 0}) for _ in range(args.ceiling_batch)],
                inline=True,
            )
            for interval in args.switch_intervals:
                sys.setswitchinterval(interval)
                stage_ns.clear()
                name = str(threads) if len(args.switch_intervals) == 1 else f"{threads}@{interval * 1e3:g}ms"
                result = served_in_threads(instance, files, threads, args, profile, not args.profile)
                served = max(1, result.pop("images"))
                # the process file's batch faces, in the threads that ran them (overlapping in time)
                result["stage_us_per_image"] = {k: round(ns / 1e3 / served, 1) for k, ns in stage_ns.items()}
                results[name] = result
                profile = None
                print(f"ceiling threads={name}: {results[name]}", flush=True)
            instance.close()
    best = max(results.values(), key=lambda r: r["images_per_s"])
    return {
        "by_threads": results,
        "jpeg_inprocess_ceiling_images_per_s": best["images_per_s"],
        "batch": args.ceiling_batch,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=("jpeg", "ceiling", "resnet50", "bert_base", "tiny"), required=True)
    parser.add_argument("--runtime", choices=("onnxruntime", "torch"), default="onnxruntime")
    parser.add_argument("--precision", default="fp16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--host-instances", type=lambda t: [int(x) for x in t.split(",")], default=[2, 4, 6])
    parser.add_argument(
        "--host-contexts",
        type=lambda t: [int(x) for x in t.split(",")],
        default=[4],
        help="the host's contexts; several: each instance count with each (variants host_xN_cC)",
    )
    parser.add_argument(
        "--host-batch-waits",
        type=lambda t: [int(x) for x in t.split(",")],
        default=[0],
        help="the host's batch_wait_microseconds (its wait for other instances' batches); several: "
        "each with each of the above (variants host_xN_wW)",
    )
    parser.add_argument(
        "--transports",
        type=lambda t: t.split(","),
        default=["none", "cuda"],
        help="tensor cases: plain gRPC (none) and, on a GPU, CUDA shared memory (cuda)",
    )
    parser.add_argument(
        "--host-gpu-inputs",
        action="store_true",
        help="tensor cases: also host_ipc_xN, whose CUDA-shm inputs reach the host through CUDA IPC",
    )
    parser.add_argument("--concurrency", type=lambda t: [int(x) for x in t.split(",")], default=[64, 256, 512])
    parser.add_argument("--interval-ms", type=int, default=2000)
    parser.add_argument(
        "--stability",
        type=int,
        default=None,
        help="perf_analyzer's --stability-percentage for the tensor cases (a noisy machine: 50)",
    )
    parser.add_argument("--files", type=int, default=64, help="JPEG files for the clients and the ceiling")
    parser.add_argument(
        "--file-set",
        choices=list(FILE_SETS),
        default="mixed",
        help="jpeg and ceiling: the bench's files of mixed sizes, or 500x375 ones as issue 36's probe took "
        "(bench/jpeg_probe.py)",
    )
    parser.add_argument(
        "--host-decoder",
        choices=("torchvision", "nvimgcodec"),
        help="process.json's decoder for the host variants and the ceiling (default: the example's, auto)",
    )
    parser.add_argument(
        "--host-decoder-backends",
        type=lambda t: t.split(","),
        default=[],
        help="with --host-decoder nvimgcodec: process.json's decoder_backends (e.g. HW_GPU_ONLY)",
    )
    parser.add_argument("--ceiling-threads", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2, 4])
    parser.add_argument("--ceiling-batch", type=int, default=JPEG_BATCH)
    parser.add_argument(
        "--switch-intervals",
        type=lambda t: [float(x) for x in t.split(",")],
        default=[sys.getswitchinterval()],
        help="ceiling: Python's switch intervals to measure each thread count at, in seconds",
    )
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument(
        "--profile-host",
        metavar="FILE",
        help="instead of the table: py-spy's samples (GIL holder) of the first host variant's "
        "engine host under load, into FILE",
    )
    parser.add_argument(
        "--profile-waits",
        type=Path,
        metavar="FILE",
        help="with --profile-host: every thread's samples, waits included, of the host (FILE_host) "
        "and of one front stub (FILE_stub), each in a window of its own; ceiling (without --profile): "
        "every thread's samples of the first --ceiling-threads run, waits included, into FILE",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="ceiling: py-spy's samples (GIL holder) of the first --ceiling-threads run, into FILE",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result = {"ceiling": ceiling}.get(args.case, served)(args)
    record = json.loads(args.out.read_text()) if args.out.exists() else {}
    record.setdefault("cases", {})[args.case] = {
        **provenance(),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        **result,
    }
    for case in record["cases"].values():  # the headline keys at the top, from every case so far
        record.update(
            {k: v for k, v in case.items() if not isinstance(v, dict | list) and k not in ("date", "command")}
        )
    write_json(args.out, record)
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, dict)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
