"""The pipeline examples for tests and benchmarks: their folders in each mode, sample
files (JPEG and PNG of mixed sizes, texts), and the plain reference loop they must equal.

The reference loop runs the folder's own process.py functions around ONNX Runtime
directly, one request at a time: what trtpool serves must equal it exactly.
"""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from google.protobuf import json_format
from PIL import Image

from tests.harness.repository import QUEUE_DELAY_US
from trtpool.process.file import ProcessFile, load_process_file
from trtpool_builder.examples.repo import make_example_folder
from trtpool_builder.folder.model_folder import read_config, write_config

SMALL_RESNET = {"image_size": 64}
SMALL_BERT = {"num_layers": 2, "hidden": 64, "num_heads": 2, "vocab_size": 1000, "max_positions": 64}
SIZES = ((640, 480), (333, 500), (1024, 768), (120, 90), (256, 256), (801, 601))


def picture(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """A photo-like RGB image: smooth noise."""
    coarse = rng.integers(0, 256, (max(1, height // 16), max(1, width // 16), 3), dtype=np.uint8)
    return Image.fromarray(coarse).resize((width, height), Image.BILINEAR)


def encoded(image: Image.Image, kind: str = "JPEG", **options: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, kind, **options)
    return out.getvalue()


def images(count: int, seed: int = 0, sizes: tuple[tuple[int, int], ...] = SIZES, png_every: int = 3,
           quality: int = 90) -> list[bytes]:
    """Encoded photo-like images of mixed sizes: every `png_every`-th a PNG (0: none), the rest JPEG
    at `quality`."""
    rng = np.random.default_rng(seed)
    files = []
    for index in range(count):
        png = png_every and index % png_every == png_every - 1
        files.append(encoded(picture(rng, *sizes[index % len(sizes)]), "PNG" if png else "JPEG", quality=quality))
    return files


def awkward_images(seed: int = 0) -> dict[str, bytes]:
    """Files a decoder may take differently, each of which must get a correct answer."""
    rng = np.random.default_rng(seed)
    photo = picture(rng, 400, 300)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotated 90 degrees (ignored, as Pillow's open ignores it)
    return {
        "progressive": encoded(photo, progressive=True, quality=85),
        "grayscale": encoded(photo.convert("L"), quality=85),
        "cmyk": encoded(photo.convert("CMYK"), quality=85),
        "exif_rotated": encoded(photo, exif=exif.tobytes(), quality=85),
        "gif": encoded(photo.convert("P"), "GIF"),
        "tiny": encoded(picture(rng, 7, 5), quality=90),
    }


def bad_images() -> dict[str, tuple[bytes, str]]:
    """Files that must be refused alone: the file, and what the refusal says."""
    whole = encoded(picture(np.random.default_rng(5), 300, 200), quality=90)
    return {
        "corrupt": (b"\xff\xd8\xff\xe0 this is not a JPEG after its first bytes",
                    "element [0]: unreadable image header"),
        "empty": (b"", "element [0]: the file is empty (0 bytes)"),
        "text": (b"plain text, no image at all", "element [0]: not an image Pillow can identify"),
        "truncated": (whole[:len(whole) // 2], "element [0]: cannot be decoded"),
    }


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


# resnet50_jpeg_batch's limit on decoded pixels: above the largest of SIZES (1024x768, 2,359,296 bytes).
BATCH_MAX_DECODED_BYTES = 2_500_000


def set_process_settings(folder: Path, **settings: Any) -> None:
    path = folder / "1" / "process.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | settings) + "\n")


def build_pipeline_repository(repo: Path) -> Path:
    """resnet50_jpeg in sync, pipelined and decoupled mode, pipelined with preprocess in 2 worker
    processes, and pipelined and sync with the batch faces (process_faces batch: preprocess_batch
    on the CPU) and a small max_decoded_bytes; bert_text pipelined; small sizes."""
    jpeg = make_example_folder(repo, "resnet50_jpeg", "onnx", SMALL_RESNET).folder
    for mode in ("pipelined", "decoupled"):
        add_mode(jpeg, mode, f"resnet50_jpeg_{mode}", contexts="2")
    add_mode(jpeg, "pipelined", "resnet50_jpeg_processes", contexts="2", preprocess_processes="2")
    batch = add_mode(jpeg, "pipelined", "resnet50_jpeg_batch", contexts="2", process_faces="batch")
    set_process_settings(batch, max_decoded_bytes=BATCH_MAX_DECODED_BYTES)
    add_mode(batch, "sync", "resnet50_jpeg_batch_sync")
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


def _axis_weights(size_in: int, size_out: int, first: int, count: int) -> np.ndarray:
    """Rows of the antialiased bilinear filter (torch's and Pillow's) for outputs first..first+count."""
    scale = size_in / size_out
    support, inverse = (scale, 1 / scale) if scale >= 1 else (1.0, 1.0)
    weights = np.zeros((count, size_in))
    for row in range(count):
        centre = scale * (first + row + 0.5)
        low, high = max(int(centre - support + 0.5), 0), min(int(centre + support + 0.5), size_in)
        taps = np.maximum(0, 1 - np.abs((np.arange(low, high) - centre + 0.5) * inverse))
        weights[row, low:high] = taps / taps.sum()
    return weights


def crop_reference(decoded: np.ndarray, spec: Any) -> np.ndarray:
    """What trtpool.vision.crop_kernel computes from a decoded uint8 [H, W, 3] image, in float64 numpy:
    the draft's rounded block means, the antialiased resize of the crop's rows and columns,
    rounding to grey levels, normalization."""
    from trtpool.vision.images import placement

    height, width = decoded.shape[:2]
    scale, (wd, hd), (wr, hr), (left, top) = placement(spec, width, height)
    padded = np.zeros((hd * scale, wd * scale, 3))
    counts = np.zeros((hd * scale, wd * scale, 1))
    padded[:height, :width] = decoded
    counts[:height, :width] = 1
    blocks = padded.reshape(hd, scale, wd, scale, 3).sum(axis=(1, 3))
    drafted = np.rint(blocks / counts.reshape(hd, scale, wd, scale, 1).sum(axis=(1, 3)))
    rows, columns = _axis_weights(hd, hr, top, spec.crop), _axis_weights(wd, wr, left, spec.crop)
    levels = np.rint(np.clip(np.einsum("yh,hwc,xw->cyx", rows, drafted, columns, optimize=True), 0, 255))
    mean, std = np.array(spec.mean).reshape(3, 1, 1), np.array(spec.std).reshape(3, 1, 1)
    return ((levels / 255 - mean) / std).astype(np.float32)
