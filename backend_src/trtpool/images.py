"""Encoded images -> an image model's normalized square crops, ImageNet style: the
shorter side resized to ``resize``, the centre ``crop`` x ``crop`` taken, RGB / 255
normalized by ``mean`` and ``std``, channels first (float32 [3, crop, crop]).

    cpu_crop(data, spec)          one file on the CPU with Pillow (the per-request faces)
    DeviceCrops(spec, device)     a batch of files on the GPU: JPEG decoded by nvJPEG
                                  (decoder "torchvision": torchvision.io.decode_jpeg; or
                                  "nvimgcodec": nvImageCodec, which also drives the GPU's
                                  hardware JPEG decoders), resized, cropped and normalized
                                  with torch; the batch never leaves the device

Every file is first read from its header alone (Pillow opens lazily): a file that is
no image, or whose decoded pixels would pass ``max_decoded_bytes``, is refused alone
(ImageRefused, with the reason). On the GPU path, JPEGs nvJPEG decodes there (baseline
or progressive, RGB or grayscale) are decoded in batches whose decoded pixels stay
within ``max_decoded_bytes``; other files (PNG, CMYK JPEG, ...) take the CPU path and
are uploaded. EXIF orientation is ignored on both paths, as Pillow's ``open`` ignores it.

The GPU path follows the CPU path: libjpeg (Pillow's draft mode) decodes a large JPEG
at a reduced DCT scale (1/2, 1/4 or 1/8: the smallest still at least ``resize`` on
both sides); nvJPEG decodes it whole and the GPU path averages the same 2x2, 4x4 or
8x8 blocks; both then resize with an antialiased bilinear filter. What remains are
the decoders' own differences (IDCT rounding, chroma upsampling) and rounding
between passes: BENCHMARKS.md, "GPU decode", has them measured.
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
# Decoded pixels (uint8) one GPU decode call may hold, and the largest image taken: 8000x8000
# RGB fits. Resizing a group of one size holds float32 copies of it besides (up to 4x more).
DEFAULT_MAX_DECODED_BYTES = 256 * 2**20
DECODERS = ("torchvision", "nvimgcodec")
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
    except Exception as exc:  # a header Pillow cannot parse
        raise ImageRefused(f"unreadable image header: {type(exc).__name__}: {exc}") from None
    width, height = image.size
    if width * height * 3 > spec.max_decoded_bytes:
        image.close()
        raise ImageRefused(f"{width}x{height} pixels decode to {width * height * 3:,} bytes, "
                           f"above the limit max_decoded_bytes={spec.max_decoded_bytes:,}")
    return image


def read_header(data: bytes, spec: CropSpec) -> Header:
    """The file's format and size from its header; ImageRefused for what is no image or too large."""
    with opened(data, spec) as image:
        return Header(image.format or "unknown", *image.size, image.mode,
                      b"\xff\xd9" in data[-4096:])


def cpu_crop(data: bytes, spec: CropSpec) -> np.ndarray:
    """[3, crop, crop] float32 from one encoded image, with Pillow; ImageRefused names why not."""
    with opened(data, spec) as image:
        try:
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


def sort_files(files: list[bytes], spec: CropSpec
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


class DeviceCrops:
    """Crops of a batch of files made on one GPU; callable from several threads at once
    (each thread works on a CUDA stream of its own)."""

    def __init__(self, spec: CropSpec, device: str, decoder: str = "torchvision",
                 backends: tuple[str, ...] = ()) -> None:
        """`backends`: nvImageCodec's BackendKind names to allow (e.g. HW_GPU_ONLY); () all of them."""
        import torch

        if decoder not in DECODERS:
            raise ValueError(f"decoder '{decoder}' is not one of {', '.join(DECODERS)}")
        self.spec = spec
        self.torch = torch
        self.device = torch.device(device)
        self._decode = self._nvimgcodec(backends) if decoder == "nvimgcodec" else self._torchvision()
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
        on_gpu, on_cpu, refused = sort_files(files, spec)
        stream = self._stream()
        with torch.cuda.stream(stream), torch.no_grad():
            batch = torch.zeros((len(files), 3, spec.crop, spec.crop), dtype=torch.float32, device=self.device)
            for chunk in decode_chunks(on_gpu, spec.max_decoded_bytes):
                decoded = self._decoded(files, chunk, on_cpu)
                for indices in _by_shape(decoded).values():
                    self._place(batch, indices, [decoded[i] for i in indices])
            for index in on_cpu:
                try:
                    batch[index].copy_(torch.from_numpy(cpu_crop(files[index], spec)), non_blocking=False)
                except ImageRefused as exc:
                    refused[index] = exc
        stream.synchronize()
        return batch, refused

    def _torchvision(self) -> Any:
        """list of files -> list of uint8 [3, H, W] device tensors, None where one failed."""
        import torchvision.io

        torch, decode_jpeg, rgb = self.torch, torchvision.io.decode_jpeg, torchvision.io.ImageReadMode.RGB

        def decode(files: list[bytes]) -> list[Any]:
            encoded = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for data in files]
            try:
                return decode_jpeg(encoded, mode=rgb, device=self.device)
            except RuntimeError:
                if len(encoded) == 1:
                    return [None]
            return [decode([data])[0] for data in files]  # one at a time: only the file that fails is None
        return decode

    def _nvimgcodec(self, backends: tuple[str, ...]) -> Any:
        from nvidia import nvimgcodec

        allowed = [nvimgcodec.Backend(getattr(nvimgcodec.BackendKind, name)) for name in backends] or None
        decoder = nvimgcodec.Decoder(device_id=self.device.index or 0, backends=allowed)
        params = nvimgcodec.DecodeParams(apply_exif_orientation=False, color_spec=nvimgcodec.ColorSpec.SRGB,
                                         sample_format=nvimgcodec.SampleFormat.P_RGB)

        def decode(files: list[bytes]) -> list[Any]:
            stream = self.torch.cuda.current_stream(self.device).cuda_stream
            images = decoder.decode(files, params=params, cuda_stream=stream)
            return [None if image is None else _planar(self.torch.as_tensor(image, device=self.device))
                    for image in images]
        return decode

    def _decoded(self, files: list[bytes], chunk: list[int], on_cpu: list[int]) -> dict[int, Any]:
        """uint8 [3, H, W] device images by index; a file the decoder refuses joins `on_cpu`
        (Pillow then decodes it, or refuses it with its reason)."""
        decoded = {}
        for index, image in zip(chunk, self._decode([files[i] for i in chunk])):
            if image is None:
                on_cpu.append(index)
            else:
                decoded[index] = image
        return decoded

    def _place(self, batch: Any, indices: list[int], images: list[Any]) -> None:
        """Reduce as JPEG draft mode does, resize (antialiased bilinear), centre-crop and normalize
        uint8 [3, H, W] images of one size into their rows of `batch`: one pass for the group."""
        spec = self.spec
        functional = self.torch.nn.functional
        pixels = self.torch.stack(images).float()
        scale, _, (new_width, new_height), (left, top) = placement(spec, pixels.shape[3], pixels.shape[2])
        if scale > 1:  # blocks at the right and bottom edges average what they hold (sizes round up)
            pixels = functional.avg_pool2d(pixels, scale, scale, ceil_mode=True).round_()
        resized = functional.interpolate(pixels, size=(new_height, new_width), mode="bilinear", antialias=True,
                                         align_corners=False)
        crops = resized[:, :, top:top + spec.crop, left:left + spec.crop].clamp_(0, 255).round_()
        batch[self.torch.tensor(indices, device=self.device)] = crops * self.scale - self.shift


def _by_shape(images: dict[int, Any]) -> dict[tuple[int, ...], list[int]]:
    """Indices of the decoded images, grouped by their shape (resized together)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, image in images.items():
        groups.setdefault(tuple(image.shape), []).append(index)
    return groups


def _planar(image: Any) -> Any:
    """[3, H, W] from an image the decoder laid out [H, W, 3] (interleaved) or [3, H, W]."""
    return image if image.shape[0] == 3 else image.permute(2, 0, 1)
