"""The GPU decoder, chosen by measurement: JPEG files of mixed sizes to ImageNet crops on one
GPU, each way trtpool.images offers, against Pillow on one CPU core, in one run.

    torchvision       torchvision.io.decode_jpeg on the device (nvJPEG, CUDA back-end)
    nvimgcodec        nvImageCodec with every back-end it has (the hardware JPEG decoders first)
    nvimgcodec_hw     nvImageCodec's hardware decoders alone (HW_GPU_ONLY)
    nvimgcodec_cuda   nvImageCodec's CUDA decoder alone (GPU_ONLY)
    kernel            nvImageCodec (all back-ends) and trtpool.crop_kernel: the path without torch

For each: images/s of the decode alone and of the whole crop (decode, draft reduction, resize,
crop, normalize; trtpool.images.DeviceCrops) at batches of 1, 8, 32 and 64, with 1 and 4
threads calling at once (the stage's batch workers do); and per file how far its crop lies
from the CPU path's (grey levels: mean, 99th percentile, max). Each way runs in a process of
its own, so a decoder that crashes (nvImageCodec aborted the first run on the H200) is
recorded and the others still run.

    python3 bench/gpu_decode.py --out $OUT/gpu_decode.json     # bench/gpu/h200.sh stage `decode`
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import provenance, write_json  # noqa: E402
from tests.harness.pipelines import images  # noqa: E402
from trtpool.images import CropSpec, DeviceCrops, cpu_crop  # noqa: E402

WAYS = {"torchvision": ("torchvision", ()), "nvimgcodec": ("nvimgcodec", ()),
        "nvimgcodec_hw": ("nvimgcodec", ("HW_GPU_ONLY",)), "nvimgcodec_cuda": ("nvimgcodec", ("GPU_ONLY",)),
        "kernel": ("kernel", ())}


def crops_of(way: str, spec: CropSpec):
    decoder, backends = WAYS[way]
    if decoder == "kernel":
        from trtpool.crop_kernel import CudaCrops

        crops = CudaCrops(spec, "cuda:0")
        return crops, lambda files: crops.decoder.decode(files, params=crops.params), lambda out: out.to_host()
    crops = DeviceCrops(spec, "cuda:0", decoder, backends)
    return crops, crops._decode, lambda out: out.cpu().numpy()


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
            "worst_max": round(max(float(d.max()) for d in diffs), 2)},
        "decode_images_per_s": {}, "crop_images_per_s": {}}
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
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "h200" / "gpu_decode.json")
    args = parser.parse_args()

    if args.one_way:
        print(json.dumps(one_way(args.one_way, args)))
        return 0
    import torch

    spec = CropSpec.imagenet(args.image_size)
    files = images(args.files, seed=7, png_every=0)
    record = {**provenance(), "gpu": torch.cuda.get_device_name(0),
              "files": {"count": len(files), "mean_bytes": sum(map(len, files)) // len(files)},
              "pillow_one_core_images_per_s": rate(lambda b: [cpu_crop(f, spec) for f in b], files, 1, 1,
                                                   args.seconds),
              "ways": {}}
    print(f"pillow, one core: {record['pillow_one_core_images_per_s']} images/s", flush=True)
    for way in args.ways:
        done = subprocess.run([sys.executable, __file__, "--one-way", way, "--image-size", str(args.image_size),
                               "--files", str(args.files), "--seconds", str(args.seconds),
                               "--batches", *map(str, args.batches), "--threads", *map(str, args.threads)],
                              capture_output=True, text=True, timeout=600)
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
