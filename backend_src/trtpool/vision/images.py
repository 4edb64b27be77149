"""Encoded images -> an image model's normalized square crops, ImageNet style (float32 [3, crop, crop]).

    cpu_crop(data, spec)                   one file on the CPU with Pillow
    sort_files, decode_chunks, placement   what the GPU path (trtpool.vision.device_crops) decides on the host

Every file is read from its header first (a JPEG's without Pillow where trtpool.vision.jpeg_frame is
sure); one that is no image, or too large decoded, is refused alone (ImageRefused). How the GPU path
follows the CPU one: docs/design/image-crops.md.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError

from trtpool.vision.jpeg_frame import read_frame

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Decoded pixels (uint8) one GPU decode call may hold, and the largest image taken: 8000x8000
# RGB fits (the crop kernel reads the decoded pixels in place: nothing more is held).
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

    def draft_scale(self, width: int, height: int) -> int:
        """The DCT scale Pillow's JPEG draft decodes at: the largest of 8, 4, 2, 1 that leaves
        both sides at least `resize` (JpegImagePlugin.draft); the size is then rounded up."""
        scale = min(width // self.resize, height // self.resize)
        return next((s for s in (8, 4, 2) if scale >= s), 1)

    def crop_origin(self, width: int, height: int) -> tuple[int, int]:
        """(left, top) of the centre crop in the resized image."""
        return (width - self.crop) // 2, (height - self.crop) // 2


@dataclass(frozen=True)
class Header:
    format: str
    width: int
    height: int
    mode: str
    ends: bool  # a JPEG's end-of-image marker is there (0xFFD9 appears nowhere else after the header)

    @property
    def decoded_bytes(self) -> int:
        return self.width * self.height * 3

    @property
    def gpu_decodable(self) -> bool:
        """nvJPEG takes it, and decodes it as libjpeg would: a truncated JPEG goes to Pillow,
        which refuses it (nvJPEG may fill the missing part in)."""
        return self.format == "JPEG" and self.mode in _GPU_MODES and self.ends


def opened(data: bytes, spec: CropSpec) -> Image.Image:
    """The file opened by Pillow, its header read (nothing decoded yet); ImageRefused for what is
    no image or would decode past max_decoded_bytes."""
    if len(data) == 0:
        raise ImageRefused("the file is empty (0 bytes)")
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise ImageRefused(f"not an image Pillow can identify ({len(data):,} bytes starting {data[:8]!r})") from None
    except Exception as exc:  # noqa: BLE001 - a header Pillow cannot parse
        raise ImageRefused(f"unreadable image header: {type(exc).__name__}: {exc}") from None
    too_large = _size_refusal(*image.size, spec)
    if too_large is not None:
        image.close()
        raise too_large
    return image


def _size_refusal(width: int, height: int, spec: CropSpec) -> ImageRefused | None:
    """The refusal of an image that would decode past max_decoded_bytes, or None."""
    if width * height * 3 <= spec.max_decoded_bytes:
        return None
    return ImageRefused(
        f"{width}x{height} pixels decode to {width * height * 3:,} bytes, "
        f"above the limit max_decoded_bytes={spec.max_decoded_bytes:,}"
    )


def jpeg_header(data: bytes) -> Header | None:
    """The header Pillow's path would give a JPEG, read without Pillow; None where that read is
    not sure to agree (then Pillow reads it)."""
    frame = read_frame(data)
    if frame is None:
        return None
    return Header("JPEG", frame.width, frame.height, frame.mode, _ends(data))


def read_header(data: bytes, spec: CropSpec) -> Header:
    """The file's format and size from its header; ImageRefused for what is no image or too large."""
    header = jpeg_header(data)
    if header is not None:
        too_large = _size_refusal(header.width, header.height, spec)
        if too_large is not None:
            raise too_large
        return header
    with opened(data, spec) as image:
        width, height = image.size
        return Header(image.format or "unknown", width, height, image.mode, _ends(data))


def _ends(data: bytes) -> bool:
    """A JPEG's end-of-image marker is in its last 4 KiB (searched from the end, where it usually is)."""
    return data.rfind(b"\xff\xd9", max(0, len(data) - 4096)) >= 0


def cpu_crop(data: bytes, spec: CropSpec) -> np.ndarray:
    """[3, crop, crop] float32 from one encoded image, with Pillow; ImageRefused names why not."""
    with opened(data, spec) as image:
        try:
            image.draft("RGB", (spec.resize, spec.resize))  # JPEG: the smallest DCT scale still >= resize
            rgb = image.convert("RGB")
        except Exception as exc:  # noqa: BLE001 - truncated or corrupt data past the header
            raise ImageRefused(f"cannot be decoded: {type(exc).__name__}: {exc}") from None
    width, height = spec.resized(*rgb.size)
    rgb = rgb.resize((width, height), Image.Resampling.BILINEAR)
    left, top = spec.crop_origin(width, height)
    pixels = np.asarray(rgb.crop((left, top, left + spec.crop, top + spec.crop)), dtype=np.float32) / 255.0
    mean, std = np.array(spec.mean, np.float32), np.array(spec.std, np.float32)
    return ((pixels - mean) / std).transpose(2, 0, 1)


def sort_files(
    files: list[bytes], spec: CropSpec
) -> tuple[list[tuple[int, Header]], list[int], dict[int, ImageRefused]]:
    """By index: the files a GPU decoder takes (with their headers), those Pillow takes, those refused."""
    on_gpu: list[tuple[int, Header]] = []
    on_cpu: list[int] = []
    refused: dict[int, ImageRefused] = {}
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
    return on_gpu, on_cpu, refused


def decode_chunks(files: list[tuple[int, Header]], limit: int) -> list[list[int]]:
    """Indices in decode calls whose decoded pixels stay within `limit` bytes."""
    chunks: list[list[int]] = []
    held = limit
    for index, header in files:
        if held + header.decoded_bytes > limit:
            chunks.append([])
            held = 0
        chunks[-1].append(index)
        held += header.decoded_bytes
    return chunks


def placement(spec: CropSpec, width: int, height: int) -> tuple[int, tuple[int, int], tuple[int, int], tuple[int, int]]:
    """A decoded image's draft scale, then (width, height) drafted and resized, and the crop's (left, top)."""
    scale = spec.draft_scale(width, height)
    drafted = (-(-width // scale), -(-height // scale))
    resized = spec.resized(*drafted)
    return scale, drafted, resized, spec.crop_origin(*resized)
