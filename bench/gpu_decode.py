"""The GPU decoder, chosen by measurement: JPEG files of mixed sizes to ImageNet crops on one
GPU, each way trtpool.vision.device_crops offers, against Pillow on one CPU core, in one run.

    torchvision       torchvision.io.decode_jpeg on the device (nvJPEG, CUDA back-end)
    nvimgcodec        nvImageCodec with every back-end it has (the hardware JPEG decoders first)
    nvimgcodec_hw     nvImageCodec's hardware decoders alone (HW_GPU_ONLY)
    nvimgcodec_cuda   nvImageCodec's CUDA decoder alone (GPU_ONLY)
    torch_resize      torchvision's decode, then the crop as trtpool made it before its crop kernel
                      (up to 0f5812f): per image size, torch's block means, antialiased resize of the
                      whole image, crop and normalize: the baseline the kernel replaced

For each: images/s of the decode alone and of the whole crop (header check, decode, draft
reduction, resize, crop, normalize: trtpool.vision.device_crops.DeviceCrops, whose crop kernel makes
the batch's crops in one launch) at batches of 1, 8, 32 and 64, with 1 and 4 threads calling at
once (the stage's batch workers do); and per file how far its crop lies from the CPU path's
(grey levels: mean, 99th percentile, max). Each way runs in a process of its own, so a decoder
that crashes (nvImageCodec aborted the first run on the H200) is recorded and the others still run.

    python3 bench/gpu_decode.py --out $OUT/gpu_decode.json     # bench/gpu/h200.sh stage `decode`
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import default_out, provenance, write_json  # noqa: E402
from tests.harness.pipelines import images  # noqa: E402
from trtpool.gpu import cuda  # noqa: E402
from trtpool.vision.device_crops import Decoder, DeviceCrops  # noqa: E402
from trtpool.vision.images import CropSpec, cpu_crop, placement, sort_files  # noqa: E402

WAYS = {
    "torchvision": ("torchvision", ()),
    "nvimgcodec": ("nvimgcodec", ()),
    "nvimgcodec_hw": ("nvimgcodec", ("HW_GPU_ONLY",)),
    "nvimgcodec_cuda": ("nvimgcodec", ("GPU_ONLY",)),
    "torch_resize": ("torchvision", ()),
}


def per_thread_stream() -> Callable[[], cuda.Stream]:
    local = threading.local()

    def stream() -> cuda.Stream:
        if getattr(local, "stream", None) is None:
            local.stream = cuda.Stream()
        return local.stream

    return stream


def decode_only(decoder: Decoder):
    """The decode of a batch, waited for."""
    stream_of = per_thread_stream()

    def decode(files: list[bytes]) -> None:
        stream = stream_of()
        decoder.decode(files, stream)
        stream.synchronize()

    return decode


def torch_crop_pass(spec: CropSpec, decoded: list):
    """The baseline's crop of decoded uint8 [3, H, W] tensors on the current stream, a pass per image
    size: block means (draft), antialiased resize of the whole image, crop, normalize."""
    import torch

    functional = torch.nn.functional
    std = torch.tensor(spec.std, device="cuda").view(3, 1, 1)
    scale, shift = 1.0 / (255.0 * std), torch.tensor(spec.mean, device="cuda").view(3, 1, 1) / std
    batch = torch.zeros((len(decoded), 3, spec.crop, spec.crop), device="cuda")
    groups: dict[tuple, list[int]] = {}
    for index, image in enumerate(decoded):
        groups.setdefault(tuple(image.shape), []).append(index)
    for indices in groups.values():
        pixels = torch.stack([decoded[i] for i in indices]).float()
        draft, _, (width, height), (left, top) = placement(spec, pixels.shape[3], pixels.shape[2])
        if draft > 1:
            pixels = functional.avg_pool2d(pixels, draft, draft, ceil_mode=True).round_()
        pixels = functional.interpolate(pixels, size=(height, width), mode="bilinear", antialias=True)
        pixels = pixels[:, :, top : top + spec.crop, left : left + spec.crop].clamp_(0, 255).round_()
        batch[torch.tensor(indices, device="cuda")] = pixels * scale - shift
    return batch


def torch_resize(crops: DeviceCrops):
    """The baseline's whole crop: header check, decode, torch_crop_pass (JPEGs only: the files here)."""
    import torch

    stream_of = per_thread_stream()

    def crop(files: list[bytes]):
        on_gpu, _, _ = sort_files(files, crops.spec)
        stream = stream_of()
        with torch.cuda.stream(torch.cuda.ExternalStream(stream.handle)), torch.no_grad():
            batch = torch_crop_pass(crops.spec, crops.decoder.decode([files[i] for i, _ in on_gpu], stream))
        stream.synchronize()
        return batch, {}

    return crop


def crops_of(way: str, spec: CropSpec):
    """The way's whole crop, its decode alone, and its output to the host."""
    decoder, backends = WAYS[way]
    crops = DeviceCrops(spec, "cuda:0", decoder, backends)
    if way == "torch_resize":
        return torch_resize(crops), decode_only(crops.decoder), lambda out: out.cpu().numpy()
    return crops, decode_only(crops.decoder), lambda out: out.to_host()


def one_way(way: str, args: argparse.Namespace) -> dict:
    """One way's figures (run in a process of its own)."""
    spec = CropSpec.imagenet(args.image_size)
    files = images(args.files, seed=7, png_every=0)
    levels = np.array(spec.std, np.float32).reshape(3, 1, 1) * 255
    crops, decode, host = crops_of(way, spec)
    served, refused = crops(files)
    served = host(served)
    diffs = [np.abs(served[i] - cpu_crop(f, spec)) * levels for i, f in enumerate(files)]
    found = {
        "refused": {str(i): str(e) for i, e in refused.items()},
        "grey_levels_from_cpu": {
            "mean_of_means": round(statistics.mean(float(d.mean()) for d in diffs), 3),
            "worst_mean": round(max(float(d.mean()) for d in diffs), 3),
            "worst_p99": round(max(float(np.percentile(d, 99)) for d in diffs), 2),
            "worst_max": round(max(float(d.max()) for d in diffs), 2),
        },
        "decode_images_per_s": {},
        "crop_images_per_s": {},
    }
    for threads in args.threads:
        for batch in args.batches:
            key = f"batch{batch}_threads{threads}"
            found["decode_images_per_s"][key] = rate(decode, files, batch, threads, args.seconds)
            found["crop_images_per_s"][key] = rate(lambda b: crops(b), files, batch, threads, args.seconds)
    return found


def rate(work, files: list[bytes], batch: int, threads: int, seconds: float) -> float:
    """Images/s of `work(list of files)` called on batches, from `threads` threads at once."""
    batches = [[files[(start + i) % len(files)] for i in range(batch)] for start in range(0, len(files), batch)]
    work(batches[0])  # warm: decoder state, kernels, allocator

    def loop(offset: int) -> int:
        done, turn, end = 0, offset, time.perf_counter() + seconds
        while time.perf_counter() < end:
            work(batches[turn % len(batches)])
            done += batch
            turn += 1
        return done

    with ThreadPoolExecutor(threads) as pool:
        begun = time.perf_counter()
        total = sum(pool.map(loop, range(threads)))
    return round(total / (time.perf_counter() - begun), 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--ways", nargs="+", default=list(WAYS))
    parser.add_argument("--one-way", choices=list(WAYS), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=default_out("gpu_decode.json"))
    args = parser.parse_args()

    if args.one_way:
        print(json.dumps(one_way(args.one_way, args)))
        return 0
    import torch

    spec = CropSpec.imagenet(args.image_size)
    files = images(args.files, seed=7, png_every=0)
    record = {
        **provenance(),
        "gpu": torch.cuda.get_device_name(0),
        "files": {"count": len(files), "mean_bytes": sum(map(len, files)) // len(files)},
        "pillow_one_core_images_per_s": rate(lambda b: [cpu_crop(f, spec) for f in b], files, 1, 1, args.seconds),
        "ways": {},
    }
    print(f"pillow, one core: {record['pillow_one_core_images_per_s']} images/s", flush=True)
    for way in args.ways:
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one-way",
                way,
                "--image-size",
                str(args.image_size),
                "--files",
                str(args.files),
                "--seconds",
                str(args.seconds),
                "--batches",
                *map(str, args.batches),
                "--threads",
                *map(str, args.threads),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = done.stdout.strip().splitlines()
        try:
            record["ways"][way] = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            record["ways"][way] = {"error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-800:]}"}
        print(way, json.dumps(record["ways"][way])[:900], flush=True)
    write_json(args.out, record)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
