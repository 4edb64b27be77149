"""process.py of the `resnet50_jpeg` example: encoded images in, the top-5 classes out.

    IMAGE  TYPE_STRING [1]   a JPEG or PNG file's bytes
    LABELS TYPE_STRING [5]   class names, most likely first
    SCORES TYPE_FP32   [5]   their softmax probabilities

Standard ImageNet preprocessing with Pillow: shorter side resized to 256/224 of
the crop, center crop, RGB scaled to [0, 1] and normalized by ImageNet's mean
and std, as NCHW float32. Pillow was chosen by measurement (BENCHMARKS.md,
"Decode library"): on par with OpenCV's antialiased resize (INTER_AREA) on the
benchmark's mixed sizes, 7x faster on camera-sized photos, which its JPEG draft
mode decodes at a reduced DCT scale.
The folder's process.json gives the crop size, labels.txt the class names.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
TOP = 5

_crop = 224
_resize = 256
_labels = np.array([], dtype=object)


def setup(model_config: dict, folder: Path) -> None:
    global _crop, _resize, _labels
    _crop = int(json.loads((folder / "process.json").read_text())["image_size"])
    _resize = round(_crop * 256 / 224)
    _labels = np.array([line.encode() for line in (folder / "labels.txt").read_text().splitlines()], dtype=object)


def _image(data: bytes) -> np.ndarray:
    """[3, crop, crop] float32 from one encoded image."""
    with Image.open(io.BytesIO(data)) as image:
        image.draft("RGB", (_resize, _resize))  # JPEG: decode at the smallest DCT scale still >= resize
        rgb = image.convert("RGB")
    width, height = rgb.size
    scale = _resize / min(width, height)
    width, height = max(_resize, round(width * scale)), max(_resize, round(height * scale))
    rgb = rgb.resize((width, height), Image.BILINEAR)
    left, top = (width - _crop) // 2, (height - _crop) // 2
    pixels = np.asarray(rgb.crop((left, top, left + _crop, top + _crop)), dtype=np.float32) / 255.0
    return ((pixels - MEAN) / STD).transpose(2, 0, 1)


def preprocess(inputs: dict) -> dict:
    return {"input": np.stack([_image(row[0]) for row in inputs["IMAGE"]])}


def postprocess(outputs: dict, inputs: dict) -> dict:
    logits = outputs["logits"].astype(np.float64)
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    top = np.argsort(-probabilities, axis=1, kind="stable")[:, :TOP]
    return {"LABELS": _labels[top], "SCORES": np.take_along_axis(probabilities, top, axis=1).astype(np.float32)}
