"""Encoded images -> an image model's normalized square crops, ImageNet style: the
shorter side resized to ``resize``, the centre ``crop`` x ``crop`` taken, RGB / 255
normalized by ``mean`` and ``std``, channels first (float32 [3, crop, crop]).

    cpu_crop(data, spec)          one file on the CPU with Pillow (the per-request faces)
    DeviceCrops(spec, device)     a batch of files on the GPU: JPEG decoded by nvJPEG
                                  (torchvision.io.decode_jpeg), resized, cropped and
                                  normalized with torch; the batch never leaves the device

Every file is first read from its header alone (Pillow opens lazily): a file that is
no image, or whose decoded pixels would pass ``max_decoded_bytes``, is refused alone
(ImageRefused, with the reason). On the GPU path, JPEGs nvJPEG decodes there (baseline
or progressive, RGB or grayscale) are decoded in batches whose decoded pixels stay
within ``max_decoded_bytes``; other files (PNG, CMYK JPEG, ...) take the CPU path and
are uploaded. EXIF orientation is ignored on both paths, as Pillow's ``open`` ignores it.

The two paths differ slightly by design: libjpeg (Pillow) decodes a large JPEG at a
reduced DCT scale first (draft mode), nvJPEG decodes it whole, and both then resize
with an antialiased bilinear filter (BENCHMARKS.md, "GPU decode", has the measured
difference).
"""
from __future__ import annotations

import io
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Decoded pixels one GPU decode call may hold, and the largest image taken: 8000x8000 RGB fits.
DEFAULT_MAX_DECODED_BYTES = 256 * 2**20
_GPU_MODES = ("RGB", "L")  # JPEG colour modes nvJPEG decodes to RGB on the device


class ImageRefused(ValueError):
    """A file this preprocessing does not take, with the reason."""


@dataclass(frozen=True)
class CropSpec:
    crop: int
    resize: int
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    max_decoded_bytes: int = DEFAULT_MAX_DECODED_BYTES

    @classmethod
    def imagenet(cls, crop: int, max_decoded_bytes: int = DEFAULT_MAX_DECODED_BYTES) -> CropSpec:
        """The usual ratio: resize to 256 / 224 of the crop."""
        return cls(crop, round(crop * 256 / 224), max_decoded_bytes=max_decoded_bytes)

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) with the shorter side at `resize`, neither below it."""
        scale = self.resize / min(width, height)
        return max(self.resize, round(width * scale)), max(self.resize, round(height * scale))

    def crop_origin(self, width: int, height: int) -> tuple[int, int]:
        """(left, top) of the centre crop in the resized image."""
        return (width - self.crop) // 2, (height - self.crop) // 2


@dataclass(frozen=True)
class Header:
    format: str
    width: int
    height: int
    mode: str
    progressive: bool

    @property
    def decoded_bytes(self) -> int:
        return self.width * self.height * 3

    @property
    def gpu_decodable(self) -> bool:
        return self.format == "JPEG" and self.mode in _GPU_MODES


def read_header(data: bytes, spec: CropSpec) -> Header:
    """The file's format and size from its header; ImageRefused for what is no image or too large."""
    if len(data) == 0:
        raise ImageRefused("the file is empty (0 bytes)")
    try:
        with Image.open(io.BytesIO(data)) as image:
            header = Header(image.format or "unknown", *image.size, image.mode,
                            bool(image.info.get("progressive") or image.info.get("progression")))
    except UnidentifiedImageError:
        raise ImageRefused(f"not an image Pillow can identify ({len(data):,} bytes starting {data[:8]!r})") from None
    except Exception as exc:  # a header Pillow cannot parse
        raise ImageRefused(f"unreadable image header: {type(exc).__name__}: {exc}") from None
    if header.decoded_bytes > spec.max_decoded_bytes:
        raise ImageRefused(f"{header.width}x{header.height} pixels decode to {header.decoded_bytes:,} bytes, "
                           f"above the limit max_decoded_bytes={spec.max_decoded_bytes:,}")
    return header


def cpu_crop(data: bytes, spec: CropSpec) -> np.ndarray:
    """[3, crop, crop] float32 from one encoded image, with Pillow; ImageRefused names why not."""
    read_header(data, spec)
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.draft("RGB", (spec.resize, spec.resize))  # JPEG: the smallest DCT scale still >= resize
            rgb = image.convert("RGB")
    except Exception as exc:  # truncated or corrupt data past the header
        raise ImageRefused(f"cannot be decoded: {type(exc).__name__}: {exc}") from None
    width, height = spec.resized(*rgb.size)
    rgb = rgb.resize((width, height), Image.BILINEAR)
    left, top = spec.crop_origin(width, height)
    pixels = np.asarray(rgb.crop((left, top, left + spec.crop, top + spec.crop)), dtype=np.float32) / 255.0
    mean, std = np.array(spec.mean, np.float32), np.array(spec.std, np.float32)
    return ((pixels - mean) / std).transpose(2, 0, 1)


class DeviceCrops:
    """Crops of a batch of files made on one GPU; callable from several threads at once
    (each thread works on a CUDA stream of its own)."""

    def __init__(self, spec: CropSpec, device: str) -> None:
        import torch
        import torchvision.io

        self.spec = spec
        self.torch = torch
        self.decode_jpeg = torchvision.io.decode_jpeg
        self.rgb = torchvision.io.ImageReadMode.RGB
        self.device = torch.device(device)
        shape = (3, 1, 1)
        std = torch.tensor(spec.std, dtype=torch.float32, device=self.device).view(shape)
        self.scale = 1.0 / (255.0 * std)  # (x / 255 - mean) / std == x * scale - shift
        self.shift = torch.tensor(spec.mean, dtype=torch.float32, device=self.device).view(shape) / std
        self._streams = threading.local()

    def _stream(self) -> Any:
        stream = getattr(self._streams, "stream", None)
        if stream is None:
            stream = self._streams.stream = self.torch.cuda.Stream(self.device)
        return stream

    def __call__(self, files: list[bytes]) -> tuple[Any, dict[int, ImageRefused]]:
        """A float32 [len(files), 3, crop, crop] tensor on the device, complete when this
        returns, and the files refused by index (their rows are left as zeros)."""
        torch = self.torch
        spec = self.spec
        refused: dict[int, ImageRefused] = {}
        on_gpu: list[tuple[int, Header]] = []
        on_cpu: list[int] = []
        for index, data in enumerate(files):
            try:
                header = read_header(data, spec)
            except ImageRefused as exc:
                refused[index] = exc
                continue
            if header.gpu_decodable:
                on_gpu.append((index, header))
            else:
                on_cpu.append(index)
        stream = self._stream()
        with torch.cuda.stream(stream), torch.inference_mode():
            batch = torch.zeros((len(files), 3, spec.crop, spec.crop), dtype=torch.float32, device=self.device)
            for chunk in self._chunks(on_gpu):
                for index, image in self._decoded(files, chunk, on_cpu).items():
                    self._place(batch[index], image)
            for index in on_cpu:
                try:
                    batch[index].copy_(torch.from_numpy(cpu_crop(files[index], spec)), non_blocking=False)
                except ImageRefused as exc:
                    refused[index] = exc
            gpu_rows = [index for index, _ in on_gpu if index not in on_cpu]
            if gpu_rows:  # normalize what the GPU decoded (cpu_crop normalized its own rows)
                rows = torch.tensor(gpu_rows, device=self.device)
                batch[rows] = batch[rows] * self.scale - self.shift
        stream.synchronize()
        return batch, refused

    def _chunks(self, files: list[tuple[int, Header]]) -> list[list[int]]:
        """Indices in decode calls whose decoded pixels stay within max_decoded_bytes."""
        chunks: list[list[int]] = []
        held = self.spec.max_decoded_bytes
        for index, header in files:
            if held + header.decoded_bytes > self.spec.max_decoded_bytes:
                chunks.append([])
                held = 0
            chunks[-1].append(index)
            held += header.decoded_bytes
        return chunks

    def _decoded(self, files: list[bytes], chunk: list[int], on_cpu: list[int]) -> dict[int, Any]:
        """uint8 [3, H, W] device images by index; a file nvJPEG refuses joins `on_cpu`
        (Pillow then decodes it, or refuses it with its reason)."""
        torch = self.torch
        encoded = [torch.frombuffer(bytearray(files[i]), dtype=torch.uint8) for i in chunk]
        try:
            return dict(zip(chunk, self.decode_jpeg(encoded, mode=self.rgb, device=self.device)))
        except RuntimeError:
            if len(chunk) == 1:
                on_cpu.append(chunk[0])
                return {}
        decoded = {}
        for index, data in zip(chunk, encoded):  # one at a time: only the file that fails goes to the CPU
            try:
                decoded[index] = self.decode_jpeg(data, mode=self.rgb, device=self.device)
            except RuntimeError:
                on_cpu.append(index)
        return decoded

    def _place(self, row: Any, image: Any) -> None:
        """Resize (antialiased bilinear) and centre-crop one uint8 [3, H, W] image into `row`."""
        spec = self.spec
        height, width = image.shape[1:]
        new_width, new_height = spec.resized(width, height)
        resized = self.torch.nn.functional.interpolate(image[None].float(), size=(new_height, new_width),
                                                       mode="bilinear", antialias=True, align_corners=False)
        left, top = spec.crop_origin(new_width, new_height)
        row.copy_(resized[0, :, top:top + spec.crop, left:left + spec.crop].clamp_(0, 255).round_())
