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

from trtpool.gpu import cuda
from trtpool.images import CropSpec, placement

KERNEL = r"""
__device__ __forceinline__ float triangle(float x) { x = fabsf(x); return x < 1.0f ? 1.0f - x : 0.0f; }

/* One axis of the antialiased bilinear filter for one output index: the first source index, the
   count of taps, their centre, 1/scale and the sum of their weights (each weight is divided by it). */
struct Axis { int first, count; float centre, inv, total; };

__device__ __forceinline__ float weight(const Axis& a, int k) {
    return triangle((a.first + k - a.centre + 0.5f) * a.inv);
}

__device__ Axis axis(int out, int size_in, int size_out) {
    Axis a;
    float scale = (float)size_in / (float)size_out;
    float support = scale >= 1.0f ? scale : 1.0f;
    a.inv = scale >= 1.0f ? 1.0f / scale : 1.0f;
    a.centre = scale * (out + 0.5f);
    int lo = (int)(a.centre - support + 0.5f);
    a.first = lo > 0 ? lo : 0;
    int hi = (int)(a.centre + support + 0.5f);
    a.count = (hi < size_in ? hi : size_in) - a.first;
    a.total = 0.0f;
    for (int k = 0; k < a.count; ++k) a.total += weight(a, k);
    return a;
}

/* The drafted pixel (row, column), 3 channels: the rounded mean of its a x a block (cut at the
   image's edge), or the pixel itself where a is 1. */
__device__ __forceinline__ void drafted(const unsigned char* __restrict__ src, int row, int column, int a,
                                        int height, int width, long long rs, long long ps, long long cs,
                                        float* p) {
    if (a == 1) {
        const unsigned char* at = src + row * rs + column * ps;
        p[0] = at[0]; p[1] = at[cs]; p[2] = at[2 * cs];
        return;
    }
    int y0 = row * a, x0 = column * a;
    int y1 = min(y0 + a, height), x1 = min(x0 + a, width);
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
    for (int y = y0; y < y1; ++y) {
        const unsigned char* line = src + y * rs;
        for (int x = x0; x < x1; ++x) {
            const unsigned char* at = line + x * ps;
            s0 += at[0]; s1 += at[cs]; s2 += at[2 * cs];
        }
    }
    float count = (float)((y1 - y0) * (x1 - x0));
    p[0] = rintf(s0 / count); p[1] = rintf(s1 / count); p[2] = rintf(s2 / count);
}

/* table: per image [ptr, H, W, row stride, pixel stride, channel stride, draft, Hd, Wd, Hr, Wr,
   left, top, output row]; grid (ceil(crop*crop / block), images); a thread makes one output
   pixel's 3 channels, each tap's weight computed once for the three. */
extern "C" __global__ void imagenet_crops(const long long* __restrict__ table, int fields,
                                          float* __restrict__ out, int crop,
                                          float scale0, float scale1, float scale2,
                                          float shift0, float shift1, float shift2) {
    const long long* t = table + (long long)blockIdx.y * fields;
    int pixel = blockIdx.x * blockDim.x + threadIdx.x;
    if (pixel >= crop * crop) return;
    int y = pixel / crop, x = pixel % crop;
    const unsigned char* src = (const unsigned char*)t[0];
    int height = (int)t[1], width = (int)t[2], a = (int)t[6];
    long long rs = t[3], ps = t[4], cs = t[5];
    Axis ay = axis(y + (int)t[12], (int)t[7], (int)t[9]);
    Axis ax = axis(x + (int)t[11], (int)t[8], (int)t[10]);
    float acc[3] = {0.0f, 0.0f, 0.0f}, p[3];
    for (int i = 0; i < ay.count; ++i) {
        float wy = weight(ay, i) / ay.total;
        if (wy == 0.0f) continue;
        float line[3] = {0.0f, 0.0f, 0.0f};
        for (int j = 0; j < ax.count; ++j) {
            float wx = weight(ax, j) / ax.total;
            if (wx == 0.0f) continue;
            drafted(src, ay.first + i, ax.first + j, a, height, width, rs, ps, cs, p);
            line[0] += wx * p[0]; line[1] += wx * p[1]; line[2] += wx * p[2];
        }
        acc[0] += wy * line[0]; acc[1] += wy * line[1]; acc[2] += wy * line[2];
    }
    float* o = out + ((long long)t[13] * 3 * crop + y) * crop + x;
    long long plane = (long long)crop * crop;
    o[0] = rintf(fminf(fmaxf(acc[0], 0.0f), 255.0f)) * scale0 - shift0;
    o[plane] = rintf(fminf(fmaxf(acc[1], 0.0f), 255.0f)) * scale1 - shift1;
    o[2 * plane] = rintf(fminf(fmaxf(acc[2], 0.0f), 255.0f)) * scale2 - shift2;
}
"""
FIELDS = 14
BLOCK = 256


class CropKernel:
    """The compiled kernel on one device; `launch` is safe from several threads (each passes
    its own stream)."""

    _compiled: dict[tuple[int, str], bytes] = {}
    _lock = threading.Lock()

    def __init__(self, device_index: int, source: str = KERNEL) -> None:
        """`source`: the kernel's CUDA C++ (another version's, for a side-by-side timing)."""
        from cuda.bindings import driver

        self.driver = driver
        cuda.set_device(device_index)  # the runtime's primary context: the driver calls use it
        image = self._cubin(device_index, source)
        self.module = _checked(driver, "cuModuleLoadData", driver.cuModuleLoadData(image))
        self.function = _checked(driver, "cuModuleGetFunction",
                                 driver.cuModuleGetFunction(self.module, b"imagenet_crops"))

    @classmethod
    def _cubin(cls, device_index: int, source: str) -> bytes:
        with cls._lock:
            key = (device_index, source)
            if key not in cls._compiled:
                cls._compiled[key] = _compile(source, cuda.device_properties(device_index).compute_capability)
            return cls._compiled[key]

    def launch(self, table: Any, images: int, out: int, crop: int, scale: tuple[float, ...],
               shift: tuple[float, ...], stream: cuda.Stream) -> None:
        c_float, c_int, c_void_p = ctypes.c_float, ctypes.c_int, ctypes.c_void_p
        arguments = ((table, FIELDS, out, crop, *scale, *shift),
                     (c_void_p, c_int, c_void_p, c_int, *(c_float,) * 6))
        blocks = -(-crop * crop // BLOCK)
        _checked(self.driver, "cuLaunchKernel",
                 self.driver.cuLaunchKernel(self.function, blocks, images, 1, BLOCK, 1, 1, 0, stream.handle,
                                            arguments, 0))


def _compile(source: str, compute_capability: str) -> bytes:
    """The kernel's cubin for this GPU (sm_XY), from NVRTC."""
    from cuda.bindings import nvrtc

    program = _checked(nvrtc, "nvrtcCreateProgram",
                       nvrtc.nvrtcCreateProgram(source.encode(), b"crop_kernel.cu", 0, [], []))
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
