"""Where a host-input batch's time goes in the torch runtime (issue 23), one context:

  upload     trtpool.gpu.host_upload alone, a batch of host parts into a device buffer
             on a stream of its own: the host's time in upload() (the gather and
             the queueing) and, by CUDA events recorded before and after it on
             that stream, when the last byte reached the device
  batch      context.submit() (host time) and submit -> complete (wall) for the
             same batch through the runtime

each with the batch gathered in one piece then copied (what trtpool did before)
and in slices on the default threads, and with the batch as 32 requests of one
row (batch-1 clients) and as one request of 32 (a batch-32 client). Then
in_place_requests_32x1: the 32 rows side by side in one page-locked mapping, as an
engine host reads an instance's input slab (trtpool.gpu.pinned_regions), copied to
the device by DMA from where they lie, with no staging. Medians of --repeats runs
after warm-up.

    python bench/host_copies.py --model resnet50 --onnx /tmp/resnet50.onnx --precision fp16 \\
        --output bench/results/h200/host_copies.json
"""

from __future__ import annotations

import mmap
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench.inprocess import example_options, inputs_for, load, parse_args
from bench.record import provenance, write_json
from trtpool.gpu import cuda
from trtpool.gpu.host_upload import ONE_PIECE, SLICE_BYTES, HostUploader, default_threads
from trtpool.gpu.pinned_regions import PinnedRegion
from trtpool.runtimes.base import Parts
from trtpool_builder.examples import write_example

UPLOADERS = {"one_piece": ONE_PIECE, "sliced": {}}
BATCH = 32


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e3, 3)


def upload_alone(uploader: HostUploader, parts: Parts, context: Any, repeats: int) -> dict[str, float]:
    """upload() of each input into a device buffer of its own, timed by host clock and CUDA events."""
    stream, start, end = cuda.Stream(), cuda.Event(timing=True), cuda.Event(timing=True)
    shapes = {name: (sum(p.shape[0] for p in tensors), *tensors[0].shape[1:]) for name, tensors in parts.items()}
    targets = {name: cuda.DeviceBuffer(context.staging.view(name, shape).nbytes) for name, shape in shapes.items()}
    host, device = [], []
    try:
        for run in range(repeats + 3):
            start.record(stream)
            began = time.perf_counter()
            for name, tensors in parts.items():
                uploader.upload(tensors, context.staging.view(name, shapes[name]), targets[name].ptr, stream)
            queued = time.perf_counter() - began
            end.record(stream)
            end.synchronize()
            if run >= 3:
                host.append(queued)
                device.append(end.elapsed_ms(start) / 1e3)
    finally:
        for resource in (*targets.values(), start, end, stream):
            resource.close()
    nbytes = sum(context.staging.view(n, s).nbytes for n, s in shapes.items())
    return {
        "bytes": nbytes,
        "host_ms": median_ms(host),
        "until_on_device_ms": median_ms(device),
        "gb_per_s": round(nbytes / statistics.median(device) / 1e9, 2),
    }


def whole_batch(parts: Parts, context: Any, repeats: int) -> dict[str, float]:
    submit, total = [], []
    for run in range(repeats + 3):
        began = time.perf_counter()
        context.submit(parts)
        submitted = time.perf_counter()
        context.complete()
        if run >= 3:
            submit.append(submitted - began)
            total.append(time.perf_counter() - began)
    return {"submit_host_ms": median_ms(submit), "submit_to_complete_ms": median_ms(total)}


def in_place(batch: dict[str, np.ndarray]) -> tuple[Parts, list[PinnedRegion]]:
    """Each input's rows as adjacent one-row views of a page-locked mapping of its own."""
    parts, regions = {}, []
    for name, tensor in batch.items():
        memory = mmap.mmap(-1, tensor.nbytes)
        slab = np.frombuffer(memory, tensor.dtype, tensor.size).reshape(tensor.shape)
        slab[...] = tensor
        regions.append(PinnedRegion(memory))
        parts[name] = [slab[i : i + 1] for i in range(tensor.shape[0])]
    return parts, regions


def main() -> None:
    args = parse_args([*sys.argv[1:], "--runtime", "torch", "--contexts", "1", "--batches", str(BATCH)])
    repeats = 20
    if not args.onnx.is_file():
        write_example(args.model, args.onnx, **example_options(args))
    runtime = load(args, 1)
    context = runtime.create_context(0)
    batch = inputs_for(args, BATCH)
    shapes = {
        "requests_32x1": {name: [t[i : i + 1].copy() for i in range(BATCH)] for name, [t] in batch.items()},
        "request_1x32": batch,
    }
    report: dict[str, Any] = {
        "benchmark": "host_copies",
        **provenance(),
        "model": args.model,
        "precision": args.precision,
        "batch": BATCH,
        "repeats": repeats,
        "sliced_uploader": {"threads": default_threads(), "slice_bytes": SLICE_BYTES},
    }
    try:
        for name, options in UPLOADERS.items():
            runtime.uploader.close()
            runtime.uploader = HostUploader(**options)
            for layout, parts in shapes.items():
                row = {
                    "upload": upload_alone(runtime.uploader, parts, context, repeats),
                    "batch": whole_batch(parts, context, repeats),
                }
                report[f"{name}_{layout}"] = row
                print(f"{name:9s} {layout:14s} {row}", file=sys.stderr, flush=True)
        parts, regions = in_place({name: t for name, [t] in batch.items()})
        try:
            row = {
                "upload": upload_alone(runtime.uploader, parts, context, repeats),
                "batch": whole_batch(parts, context, repeats),
            }
        finally:
            for region in regions:
                region.close()
        report["in_place_requests_32x1"] = row
        print(f"in place  requests_32x1 {row}", file=sys.stderr, flush=True)
    finally:
        context.close()
        runtime.close()
    if args.output:
        write_json(args.output, report)
    else:
        print(report)


if __name__ == "__main__":
    main()
