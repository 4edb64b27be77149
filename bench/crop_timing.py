"""Where the GPU path's time goes per image (issue 28): the JPEG files bench/gpu_decode.py uses,
decoded by torchvision's nvJPEG, in batches of 32 and 64, each step timed alone:

    decode           GPU time of the decode call (CUDA events on its stream) and its host time
    table            host time to build the crop kernel's table (Python: layout, placement)
    kernel           GPU time of trtpool's crop kernel on the decoded batch
    kernel_previous  the same for another version of the kernel (--previous: a crop_kernel.py file,
                     e.g. `git show REV:backend_src/trtpool/vision/crop_kernel.py`)
    torch_resize     GPU time of the crop with torch ops, a pass per image size (gpu_decode's baseline)

Microseconds per image, the median of --runs; and the largest distance, in grey levels, of each
kernel's crops from crop_reference (its arithmetic in float64) on the same decoded pixels.

    python3 bench/crop_timing.py --previous .probe/crop_kernel_previous.py --out $OUT/crop_timing.json
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gpu_decode import torch_crop_pass  # noqa: E402
from bench.record import provenance, write_json  # noqa: E402
from tests.harness.pipelines import crop_reference, images  # noqa: E402
from trtpool.gpu import cuda  # noqa: E402
from trtpool.vision.crop_kernel import CropKernel  # noqa: E402
from trtpool.vision.device_crops import DeviceCrops  # noqa: E402
from trtpool.vision.images import CropSpec  # noqa: E402


def kernel_source(path: Path) -> str:
    """The KERNEL string of a crop_kernel.py file."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "KERNEL":
            return ast.literal_eval(node.value)
    raise SystemExit(f"{path} holds no KERNEL")


def gpu_us(work, stream: cuda.Stream, runs: int) -> float:
    """The median GPU time of `work()` queued on `stream`, in microseconds."""
    external = torch.cuda.ExternalStream(stream.handle)
    times = []
    for _ in range(runs + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(external)
        with torch.cuda.stream(external):
            work()
        end.record(external)
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return statistics.median(times[1:])  # the first warms up


def host_us(work, runs: int) -> float:
    times = []
    for _ in range(runs):
        begun = time.perf_counter()
        work()
        times.append((time.perf_counter() - begun) * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--previous", type=Path, help="another version's crop_kernel.py, timed beside")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    spec = CropSpec.imagenet(args.image_size)
    crops = DeviceCrops(spec, "cuda:0", "torchvision")
    kernels = {"kernel": crops.kernel}
    if args.previous:
        kernels["kernel_previous"] = CropKernel(crops.device_index, kernel_source(args.previous))
    stream = cuda.Stream()
    record = {**provenance(), "gpu": torch.cuda.get_device_name(0), "batches": {}}
    for batch in args.batches:
        files = images(batch, seed=7, png_every=0)
        decoded = crops.decoder.decode(files, stream)
        stream.synchronize()
        rows = {
            "decode_gpu_us": gpu_us(lambda: crops.decoder.decode(files, stream), stream, args.runs) / batch,
            "decode_host_us": host_us(lambda: (crops.decoder.decode(files, stream), stream.synchronize()), args.runs)
            / batch,
        }

        def table() -> np.ndarray:
            return np.array([crops.table_row(image, index) for index, image in enumerate(decoded)], np.int64)

        rows["table_host_us"] = host_us(table, args.runs) / batch
        table_rows = table()
        device_table = cuda.DeviceBuffer(table_rows.nbytes)
        cuda.memcpy_htod_async(device_table.ptr, table_rows, table_rows.nbytes, stream)
        out = torch.empty((batch, 3, spec.crop, spec.crop), device="cuda")
        expected = [crop_reference(image.permute(1, 2, 0).cpu().numpy(), spec) for image in decoded]
        levels = np.array(spec.std).reshape(3, 1, 1) * 255
        for name, kernel in kernels.items():

            def launch() -> None:
                kernel.launch(device_table.ptr, batch, out.data_ptr(), spec.crop, crops.scale, crops.shift, stream)

            rows[f"{name}_gpu_us"] = gpu_us(launch, stream, args.runs) / batch
            served = out.cpu().numpy()
            rows[f"{name}_max_levels_from_reference"] = round(
                max(float((np.abs(served[i] - expected[i]) * levels).max()) for i in range(batch)), 3
            )
        with torch.no_grad():
            rows["torch_resize_gpu_us"] = gpu_us(lambda: torch_crop_pass(spec, decoded), stream, args.runs) / batch
        rows = {k: round(v, 2) for k, v in rows.items()}
        record["batches"][str(batch)] = rows
        print(batch, rows, flush=True)
    write_json(args.out, record)


if __name__ == "__main__":
    main()
