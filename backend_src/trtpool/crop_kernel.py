"""ImageNet crops on the GPU: one CUDA kernel (compiled at run time with NVRTC, launched
through cuda-python, both of which the TensorRT runtime already uses; no torch) takes a batch
of decoded uint8 images of any sizes and layouts (torchvision's or nvImageCodec's, by the CUDA
array interface) and writes the engine's normalized float32 [N, 3, crop, crop] batch in one
launch, computing the crop's pixels alone (trtpool.device_crops drives it).

Per output pixel it follows trtpool.images.cpu_crop (Pillow): the JPEG draft reduction as the
rounded mean of a x a blocks (libjpeg's DCT-domain scaling is close to it), then the
antialiased bilinear resize of Pillow and torch (a triangle filter whose support grows with
the downscale, weights normalized per axis), the centre crop, rounding to grey levels, and
(x / 255 - mean) / std. tests/harness/pipelines.crop_reference is the same in float64 numpy.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from trtpool import cuda
from trtpool.images import CropSpec, placement

KERNEL = r"""
__device__ float triangle(float x) { x = fabsf(x); return x < 1.0f ? 1.0f - x : 0.0f; }

__device__ float drafted(const unsigned char* src, const long long* t, int row, int column, int channel) {
    long long height = t[1], width = t[2], rs = t[3], ps = t[4], cs = t[5];
    int a = (int)t[6];
    const unsigned char* base = src + channel * cs;
    if (a == 1) return (float)base[row * rs + column * ps];
    long long y0 = (long long)row * a, x0 = (long long)column * a;
    long long y1 = min(y0 + a, height), x1 = min(x0 + a, width);
    float sum = 0.0f;
    for (long long y = y0; y < y1; ++y)
        for (long long x = x0; x < x1; ++x) sum += (float)base[y * rs + x * ps];
    return rintf(sum / (float)((y1 - y0) * (x1 - x0)));
}

/* One axis of the antialiased bilinear filter: first source index, count, centre, 1/scale. */
__device__ void axis(int out, int size_in, int size_out, int* first, int* count, float* centre, float* inv) {
    float scale = (float)size_in / (float)size_out;
    float support = scale >= 1.0f ? scale : 1.0f;
    *inv = scale >= 1.0f ? 1.0f / scale : 1.0f;
    *centre = scale * (out + 0.5f);
    int lo = (int)(*centre - support + 0.5f);
    *first = lo > 0 ? lo : 0;
    int hi = (int)(*centre + support + 0.5f);
    *count = (hi < size_in ? hi : size_in) - *first;
}

/* table: per image [ptr, H, W, row stride, pixel stride, channel stride, draft, Hd, Wd, Hr, Wr,
   left, top, output row]; grid (ceil(crop*crop / block), images). */
extern "C" __global__ void imagenet_crops(const long long* table, int fields, float* out, int crop,
                                          float scale0, float scale1, float scale2,
                                          float shift0, float shift1, float shift2) {
    const long long* t = table + (long long)blockIdx.y * fields;
    int pixel = blockIdx.x * blockDim.x + threadIdx.x;
    if (pixel >= crop * crop) return;
    int y = pixel / crop, x = pixel % crop;
    const unsigned char* src = (const unsigned char*)t[0];
    int hd = (int)t[7], wd = (int)t[8], hr = (int)t[9], wr = (int)t[10];
    int fy, ny, fx, nx; float cy, cx, iy, ix;
    axis(y + (int)t[12], hd, hr, &fy, &ny, &cy, &iy);
    axis(x + (int)t[11], wd, wr, &fx, &nx, &cx, &ix);
    float wy_total = 0.0f, wx_total = 0.0f;
    for (int i = 0; i < ny; ++i) wy_total += triangle((fy + i - cy + 0.5f) * iy);
    for (int j = 0; j < nx; ++j) wx_total += triangle((fx + j - cx + 0.5f) * ix);
    float scales[3] = {scale0, scale1, scale2}, shifts[3] = {shift0, shift1, shift2};
    for (int c = 0; c < 3; ++c) {
        float acc = 0.0f;
        for (int i = 0; i < ny; ++i) {
            float wy = triangle((fy + i - cy + 0.5f) * iy) / wy_total;
            if (wy == 0.0f) continue;
            float line = 0.0f;
            for (int j = 0; j < nx; ++j) {
                float wx = triangle((fx + j - cx + 0.5f) * ix) / wx_total;
                if (wx != 0.0f) line += wx * drafted(src, t, fy + i, fx + j, c);
            }
            acc += wy * line;
        }
        float level = rintf(fminf(fmaxf(acc, 0.0f), 255.0f));
        out[(((long long)t[13] * 3 + c) * crop + y) * crop + x] = level * scales[c] - shifts[c];
    }
}
"""
FIELDS = 14
BLOCK = 256


class DeviceArray:
    """A float32 array in device memory, shown to torch, numpy-free runtimes and TensorRT through
    the CUDA array interface; slicing rows gives a view that keeps the memory alive."""

    def __init__(self, owner: Any, ptr: int, shape: tuple[int, ...]) -> None:
        self._owner = owner
        self.ptr = ptr
        self.shape = shape
        self.dtype = np.dtype(np.float32)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> DeviceArray:
        start, stop, step = rows.indices(self.shape[0])
        if step != 1:
            raise IndexError("only contiguous row ranges")
        row_bytes = self.nbytes // max(1, self.shape[0])
        return DeviceArray(self._owner, self.ptr + start * row_bytes, (stop - start, *self.shape[1:]))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None}

    def to_host(self) -> np.ndarray:
        host = np.empty(self.shape, self.dtype)
        stream = cuda.Stream()
        cuda.memcpy_dtoh_async(host, self.ptr, self.nbytes, stream)
        stream.synchronize()
        return host


class CropKernel:
    """The compiled kernel on one device; `launch` is safe from several threads (each passes
    its own stream)."""

    _compiled: dict[int, bytes] = {}
    _lock = threading.Lock()

    def __init__(self, device_index: int) -> None:
        from cuda.bindings import driver

        self.driver = driver
        cuda.set_device(device_index)  # the runtime's primary context: the driver calls use it
        image = self._cubin(device_index)
        self.module = _checked(driver, "cuModuleLoadData", driver.cuModuleLoadData(image))
        self.function = _checked(driver, "cuModuleGetFunction",
                                 driver.cuModuleGetFunction(self.module, b"imagenet_crops"))

    @classmethod
    def _cubin(cls, device_index: int) -> bytes:
        with cls._lock:
            if device_index not in cls._compiled:
                cls._compiled[device_index] = _compile(cuda.device_properties(device_index).compute_capability)
            return cls._compiled[device_index]

    def launch(self, table: Any, images: int, out: int, crop: int, scale: tuple[float, ...],
               shift: tuple[float, ...], stream: cuda.Stream) -> None:
        c_float, c_int, c_void_p = ctypes.c_float, ctypes.c_int, ctypes.c_void_p
        arguments = ((table, FIELDS, out, crop, *scale, *shift),
                     (c_void_p, c_int, c_void_p, c_int, *(c_float,) * 6))
        blocks = -(-crop * crop // BLOCK)
        _checked(self.driver, "cuLaunchKernel",
                 self.driver.cuLaunchKernel(self.function, blocks, images, 1, BLOCK, 1, 1, 0, stream.handle,
                                            arguments, 0))


def _compile(compute_capability: str) -> bytes:
    """The kernel's cubin for this GPU (sm_XY), from NVRTC."""
    from cuda.bindings import nvrtc

    program = _checked(nvrtc, "nvrtcCreateProgram",
                       nvrtc.nvrtcCreateProgram(KERNEL.encode(), b"crop_kernel.cu", 0, [], []))
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


def table_row(spec: CropSpec, interface: dict[str, Any], index: int, planar: bool) -> list[int]:
    """The kernel's table row for one decoded uint8 image: [3, H, W] if `planar`, else [H, W, 3]
    (the decoder says which: a shape alone cannot, an image 3 pixels wide being either)."""
    shape = tuple(interface["shape"])
    strides = interface.get("strides") or tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    if planar:
        (_, height, width), (cs, rs, ps) = shape, strides
    else:
        (height, width, _), (rs, ps, cs) = shape, strides
    draft, (wd, hd), (wr, hr), (left, top) = placement(spec, width, height)
    return [interface["data"][0], height, width, rs, ps, cs, draft, hd, wd, hr, wr, left, top, index]
