"""Issue 36's stand-alone JPEG probe, in the repo: does its figure depend on the files it decodes, and on
how the decoders and the model share the GPU?

The issue's JPEG goal rests on a torch probe run on an H200 outside the repo, on 500x375 JPEG files
of 73 KB on average; the served benchmarks and the in-process ceiling (bench/engine_host.py --case
ceiling) take the bench's files of mixed sizes (120x90 to 1024x768, about 57 KB, about 1.6x the
pixels). This measures the probe's work on both file sets, in one run on one GPU:

    small   64 photo-like JPEGs of 500x375 (tests.harness.pipelines.images at quality 98: the mean
            size the record states, near the probe's 73 KB)
    mixed   the bench's 64 files: images(64, seed=7, png_every=0)

in the probe's two arrangements and a third:

    threads_K    ONE process of K threads (--threads), each thread on its own CUDA stream with its own
                 CUDA graph of the one shared model and its own static input
    processes_K  K processes of one thread each (--processes), each with a model of its own
    split_K      K decoder processes and ONE engine process of E threads (--split,
                 --split-engine-threads): the model once

torchvision keeps one nvJPEG decoder per process behind a lock, so one process decodes one batch at a
time; K processes decode K batches at once but hold K models that time-slice the GPU; split keeps the
K decoders and holds the model once. Its engine allocates 2K slots of the preprocessed batch's shape
and layout (fp16, channels_last) on the GPU and shares them with the decoders through CUDA IPC
(torch.multiprocessing): a decoder takes a free slot's index from a queue, decodes, resizes and
normalizes its batch on its own stream straight into the slot, waits for its stream and hands the index
on in a second queue; an engine thread takes it, copies the slot into its graph's static input on its
own stream (device to device, the same layout), frees the slot once the copy is done and runs the rest
of the step. After the window the engine puts a poison pill per decoder behind the free slots and reads
every slot back; it ends only once every decoder has let go of the slots (torch's rules for sharing
CUDA tensors: the producer keeps them alive while consumers hold them).

A step, per thread: torchvision.io.decode_jpeg of the batch's files (a list of uint8 CPU tensors,
device='cuda': nvJPEG), each image resized to 224x224 (bilinear, no antialias) and stacked, normalized
with ImageNet's mean and std, copied as fp16 channels_last into the graph's static input (split: into
a slot, in a decoder process), the graph replayed (torchvision's ResNet-50, random weights, fp16,
channels_last, captured on the thread's stream after warm-up there), softmax and top-5, the top-5
copied to the host and the stream waited for. Every process is spawned and runs both file sets in
turn, so both meet the same processes; per file set, all of an arrangement's processes warm up, then
start together behind a barrier and measure the same window. Per arrangement and file set: images/s
after warm-up over --seconds (the processes' rates summed; split: the batches the engine consumed),
and the GPU's busy share (nvidia-smi) over the same window. --device cpu is a smoke test of the code on
a machine without a GPU: eager fp32 model, no streams, graphs or warm-up; split's slots are CPU tensors
in shared memory.

    python3 bench/jpeg_probe.py --out $OUT/jpeg_probe.json     # bench/gpu/h200.sh stage jpeg-probe
"""

from __future__ import annotations

import argparse
import io
import itertools
import multiprocessing
import queue
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
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
STALL_S = 60  # the longest split's processes wait on a slot queue: a peer that failed, not a slow one
RELEASED = "released"  # a split decoder's last word to the engine: it holds none of the slots any more


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


class Lane:
    """A CUDA stream of one's own (none on the CPU): what runs inside `running()` is queued there,
    without autograd; wait() waits for it."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch = torch
        self.stream = torch.cuda.Stream() if device == "cuda" else None

    @contextmanager
    def running(self) -> Iterator[None]:
        torch = self.torch
        with torch.no_grad(), torch.cuda.stream(self.stream) if self.stream is not None else nullcontext():
            yield

    def wait(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()


class Preprocess:
    """Decode, resize and normalize, the same in every arrangement: a batch of encoded files (uint8 CPU
    tensors) decoded by decode_jpeg on the device (nvJPEG on the GPU), each image resized to SIDE x SIDE
    (bilinear, no antialias), stacked, normalized with ImageNet's mean and std and copied into a target
    tensor (a step's static input, or a split slot), queued on the current stream."""

    def __init__(self, torch: Any, device: str) -> None:
        import torchvision.io

        self.torch, self.device = torch, device
        self.decode_jpeg, self.rgb = torchvision.io.decode_jpeg, torchvision.io.ImageReadMode.RGB
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def __call__(self, files: list, target: Any) -> None:
        decoded = self.decode_jpeg(files, mode=self.rgb, device=self.device)
        batch = self.torch.cat([self._resized(image) for image in decoded])
        target.copy_(batch.sub_(self.mean).div_(self.std))

    def _resized(self, image: Any) -> Any:
        """A decoded uint8 [3, H, W] image as float [1, 3, SIDE, SIDE], bilinear (no antialias)."""
        interpolate = self.torch.nn.functional.interpolate
        return interpolate(image[None].float(), (SIDE, SIDE), mode="bilinear", align_corners=False)


class Step:
    """One thread's pipeline: its lane, its static input and its CUDA graph of the shared model (on the
    CPU: the eager model); called with a batch of encoded files (uint8 CPU tensors), or fed a batch
    another process decoded (from_slot)."""

    def __init__(self, model: Any, batch: int, device: str) -> None:
        import torch

        self.torch, self.on_gpu = torch, device == "cuda"
        self.preprocess, self.lane = Preprocess(torch, device), Lane(torch, device)
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
        with self.lane.running():
            for _ in range(3):
                self.model(self.input)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self.lane.stream):
                self.output = self.model(self.input)
        self.lane.wait()
        return graph

    def __call__(self, files: list) -> None:
        with self.lane.running():
            self.preprocess(files, self.input)
            self._inferred()
        self.lane.wait()

    def from_slot(self, slot: Any, release: Callable[[], None]) -> None:
        """A batch a decoder process left in `slot` copied into the static input (device to device, the
        same layout), `release` called once the copy is done, then the rest of the step."""
        with self.lane.running():
            self.input.copy_(slot)
            self.lane.wait()  # the copy done: the slot may be filled again
            release()
            self._inferred()
        self.lane.wait()

    def _inferred(self) -> None:
        """The graph replayed (on the CPU: the eager model), softmax and top-5, and the top-5 copied to
        host memory, queued on the current stream."""
        torch = self.torch
        if self.graph is not None:
            self.graph.replay()
            logits = self.output
        else:
            logits = self.model(self.input)
        scores, labels = torch.softmax(logits.float(), dim=1).topk(5)
        self.scores.copy_(scores, non_blocking=self.on_gpu)
        self.labels.copy_(labels, non_blocking=self.on_gpu)


def resnet(torch: Any, device: str) -> Any:
    """torchvision's ResNet-50 with random weights, channels_last: fp16 on the GPU, fp32 on the CPU."""
    import torchvision

    model = torchvision.models.resnet50(weights=None).eval()
    return (model.half() if device == "cuda" else model).to(device, memory_format=torch.channels_last)


def batched(torch: Any, files: list[bytes], batch: int) -> list[list]:
    """The files as uint8 tensors in batches of `batch`, one starting at every batch-th file (wrapping)."""
    encoded = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files]
    return [[encoded[(s + i) % len(encoded)] for i in range(batch)] for s in range(0, len(encoded), batch)]


def cycled(batches: list[list], first: int) -> Iterator[list]:
    """The batches in turn, forever, from the `first`th: each thread or decoder starts on its own."""
    return itertools.islice(itertools.cycle(batches), first % len(batches), None)


def timed(calls: list[Callable[[], int]], seconds: float) -> tuple[int, float]:
    """Images done by the calls, each called over and over in a thread of its own for `seconds`, and
    the seconds taken (to the end of each thread's last call)."""
    begun = time.perf_counter()
    end = begun + seconds

    def loop(call: Callable[[], int]) -> int:
        done = 0
        while time.perf_counter() < end:
            done += call()
        return done

    with ThreadPoolExecutor(len(calls)) as pool:
        done = sum(pool.map(loop, calls))
    return done, time.perf_counter() - begun


def stepping(step: Step, batches: list[list], first: int) -> Callable[[], int]:
    """A thread's whole steps on the batches in turn, from the `first`th: one a call."""
    turns = cycled(batches, first)

    def call() -> int:
        files = next(turns)
        step(files)
        return len(files)

    return call


@dataclass(frozen=True)
class Exchange:
    """Split's queues, made by the parent: the slots (their block) handed from the engine to the decoders
    (and each decoder's last word back, RELEASED: on the filled queue it could overtake another decoder's
    stop), and the indices of the free slots and of the filled ones."""

    handout: Any
    free: Any
    filled: Any


def consuming(step: Step, slots: list, exchange: Exchange) -> Callable[[], int]:
    """A split engine thread's steps on the slots the decoders filled: one a call, the slot back in the
    free queue once copied."""

    def call() -> int:
        index = exchange.filled.get(timeout=STALL_S)
        step.from_slot(slots[index], lambda: exchange.free.put(index))
        return len(step.input)

    return call


def slot_views(block: Any) -> list:
    """Split's slots: block [S, batch, SIDE, SIDE, 3] as S tensors [batch, 3, SIDE, SIDE] in channels_last
    layout, the layout of a step's static input, so that the engine's copy is one plain copy."""
    return [slot.permute(0, 3, 1, 2) for slot in block]


def worker(rank: int, threads: int, sets: dict[str, list[bytes]], args: dict, barrier: Any, results: Any) -> None:
    """One process of threads_K or processes_K: `threads` steps on one model; per file set, warm-up,
    the barrier, then --seconds of steps; reports {set, rank, images, seconds} (or an error) to `results`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a time limit's SIGINT: the parent ends its workers
    try:
        import torch

        device, batch = args["device"], args["batch"]
        model = resnet(torch, device)
        steps = [Step(model, batch, device) for _ in range(threads)]  # captured one by one, before any thread runs
        for name, files in sets.items():
            batches = batched(torch, files, batch)
            for step in steps:
                for _ in range(WARM_STEPS if device == "cuda" else 0):
                    step(batches[0])
            barrier.wait(START_S)
            done, seconds = timed([stepping(step, batches, i) for i, step in enumerate(steps)], args["seconds"])
            results.put({"set": name, "rank": rank, "images": done, "seconds": round(seconds, 3)})
    except Exception as error:  # noqa: BLE001 - any failure is the arrangement's figure: said, not raised
        report_failure(rank, error, barrier, results)


def engine(
    decoders: int,
    threads: int,
    exchange: Exchange,
    sets: dict[str, list[bytes]],
    args: dict,
    barrier: Any,
    results: Any,
) -> None:
    """Split's engine process: the model once, `threads` steps on it, and 2 x `decoders` slots handed
    to the decoders; per file set, every slot in the free queue, the barrier, --seconds of steps on the
    batches the decoders filled, then the slots read back; reports {set, rank, images, seconds} (or an
    error) to `results`. It ends once every decoder has let go of the slots."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import torch
        import torch.multiprocessing  # its reducers share the slots (CUDA IPC; on the CPU shared memory)

        device, batch = args["device"], args["batch"]
        model = resnet(torch, device)
        steps = [Step(model, batch, device) for _ in range(threads)]
        block = torch.zeros((2 * decoders, batch, SIDE, SIDE, 3), dtype=steps[0].input.dtype, device=device)
        if device == "cpu":
            block.share_memory_()
        slots = slot_views(block)
        for _ in range(decoders):
            exchange.handout.put(block)  # kept alive here until every decoder says RELEASED
        for step in steps:
            for _ in range(WARM_STEPS if device == "cuda" else 0):
                step.from_slot(slots[0], lambda: None)
        for name in sets:
            for index in range(len(slots)):
                exchange.free.put(index)
            barrier.wait(START_S)
            done, seconds = timed([consuming(step, slots, exchange) for step in steps], args["seconds"])
            back = collected(exchange, decoders)
            if sorted(back) != list(range(len(slots))):
                raise RuntimeError(f"slots {sorted(back)} came back of {len(slots)}")
            results.put({"set": name, "rank": 0, "images": done, "seconds": round(seconds, 3)})
        for _ in range(decoders):  # the slots go with this process: not before every decoder let go of them
            if exchange.handout.get(timeout=STALL_S) != RELEASED:
                raise RuntimeError(f"a decoder's last word was not {RELEASED!r}")
    except Exception as error:  # noqa: BLE001 - any failure is the arrangement's figure: said, not raised
        report_failure(0, error, barrier, results)


def collected(exchange: Exchange, decoders: int) -> list[int]:
    """Split's slots back after a window: a poison pill per decoder in the free queue, behind the free
    slots (which the decoders fill first), then the filled queue read until every decoder has stopped."""
    for _ in range(decoders):
        exchange.free.put(None)
    back, stopped = [], 0
    while stopped < decoders:
        index = exchange.filled.get(timeout=STALL_S)
        if index is None:
            stopped += 1
        else:
            back.append(index)
    return back


def decoder(
    rank: int, exchange: Exchange, sets: dict[str, list[bytes]], args: dict, barrier: Any, results: Any
) -> None:
    """One of split's decoder processes: the engine's slots; per file set, warm-up into a slot-shaped
    tensor of its own, the barrier, then a batch decoded into each free slot it takes, on its own stream,
    until a poison pill; reports {set, rank, decoded, seconds} (or an error) to `results`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import torch
        import torch.multiprocessing  # its reducers rebuild the engine's slots from their handles

        device = args["device"]
        preprocess, lane = Preprocess(torch, device), Lane(torch, device)
        block = exchange.handout.get(timeout=START_S)
        slots = slot_views(block)
        scratch = torch.empty_like(slots[0])
        for name, files in sets.items():
            batches = batched(torch, files, args["batch"])
            for _ in range(WARM_STEPS if device == "cuda" else 0):
                with lane.running():
                    preprocess(batches[0], scratch)
                lane.wait()
            turns = cycled(batches, rank)
            barrier.wait(START_S)
            begun, decoded = time.perf_counter(), 0
            while (index := exchange.free.get(timeout=STALL_S)) is not None:
                files = next(turns)
                with lane.running():
                    preprocess(files, slots[index])
                lane.wait()
                exchange.filled.put(index)
                decoded += len(files)
            exchange.filled.put(None)  # stopped: every slot it took is in the filled queue
            results.put(
                {"set": name, "rank": rank, "decoded": decoded, "seconds": round(time.perf_counter() - begun, 3)}
            )
        del slots, block  # the engine's memory let go before the engine ends
        exchange.handout.put(RELEASED)
    except Exception as error:  # noqa: BLE001 - any failure is the arrangement's figure: said, not raised
        report_failure(rank, error, barrier, results)


def report_failure(rank: int, error: Exception, barrier: Any, results: Any) -> None:
    """A process's failure reported to the parent, and the barrier broken so that the others stop waiting."""
    results.put({"rank": rank, "error": f"{type(error).__name__}: {error}"[-600:]})
    barrier.abort()


Roles = list[tuple[Callable[..., None], tuple]]


def roles(kind: str, count: int, engine_threads: int, context: Any) -> Roles:
    """The processes of arrangement `kind`_`count`: each one's target and its leading arguments."""
    if kind == "threads":
        return [(worker, (0, count))]
    if kind == "processes":
        return [(worker, (rank, 1)) for rank in range(count)]
    exchange = Exchange(context.Queue(), context.Queue(), context.Queue())
    return [(engine, (count, engine_threads, exchange))] + [(decoder, (r, exchange)) for r in range(1, count + 1)]


def arrangement(
    label: str, launched: Roles, context: Any, sets: dict[str, list[bytes]], args: argparse.Namespace
) -> dict:
    """Per file set: images/s of the processes `launched` names, started together, summed, and the GPU's
    busy share over the window; printed as each set finishes."""
    barrier, results = context.Barrier(len(launched) + 1), context.Queue()
    settings = {"device": args.device, "batch": args.batch, "seconds": args.seconds}
    processes = [
        context.Process(target=target, args=(*lead, sets, settings, barrier, results), daemon=True)
        for target, lead in launched
    ]
    for process in processes:
        process.start()
    rows: dict[str, Any] = {}
    finished = False
    try:
        for name in sets:
            barrier.wait(START_S)
            with GpuUtilization() as busy:
                reports = reported(results, len(processes), args.seconds + 120)
            failed = [r["error"] for r in reports if "error" in r]
            if failed:
                rows["errors"] = failed
                print(f"{label:13s} failed: {failed[0]}", flush=True)
                break
            reports.sort(key=lambda r: r["rank"])
            rows[name] = {
                "images_per_s": round(sum(r["images"] / r["seconds"] for r in reports if "images" in r), 1),
                "gpu_busy_percent": busy.mean,
                "per_process": [{k: v for k, v in r.items() if k not in ("set", "rank")} for r in reports],
            }
            rate, share = rows[name]["images_per_s"], "-" if busy.mean is None else f"{busy.mean}%"
            print(f"{label:13s} {name:6s} {rate:9.1f} images/s, GPU busy {share}", flush=True)
        finished = "errors" not in rows
    except (threading.BrokenBarrierError, queue.Empty) as error:
        # a worker's own error first; the others' broken barrier after it
        said = sorted(set(drained(results)), key=lambda e: ("BrokenBarrierError" in e, e))
        rows["errors"] = said or [f"{type(error).__name__} in the parent: no worker said why"]
        print(f"{label:13s} failed: {rows['errors'][0]}", flush=True)
    finally:
        for process in processes:
            process.join(timeout=30 if finished else 0)
            if process.is_alive():
                process.terminate()
    return rows


def reported(results: Any, count: int, timeout: float) -> list[dict]:
    """The processes' reports on a file set: `count` of them, or fewer up to the first error."""
    reports: list[dict] = []
    while len(reports) < count and not any("error" in r for r in reports):
        reports.append(results.get(timeout=timeout))
    return reports


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
    parser.add_argument("--split", type=counts, default=[4, 6], help="K decoder processes and one engine, each K")
    parser.add_argument("--split-engine-threads", type=int, default=2, help="the split engine's threads")
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
    if args.split_engine_threads < 1:
        parser.error("--split-engine-threads: at least 1")

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
    context = multiprocessing.get_context("spawn")
    plan = [("threads", k) for k in args.threads] + [("processes", k) for k in args.processes]
    plan += [("split", k) for k in args.split]
    try:
        for kind, count in plan:
            begun = time.perf_counter()
            launched = roles(kind, count, args.split_engine_threads, context)
            shape = {"decoders": count, "engine_threads": args.split_engine_threads} if kind == "split" else {}
            rows = arrangement(f"{kind}={count}", launched, context, sets, args)
            record["arrangements"][f"{kind}_{count}"] = {**shape, **rows}
            write_json(args.out, summarized(record))  # each arrangement kept, whatever comes next
            print(f"{kind}={count} took {time.perf_counter() - begun:.0f} s", flush=True)
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
