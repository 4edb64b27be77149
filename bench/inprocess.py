"""In-process throughput of a runtime through ContextPool: K contexts, K worker threads.

    PYTHONPATH=backend_src:builder python bench/inprocess.py --runtime torch --model resnet50 \\
        --precision fp16 --contexts 1,2,4,8 --batches 1,8,32 --seconds 5 --output resnet50-fp16.json

For each K the model is loaded afresh (its weights once) and a pool of K
contexts is made. For each batch size every context runs the same inputs a
few times first (the torch runtime captures that bucket's CUDA graph then), a
short concurrent warm-up follows, and then K threads loop take -> submit ->
complete -> give for --seconds, the path a served batch takes. --inputs says
where the inputs lie: host (numpy, gathered into pinned memory and copied to
the GPU: plain gRPC/HTTP clients) or device (already on the GPU, copied into
place there: CUDA shared-memory clients). Throughput is the items (images or
sequences) of completed runs over the wall time from the start until the last
thread's last run ended. GPU memory comes from torch's allocator statistics
and cudaMemGetInfo, relative to before the model was loaded.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.record import provenance, write_json
from trtpool import parameters
from trtpool.engine.pool import ContextPool
from trtpool.runtimes.base import Parts, Runtime
from trtpool_builder.examples import get_example, write_example

WARMUP_RUNS = 3  # per context and batch size, sequential
WARMUP_SECONDS = 1.0  # concurrent, not counted


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", choices=("torch", "onnxruntime"), default="torch")
    parser.add_argument("--model", choices=("tiny", "resnet50", "bert_base"), default="resnet50")
    parser.add_argument(
        "--onnx",
        type=Path,
        help="the model's ONNX file; generated with the example's "
        "defaults if missing (default: <tmp>/trtpool-bench/<model>.onnx)",
    )
    parser.add_argument("--contexts", type=ints, default=[1, 2, 4, 8])
    parser.add_argument("--batches", type=ints, default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per (contexts, batch)")
    parser.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    parser.add_argument("--seq-len", type=int, default=128, help="bert_base: tokens per sequence")
    parser.add_argument("--image-size", type=int, default=224, help="resnet50: input height and width")
    parser.add_argument("--device", default="cuda:0", help="torch: the GPU")
    parser.add_argument(
        "--inputs",
        choices=("host", "device"),
        default="host",
        help="torch: where the batch's inputs lie when submitted",
    )
    parser.add_argument("--output", type=Path, help="write the JSON here (default: stdout)")
    args = parser.parse_args(argv)
    if args.runtime == "onnxruntime" and args.precision != "fp32":
        parser.error("--precision fp16 needs --runtime torch (onnxruntime runs the file's own types)")
    args.onnx = args.onnx or Path(tempfile.gettempdir()) / "trtpool-bench" / f"{args.model}.onnx"
    return args


def example_options(args: argparse.Namespace) -> dict[str, int]:
    return {"image_size": args.image_size} if args.model == "resnet50" else {}


def load(args: argparse.Namespace, contexts: int) -> Runtime:
    example = get_example(args.model)
    params = {
        "runtime": args.runtime,
        "model_file": args.onnx.name,
        "contexts": str(contexts),
        "profile": example.serving_profiles(**example_options(args))[0],
    }
    if args.runtime == "torch":
        params["precision"] = args.precision
    config = {
        "name": args.model,
        "max_batch_size": example.max_batch_size(),
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }
    device = args.device if args.runtime == "torch" else "cpu"
    cfg = parameters.load(config, args.onnx.parent, device)
    if args.runtime == "torch":
        from trtpool.runtimes.torch.runtime import TorchRuntime

        return TorchRuntime(cfg, args.onnx)  # exact sequence lengths (no sequence_buckets): one --seq-len
    from trtpool.runtimes.onnxruntime import OnnxRuntime

    return OnnxRuntime(cfg, args.onnx)


def inputs_for(args: argparse.Namespace, batch: int) -> Parts:
    """One batch as the parts a context is submitted: numpy arrays, or CUDA tensors with --inputs device."""
    example = get_example(args.model)
    if args.model != "bert_base":
        inputs = example.sample_inputs(batch, seed=0, **example_options(args))
    else:
        rng = np.random.default_rng(0)
        vocab = example.options()["vocab_size"]
        inputs = {
            "input_ids": rng.integers(0, vocab, size=(batch, args.seq_len), dtype=np.int64),
            "attention_mask": np.ones((batch, args.seq_len), np.int64),
        }
    if args.inputs == "device":
        import torch

        return {name: [torch.from_numpy(array).to(args.device)] for name, array in inputs.items()}
    return {name: [array] for name, array in inputs.items()}


def run_once(pool: ContextPool, parts: Parts) -> int:
    """One batch through a context, as a served batch runs; the context's index."""
    with pool.acquire() as context:
        context.submit(parts)
        context.complete()
    return context.index


def warm_up(pool: ContextPool, parts: Parts) -> None:
    """Run every context WARMUP_RUNS times, all held at once: the pool hands out the
    context freed last first, so one thread taking and giving would warm only one."""
    with ExitStack() as held:
        contexts = [held.enter_context(pool.acquire()) for _ in range(pool.size)]
        for _ in range(WARMUP_RUNS):
            for context in contexts:
                context.submit(parts)
                context.complete()


def items_per_s(result: dict[str, Any], batch: int) -> float:
    """Throughput of a timed() result whose runs each carried `batch` items."""
    return round(result["runs"] * batch / result["elapsed_s"], 1)


def timed(pool: ContextPool, parts: Parts, seconds: float) -> dict[str, Any]:
    """pool.size threads loop take -> submit -> complete -> give until the deadline."""
    latencies: list[list[float]] = [[] for _ in range(pool.size)]
    errors: list[BaseException] = []
    start = threading.Barrier(pool.size + 1)

    def work(mine: list[float]) -> None:
        start.wait()
        try:
            while (run_start := time.perf_counter()) < deadline:
                run_once(pool, parts)
                mine.append(time.perf_counter() - run_start)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(mine,)) for mine in latencies]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    every = np.array([t for mine in latencies for t in mine]) * 1e3
    return {
        "runs": int(every.size),
        "elapsed_s": round(elapsed, 4),
        "latency_ms": {
            "p50": round(float(np.percentile(every, 50)), 3),
            "p99": round(float(np.percentile(every, 99)), 3),
            "mean": round(float(every.mean()), 3),
        },
    }


class GpuMemory:
    """torch's allocator statistics and cudaMemGetInfo, relative to a baseline."""

    def __init__(self, device: str) -> None:
        import torch

        self.torch, self.device = torch, torch.device(device)
        torch.cuda.set_device(self.device)
        torch.cuda.synchronize(self.device)
        gc.collect()  # the previous model's module may sit in reference cycles
        torch.cuda.empty_cache()
        self.allocated = torch.cuda.memory_allocated(self.device)
        self.reserved = torch.cuda.memory_reserved(self.device)
        self.free = torch.cuda.mem_get_info(self.device)[0]

    def read(self) -> dict[str, int]:
        torch, device = self.torch, self.device
        torch.cuda.synchronize(device)
        return {
            "allocated_bytes": torch.cuda.memory_allocated(device) - self.allocated,
            "max_allocated_bytes": torch.cuda.max_memory_allocated(device) - self.allocated,
            "reserved_bytes": torch.cuda.memory_reserved(device) - self.reserved,
            "used_bytes": self.free - torch.cuda.mem_get_info(device)[0],
        }


def bench_contexts(args: argparse.Namespace, contexts: int) -> tuple[list[dict], dict]:
    gpu = GpuMemory(args.device) if args.runtime == "torch" else None
    runtime = load(args, contexts)
    memory: dict[str, Any] = {"contexts": contexts}
    if gpu:
        memory["weights_bytes"] = gpu.read()["allocated_bytes"]
    memory["context_memory_bytes"] = runtime.context_memory_bytes()
    if gpu:
        gpu.torch.cuda.reset_peak_memory_stats(gpu.device)  # the peak of the model with its pool only
        reserved = gpu.read()["reserved_bytes"]
    pool = ContextPool(runtime, contexts)
    if gpu:  # buffers, workspaces and graph pools (whose freed blocks stay reserved, not allocated)
        memory["pool_reserved_bytes"] = gpu.read()["reserved_bytes"] - reserved
    results = []
    try:
        for batch in args.batches:
            parts = inputs_for(args, batch)
            warm_up(pool, parts)
            timed(pool, parts, min(WARMUP_SECONDS, args.seconds))
            result = timed(pool, parts, args.seconds)
            result = {"contexts": contexts, "batch": batch, "items_per_s": items_per_s(result, batch), **result}
            print(
                f"contexts {contexts:2d}  batch {batch:3d}  {result['items_per_s']:10.1f} items/s  "
                f"p50 {result['latency_ms']['p50']:.2f} ms",
                file=sys.stderr,
                flush=True,
            )
            results.append(result)
        memory.update(
            gpu.read() if gpu else {"max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10}
        )
    finally:
        pool.close()  # closes the runtime too
    return results, memory


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.onnx.is_file():
        print(f"generating {args.model} into {args.onnx}", file=sys.stderr, flush=True)
        write_example(args.model, args.onnx, **example_options(args))
    report: dict[str, Any] = {
        **provenance(),
        "runtime": args.runtime,
        "model": args.model,
        "onnx": str(args.onnx),
        "precision": args.precision,
        "seconds": args.seconds,
        "seq_len": args.seq_len if args.model == "bert_base" else None,
        "inputs": args.inputs,
    }
    if args.runtime == "torch":
        import torch

        report.update(
            device=args.device, gpu=torch.cuda.get_device_name(torch.device(args.device)), torch=torch.__version__
        )
    report["results"], report["memory"] = [], []
    for contexts in args.contexts:
        results, memory = bench_contexts(args, contexts)
        report["results"] += results
        report["memory"].append(memory)
    single = {r["batch"]: r["items_per_s"] for r in report["results"] if r["contexts"] == 1}
    for result in report["results"]:
        if result["batch"] in single:
            result["speedup_vs_1_context"] = round(result["items_per_s"] / single[result["batch"]], 2)
    if args.output:
        write_json(args.output, report)
    else:
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
