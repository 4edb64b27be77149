"""Valid inputs for the corpus models at any shape the manifest names, made from a seed.

Each generator takes {input name: shape} and a numpy Generator and returns
{input name: array} with the model's dtypes and value ranges: normalized
images with dark text-like strokes for the OCR models, bytes of real text for
magika, speech-like audio for the VAD models, pixel counts for the digits
classifier.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

Shapes = dict[str, tuple[int, ...]]
Feed = dict[str, np.ndarray]
Generator = Callable[[Shapes, np.random.Generator], Feed]

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


def _text_image(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """A light page, 3 x H x W in [0, 1], with rows of dark strokes where words would be."""
    page = np.full((3, height, width), 0.9, np.float32) + rng.normal(0, 0.02, (3, height, width)).astype(np.float32)
    line_height = max(8, height // 4)
    for top in range(line_height // 4, height - line_height // 2, line_height):
        x = int(rng.integers(0, max(1, width // 8)))
        while x < width - 4:
            stroke = int(rng.integers(2, 6))
            tall = int(rng.integers(line_height // 3, line_height // 2 + 1))
            page[:, top:top + tall, x:x + stroke] = rng.uniform(0.0, 0.25)
            x += stroke + int(rng.integers(2, 9)) + (int(rng.integers(6, 16)) if rng.random() < 0.2 else 0)
    return np.clip(page, 0.0, 1.0)


def _images(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    batch, _, height, width = shape
    return np.stack([_text_image(height, width, rng) for _ in range(batch)])


def ocr_detector(shapes: Shapes, rng: np.random.Generator) -> Feed:
    """PaddleOCR's detector: ImageNet mean/std normalization."""
    return {"x": ((_images(shapes["x"], rng) - IMAGENET_MEAN) / IMAGENET_STD).astype(np.float32)}


def ocr_line(shapes: Shapes, rng: np.random.Generator) -> Feed:
    """PaddleOCR's recognizer and direction classifier: text lines scaled to [-1, 1]."""
    return {"x": ((_images(shapes["x"], rng) - 0.5) / 0.5).astype(np.float32)}


PADDING_TOKEN = 256  # magika pads files shorter than its window with 256


def file_bytes(shapes: Shapes, rng: np.random.Generator) -> Feed:
    """magika: windows of real text (this repository's own sources), some padded."""
    batch, window = shapes["bytes"]
    # Files of a window or more, so that each row holds at least half a window of text: on rows of
    # mostly padding, ONNX Runtime's answer depends on the batch it runs in (by up to 1e-3).
    sources = [path for path in sorted(Path(__file__).resolve().parents[2].glob("builder/trtpool_builder/**/*.py"))
               if path.stat().st_size >= window]
    rows = []
    for _ in range(batch):
        data = np.frombuffer(sources[int(rng.integers(len(sources)))].read_bytes(), np.uint8)
        start = int(rng.integers(0, max(1, len(data) - window)))
        row = np.full(window, PADDING_TOKEN, np.int32)
        chunk = data[start:start + int(rng.integers(window // 2, window + 1))]
        row[:len(chunk)] = chunk
        rows.append(row)
    return {"bytes": np.stack(rows)}


def _speech(samples: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """16 kHz audio: voiced harmonics under a syllable envelope, plus noise, in [-1, 1]."""
    t = np.arange(samples[-1]) / 16000.0
    rows = []
    for _ in range(int(np.prod(samples[:-1]))):
        pitch = rng.uniform(90, 250)
        voice = sum(np.sin(2 * np.pi * pitch * k * t + rng.uniform(0, 6.3)) / k for k in range(1, 6))
        envelope = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(3, 6) * t)
        rows.append(0.3 * envelope * voice + rng.normal(0, 0.01, t.shape))
    return np.clip(np.array(rows, np.float32).reshape(samples), -1.0, 1.0)


def vad_sequence(shapes: Shapes, rng: np.random.Generator) -> Feed:
    """silero VAD, sequence export: frames of 576 samples and the LSTM's h and c."""
    return {"input": _speech(shapes["input"], rng),
            "h": rng.normal(0, 0.1, shapes["h"]).astype(np.float32),
            "c": rng.normal(0, 0.1, shapes["c"]).astype(np.float32)}


def vad_streaming(shapes: Shapes, rng: np.random.Generator) -> Feed:
    """silero VAD, streaming export: chunks of 512 samples, the recurrent state, the sample rate."""
    return {"input": _speech(shapes["input"], rng),
            "state": rng.normal(0, 0.1, shapes["state"]).astype(np.float32),
            "sr": np.array(16000, np.int64).reshape(shapes["sr"])}


def digit_pixels(shapes: Shapes, rng: np.random.Generator) -> Feed:
    """scikit-learn's 8 x 8 digits: ink counts 0..16 per pixel, as int64."""
    return {"pixels": rng.integers(0, 17, shapes["pixels"]).astype(np.int64)}
