"""A batch of encoded images -> an image model's normalized crops on one GPU (trtpool.vision.images'
CropSpec: shorter side resized, centre crop, ImageNet normalization, float32 [N, 3, crop, crop]),
the pixels never leaving the device:

    decode   the batch's JPEGs in one call on the device, by nvJPEG: decoder "torchvision"
             (torchvision.io.decode_jpeg) or "nvimgcodec" (nvImageCodec: no torch, as in NVIDIA's
             Triton image, and the GPU's hardware JPEG decoders where it can drive them);
             "auto" takes torchvision where it imports, nvImageCodec elsewhere
    crop     trtpool.vision.crop_kernel: every image's crop in one launch, whatever its size

Every file is first read from its header alone (trtpool.vision.images.sort_files): a file that is no
image, or whose decoded pixels would pass ``max_decoded_bytes``, is refused alone (ImageRefused,
with the reason). JPEGs nvJPEG decodes as libjpeg would (baseline or progressive, RGB or
grayscale, complete) are decoded in calls whose decoded pixels stay within ``max_decoded_bytes``;
other files (PNG, CMYK JPEG, ...) and any the decoder fails take the CPU path and are uploaded.
"""

from __future__ import annotations

import importlib
import logging
import threading
import warnings
from typing import Any, Protocol

import numpy as np

from trtpool.gpu import cuda
from trtpool.gpu.device_tensors import DeviceArray
from trtpool.vision.crop_kernel import FIELDS, CropKernel, Memory, interface_memory, table_row
from trtpool.vision.images import CropSpec, ImageRefused, cpu_crop, decode_chunks, sort_files

log = logging.getLogger("trtpool")

DECODERS = ("auto", "torchvision", "nvimgcodec")
NVIMGCODEC_BACKENDS = ("GPU_ONLY", "HYBRID_CPU_GPU", "HW_GPU_ONLY", "CPU_ONLY")  # nvimgcodec.BackendKind
# What each decoder imports, and how to install it.
DECODER_PACKAGES = {
    "torchvision": ("torchvision.io", "pip install torchvision (the build for the installed torch)"),
    "nvimgcodec": ("nvidia.nvimgcodec", "pip install nvidia-nvimgcodec-cu12 (nvidia-nvimgcodec-cu13 for CUDA 13)"),
}


class Decoder(Protocol):
    planar: bool  # decoded images are [3, H, W]; else [H, W, 3]

    def decode(self, files: list[bytes], stream: cuda.Stream) -> list[Any]:
        """Decoded uint8 RGB images on the device, queued on `stream`; None for a file the
        decoder does not take."""

    def memory(self, image: Any) -> Memory:
        """A decoded image's pointer, shape and byte strides."""

    def for_another_thread(self) -> Decoder:
        """The decoder another thread decodes with: itself where sharing is safe and costs nothing."""


class TorchvisionDecoder:
    """torchvision.io.decode_jpeg on a list of files: nvJPEG's batched decode, on the caller's stream."""

    planar = True

    def __init__(self, device_index: int) -> None:
        import torch
        import torchvision.io

        self.torch = torch
        self.device = torch.device("cuda", device_index)
        self.decode_jpeg, self.rgb = torchvision.io.decode_jpeg, torchvision.io.ImageReadMode.RGB
        with warnings.catch_warnings():  # "The given buffer is not writable": said once, here
            warnings.simplefilter("ignore", UserWarning)
            torch.frombuffer(b"\xff", dtype=torch.uint8)

    def decode(self, files: list[bytes], stream: cuda.Stream) -> list[Any]:
        torch = self.torch
        with torch.cuda.stream(torch.cuda.ExternalStream(stream.handle, device=self.device)):
            return self._decoded(files)

    @staticmethod
    def memory(image: Any) -> Memory:  # a uint8 tensor: its strides in elements are bytes
        return image.data_ptr(), tuple(image.shape), image.stride()

    def for_another_thread(self) -> TorchvisionDecoder:
        return self  # torchvision holds one nvJPEG decoder per process, behind a lock, whoever calls

    def _decoded(self, files: list[bytes]) -> list[Any]:
        # The files' own memory, not a copy: decode_jpeg only reads it. torch warns once per process
        # that the buffer is read-only (said at __init__, where the warning is silenced).
        encoded = [self.torch.frombuffer(data, dtype=self.torch.uint8) for data in files]
        try:
            return self.decode_jpeg(encoded, mode=self.rgb, device=self.device)
        except RuntimeError:
            if len(files) == 1:
                return [None]
        return [self._decoded([data])[0] for data in files]  # one at a time: only the file that fails is None


class NvImageCodecDecoder:
    """nvImageCodec's decoder; `backends`: its BackendKind names to allow (e.g. HW_GPU_ONLY), () all."""

    planar = False  # SampleFormat.I_RGB

    def __init__(self, device_index: int, backends: tuple[str, ...] = ()) -> None:
        from nvidia import nvimgcodec

        self.device_index, self.backends = device_index, backends
        allowed = [nvimgcodec.Backend(getattr(nvimgcodec.BackendKind, name)) for name in backends] or None
        self.decoder = nvimgcodec.Decoder(device_id=device_index, backends=allowed)
        self.params = nvimgcodec.DecodeParams(
            apply_exif_orientation=False,
            color_spec=nvimgcodec.ColorSpec.SRGB,
            sample_format=nvimgcodec.SampleFormat.I_RGB,
        )

    def decode(self, files: list[bytes], stream: cuda.Stream) -> list[Any]:
        return self.decoder.decode(files, params=self.params, cuda_stream=stream.handle)

    @staticmethod
    def memory(image: Any) -> Memory:
        return interface_memory(image.__cuda_array_interface__)

    def for_another_thread(self) -> NvImageCodecDecoder:
        """A decoder of its own: threads then decode at once (one shared decoder aborted under
        threads on the H200, bench/journal/decode-library.md)."""
        return NvImageCodecDecoder(self.device_index, self.backends)


def _import_failure(name: str) -> str | None:
    """Why decoder `name`'s module does not import here (a build for another torch fails too), or None."""
    try:
        importlib.import_module(DECODER_PACKAGES[name][0])
    except Exception as exc:  # noqa: BLE001 - any failure to import means the decoder cannot be made
        return f"{type(exc).__name__}: {exc}"
    return None


def decoder_unavailable(name: str) -> str | None:
    """Why decoder `name` ("auto": either) cannot be used here, naming the package to install;
    None where it can. Imports only: no CUDA work, so a model can be refused at load (on any
    machine) rather than at its first batch of images, which make_decoder would fail."""
    if name not in DECODERS:
        return f"JPEG decoder '{name}' is not one of {', '.join(DECODERS)}"
    failures = []
    for candidate in ("torchvision", "nvimgcodec") if name == "auto" else (name,):
        why = _import_failure(candidate)
        if why is None:
            return None
        failures.append(f"'{candidate}' does not import ({why}): {DECODER_PACKAGES[candidate][1]}")
    return f"JPEG decoder '{name}' cannot be used here: " + "; ".join(failures)


def backends_refused(decoder: str, backends: tuple[str, ...]) -> str | None:
    """Why nvImageCodec `backends` cannot go with `decoder` (only nvimgcodec takes them, by
    BackendKind name); None where they can. No import: checked at load on any machine."""
    if not backends:
        return None
    if decoder != "nvimgcodec":
        return f"backends {list(backends)} are nvImageCodec's: they need decoder 'nvimgcodec', not '{decoder}'"
    unknown = [name for name in backends if name not in NVIMGCODEC_BACKENDS]
    if unknown:
        return f"unknown nvImageCodec backend(s) {unknown}: one or more of {', '.join(NVIMGCODEC_BACKENDS)}"
    return None


def make_decoder(name: str, device_index: int, backends: tuple[str, ...] = ()) -> Decoder:
    if name not in DECODERS:
        raise ValueError(f"decoder '{name}' is not one of {', '.join(DECODERS)}")
    if name == "auto":
        try:
            return TorchvisionDecoder(device_index)
        except Exception as exc:  # noqa: BLE001 - no torchvision, or one built for another torch
            log.info(
                "JPEG decoder 'auto': torchvision cannot be used here (%s: %s); nvImageCodec decodes",
                type(exc).__name__,
                exc,
            )
            name = "nvimgcodec"
    return TorchvisionDecoder(device_index) if name == "torchvision" else NvImageCodecDecoder(device_index, backends)


class DeviceCrops:
    """Crops of a batch of files made on one GPU. Callable from several threads at once: each works
    on its own stream and output memory, reused call after call (a thread's crops are handed to the
    engine, which copies them, before its next call), and with its own decoder where the decoder
    allows (Decoder.for_another_thread)."""

    def __init__(self, spec: CropSpec, device: str, decoder: str = "auto", backends: tuple[str, ...] = ()) -> None:
        self.spec = spec
        self.device_index = cuda.device_index(device)
        self.kernel = CropKernel(self.device_index)
        self.decoder = make_decoder(decoder, self.device_index, backends)  # the first thread's
        self._decoder_taken = False
        self._decoder_lock = threading.Lock()
        std = np.array(spec.std, np.float64)
        self.scale = tuple(float(v) for v in 1.0 / (255.0 * std))
        self.shift = tuple(float(v) for v in np.array(spec.mean, np.float64) / std)
        self._local = threading.local()

    def _thread_state(self, nbytes: int, images: int) -> tuple[cuda.Stream, cuda.DeviceBuffer, cuda.DeviceBuffer]:
        """This thread's stream, output memory and kernel table, grown to this call's batch (no
        allocation, and no cudaFree's device-wide wait, per request)."""
        local = self._local
        if getattr(local, "stream", None) is None:
            cuda.set_device(self.device_index)
            local.stream, local.buffer, local.size, local.table, local.rows = cuda.Stream(), None, 0, None, 0
        if local.size < nbytes:
            local.buffer, local.size = cuda.DeviceBuffer(nbytes), nbytes
        if local.rows < images:
            local.table, local.rows = cuda.DeviceBuffer(max(1, images) * FIELDS * 8), images
        return local.stream, local.buffer, local.table

    def _thread_decoder(self) -> Decoder:
        """This thread's decoder: the one made at construction for the first thread that decodes,
        Decoder.for_another_thread for the others."""
        local = self._local
        if getattr(local, "decoder", None) is None:
            with self._decoder_lock:
                first, self._decoder_taken = not self._decoder_taken, True
            local.decoder = self.decoder if first else self.decoder.for_another_thread()
        return local.decoder

    def table_row(self, image: Any, index: int) -> list[int]:
        """The crop kernel's row for a decoded image, to be the batch's row `index`."""
        return table_row(self.spec, self.decoder.memory(image), index, self.decoder.planar)

    def __call__(self, files: list[bytes]) -> tuple[DeviceArray, dict[int, ImageRefused]]:
        """float32 [len(files), 3, crop, crop] on the device, complete when this returns, and the
        files refused by index (their rows are left as zeros)."""
        spec = self.spec
        on_gpu, on_cpu, refused = sort_files(files, spec)
        shape = (len(files), 3, spec.crop, spec.crop)
        nbytes = int(np.prod(shape)) * 4
        row_bytes = nbytes // max(1, len(files))
        stream, buffer, device_table = self._thread_state(nbytes, len(files))
        cuda.set_device(self.device_index)
        cuda.memset_async(buffer.ptr, 0, nbytes, stream)
        held: list[Any] = []  # decoded images and host arrays the stream still reads
        for chunk in decode_chunks(on_gpu, spec.max_decoded_bytes):
            rows = []
            decoded = self._thread_decoder().decode([files[i] for i in chunk], stream)
            for index, image in zip(chunk, decoded, strict=True):
                if image is None:  # Pillow decodes it, or refuses it with its reason
                    on_cpu.append(index)
                    continue
                held.append(image)
                rows.append(self.table_row(image, index))
            if rows:  # a later chunk's table is copied after this launch, in stream order
                table = np.array(rows, np.int64)
                cuda.memcpy_htod_async(device_table.ptr, table, table.nbytes, stream)
                held.append(table)
                self.kernel.launch(device_table.ptr, len(rows), buffer.ptr, spec.crop, self.scale, self.shift, stream)
        for index in on_cpu:
            try:
                crop = np.ascontiguousarray(cpu_crop(files[index], spec))
            except ImageRefused as exc:
                refused[index] = exc
                continue
            held.append(crop)
            cuda.memcpy_htod_async(buffer.ptr + index * row_bytes, crop, crop.nbytes, stream)
        stream.synchronize()
        return DeviceArray(buffer, buffer.ptr, shape), refused
