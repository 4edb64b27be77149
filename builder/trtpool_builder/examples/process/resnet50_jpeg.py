"""process.py of the `resnet50_jpeg` example: encoded images in, the top-5 classes out.

    IMAGE  TYPE_STRING [1]   a JPEG or PNG file's bytes (a request of N rows: N files)
    LABELS TYPE_STRING [5]   class names, most likely first
    SCORES TYPE_FP32   [5]   their softmax probabilities

Standard ImageNet preprocessing (trtpool.vision.images): shorter side resized to 256/224 of
the crop, centre crop, RGB scaled to [0, 1] and normalized by ImageNet's mean and
std, as NCHW float32. Two ways, chosen by the instance's device (trtpool.process.faces.choose_faces):

    GPU instance  preprocess_batch: the whole dynamic batch's files decoded by nvJPEG on
                  the device, resized, cropped and normalized there in one kernel launch
                  (trtpool.vision.device_crops); the engine reads them from the device.
                  postprocess_batch: one softmax and top-5 for the batch, on the device
                  where the runtime leaves the logits there (OUTPUTS_ON_DEVICE: the torch
                  runtime), so only the answer comes to the host. process.json's
                  "decoder": "auto" (default: torchvision where it imports, else
                  nvImageCodec), "torchvision" or "nvimgcodec" (no torch, as in NVIDIA's
                  Triton image); "decoder_backends": nvImageCodec's backends to allow
                  (e.g. ["HW_GPU_ONLY"]: the hardware JPEG decoder), all when left out. A
                  model that will decode on a GPU and whose decoder does not import is
                  refused at load, naming the package to install.
    CPU instance  preprocess / postprocess per request, in parallel on the stage's
                  workers: Pillow (chosen by measurement, BENCHMARKS.md "Decode library").

A file that is not an image, or is too large (process.json's max_decoded_bytes), fails
its request alone: a Refused naming the element and the reason. The folder's process.json gives the crop size,
labels.txt the class names (synthetic: the example's weights are random).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

from trtpool.errors import ConfigError, Refused
from trtpool.vision.images import DEFAULT_MAX_DECODED_BYTES, CropSpec, ImageRefused, cpu_crop

TOP = 5
OUTPUTS_ON_DEVICE = True  # postprocess_batch takes the logits as device tensors where the runtime can

_spec = CropSpec.imagenet(224)
_settings: dict = {}
_labels = np.array([], dtype=object)
_device_crops: dict = {}


def setup(model_config: dict, folder: Path) -> None:
    global _spec, _settings, _labels
    _settings = json.loads((folder / "process.json").read_text())
    _spec = CropSpec.imagenet(
        int(_settings["image_size"]), int(_settings.get("max_decoded_bytes", DEFAULT_MAX_DECODED_BYTES))
    )
    _labels = np.array([line.encode() for line in (folder / "labels.txt").read_text().splitlines()], dtype=object)
    if _decodes_on_a_gpu(model_config):
        _check_decoder(_settings.get("decoder", "auto"), _backends())


def _decodes_on_a_gpu(model_config: dict) -> bool:
    """Whether the model has GPU instances that serve preprocess_batch (trtpool.process.faces.choose_faces:
    unless process_faces asks for the per-request face)."""
    gpu = any(group.get("kind") == "KIND_GPU" for group in model_config.get("instance_group", []))
    faces = model_config.get("parameters", {}).get("process_faces", {}).get("string_value", "auto")
    return gpu and faces != "request"


def _backends() -> tuple[str, ...]:
    return tuple(_settings.get("decoder_backends", ()))


def _check_decoder(name: str, backends: tuple[str, ...]) -> None:
    """Refuse the model at load when its decoder cannot be made, rather than its first batch."""
    from trtpool.vision.device_crops import backends_refused, decoder_unavailable

    why = backends_refused(name, backends)
    if why is not None:
        raise ConfigError(f'process.json "decoder_backends": {why}')
    why = decoder_unavailable(name)
    if why is not None:
        raise ConfigError(f'process.json "decoder": {why}')


def _crop(element: int, data: bytes) -> np.ndarray:
    try:
        return cpu_crop(data, _spec)
    except ImageRefused as exc:
        raise Refused.element("IMAGE", element, exc) from None


def preprocess(inputs: dict) -> dict:
    return {"input": np.stack([_crop(element, row[0]) for element, row in enumerate(inputs["IMAGE"])])}


def preprocess_batch(batch: list[dict], device: str) -> list:
    """Every request's files decoded together; each request gets its rows of the batch, or the
    refusal of its first bad file."""
    if device == "cpu":
        entries: list[dict | Refused] = []
        for inputs in batch:
            try:
                entries.append(preprocess(inputs))
            except Refused as exc:
                entries.append(exc)
        return entries
    crops = _device_crops.get(device) or _device_crops.setdefault(device, _crops_on(device))
    files = [row[0] for inputs in batch for row in inputs["IMAGE"]]
    pixels, refused = crops(files)
    entries, start = [], 0
    for inputs in batch:
        stop = start + len(inputs["IMAGE"])
        bad = next((i for i in range(start, stop) if i in refused), None)
        entries.append(
            {"input": pixels[start:stop]} if bad is None else Refused.element("IMAGE", bad - start, refused[bad])
        )
        start = stop
    return entries


def _crops_on(device: str):
    from trtpool.vision.device_crops import DeviceCrops

    return DeviceCrops(_spec, device, _settings.get("decoder", "auto"), _backends())


def _top(logits: np.ndarray) -> dict:
    logits = logits.astype(np.float64)
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    top = np.argsort(-probabilities, axis=1, kind="stable")[:, :TOP]
    return {"LABELS": _labels[top], "SCORES": np.take_along_axis(probabilities, top, axis=1).astype(np.float32)}


def _top_on_device(logits) -> dict:
    """_top on a torch tensor on the device: only the top 5's indices and scores come to the host."""
    scores, top = logits.float().softmax(dim=1).topk(TOP, dim=1)
    top = top.cpu().numpy()
    return {"LABELS": _labels[top], "SCORES": scores.cpu().numpy()}


def postprocess(outputs: dict, inputs: dict) -> dict:
    return _top(outputs["logits"])


def postprocess_batch(outputs: list[dict], batch: list[dict]) -> list:
    logits = [o["logits"] for o in outputs]
    if isinstance(logits[0], np.ndarray):
        answers = _top(np.concatenate(logits))
    else:  # device tensors: the torch runtime's, so torch is there
        import torch

        answers = _top_on_device(torch.cat(logits))
    bounds = np.cumsum([0, *(len(o["logits"]) for o in outputs)])
    return [{name: value[start:stop] for name, value in answers.items()} for start, stop in itertools.pairwise(bounds)]
