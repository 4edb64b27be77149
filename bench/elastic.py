"""Step load on an elastic context pool: batch-1 clients at a low level, then a peak,
then low again, against one decoupled model whose pool runs between min_contexts 1
and max_contexts N; every second the pool's context count (trtpool_contexts on
/metrics), the model instance's memory and the answers per second. Then, in the
same server, a fixed pool of N contexts beside it, and both at the peak's clients
in perf_analyzer rounds (gRPC streaming) in ABBA order.

    python bench/elastic.py --runtime onnxruntime --example resnet50 --image-size 64 \\
        --out bench/results/elastic_cpu.json                                   # CPU twin
    python bench/elastic.py --runtime torch --precision fp16 --example bert_base \\
        --peak 16 --out $OUT/elastic.json                                      # GPU (bench/gpu/h200.sh elastic)

Memory is the instance's own: its stub process's resident memory on the CPU; on
a GPU its memory in nvidia-smi's per-process list, or where that list does not
show the stub (a container's process ids), the device's used memory over the
baseline before the model loaded (the step load runs with that model alone
loaded). Each step-load client is a process with one gRPC stream and one
request in flight.

Keys: contexts_low and memory_low_mib (the last sample of the last low phase),
contexts_peak and memory_peak_mib (the most seen during the peak),
throughput_peak_elastic and throughput_peak_fixed (the median of each pool's
perf_analyzer rounds), elastic_over_fixed_throughput (per round and median),
seconds_to_peak and seconds_to_min (from each step to the first sample at the
peak count and at the minimum), memory_fixed_mib (the fixed pool once loaded),
and every sample.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import queue
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from bench import gpu_memory  # noqa: E402
from bench.paired import alternate, compared  # noqa: E402
from bench.record import default_out, provenance, write_json  # noqa: E402
from tests.harness.perf import PerfAnalyzerFailed, perf_analyzer  # noqa: E402
from tests.harness.repository import set_parameters  # noqa: E402
from tests.harness.server import TritonServer, rss_bytes  # noqa: E402
from trtpool.parameters import Elasticity  # noqa: E402
from trtpool_builder.examples import get_example, write_example  # noqa: E402
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder  # noqa: E402

MIB = 2**20
IDLE, BUSY, STOP = 0, 1, -1  # a client's control value
# perf_analyzer's input options: BERT at sequence 128, token ids 0 (as bench/gpu_serving.py).
INPUTS = {"bert_base": ("--shape", "input_ids:128", "--shape", "attention_mask:128", "--input-data", "zero")}
NUMPY_TYPES = {"FP32": np.float32, "FP16": np.float16, "INT64": np.int64, "INT32": np.int32}


# ---- the served models ---------------------------------------------------------------------


def add_model(repo: Path, onnx: Path, name: str, args, parameters: dict[str, str]) -> None:
    options = {"image_size": args.image_size} if args.example == "resnet50" else {}
    folder = make_model_folder(
        repo,
        name,
        onnx,
        get_example(args.example).serving_profiles(**options),
        ServingOptions(
            runtime=args.runtime,
            mode="decoupled",
            max_queue_delay_microseconds=100,
            instance_kind="gpu" if args.runtime == "torch" else "cpu",
        ),
    )
    if args.runtime == "torch":
        parameters = {"model_file": "model.onnx", "precision": args.precision, **parameters}
    set_parameters(folder, metrics_interval_ms="250", **parameters)


def request_inputs(server: TritonServer, model: str, seq_len: int) -> dict[str, np.ndarray]:
    """One batch-1 request from the model's metadata: floats random, integers (token ids, masks) ones."""
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        metadata = client.get_model_metadata(model)
    finally:
        client.close()
    rng = np.random.default_rng(0)
    inputs = {}
    for tensor in metadata["inputs"]:
        shape = [1, *(seq_len if d == -1 else d for d in tensor["shape"][1:])]
        dtype = NUMPY_TYPES[tensor["datatype"]]
        inputs[tensor["name"]] = (
            rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating) else np.ones(shape, dtype)
        )
    return inputs


# ---- clients -------------------------------------------------------------------------------


def client(url: str, model: str, inputs: dict[str, np.ndarray], slot: int, control, answered, failed) -> None:
    """One batch-1 client: while control[slot] is BUSY, one request at a time on a stream of that
    burst's own (a stream held open across an unload holds a decoupled model in Triton 2.51:
    docs/reliability.md)."""
    while (state := control[slot]) != STOP:
        if state == IDLE:
            time.sleep(0.01)
            continue
        _burst(url, model, inputs, slot, control, answered, failed)


def _burst(url: str, model: str, inputs: dict[str, np.ndarray], slot: int, control, answered, failed) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    stream = grpcclient.InferenceServerClient(url)
    answers: queue.Queue = queue.Queue()
    stream.start_stream(callback=lambda result, error: answers.put(error))
    try:
        while control[slot] == BUSY:
            stream.async_stream_infer(model, tensors)
            try:
                error = answers.get(timeout=120)
            except queue.Empty:
                error = TimeoutError("no answer in 120 s")
            tally = failed if error is not None else answered
            with tally.get_lock():
                tally[slot] += 1
    finally:
        stream.stop_stream()
        stream.close()


# ---- sampling ------------------------------------------------------------------------------


class Sampler:
    def __init__(self, server: TritonServer, model: str, runtime: str, baseline_mib: int | None) -> None:
        self.server, self.model, self.baseline = server, model, baseline_mib
        self.on_gpu = runtime == "torch"
        self.pid = server.stub_pid(model)
        self.source = "stub RSS" if not self.on_gpu else None

    def memory_mib(self) -> float | None:
        if not self.on_gpu:
            return round(rss_bytes(self.pid) / MIB, 1) if self.pid else None
        per_process = gpu_memory.by_process()
        if self.pid in per_process:
            self.source = "nvidia-smi per process"
            return per_process[self.pid][1]
        self.source = "device used memory over the baseline"
        used = gpu_memory.used_mib()
        return used - self.baseline if used is not None and self.baseline is not None else None

    def contexts(self) -> float:
        return self.server.metric_total("trtpool_contexts", self.model)


def run_phase(
    name: str,
    clients: int,
    seconds: float,
    control,
    answered,
    failed,
    sampler: Sampler,
    started: float,
    samples: list[dict],
) -> list[dict]:
    """`clients` clients on the model for `seconds`, sampled every second."""
    for slot in range(len(control)):
        control[slot] = BUSY if slot < clients else IDLE
    phase: list[dict] = []
    tick = time.monotonic()
    last = sum(answered[:])
    for second in range(int(seconds)):
        tick += 1.0
        time.sleep(max(0.0, tick - time.monotonic()))
        total = sum(answered[:])
        sample = {
            "t_s": round(time.monotonic() - started, 1),
            "phase": name,
            "second": second + 1,
            "clients": clients,
            "infer_per_s": total - last,
            "contexts": sampler.contexts(),
            "memory_mib": sampler.memory_mib(),
            "errors": sum(failed[:]),
        }
        last = total
        phase.append(sample)
        print(sample, flush=True)
    samples += phase
    return phase


def first_second(phase: list[dict], count: float) -> float | None:
    return next((s["second"] for s in phase if s["contexts"] == count), None)


def mean_rate(phase: list[dict], settle: int) -> float:
    return round(statistics.mean(s["infer_per_s"] for s in phase[settle:]), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", choices=("torch", "onnxruntime"), default="onnxruntime")
    parser.add_argument("--precision", default="fp16")
    parser.add_argument("--example", choices=("tiny", "resnet50", "bert_base"), default="resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--seq-len", type=int, default=128, help="the requests' sequence length (BERT)")
    parser.add_argument("--low", type=int, default=1, help="batch-1 clients at low load")
    parser.add_argument("--peak", type=int, default=8, help="batch-1 clients at the peak")
    parser.add_argument(
        "--max-contexts", type=int, default=4, help="the elastic pool's maximum, the fixed pool's count"
    )
    parser.add_argument(
        "--phases",
        type=lambda t: [float(x) for x in t.split(",")],
        default=[20, 30, 40],
        help="seconds of low, peak, low",
    )
    parser.add_argument("--rounds", type=int, default=4, help="perf_analyzer rounds per pool at the peak (ABBA)")
    parser.add_argument("--interval-ms", type=int, default=3000, help="perf_analyzer's measurement interval")
    parser.add_argument("--idle", type=float, default=10, help="shrink_after_idle_seconds of the elastic pool")
    parser.add_argument(
        "--grow-after-us",
        type=int,
        default=Elasticity().grow_after_wait_us,
        help="grow_after_wait_microseconds (default: the parameter's)",
    )
    parser.add_argument("--settle", type=int, default=5, help="seconds at the start of a peak left out of its rate")
    parser.add_argument("--out", type=Path, default=default_out("elastic_cpu.json"))
    args = parser.parse_args()
    elastic, fixed = f"{args.example}_elastic", f"{args.example}_fixed"
    report: dict = {
        "benchmark": "elastic",
        **provenance(),
        "runtime": args.runtime,
        "example": args.example,
        "clients": {"low": args.low, "peak": args.peak},
        "max_contexts": args.max_contexts,
        "policy": {
            "min_contexts": 1,
            "grow_after_wait_microseconds": args.grow_after_us,
            "shrink_after_idle_seconds": args.idle,
        },
    }
    if args.runtime == "torch":
        report["precision"] = args.precision

    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        options = {"image_size": args.image_size} if args.example == "resnet50" else {}
        onnx = write_example(args.example, base / f"{args.example}.onnx", **options)
        repo = base / "repo"
        add_model(
            repo,
            onnx,
            elastic,
            args,
            {
                "contexts": "auto",
                "min_contexts": "1",
                "max_contexts": str(args.max_contexts),
                "grow_after_wait_microseconds": str(args.grow_after_us),
                "shrink_after_idle_seconds": str(args.idle),
            },
        )
        add_model(repo, onnx, fixed, args, {"contexts": str(args.max_contexts)})
        server = TritonServer(repo, base / "server.log", ("--model-control-mode=explicit",)).start(timeout=600)
        spawn = mp.get_context("spawn")
        control = spawn.Array("i", [IDLE] * args.peak, lock=False)
        answered = spawn.Array("q", [0] * args.peak)
        failed = spawn.Array("q", [0] * args.peak)
        processes = []
        admin = httpclient.InferenceServerClient(server.http_url)
        try:
            baseline = gpu_memory.used_mib()
            admin.load_model(elastic)
            inputs = request_inputs(server, elastic, args.seq_len)
            processes = [
                spawn.Process(
                    target=client, args=(server.grpc_url, elastic, inputs, slot, control, answered, failed), daemon=True
                )
                for slot in range(args.peak)
            ]
            for process in processes:
                process.start()
            samples: list[dict] = []
            started = time.monotonic()
            sampler = Sampler(server, elastic, args.runtime, baseline)
            low_s, peak_s, after_s = args.phases
            first_low = run_phase("low", args.low, low_s, control, answered, failed, sampler, started, samples)
            peak = run_phase("peak", args.peak, peak_s, control, answered, failed, sampler, started, samples)
            last_low = run_phase("low_again", args.low, after_s, control, answered, failed, sampler, started, samples)
            control[:] = [STOP] * args.peak
            for process in processes:
                process.join(timeout=60)
            # The fixed pool beside it: its memory once loaded (every context made at load),
            # then both at the peak's clients, perf_analyzer's rounds in ABBA order.
            baseline = gpu_memory.used_mib()
            admin.load_model(fixed)
            fixed_memory = Sampler(server, fixed, args.runtime, baseline).memory_mib()
            streaming = ("--streaming", *INPUTS.get(args.example, ()))

            def at_peak(model: str) -> dict:
                """The elastic pool shrinks while the fixed pool's round runs (longer than its
                idle period): bring it back to its peak count before its own round, so that
                the rounds compare the pools at the peak, not the elastic pool's growth."""
                if model != elastic:
                    return {}
                with contextlib.suppress(PerfAnalyzerFailed):  # a warm-up: the count it reached is what matters
                    perf_analyzer(
                        model,
                        server.grpc_url,
                        concurrency=str(args.peak),
                        interval_ms=1000,
                        max_trials=3,
                        extra=("--stability-percentage", "100", *streaming),
                    )
                return {"contexts_at_start": sampler.contexts()}

            rounds = alternate(
                server, (elastic, fixed), args.rounds, args.peak, args.interval_ms, streaming, before=at_peak
            )
        finally:
            control[:] = [STOP] * args.peak
            for process in processes:
                process.join(timeout=30)
            admin.close()
            server.stop()
            report["server_log_tail"] = server.log_tail(20)

    most = max(s["contexts"] for s in peak)
    peak_memory = max((s["memory_mib"] for s in peak if s["memory_mib"] is not None), default=None)
    report.update(
        {
            "contexts_low": last_low[-1]["contexts"],
            "contexts_peak": most,
            "memory_low_mib": last_low[-1]["memory_mib"],
            "memory_peak_mib": peak_memory,
            "throughput_peak_elastic": statistics.median(r["infer_per_s"] for r in rounds[elastic]),
            "throughput_peak_fixed": statistics.median(r["infer_per_s"] for r in rounds[fixed]),
            "elastic_over_fixed_throughput": compared(
                rounds[elastic], rounds[fixed], "infer_per_s", faster="rounds_elastic_faster"
            ),
            "seconds_to_peak": first_second(peak, most),
            "seconds_to_min": first_second(last_low, 1),
            "step_peak_infer_per_s": mean_rate(peak, args.settle),
            "contexts_first_low": first_low[-1]["contexts"],
            "memory_first_low_mib": first_low[-1]["memory_mib"],
            "memory_fixed_mib": fixed_memory,
            "memory_source": sampler.source,
            "step_errors": sum(failed[:]),
            "step_answers": sum(answered[:]),
            "rounds": rounds,
            "samples": samples,
        }
    )
    if report["memory_low_mib"] and peak_memory:
        report["memory_low_over_peak"] = round(report["memory_low_mib"] / peak_memory, 3)
    write_json(args.out, report)
    print({k: v for k, v in report.items() if k not in ("samples", "server_log_tail")})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
