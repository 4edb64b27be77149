"""ImageNet crops on the GPU without torch: one CUDA kernel (compiled at run time with NVRTC,
launched through cuda-python, both of which the TensorRT runtime already uses) takes a batch
of decoded uint8 images of any sizes and layouts (nvImageCodec's, by the CUDA array
interface) and writes the engine's normalized float32 [N, 3, crop, crop] batch in one launch.

Per output pixel it does what trtpool.images' torch path does, in the same arithmetic:
Pillow's JPEG draft reduction as the rounded mean of a x a blocks, then the antialiased
bilinear resize of torch and Pillow (a triangle filter whose support grows with the
downscale, weights normalized per axis), the centre crop, rounding to grey levels, and
(x / 255 - mean) / std.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtpool import cuda
from trtpool.images import CropSpec, ImageRefused, cpu_crop, decode_chunks, placement, sort_files

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


@dataclass(frozen=True)
class Placement:
    """Where one decoded image goes: its draft scale, sizes after draft and resize, crop origin."""

    draft: int
    drafted: tuple[int, int]   # (height, width)
    resized: tuple[int, int]
    origin: tuple[int, int]    # (left, top)


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


class CudaCrops:
    """trtpool.images.DeviceCrops without torch: nvImageCodec decodes the batch's JPEGs on the
    device (its hardware decoders where the GPU has them), CropKernel makes the crops; the
    result is a DeviceArray, which the runtimes take like a torch tensor. Callable from several
    threads at once: each works on its own stream and output memory, reused call after call
    (a thread's crops are handed to the engine, which copies them, before its next call)."""

    def __init__(self, spec: CropSpec, device: str, backends: tuple[str, ...] = ()) -> None:
        from nvidia import nvimgcodec

        self.spec = spec
        self.device_index = cuda.device_index(device)
        self.kernel = CropKernel(self.device_index)
        allowed = [nvimgcodec.Backend(getattr(nvimgcodec.BackendKind, name)) for name in backends] or None
        self.decoder = nvimgcodec.Decoder(device_id=self.device_index, backends=allowed)
        self.params = nvimgcodec.DecodeParams(apply_exif_orientation=False, color_spec=nvimgcodec.ColorSpec.SRGB,
                                              sample_format=nvimgcodec.SampleFormat.I_RGB)
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

    def __call__(self, files: list[bytes]) -> tuple[DeviceArray, dict[int, ImageRefused]]:
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
            images = self.decoder.decode([files[i] for i in chunk], params=self.params, cuda_stream=stream.handle)
            rows = []
            for index, image in zip(chunk, images):
                if image is None:  # Pillow decodes it, or refuses it with its reason
                    on_cpu.append(index)
                    continue
                held.append(image)
                rows.append(_table_row(spec, image.__cuda_array_interface__, index))
            if rows:  # a later chunk's table is copied after this launch, in stream order
                table = np.array(rows, np.int64)
                cuda.memcpy_htod_async(device_table.ptr, table, table.nbytes, stream)
                held.append(table)
                self.kernel.launch(device_table.ptr, len(rows), buffer.ptr, spec.crop, self.scale, self.shift,
                                   stream)
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


def _table_row(spec: CropSpec, interface: dict[str, Any], index: int) -> list[int]:
    """The kernel's table row for one decoded uint8 image, [H, W, 3] or [3, H, W] by its strides."""
    shape = tuple(interface["shape"])
    strides = interface.get("strides") or tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    if shape[-1] == 3:   # interleaved: H, W, C
        (height, width, _), (rs, ps, cs) = shape, strides
    else:                # planar: C, H, W
        (_, height, width), (cs, rs, ps) = shape, strides
    draft, (wd, hd), (wr, hr), (left, top) = placement(spec, width, height)
    return [interface["data"][0], height, width, rs, ps, cs, draft, hd, wd, hr, wr, left, top, index]
