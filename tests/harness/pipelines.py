"""The pipeline examples for tests and benchmarks: their folders in each mode, sample
files (JPEG and PNG of mixed sizes, texts), and the plain reference loop they must equal.

The reference loop runs the folder's own process.py functions around ONNX Runtime
directly, one request at a time: what trtpool serves must equal it exactly.
"""
from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from google.protobuf import json_format
from PIL import Image

from tests.harness.repository import QUEUE_DELAY_US
from trtpool.process_file import ProcessFile, load_process_file
from trtpool_builder.example_repo import make_example_folder
from trtpool_builder.model_folder import read_config, write_config

SMALL_RESNET = {"image_size": 64}
SMALL_BERT = {"num_layers": 2, "hidden": 64, "num_heads": 2, "vocab_size": 1000, "max_positions": 64}
SIZES = ((640, 480), (333, 500), (1024, 768), (120, 90), (256, 256), (801, 601))


def images(count: int, seed: int = 0, sizes: tuple[tuple[int, int], ...] = SIZES) -> list[bytes]:
    """Encoded photos-like images (smooth noise), every third a PNG, the rest JPEG, of mixed sizes."""
    rng = np.random.default_rng(seed)
    files = []
    for index in range(count):
        width, height = sizes[index % len(sizes)]
        coarse = rng.integers(0, 256, (max(1, height // 16), max(1, width // 16), 3), dtype=np.uint8)
        picture = Image.fromarray(coarse).resize((width, height), Image.BILINEAR)
        encoded = io.BytesIO()
        picture.save(encoded, "PNG" if index % 3 == 2 else "JPEG", quality=90)
        files.append(encoded.getvalue())
    return files


def texts(count: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    words = ["kalo", "mine", "the", "rusa", "tivo", "great", "zeba", "movie", "dofu", "!", "bad", "2024"]
    return [" ".join(rng.choice(words, size=rng.integers(1, 40))).encode() for _ in range(count)]


def as_request(name: str, payload: bytes) -> dict[str, np.ndarray]:
    return {name: np.array([[payload]], dtype=np.object_)}


def add_mode(folder: Path, mode: str, name: str | None = None, **parameters: str) -> Path:
    """A copy of `folder` (or the folder itself) served in `mode`, with extra parameters."""
    target = folder if name is None else folder.parent / name
    if name is not None:
        shutil.copytree(folder, target, dirs_exist_ok=True)
    config = read_config(target)
    config.name = target.name
    config.parameters["mode"].string_value = mode
    config.model_transaction_policy.decoupled = mode == "decoupled"
    config.dynamic_batching.max_queue_delay_microseconds = QUEUE_DELAY_US
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    write_config(target, config)
    return target


def build_pipeline_repository(repo: Path) -> Path:
    """resnet50_jpeg in sync, pipelined and decoupled mode, and pipelined with preprocess in
    2 worker processes; bert_text pipelined; small sizes."""
    jpeg = make_example_folder(repo, "resnet50_jpeg", "onnx", SMALL_RESNET).folder
    for mode in ("pipelined", "decoupled"):
        add_mode(jpeg, mode, f"resnet50_jpeg_{mode}", contexts="2")
    add_mode(jpeg, "pipelined", "resnet50_jpeg_processes", contexts="2", preprocess_processes="2")
    add_mode(jpeg, "sync", contexts="2")
    add_mode(make_example_folder(repo, "bert_text", "onnx", SMALL_BERT).folder, "pipelined", contexts="2")
    return repo


def process_of(folder: Path) -> ProcessFile:
    """The folder's process.py, loaded and set up with its config.pbtxt as the model does."""
    config = json_format.MessageToDict(read_config(folder), preserving_proto_field_name=True)
    return load_process_file(folder / "1", config)


class Reference:
    """The folder's process.py around ONNX Runtime, one request at a time."""

    def __init__(self, folder: Path) -> None:
        self.process = process_of(folder)
        self.session = ort.InferenceSession(str(folder / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
        self.outputs = [o.name for o in self.session.get_outputs()]

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
        engine_inputs = self.process.preprocess(inputs)
        outputs = dict(zip(self.outputs, self.session.run(self.outputs, engine_inputs)))
        return self.process.postprocess(outputs, inputs)
