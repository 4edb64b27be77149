"""Which imaging library preprocesses resnet50_jpeg's images: Pillow or OpenCV.

The same ImageNet preprocessing (shorter side to 256, center crop 224, RGB
normalized, NCHW float32) on two sets of JPEG files, the benchmarks' mixed sizes
(120x90 .. 1024x768, tests/harness/pipelines.py) and camera-sized photos
(1920x1080 .. 4032x3024), with one and two threads: Pillow with its JPEG draft mode (decoding at a reduced
DCT scale) and its antialiased bilinear resize; OpenCV's INTER_AREA (its
antialiased resize, comparable output) and INTER_LINEAR (no antialiasing: aliased
output when shrinking, shown for speed only). OpenCV is not a trtpool dependency:

    .venv/bin/python -m pip install --target /tmp/cv opencv-python-headless==4.10.0.84 --no-deps
    .venv/bin/python bench/decode_choice.py --opencv-path /tmp/cv --out bench/results/decode_choice.json
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import default_out, provenance, write_json  # noqa: E402
from tests.harness.pipelines import images  # noqa: E402

MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255
RESIZE, CROP = 256, 224
CAMERA = ((1920, 1080), (2592, 1944), (4032, 3024))


def _normalized(rgb: np.ndarray) -> np.ndarray:
    return ((rgb.astype(np.float32) - MEAN) / STD).transpose(2, 0, 1)


def _scaled(width: int, height: int) -> tuple[int, int]:
    scale = RESIZE / min(width, height)
    return max(RESIZE, round(width * scale)), max(RESIZE, round(height * scale))


def pillow(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        image.draft("RGB", (RESIZE, RESIZE))
        rgb = image.convert("RGB")
    width, height = _scaled(*rgb.size)
    rgb = rgb.resize((width, height), Image.Resampling.BILINEAR)
    left, top = (width - CROP) // 2, (height - CROP) // 2
    return _normalized(np.asarray(rgb.crop((left, top, left + CROP, top + CROP))))


def opencv(interpolation: str):
    import cv2

    cv2.setNumThreads(1)
    flag = getattr(cv2, interpolation)

    def run(data: bytes) -> np.ndarray:
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        width, height = _scaled(bgr.shape[1], bgr.shape[0])
        bgr = cv2.resize(bgr, (width, height), interpolation=flag)
        left, top = (width - CROP) // 2, (height - CROP) // 2
        return _normalized(cv2.cvtColor(bgr[top : top + CROP, left : left + CROP], cv2.COLOR_BGR2RGB))

    return run


def rate(function, files: list[bytes], threads: int, count: int) -> float:
    work = [files[i % len(files)] for i in range(count)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(function, work[: threads * 2]))
        begun = time.perf_counter()
        list(pool.map(function, work))
        return count / (time.perf_counter() - begun)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opencv-path", type=Path, help="a folder holding cv2 (pip install --target)")
    parser.add_argument("--images", type=int, default=240)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=default_out("decode_choice.json"))
    args = parser.parse_args()
    if args.opencv_path:
        sys.path.insert(0, str(args.opencv_path))
    sets = {
        "mixed": [f for i, f in enumerate(images(12, seed=5)) if i % 3 != 2],  # the JPEGs
        "camera": [f for i, f in enumerate(images(6, seed=6, sizes=CAMERA)) if i % 3 != 2],
    }
    variants = {
        "pillow_draft_bilinear": pillow,
        "opencv_inter_area": opencv("INTER_AREA"),
        "opencv_inter_linear": opencv("INTER_LINEAR"),
    }
    results = {s: {name: {"1": [], "2": []} for name in variants} for s in sets}
    for round_index in range(args.rounds):  # interleaved: the machine's load hits each alike
        for set_name, files in sets.items():
            count = args.images if set_name == "mixed" else args.images // 4
            for name, function in variants.items():
                for threads in (1, 2):
                    found = rate(function, files, threads, count)
                    results[set_name][name][str(threads)].append(found)
                    print(
                        f"round {round_index} {set_name:6s} {name:22s} threads {threads} {found:7.1f} img/s", flush=True
                    )
    record = {
        **provenance(),
        "what": "images/s preprocessed, by file set, library and threads",
        "sets": {"mixed": "120x90 .. 1024x768", "camera": "1920x1080 .. 4032x3024"},
        "images_per_s": {
            s: {
                n: {t: {"rounds": r, "median": float(np.median(r))} for t, r in per.items()}
                for n, per in by_name.items()
            }
            for s, by_name in results.items()
        },
    }
    write_json(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
