"""Deterministic example ONNX models and their serving defaults.

Nothing is downloaded: every weight comes from ``np.random.default_rng(seed)``,
so the same name and options always give the same file.

    write_example("tiny", Path("tiny.onnx"))
    write_example("bert_base", Path("bert.onnx"), num_layers=2, hidden=128)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtpool.model.shapes import parse_profile
from trtpool.model.signature import Profile
from trtpool_builder.examples.bert import build_bert_base
from trtpool_builder.examples.pipelines import BERT_TEXT, RESNET50_JPEG, ProcessExample
from trtpool_builder.examples.resnet import build_resnet50
from trtpool_builder.examples.tiny import build_tiny, tiny_reference, tiny_weights

__all__ = ["EXAMPLES", "Example", "get_example", "tiny_reference", "tiny_weights", "write_example"]


@dataclass(frozen=True)
class Example:
    """A generator plus how the model is served by default."""

    name: str
    build: Callable[..., onnx.ModelProto]
    # Optimization profiles (trtpool.model.shapes text form) for the given options.
    profiles: Callable[[dict[str, Any]], tuple[str, ...]]
    preferred_batch_sizes: tuple[int, ...]
    # Random valid inputs {name: array} for a batch, given the options.
    sample: Callable[[np.random.Generator, int, dict[str, Any]], dict[str, np.ndarray]]
    # A pipeline example: the process file and files its folder carries (examples/pipelines.py).
    process: ProcessExample | None = None

    def options(self, **overrides: Any) -> dict[str, Any]:
        """The generator's full keyword options: defaults updated by `overrides`."""
        params = inspect.signature(self.build).parameters
        unknown = sorted(set(overrides) - set(params))
        if unknown:
            raise ValueError(f"example '{self.name}': unknown option(s) {unknown}; it takes {sorted(params)}")
        return {k: overrides.get(k, p.default) for k, p in params.items()}

    def serving_profiles(self, **overrides: Any) -> tuple[str, ...]:
        return self.profiles(self.options(**overrides))

    def max_batch_size(self, **overrides: Any) -> int:
        return max(
            Profile(i, parse_profile(text)).max_batch() for i, text in enumerate(self.serving_profiles(**overrides))
        )

    def sample_inputs(self, batch: int, seed: int = 0, **overrides: Any) -> dict[str, np.ndarray]:
        return self.sample(np.random.default_rng(seed), batch, self.options(**overrides))


def _bert_profiles(o: dict[str, Any]) -> tuple[str, ...]:
    longest = o["max_positions"]
    typical = min(128, longest)
    shapes = f"1x1:8x{typical}:32x{longest}"
    return (f"input_ids={shapes},attention_mask={shapes}",)


def _bert_sample(rng: np.random.Generator, batch: int, o: dict[str, Any]) -> dict[str, np.ndarray]:
    length = min(16, o["max_positions"])
    ids = rng.integers(0, o["vocab_size"], size=(batch, length), dtype=np.int64)
    mask = np.ones((batch, length), np.int64)
    mask[:, length // 2 + 1 :] = rng.integers(0, 2, size=(batch, length - length // 2 - 1))
    return {"input_ids": ids, "attention_mask": mask}


def _resnet_profiles(o: dict[str, Any]) -> tuple[str, ...]:
    return ("input=1x3x{s}x{s}:8x3x{s}x{s}:32x3x{s}x{s}".format(s=o["image_size"]),)


def _resnet_sample(rng: np.random.Generator, batch: int, o: dict[str, Any]) -> dict[str, np.ndarray]:
    return {"input": rng.standard_normal((batch, 3, o["image_size"], o["image_size"]), dtype=np.float32)}


EXAMPLES: dict[str, Example] = {
    "tiny": Example(
        "tiny",
        build_tiny,
        profiles=lambda o: ("INPUT0=1x16:8x16:64x16",),
        preferred_batch_sizes=(8, 64),
        sample=lambda rng, b, o: {"INPUT0": rng.standard_normal((b, 16), dtype=np.float32)},
    ),
    "resnet50": Example("resnet50", build_resnet50, _resnet_profiles, (8, 32), _resnet_sample),
    # Encoded images in, the top-5 class names and scores out (process/resnet50_jpeg.py).
    "resnet50_jpeg": Example(
        "resnet50_jpeg", build_resnet50, _resnet_profiles, (8, 32), _resnet_sample, process=RESNET50_JPEG
    ),
    "bert_base": Example(
        "bert_base",
        build_bert_base,
        profiles=_bert_profiles,
        preferred_batch_sizes=(8, 32),
        sample=_bert_sample,
    ),
    # Text in, a label out: a WordPiece tokenizer in front of BERT (process/bert_text.py).
    "bert_text": Example("bert_text", build_bert_base, _bert_profiles, (8, 32), _bert_sample, process=BERT_TEXT),
}


def get_example(name: str) -> Example:
    try:
        return EXAMPLES[name]
    except KeyError:
        raise ValueError(f"unknown example '{name}'; choose from {sorted(EXAMPLES)}") from None


def write_example(name: str, path: Path, **options: Any) -> Path:
    """Generate example `name` with `options`, check it, and save it to `path`."""
    example = get_example(name)
    model = example.build(**example.options(**options))
    onnx.checker.check_model(model, full_check=True)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path
