"""What the tensor layout does to the torch runtime's speed (issue 28: the GPU's time per image bounds
the JPEG pipeline on the H200). The ResNet-50 example converted by trtpool's torch runtime (fp16) in
NCHW, as served before 2026-12-04's change; in channels_last (NHWC, the layout the tensor-core
convolutions take) with its input in NHWC too; and as the runtime now serves it (convert's default
for fp16 convolutions: channels_last weights, the input in NCHW as the ONNX file declares it, which
the first convolution converts); each without and (the first two) with cuDNN's autotuner; batch 32
replayed as a CUDA graph (as a context runs it). Images/s (the median of 3 timings of 50 replays,
CUDA events) and each output's relative difference from the NCHW module's, in float64.

    python3 bench/torch_layout.py --out $OUT/torch_layout.json       # bench/gpu/h200.sh stage torch-layout
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import onnx
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "backend_src"), str(ROOT / "builder")]

from bench.record import provenance, write_json  # noqa: E402
from trtpool.runtimes.torch.convert import convert  # noqa: E402
from trtpool_builder.examples import write_example  # noqa: E402

# name: (channels_last weights, channels_last input, cuDNN autotuner)
VARIANTS = {
    "nchw": (False, False, False),
    "nchw_autotuned": (False, False, True),
    "channels_last": (True, True, False),
    "channels_last_autotuned": (True, True, True),
    "as_served": (None, False, False),
}


def images_per_s(module: torch.nn.Module, x: torch.Tensor, runs: int) -> tuple[float, torch.Tensor]:
    """The module captured as a CUDA graph after warm-up runs (the autotuner's choices made there)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            module(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = module(x)
    timings = []
    for _ in range(3):
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(runs):
            graph.replay()
        end.record()
        end.synchronize()
        timings.append(runs * x.shape[0] / (start.elapsed_time(end) / 1000))
    return statistics.median(timings), (out[0] if isinstance(out, (tuple, list)) else out).clone()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = write_example("resnet50", Path(scratch) / "resnet50.onnx", image_size=args.image_size)
        model = onnx.load(str(path))
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, device="cuda").half()
    rows, reference = {}, None
    for name, (channels_last, nhwc_input, autotuned) in VARIANTS.items():
        torch.backends.cudnn.benchmark = autotuned
        module = convert(model, "cuda", "fp16", channels_last=channels_last)
        given = x.contiguous(memory_format=torch.channels_last) if nhwc_input else x
        rate, out = images_per_s(module, given, args.runs)
        out = out.double()
        reference = out if reference is None else reference
        difference = float((out - reference).norm() / reference.norm())
        rows[name] = {"images_per_s": round(rate, 1), "relative_difference": difference}
        print(f"{name:24s} {rate:9.1f} images/s  rel. diff {difference:.2e}", flush=True)
        del module
        torch.cuda.empty_cache()
    record = {
        **provenance(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "batch": args.batch,
        "image_size": args.image_size,
        "variants": rows,
        "channels_last_over_nchw": round(
            rows["channels_last_autotuned"]["images_per_s"] / rows["nchw"]["images_per_s"], 3
        ),
        "as_served_over_nchw": round(rows["as_served"]["images_per_s"] / rows["nchw"]["images_per_s"], 3),
    }
    write_json(args.out, record)


if __name__ == "__main__":
    main()
