"""Issue 36's stand-alone JPEG probe, in the repo: does its figure depend on the files it decodes?

The issue's JPEG goal rests on a torch probe run on an H200 outside the repo, on 500x375 JPEG files
of 73 KB on average; the served benchmarks and the in-process ceiling (bench/engine_host.py --case
ceiling) take the bench's files of mixed sizes (120x90 to 1024x768, about 57 KB, about 1.6x the
pixels). This measures the probe's work on both file sets, in one run on one GPU:

    small   64 photo-like JPEGs of 500x375 (tests.harness.pipelines.images at quality 98: the mean
            size the record states, near the probe's 73 KB)
    mixed   the bench's 64 files: images(64, seed=7, png_every=0)

in each arrangement the probe had: ONE process of K threads (--threads), each thread on its own CUDA
stream with its own CUDA graph of the one shared model and its own static input; and K processes of
one thread each (--processes, spawned, started together behind a barrier so they measure the same
window; their rates summed). Each process runs both file sets in turn, so both meet the same
processes. A step, per thread: torchvision.io.decode_jpeg of the batch's files (a list of uint8 CPU
tensors, device='cuda': nvJPEG), each image resized to 224x224 (bilinear, no antialias) and stacked,
normalized with ImageNet's mean and std, copied as fp16 channels_last into the graph's static input,
the graph replayed (torchvision's ResNet-50, random weights, fp16, channels_last, captured on the
thread's stream after warm-up there), softmax and top-5, the top-5 copied to the host and the stream
waited for. Per arrangement and file set: images/s after warm-up over --seconds, and the GPU's busy
share (nvidia-smi) over the same window. --device cpu is a smoke test of the code on a machine
without a GPU: eager fp32 model, no streams or graphs, no warm-up.

    python3 bench/jpeg_probe.py --out $OUT/jpeg_probe.json     # bench/gpu/h200.sh stage jpeg-probe
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import queue
import signal
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from importlib import metadata
from pathlib import Path
from typing import Any

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import gpu_memory  # noqa: E402
from bench.pipeline import GpuUtilization  # noqa: E402
from bench.record import default_out, provenance, write_json  # noqa: E402
from tests.harness.pipelines import images  # noqa: E402

FILE_SETS: dict[str, dict[str, Any]] = {
    # the probe: 500x375, 73 KB on average (picture() comes to about 67 KB at 98, 84 KB at 99)
    "small": {"sizes": ((500, 375),), "quality": 98},
    # the served benchmarks' and the in-process ceiling's: mixed sizes at quality 90
    "mixed": {},
}
SIDE = 224
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
WARM_STEPS = 3  # per thread and file set, on the GPU: the decoder's state for the sizes, the allocator
START_S = 180  # the longest a barrier waits: K processes importing torch and capturing their graphs


def file_set(name: str, count: int = 64) -> list[bytes]:
    """The named set's JPEG files (seed 7, as the benchmarks make them)."""
    return images(count, seed=7, png_every=0, **FILE_SETS[name])


def described(name: str, files: list[bytes]) -> dict:
    """What a file set holds: count, mean bytes, mean pixels, its sizes and JPEG quality."""
    sizes = [Image.open(io.BytesIO(f)).size for f in files]
    return {
        "count": len(files),
        "mean_bytes": round(statistics.mean(map(len, files))),
        "mean_pixels": round(statistics.mean(w * h for w, h in sizes)),
        "sizes": sorted({f"{w}x{h}" for w, h in sizes}),
        "quality": FILE_SETS[name].get("quality", 90),
    }


class Step:
    """One thread's pipeline: its stream, its static input and its CUDA graph of the shared model
    (on the CPU: the eager model); called with a batch of encoded files (uint8 CPU tensors)."""

    def __init__(self, model: Any, batch: int, device: str) -> None:
        import torch
        import torchvision.io

        self.torch, self.device, self.on_gpu = torch, device, device == "cuda"
        self.decode_jpeg, self.rgb = torchvision.io.decode_jpeg, torchvision.io.ImageReadMode.RGB
        self.stream = torch.cuda.Stream() if self.on_gpu else None
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255
        dtype = torch.float16 if self.on_gpu else torch.float32
        self.input = torch.zeros((batch, 3, SIDE, SIDE), dtype=dtype, device=device).contiguous(
            memory_format=torch.channels_last
        )
        self.scores = torch.empty((batch, 5), pin_memory=self.on_gpu)
        self.labels = torch.empty((batch, 5), dtype=torch.int64, pin_memory=self.on_gpu)
        self.model, self.graph = model, None
        if self.on_gpu:
            self.graph = self._captured()

    def _captured(self) -> Any:
        """The model on the static input as a CUDA graph, captured on this step's stream after
        warm-up runs there."""
        torch = self.torch
        with torch.no_grad(), torch.cuda.stream(self.stream):
            for _ in range(3):
                self.model(self.input)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self.stream):
                self.output = self.model(self.input)
        self.stream.synchronize()
        return graph

    def _resized(self, image: Any) -> Any:
        """A decoded uint8 [3, H, W] image as float [1, 3, SIDE, SIDE], bilinear (no antialias)."""
        interpolate = self.torch.nn.functional.interpolate
        return interpolate(image[None].float(), (SIDE, SIDE), mode="bilinear", align_corners=False)

    def __call__(self, files: list) -> None:
        torch = self.torch
        with torch.no_grad(), torch.cuda.stream(self.stream) if self.on_gpu else nullcontext():
            decoded = self.decode_jpeg(files, mode=self.rgb, device=self.device)
            batch = torch.cat([self._resized(image) for image in decoded])
            self.input.copy_(batch.sub_(self.mean).div_(self.std))
            if self.graph is not None:
                self.graph.replay()
                logits = self.output
            else:
                logits = self.model(self.input)
            scores, labels = torch.softmax(logits.float(), dim=1).topk(5)
            self.scores.copy_(scores, non_blocking=self.on_gpu)
            self.labels.copy_(labels, non_blocking=self.on_gpu)
        if self.stream is not None:
            self.stream.synchronize()


def timed(steps: list[Step], batches: list[list], seconds: float) -> tuple[int, float]:
    """Images done by the steps, each in a thread of its own, in `seconds`, and the seconds taken
    (to the end of each thread's last step)."""
    begun = time.perf_counter()
    end = begun + seconds

    def loop(index: int) -> int:
        done, turn = 0, index
        while time.perf_counter() < end:
            batch = batches[turn % len(batches)]
            steps[index](batch)
            done, turn = done + len(batch), turn + 1
        return done

    with ThreadPoolExecutor(len(steps)) as pool:
        done = sum(pool.map(loop, range(len(steps))))
    return done, time.perf_counter() - begun


def worker(rank: int, threads: int, sets: dict[str, list[bytes]], args: dict, barrier: Any, results: Any) -> None:
    """One process of an arrangement: `threads` steps on one model; per file set, warm-up, the
    barrier, then --seconds of steps; reports {set, rank, images, seconds} (or an error) to `results`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a time limit's SIGINT: the parent ends its workers
    try:
        import torch
        import torchvision

        device, batch = args["device"], args["batch"]
        model = torchvision.models.resnet50(weights=None).eval()
        model = (model.half() if device == "cuda" else model).to(device, memory_format=torch.channels_last)
        steps = [Step(model, batch, device) for _ in range(threads)]  # captured one by one, before any thread runs
        for name, files in sets.items():
            encoded = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files]
            batches = [[encoded[(s + i) % len(encoded)] for i in range(batch)] for s in range(0, len(encoded), batch)]
            for step in steps:
                for _ in range(WARM_STEPS if device == "cuda" else 0):
                    step(batches[0])
            barrier.wait(START_S)
            done, seconds = timed(steps, batches, args["seconds"])
            results.put({"set": name, "rank": rank, "images": done, "seconds": round(seconds, 3)})
    except Exception as error:  # noqa: BLE001 - any failure is the arrangement's figure: said, not raised
        results.put({"rank": rank, "error": f"{type(error).__name__}: {error}"[-600:]})
        barrier.abort()


def arrangement(processes: int, threads: int, sets: dict[str, list[bytes]], args: argparse.Namespace) -> dict:
    """Per file set: images/s of `processes` processes of `threads` threads started together, summed,
    and the GPU's busy share over the window; printed as each set finishes."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(processes + 1), context.Queue()
    settings = {"device": args.device, "batch": args.batch, "seconds": args.seconds}
    workers = [
        context.Process(target=worker, args=(rank, threads, sets, settings, barrier, results), daemon=True)
        for rank in range(processes)
    ]
    for process in workers:
        process.start()
    label = f"threads={threads}" if processes == 1 else f"processes={processes}"
    rows: dict[str, Any] = {}
    finished = False
    try:
        for name in sets:
            barrier.wait(START_S)
            with GpuUtilization() as busy:
                reports = [results.get(timeout=args.seconds + 120) for _ in workers]
            failed = [r["error"] for r in reports if "error" in r]
            if failed:
                rows["errors"] = failed
                print(f"{label:13s} failed: {failed[0]}", flush=True)
                break
            rows[name] = {
                "images_per_s": round(sum(r["images"] / r["seconds"] for r in reports), 1),
                "gpu_busy_percent": busy.mean,
                "per_process": [{"images": r["images"], "seconds": r["seconds"]} for r in reports],
            }
            rate, share = rows[name]["images_per_s"], "-" if busy.mean is None else f"{busy.mean}%"
            print(f"{label:13s} {name:6s} {rate:9.1f} images/s, GPU busy {share}", flush=True)
        finished = True
    except (threading.BrokenBarrierError, queue.Empty) as error:
        # a worker's own error first; the others' broken barrier after it
        said = sorted(set(drained(results)), key=lambda e: ("BrokenBarrierError" in e, e))
        rows["errors"] = said or [f"{type(error).__name__} in the parent: no worker said why"]
        print(f"{label:13s} failed: {rows['errors'][0]}", flush=True)
    finally:
        for process in workers:
            process.join(timeout=30 if finished else 0)
            if process.is_alive():
                process.terminate()
    return rows


def drained(results: Any) -> list[str]:
    """The errors the workers reported, waiting a little for them."""
    errors = []
    try:
        while True:
            report = results.get(timeout=5)
            if "error" in report:
                errors.append(report["error"])
    except queue.Empty:
        return errors


def installed(package: str) -> str | None:
    """The package's version, without importing it (the parent holds no CUDA context)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def counts(text: str) -> list[int]:
    """A comma-separated list of counts, each at least 1 ("" for none)."""
    found = [int(x) for x in text.split(",") if x]
    if any(n < 1 for n in found):
        raise argparse.ArgumentTypeError(f"counts start at 1: {text}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=lambda t: t.split(","), default=list(FILE_SETS), help="file sets: small,mixed")
    parser.add_argument("--threads", type=counts, default=[1, 2, 4], help="one process of K threads, each K")
    parser.add_argument("--processes", type=counts, default=[2, 4, 6], help="K processes of one thread, each K")
    parser.add_argument("--seconds", type=float, default=5.0, help="the measured window of each arrangement")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test of the code")
    parser.add_argument("--out", type=Path, default=default_out("jpeg_probe.json"))
    args = parser.parse_args()
    unknown = set(args.files) - set(FILE_SETS)
    if unknown:
        parser.error(f"--files: no file set {sorted(unknown)} (there are {list(FILE_SETS)})")
    if args.batch < 1:
        parser.error("--batch: at least 1")

    sets = {name: file_set(name) for name in args.files}
    record: dict[str, Any] = {
        **provenance(),
        "gpu": gpu_memory.name(),
        "versions": {package: installed(package) for package in ("torch", "torchvision")},
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "file_sets": {name: described(name, files) for name, files in sets.items()},
        "arrangements": {},
        "interrupted": None,
    }
    for name, found in record["file_sets"].items():
        print(f"{name}: {found}", flush=True)
    plan = [(1, k) for k in args.threads] + [(k, 1) for k in args.processes]
    try:
        for processes, threads in plan:
            key = f"threads_{threads}" if processes == 1 else f"processes_{processes}"
            record["arrangements"][key] = arrangement(processes, threads, sets, args)
            write_json(args.out, summarized(record))  # each arrangement kept, whatever comes next
    except KeyboardInterrupt:  # a time limit's SIGINT (timeout -s INT): keep what was measured
        record["interrupted"] = f"interrupted after {list(record['arrangements'])}"
        print(record["interrupted"], flush=True)
    write_json(args.out, summarized(record))
    print(f"wrote {args.out}")
    return 0


def summarized(record: dict) -> dict:
    """The record with its headline: images/s by file set and arrangement, and mixed over small."""
    table = {
        name: {key: rows[name]["images_per_s"] for key, rows in record["arrangements"].items() if name in rows}
        for name in record["file_sets"]
    }
    record["images_per_s"] = table
    if {"small", "mixed"} <= set(table):
        record["mixed_over_small"] = {
            key: round(table["mixed"][key] / table["small"][key], 3)
            for key in table["small"]
            if table["small"][key] and key in table["mixed"]
        }
    return record


if __name__ == "__main__":
    sys.exit(main())
