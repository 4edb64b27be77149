"""ImageNet crops on the GPU: one CUDA kernel (compiled at run time with NVRTC, launched
through cuda-python, both of which the TensorRT runtime already uses; no torch) takes a batch
of decoded uint8 images of any sizes and layouts (torchvision's or nvImageCodec's, by the CUDA
array interface) and writes the engine's normalized float32 [N, 3, crop, crop] batch in one
launch, computing the crop's pixels alone (trtpool.vision.device_crops drives it).

Per output pixel it follows trtpool.vision.images.cpu_crop (Pillow): the JPEG draft reduction as the
rounded mean of a x a blocks (libjpeg's DCT-domain scaling is close to it), then the
antialiased bilinear resize of Pillow and torch (a triangle filter whose support grows with
the downscale, weights normalized per axis), the centre crop, rounding to grey levels, and
(x / 255 - mean) / std. tests/harness/pipelines.crop_reference is the same in float64 numpy.
"""

from __future__ import annotations

import ctypes
import threading
from importlib import resources
from typing import Any, ClassVar

from trtpool.gpu import cuda
from trtpool.vision.images import CropSpec, placement

# The kernel's CUDA C++, a package file beside this module.
KERNEL = resources.files(__package__).joinpath("crop_kernel.cu").read_text()
FIELDS = 14
BLOCK = 256


class CropKernel:
    """The compiled kernel on one device; `launch` is safe from several threads (each passes
    its own stream)."""

    _compiled: ClassVar[dict[tuple[int, str], bytes]] = {}  # every instance's cache
    _lock = threading.Lock()

    def __init__(self, device_index: int, source: str = KERNEL) -> None:
        """`source`: the kernel's CUDA C++ (another version's, for a side-by-side timing)."""
        from cuda.bindings import driver

        self.driver = driver
        cuda.set_device(device_index)  # the runtime's primary context: the driver calls use it
        image = self._cubin(device_index, source)
        self.module = _checked(driver, "cuModuleLoadData", driver.cuModuleLoadData(image))
        self.function = _checked(
            driver, "cuModuleGetFunction", driver.cuModuleGetFunction(self.module, b"imagenet_crops")
        )

    @classmethod
    def _cubin(cls, device_index: int, source: str) -> bytes:
        with cls._lock:
            key = (device_index, source)
            if key not in cls._compiled:
                cls._compiled[key] = _compile(source, cuda.device_properties(device_index).compute_capability)
            return cls._compiled[key]

    def launch(
        self,
        table: Any,
        images: int,
        out: int,
        crop: int,
        scale: tuple[float, ...],
        shift: tuple[float, ...],
        stream: cuda.Stream,
    ) -> None:
        c_float, c_int, c_void_p = ctypes.c_float, ctypes.c_int, ctypes.c_void_p
        arguments = ((table, FIELDS, out, crop, *scale, *shift), (c_void_p, c_int, c_void_p, c_int, *(c_float,) * 6))
        blocks = -(-crop * crop // BLOCK)
        _checked(
            self.driver,
            "cuLaunchKernel",
            self.driver.cuLaunchKernel(self.function, blocks, images, 1, BLOCK, 1, 1, 0, stream.handle, arguments, 0),
        )


def _compile(source: str, compute_capability: str) -> bytes:
    """The kernel's cubin for this GPU (sm_XY), from NVRTC."""
    from cuda.bindings import nvrtc

    program = _checked(
        nvrtc, "nvrtcCreateProgram", nvrtc.nvrtcCreateProgram(source.encode(), b"crop_kernel.cu", 0, [], [])
    )
    arch = f"--gpu-architecture=sm_{compute_capability.replace('.', '')}".encode()
    result = nvrtc.nvrtcCompileProgram(program, 2, [arch, b"-default-device"])
    if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        size = _checked(nvrtc, "nvrtcGetProgramLogSize", nvrtc.nvrtcGetProgramLogSize(program))
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(program, log)
        raise cuda.CudaError("nvrtcCompileProgram", str(result[0]), f"the crop kernel did not compile: {log.decode()}")
    size = _checked(nvrtc, "nvrtcGetCUBINSize", nvrtc.nvrtcGetCUBINSize(program))
    cubin = b" " * size
    _checked(nvrtc, "nvrtcGetCUBIN", nvrtc.nvrtcGetCUBIN(program, cubin))
    return cubin


def _checked(module: Any, call: str, result: tuple) -> Any:
    """cuda-python's (error, value...) return: the value, or CudaError naming the call."""
    error, *values = result
    if int(error) != 0:
        raise cuda.CudaError(call, str(error), f"{call} failed: {error}")
    return values[0] if len(values) == 1 else tuple(values) if values else None


Memory = tuple[int, tuple[int, int, int], tuple[int, int, int]]  # a decoded image: pointer, shape, byte strides


def interface_memory(interface: dict[str, Any]) -> Memory:
    """A uint8 image's Memory from its CUDA array interface (strides None: C-contiguous)."""
    shape = tuple(interface["shape"])
    strides = interface.get("strides") or (shape[1] * shape[2], shape[2], 1)
    return interface["data"][0], shape, tuple(strides)


def table_row(spec: CropSpec, memory: Memory, index: int, planar: bool) -> list[int]:
    """The kernel's table row for one decoded uint8 image: [3, H, W] if `planar`, else [H, W, 3]
    (the decoder says which: a shape alone cannot, an image 3 pixels wide being either)."""
    pointer, shape, strides = memory
    if planar:
        (_, height, width), (cs, rs, ps) = shape, strides
    else:
        (height, width, _), (rs, ps, cs) = shape, strides
    draft, (wd, hd), (wr, hr), (left, top) = placement(spec, width, height)
    return [pointer, height, width, rs, ps, cs, draft, hd, wd, hr, wr, left, top, index]
