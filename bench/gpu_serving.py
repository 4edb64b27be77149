"""Served benchmarks through a real tritonserver with perf_analyzer, in one run:

  throughput   batch-1 clients at several concurrencies, one context vs four,
               sync vs decoupled, plain gRPC and CUDA shared memory; batch-8/32
               clients for the served / in-process ratio
  latency      p50/p99 at 50% and 90% of the peak request rate
  memory       one instance with N contexts vs N instances of one context each
               (GPU memory used, from nvidia-smi, after loading each alone, then
               after batch-1 clients at the served shape, then after the
               profile's largest batch and shapes; per process too)

    python bench/gpu_serving.py --runtime torch --precision fp16 --out bench/results/gpu_serving.json

With --runtime onnxruntime it runs on a CPU machine too (no CUDA shared memory,
no GPU memory figures), which is how its logic is checked without a GPU.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tritonclient.http as httpclient  # noqa: E402

from bench import cpu_account, gpu_memory  # noqa: E402
from bench.record import default_out, provenance, write_json  # noqa: E402
from tests.harness.perf import PerfAnalyzerFailed, perf_analyzer  # noqa: E402
from tests.harness.repository import set_parameters  # noqa: E402
from tests.harness.server import TritonServer  # noqa: E402
from trtpool_builder.examples import get_example, write_example  # noqa: E402
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config, write_config  # noqa: E402


def example_options(example: str, args) -> dict:
    return {"image_size": args.image_size} if example == "resnet50" else {}


def add_model(
    repo: Path,
    onnx: Path,
    name: str,
    example: str,
    args,
    *,
    contexts: int,
    mode: str,
    instances: int = 1,
    parameters: dict[str, str] | None = None,
    profiles: tuple[str, ...] | None = None,
) -> None:
    kind = "gpu" if args.runtime == "torch" else "cpu"
    folder = make_model_folder(
        repo,
        name,
        onnx,
        profiles or get_example(example).serving_profiles(**example_options(example, args)),
        ServingOptions(
            runtime=args.runtime,
            contexts=str(contexts),
            mode=mode,
            instance_kind=kind,
            max_queue_delay_microseconds=100,
        ),
    )
    config = read_config(folder)
    config.instance_group[0].count = instances
    write_config(folder, config)
    if args.runtime == "torch":
        # GPU inputs (CUDA shared memory) reach the backend on the GPU, by DLPack.
        parameters = {
            "model_file": "model.onnx",
            "precision": args.precision,
            "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
            **(parameters or {}),
        }
    set_parameters(folder, **(parameters or {}))


STAGES = ("queue", "compute_input", "compute_infer", "compute_output")
METRICS_INTERVAL_S = 1.1  # trtpool hands its counts to Triton every metrics_interval_ms (1000 by default)


def model_processes(server: TritonServer, model: str) -> dict[str, list[int]]:
    """tritonserver's own process, the model's stubs and its engine host (none unless engine_host is on)."""
    assert server.process is not None, "the server was started"
    return {"tritonserver": [server.process.pid], "stubs": server.stub_pids(model), "host": server.host_pids(model)}


def server_counters(server: TritonServer, model: str) -> dict[str, float]:
    """Triton's cumulative statistics for `model` (executions, inferences, ns per stage) and trtpool's
    series. Read after a pause of one metrics interval: trtpool hands its counts to Triton every second."""
    time.sleep(METRICS_INTERVAL_S)
    client = httpclient.InferenceServerClient(server.http_url)
    [stats] = client.get_inference_statistics(model)["model_stats"]
    counters = {"executions": int(stats["execution_count"]), "inferences": int(stats["inference_count"])}
    for stage in STAGES:
        counters[f"{stage}_count"] = int(stats["inference_stats"][stage]["count"])
        counters[f"{stage}_ns"] = int(stats["inference_stats"][stage]["ns"])
    return counters | trtpool_counters(server, model)


# trtpool's own series (docs/reference/metrics.md) summed per model: counter -> (metric, label weighting it)
TRTPOOL_COUNTERS = {
    "batches": ("trtpool_batches_total", None),
    "rows": ("trtpool_batches_total", "batch_size"),
    "merged": ("trtpool_host_merged_batches_total", None),
    "messages": ("trtpool_host_merged_batches_total", "messages"),
    "context_wait_us": ("trtpool_queue_wait_us_total", None),
    "context_busy_us": ("trtpool_context_busy_us_total", None),
    "context_runs": ("trtpool_context_runs_total", None),
    "host_runs": ("trtpool_host_runs_total", None),
    "host_round_trip_us": ("trtpool_host_round_trip_us_total", None),
}
SERIES = re.compile(r"^(\w+)\{([^}]*)\}\s+(\S+)$")


def trtpool_counters(server: TritonServer, model: str) -> dict[str, float]:
    """trtpool's cumulative series for `model` from /metrics (zeros for a model that is not trtpool's)."""
    totals = dict.fromkeys(TRTPOOL_COUNTERS, 0.0)
    for line in server.metrics().splitlines():
        match = SERIES.match(line)
        if not match:
            continue
        name, labels, value = match.group(1), dict(re.findall(r'(\w+)="([^"]*)"', match.group(2))), match.group(3)
        if labels.get("model") != model:
            continue
        for counter, (metric, weight) in TRTPOOL_COUNTERS.items():
            if metric == name:
                totals[counter] += float(value) * (float(labels[weight]) if weight else 1.0)
    return totals


def server_breakdown(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Where a request's time went inside the server during one measurement: Triton's
    average batch per execute and microseconds per request in each stage. For a
    decoupled model compute_infer ends when execute() returns, not at the response.
    From trtpool's series, where the model has them (an engine host's are the host's): rows per
    engine batch, instances' batches merged per host batch, per engine batch the wait for a
    context and the context's time from taken to given back, and an instance's time from sending
    a batch to the host's answer (the rest of compute_infer is the instance's own work)."""
    delta = {key: after[key] - before[key] for key in after}
    breakdown = {"inferences_per_execute": round(delta["inferences"] / max(delta["executions"], 1), 2)}
    for stage in STAGES:
        breakdown[f"{stage}_us"] = round(delta[f"{stage}_ns"] / max(delta[f"{stage}_count"], 1) / 1000, 1)
    if delta["batches"] > 0:
        breakdown["engine_batch_rows"] = round(delta["rows"] / delta["batches"], 2)
        breakdown["context_wait_us_per_batch"] = round(delta["context_wait_us"] / delta["batches"], 1)
    if delta["context_runs"] > 0:
        breakdown["context_busy_us_per_batch"] = round(delta["context_busy_us"] / delta["context_runs"], 1)
    if delta["merged"] > 0:
        breakdown["host_messages_per_batch"] = round(delta["messages"] / delta["merged"], 2)
    if delta["host_runs"] > 0:
        breakdown["host_round_trip_us"] = round(delta["host_round_trip_us"] / delta["host_runs"], 1)
    return breakdown


def measure(
    server: TritonServer,
    model: str,
    *,
    concurrency: int | None = None,
    rate: float | None = None,
    batch: int = 1,
    streaming: bool = False,
    shm: str = "none",
    inputs: tuple[str, ...] = (),
    interval_ms: int = 1500,
    stability: int | None = None,
) -> dict:
    """One perf_analyzer point with Triton's per-stage times. `stability`: perf_analyzer's
    criterion (percent) from the start, for a machine too noisy for its default (recorded)."""
    extra = ["-b", str(batch), "--shared-memory", shm]
    if shm == "cuda":
        extra += ["--output-shared-memory-size", str(64 << 20)]
    if streaming:
        extra.append("--streaming")
    extra += inputs
    if rate is not None:
        # Open-loop load: asynchronous requests at a fixed rate, looser stability.
        extra += ["--request-rate-range", f"{rate:.1f}", "--async", "--stability-percentage", "30"]
    result: dict = {}
    if stability is not None:
        extra += ["--stability-percentage", str(stability)]
        result["stability_percentage"] = stability

    def run(interval: int, trials: int, options: tuple[str, ...]) -> dict:
        [row] = perf_analyzer(
            model,
            server.grpc_url,
            concurrency=str(concurrency or 1),
            interval_ms=interval,
            max_trials=trials,
            extra=options,
        )
        return row

    def stable_row() -> dict:
        try:
            return run(interval_ms, 4 if stability is None else 8, tuple(extra))
        except PerfAnalyzerFailed as exc:
            if "stable measurement" not in str(exc) or rate is not None or stability is not None:
                raise
        # Once more with longer windows and a looser stability criterion (recorded).
        result["stability_percentage"] = 25
        return run(2 * interval_ms, 6, (*extra, "--stability-percentage", "25"))

    before = server_counters(server, model)
    try:
        with cpu_account.measuring(lambda: model_processes(server, model)) as cpu:
            row = stable_row()
    except PerfAnalyzerFailed as exc:
        return {"error": str(exc)[-2000:]}
    after = server_counters(server, model)
    # perf_analyzer's inferences/s already count batch items: requests/s x client batch.
    result.update(
        {
            "infer_per_s": row["Inferences/Second"],
            "p50_ms": row["p50 latency"] / 1000,
            "p99_ms": row["p99 latency"] / 1000,
            "server": server_breakdown(before, after),
            # CPU per request by process (bench/cpu_account.py): on a machine whose cores are all busy,
            # throughput follows what each request costs
            "cpu_us_per_inference": cpu.per_request_us(after["inferences"] - before["inferences"]),
            "machine_cpu_busy_percent": cpu.machine_busy_percent,
        }
    )
    print(
        f"{model:14s} b={batch:2d} c={concurrency} rate={rate} stream={streaming} shm={shm}: "
        f"{result['infer_per_s']:9.1f} infer/s p99 {result['p99_ms']:.2f} ms {result['server']} "
        f"CPU µs per inference {result['cpu_us_per_inference']} (machine {result['machine_cpu_busy_percent']}% busy)",
        flush=True,
    )
    return result


# Served models by name suffix: contexts, mode, extra parameters. c1_inline is c1
# handing its metrics to Triton after every batch instead of from a background thread.
SERVED_MODELS = {
    "c1": (1, "sync", {}),
    "c4": (4, "sync", {}),
    "c1_dec": (1, "decoupled", {}),
    "c4_dec": (4, "decoupled", {}),
    "c1_inline": (1, "sync", {"metrics_interval_ms": "0"}),
}
PREFIX = {"resnet50": "resnet", "bert_base": "bert"}
# perf_analyzer's input options: BERT at sequence 128, token ids 0 (random int64
# ids could fall outside the vocabulary).
INPUTS = {
    "tiny": (),
    "resnet50": (),
    "bert_base": ("--shape", "input_ids:128", "--shape", "attention_mask:128", "--input-data", "zero"),
}


def served_names(text: str) -> list[str]:
    names = text.split(",")
    unknown = sorted(set(names) - set(SERVED_MODELS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown models {unknown}; expected some of {', '.join(SERVED_MODELS)}")
    return names


def throughput_section(server: TritonServer, args) -> dict:
    """Batch-1 clients at each level over plain gRPC, the top level also over CUDA
    shared memory; batch-8/32 clients (vs in-process) at --batch-levels over --transports."""
    shm = "cuda" if args.runtime == "torch" else "none"
    rows = []
    for suffix in args.models:
        model, streaming = f"{PREFIX[args.example]}_{suffix}", SERVED_MODELS[suffix][1] == "decoupled"
        plan = [(1, level, "none") for level in args.levels] + [(1, args.levels[-1], shm)]
        plan += [
            (batch, level, memory)
            for batch in (8, 32)
            for level in args.batch_levels
            for memory in dict.fromkeys((shm, "none"))
            if memory in args.transports
        ]
        for batch, level, memory in dict.fromkeys(plan):
            rows.append(
                {
                    "model": model,
                    "batch": batch,
                    "concurrency": level,
                    "shm": memory,
                    "streaming": streaming,
                    **measure(
                        server,
                        model,
                        concurrency=level,
                        batch=batch,
                        streaming=streaming,
                        shm=memory,
                        inputs=INPUTS[args.example],
                    ),
                }
            )
    return {"rows": rows}


def latency_section(
    server: TritonServer, peak: float, models: list[tuple[str, bool]], shm: str, inputs: tuple[str, ...]
) -> list[dict]:
    """Each (model, streaming) at 50% and 90% of `peak`, the models side by side at each rate."""
    rows = []
    for share in (0.5, 0.9):
        rate = peak * share
        for model, streaming in models:
            rows.append(
                {
                    "model": model,
                    "share_of_peak": share,
                    "request_rate": round(rate, 1),
                    "shm": shm,
                    **measure(server, model, rate=rate, streaming=streaming, shm=shm, interval_ms=3000, inputs=inputs),
                }
            )
    return rows


def processes_mib() -> dict[str, int]:
    """GPU memory (MiB) per compute process, keyed 'pid name'."""
    return {f"{pid} {name}": mib for pid, (name, mib) in gpu_memory.by_process().items()}


# The loads a memory reading follows: batch-1 clients at the example's served
# shape (every context runs), then the profile's largest batch and shapes.
MEMORY_LOADS = {
    "in_use": {"concurrency": 16, "batch": 1},
    "largest": {"concurrency": 8, "batch": 32},
}
LARGEST_INPUTS = {
    "resnet50": (),
    "bert_base": ("--shape", "input_ids:512", "--shape", "attention_mask:512", "--input-data", "zero"),
}


def memory_readings(server: TritonServer, model: str, example: str, before: int | None) -> dict:
    """GPU memory the model adds after load, after a load at the served shape and after
    one at the profile's largest shapes (activations are sized to the shapes in use)."""

    def added() -> int | None:
        now = gpu_memory.used_mib()
        return None if now is None or before is None else now - before

    readings = {"loaded": {"mib": added(), "processes": processes_mib()}}
    for state, load in MEMORY_LOADS.items():
        inputs = LARGEST_INPUTS[example] if state == "largest" else INPUTS[example]
        figures = measure(server, model, inputs=inputs, interval_ms=1000, shm="none", **load)
        time.sleep(2)
        readings[state] = {
            "mib": added(),
            "processes": processes_mib(),
            "load": {
                **load,
                "inputs": " ".join(inputs),
                "infer_per_s": figures.get("infer_per_s"),
                "error": figures.get("error"),
            },
        }
    return readings


def memory_section(repo: Path, base: Path, onnx: Path, args) -> dict:
    """Load each model alone (explicit model control) and read the GPU memory it adds:
    loaded, then after each of MEMORY_LOADS."""
    n, example = args.memory_n, args.example
    profiles = (args.memory_profile,) if args.memory_profile else None
    contexts_model, instances_model = f"{PREFIX[example]}_ctx", f"{PREFIX[example]}_inst"
    # Pipelined: several batches in flight, so that under load every context runs (and
    # holds its activations), as each of the N instances does. (Sync runs one batch at a
    # time: its other contexts never run; the 16:30 UTC 2026-12-03 readings were taken so.)
    add_model(repo, onnx, contexts_model, example, args, contexts=n, mode="pipelined", profiles=profiles)
    add_model(repo, onnx, instances_model, example, args, contexts=1, mode="sync", instances=n, profiles=profiles)
    idle = gpu_memory.used_mib()
    server = TritonServer(repo, base / "memory.log", ("--model-control-mode=explicit",)).start()
    client = httpclient.InferenceServerClient(server.http_url)
    time.sleep(2)
    serving = gpu_memory.used_mib()
    # tritonserver with no model loaded: its CUDA context and CUDA memory pool
    figures: dict = {"server_alone_mib": None if idle is None else serving - idle, "server_alone": processes_mib()}
    try:
        for model in (contexts_model, instances_model):
            time.sleep(2)
            before = gpu_memory.used_mib()
            client.load_model(model)
            time.sleep(3)
            readings = memory_readings(server, model, example, before)
            figures[model] = {"mib": readings["loaded"]["mib"], "readings": readings}
            client.unload_model(model)
            time.sleep(5)
            print(f"memory {model}: " + ", ".join(f"{k} {v['mib']} MiB" for k, v in readings.items()), flush=True)
    finally:
        server.stop()
    if figures[contexts_model]["mib"] and figures[instances_model]["mib"]:
        figures["ratio_contexts_over_instances"] = round(
            figures[contexts_model]["mib"] / figures[instances_model]["mib"], 3
        )
        figures["ratios_by_state"] = {
            state: round(
                figures[contexts_model]["readings"][state]["mib"] / figures[instances_model]["readings"][state]["mib"],
                3,
            )
            for state in ("loaded", *MEMORY_LOADS)
            if figures[instances_model]["readings"][state]["mib"]
        }
    return {"n": n, "example": example, "profile": args.memory_profile or "the example's default", **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", choices=("torch", "onnxruntime"), default="torch")
    parser.add_argument("--precision", default="fp16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--levels", type=lambda t: [int(x) for x in t.split(",")], default=[1, 8, 32])
    parser.add_argument("--memory-n", type=int, default=4)
    parser.add_argument("--sections", default="throughput,latency,memory")
    parser.add_argument(
        "--peak",
        type=float,
        default=None,
        help="batch-1 peak infer/s for the latency section without a throughput run; "
        "then every --models model is measured at 50%% and 90%% of it",
    )
    parser.add_argument(
        "--batch-levels",
        type=lambda t: [int(x) for x in t.split(",") if x],
        default=[8],
        help="client concurrencies for the batch-8 and batch-32 clients",
    )
    parser.add_argument(
        "--transports",
        type=lambda t: t.split(","),
        default=["cuda", "none"],
        help="shared-memory kinds for the batch-8 and batch-32 clients",
    )
    parser.add_argument(
        "--memory-profile",
        default=None,
        help="the models' profile for the memory section (default: the example's, for BERT "
        "up to 32 x 512 tokens), e.g. input_ids=1x1:8x128:8x128,attention_mask=1x1:8x128:8x128",
    )
    parser.add_argument(
        "--example",
        choices=tuple(PREFIX),
        default="resnet50",
        help="the example the throughput and latency sections serve",
    )
    parser.add_argument(
        "--models",
        type=served_names,
        default=list(SERVED_MODELS),
        help="which of the served models (c1, c4, c4_dec, c1_inline) the throughput section measures",
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="an extra tritonserver argument, e.g. --cuda-memory-pool-byte-size=0:1073741824",
    )
    parser.add_argument("--out", type=Path, default=default_out("gpu_serving.json"))
    args = parser.parse_args()
    sections = args.sections.split(",")
    report: dict = {"benchmark": "gpu_serving", **provenance(), "runtime": args.runtime, "precision": args.precision}
    try:
        report["gpu"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        report["gpu"] = None

    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        if {"throughput", "latency"} & set(sections):
            example, prefix = args.example, PREFIX[args.example]
            onnx = write_example(example, base / f"{example}.onnx", **example_options(example, args))
            repo = base / "serving"
            for suffix in dict.fromkeys([*args.models, "c1"]):  # c1: the latency section's
                contexts, mode, parameters = SERVED_MODELS[suffix]
                add_model(
                    repo, onnx, f"{prefix}_{suffix}", example, args, contexts=contexts, mode=mode, parameters=parameters
                )
            server = TritonServer(repo, base / "serving.log", tuple(args.server_arg)).start(timeout=600)
            shm = "cuda" if args.runtime == "torch" else "none"
            try:
                if "throughput" in sections:
                    report["throughput"] = throughput_section(server, args)
                if "latency" in sections:
                    if args.peak:  # from an earlier run's throughput section: every --models model
                        peak = args.peak
                        models = [
                            (f"{prefix}_{suffix}", SERVED_MODELS[suffix][1] == "decoupled") for suffix in args.models
                        ]
                    else:  # the best batch-1 model of this run's throughput section
                        batch1 = [
                            r
                            for r in report["throughput"]["rows"]
                            if r["batch"] == 1 and "infer_per_s" in r and r["shm"] == shm
                        ]
                        best = max(batch1, key=lambda r: r["infer_per_s"])
                        peak, models = best["infer_per_s"], [(best["model"], best["streaming"])]
                    report["latency"] = latency_section(server, peak, models, shm, INPUTS[example])
            finally:
                server.stop()
                report["server_log_tail"] = server.log_tail(30)
        if "memory" in sections:
            onnx = write_example(args.example, base / "memory.onnx", **example_options(args.example, args))
            report["memory"] = memory_section(base / "memory", base, onnx, args)
    write_json(args.out, report)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
