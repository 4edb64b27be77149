"""The thin layer over CUDA's runtime API (cuda-python's ``cuda.bindings.runtime``).

Every call's return code is checked and a failure becomes a CudaError that
names the call and CUDA's description of the error. cuda-python is imported
on first use, so this module imports on any machine; on one without a GPU or
driver the calls raise CudaError. Handles (streams, events, pointers) are
plain ints, which is what TensorRT and torch take.

The current device is per host thread: a thread that works on a device other
than 0 calls ``set_device`` first.
"""

from __future__ import annotations

import ctypes
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtpool.errors import ConfigError, TrtpoolError

log = logging.getLogger("trtpool")

# Codes that mean "no usable GPU here" rather than "something broke".
NO_GPU = ("cudaErrorNoDevice", "cudaErrorInsufficientDriver")

_cudart: Any = None  # cuda.bindings.runtime, loaded on first use (tests put a double here)


class CudaError(TrtpoolError):
    """A CUDA runtime call failed; ``call`` and ``code`` (cudaError_t name) say which and how."""

    def __init__(self, call: str, code: str | None, message: str) -> None:
        super().__init__(message)
        self.call = call
        self.code = code


def _rt() -> Any:
    global _cudart
    if _cudart is None:
        try:
            from cuda.bindings import runtime
        except ImportError as exc:
            raise CudaError(
                "import cuda.bindings",
                None,
                f"cuda-python is not installed ({exc}); install it with pip install 'cuda-python>=12.6'",
            ) from exc
        _cudart = runtime
    return _cudart


def _call(name: str, *args: Any) -> Any:
    """Call cudart.<name>; raise CudaError unless it returns cudaSuccess; return its value(s)."""
    return _call_on(_rt(), name, *args)


def _call_on(rt: Any, name: str, *args: Any) -> Any:
    err, *values = getattr(rt, name)(*args)
    _check(rt, name, err)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _check(rt: Any, name: str, err: Any) -> None:
    """Raise CudaError naming the call and CUDA's description unless `err` is cudaSuccess."""
    if err != rt.cudaError_t.cudaSuccess:
        code = rt.cudaGetErrorName(err)[1].decode()
        text = rt.cudaGetErrorString(err)[1].decode()
        hint = (
            (" (is an NVIDIA driver installed and a GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES)")
            if code in NO_GPU
            else ""
        )
        raise CudaError(name, code, f"{name} failed: {code}: {text}{hint}")


def _release_quietly(rt: Any, call: str, handle: int) -> None:
    """Free on garbage collection, where an exception has nowhere to go."""
    try:
        _call_on(rt, call, handle)
    except CudaError as exc:
        log.warning("freeing a CUDA resource when it was garbage-collected: %s", exc)


def device_index(device: str) -> int:
    """'cuda:N' -> N ('cuda' -> 0)."""
    kind, _, index = device.partition(":")
    if kind != "cuda" or not (index.isdigit() or index == ""):
        raise ConfigError(f"device '{device}' is not a CUDA device; expected 'cuda:N'")
    return int(index or 0)


def device_count() -> int:
    """GPUs visible to this process; 0 when there is no GPU, driver or cuda-python."""
    try:
        return _call("cudaGetDeviceCount")
    except CudaError as exc:
        if exc.code is None or exc.code in NO_GPU:
            return 0
        raise


def set_device(index: int) -> None:
    """Make device `index` current for the calling thread."""
    _call("cudaSetDevice", index)


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    major: int
    minor: int
    total_memory: int

    @property
    def compute_capability(self) -> str:
        """'major.minor', e.g. '9.0' (the form engine sidecars record)."""
        return f"{self.major}.{self.minor}"


def device_properties(index: int) -> DeviceProperties:
    prop = _call("cudaGetDeviceProperties", index)
    name = prop.name.split(b"\0", 1)[0].decode() if isinstance(prop.name, bytes) else str(prop.name)
    return DeviceProperties(name, prop.major, prop.minor, prop.totalGlobalMem)


def mem_get_info() -> tuple[int, int]:
    """(free, total) bytes on the current device."""
    free, total = _call("cudaMemGetInfo")
    return free, total


def _free_later(owner: object, free_call: str, handle: int) -> weakref.finalize:
    """Free `handle` with `free_call` when `owner` is garbage-collected, through the
    API that allocated it. Not at interpreter exit: the driver frees everything then."""
    finalizer = weakref.finalize(owner, _release_quietly, _rt(), free_call, handle)
    finalizer.atexit = False
    return finalizer


class _Resource:
    """Owns one handle freed by one CUDA call: on close() (errors raised) or when
    garbage-collected (errors logged)."""

    def _own(self, free_call: str, handle: int) -> None:
        self._finalizer = _free_later(self, free_call, handle)

    def close(self) -> None:
        detached = self._finalizer.detach()
        if detached is not None:
            _call_on(*detached[2])


class Stream(_Resource):
    """A non-blocking stream: it does not synchronize with the legacy default stream."""

    def __init__(self) -> None:
        self.handle: int = int(_call("cudaStreamCreateWithFlags", _rt().cudaStreamNonBlocking))
        self._own("cudaStreamDestroy", self.handle)

    def synchronize(self) -> None:
        _call("cudaStreamSynchronize", self.handle)


class Event(_Resource):
    """An event; timing is off by default (cheaper to record and wait on)."""

    def __init__(self, timing: bool = False) -> None:
        rt = _rt()
        flags = rt.cudaEventDefault if timing else rt.cudaEventDisableTiming
        self.handle: int = int(_call("cudaEventCreateWithFlags", flags))
        self._own("cudaEventDestroy", self.handle)

    def record(self, stream: Stream) -> None:
        _call("cudaEventRecord", self.handle, stream.handle)

    def synchronize(self) -> None:
        _call("cudaEventSynchronize", self.handle)

    def elapsed_ms(self, start: Event) -> float:
        """Milliseconds from `start` to this event (both created with timing=True, both done)."""
        return float(_call("cudaEventElapsedTime", start.handle, self.handle))


class DeviceBuffer(_Resource):
    """`nbytes` of device memory on the current device (at least 1 byte, so `ptr` is never 0)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.ptr: int = int(_call("cudaMalloc", max(1, nbytes)))
        self._own("cudaFree", self.ptr)


def host_register(ptr: int, nbytes: int) -> None:
    """Page-lock `nbytes` of existing host memory at `ptr` in place, for every device
    (cudaHostRegisterPortable): device copies then read it by DMA, with no staging."""
    _call("cudaHostRegister", ptr, nbytes, _rt().cudaHostRegisterPortable)


def host_unregister(ptr: int) -> None:
    _call("cudaHostUnregister", ptr)


IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)


def ipc_handle(ptr: int) -> bytes:
    """The inter-process handle of the allocation that starts at `ptr` (made by cudaMalloc)."""
    handle = _call("cudaIpcGetMemHandle", ptr)
    return ctypes.string_at(handle.getPtr(), IPC_HANDLE_BYTES)


def ipc_open(handle: bytes) -> int:
    """Map another process's allocation, named by its ipc_handle(), into this one's current
    device; the address it has here (close it with ipc_close)."""
    if len(handle) != IPC_HANDLE_BYTES:
        raise ValueError(f"a CUDA IPC handle has {IPC_HANDLE_BYTES} bytes, not {len(handle)}")
    rt = _rt()
    wrapped = rt.cudaIpcMemHandle_t()
    ctypes.memmove(wrapped.getPtr(), handle, IPC_HANDLE_BYTES)
    return int(_call("cudaIpcOpenMemHandle", wrapped, rt.cudaIpcMemLazyEnablePeerAccess))


def ipc_close(ptr: int) -> None:
    _call("cudaIpcCloseMemHandle", ptr)


def pinned_allocator(dtype: np.dtype, count: int) -> np.ndarray:
    """`count` elements of page-locked host memory as a flat numpy array (a buffers.Allocator).

    The memory is freed with cudaFreeHost when the last array or view over it
    is garbage-collected: the finalizer hangs on the ctypes object at the
    bottom of every view's base chain.
    """
    dtype = np.dtype(dtype)
    nbytes = max(1, dtype.itemsize * count)
    ptr = int(_call("cudaHostAlloc", nbytes, _rt().cudaHostAllocPortable))
    memory = (ctypes.c_byte * nbytes).from_address(ptr)
    _free_later(memory, "cudaFreeHost", ptr)
    # numpy 1.26's stubs list bytes-like types only; a ctypes array has the buffer protocol too
    return np.frombuffer(memory, dtype=dtype, count=count)  # type: ignore[call-overload]


def _host_ptr(array: np.ndarray, nbytes: int) -> int:
    if not array.flags.c_contiguous:
        raise ValueError("host array for an async copy must be C-contiguous")
    if nbytes > array.nbytes:
        raise ValueError(f"copy of {nbytes} bytes exceeds the host array's {array.nbytes} bytes")
    return array.ctypes.data


def memcpy_htod_async(dst_ptr: int, host_array: np.ndarray, nbytes: int, stream: Stream) -> None:
    """Queue a copy of host_array's first nbytes to device memory (pinned: truly async)."""
    _call(
        "cudaMemcpyAsync",
        dst_ptr,
        _host_ptr(host_array, nbytes),
        nbytes,
        _rt().cudaMemcpyKind.cudaMemcpyHostToDevice,
        stream.handle,
    )


def memcpy_htod_from_async(dst_ptr: int, src_ptr: int, nbytes: int, stream: Stream) -> None:
    """Queue a copy of nbytes of host memory at `src_ptr` (page-locked: read by DMA after this
    returns, so it must stay unchanged until the stream passes) to device memory."""
    _call("cudaMemcpyAsync", dst_ptr, src_ptr, nbytes, _rt().cudaMemcpyKind.cudaMemcpyHostToDevice, stream.handle)


def memcpy_dtoh_async(host_array: np.ndarray, src_ptr: int, nbytes: int, stream: Stream) -> None:
    """Queue a copy of nbytes of device memory into host_array; valid after a synchronize."""
    _call(
        "cudaMemcpyAsync",
        _host_ptr(host_array, nbytes),
        src_ptr,
        nbytes,
        _rt().cudaMemcpyKind.cudaMemcpyDeviceToHost,
        stream.handle,
    )


def memcpy_dtod_async(dst_ptr: int, src_ptr: int, nbytes: int, stream: Stream) -> None:
    _call("cudaMemcpyAsync", dst_ptr, src_ptr, nbytes, _rt().cudaMemcpyKind.cudaMemcpyDeviceToDevice, stream.handle)


def memset_async(dst_ptr: int, value: int, nbytes: int, stream: Stream) -> None:
    """Queue setting nbytes of device memory to the byte `value`."""
    _call("cudaMemsetAsync", dst_ptr, value, nbytes, stream.handle)


class Graph(_Resource):
    """An instantiated CUDA graph (a cudaGraphExec_t), replayed with ``launch``."""

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self._own("cudaGraphExecDestroy", handle)

    def launch(self, stream: Stream) -> None:
        """Queue the graph's work on `stream` (the addresses and sizes it captured)."""
        _call("cudaGraphLaunch", self.handle, stream.handle)


def capture(stream: Stream, work: Callable[[], None]) -> Graph:
    """What ``work()`` queues on `stream`, captured into a graph and instantiated.

    The capture is thread-local (cudaStreamCaptureModeThreadLocal), as trtexec
    (samples/common/sampleDevice.h, TrtCudaGraph::beginCapture) and Triton's
    TensorRT backend (src/instance_state.cc, BuildCudaGraph) capture: calls that
    are illegal while capturing (a synchronization, an allocation) fail on this
    thread only, and other threads keep working. If ``work`` raises or CUDA
    invalidated the capture, the capture is ended, whatever graph it made is
    discarded with the error it left (as trtexec's endCaptureOnError does), and
    the failure is raised: work's own exception, else a CudaError.
    """
    rt = _rt()
    _call("cudaStreamBeginCapture", stream.handle, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal)
    try:
        work()
    except BaseException:
        _discard_capture(rt, stream)
        raise
    err, graph = rt.cudaStreamEndCapture(stream.handle)
    if err != rt.cudaError_t.cudaSuccess:
        rt.cudaGetLastError()
        _check(rt, "cudaStreamEndCapture", err)
    try:
        return Graph(int(_call("cudaGraphInstantiate", graph, 0)))
    finally:
        _call("cudaGraphDestroy", graph)


def _discard_capture(rt: Any, stream: Stream) -> None:
    """End a capture whose work failed. CUDA returns no graph when the capture was
    invalidated, else one that must not be used; either way the error CUDA recorded
    for the failed call is cleared, so that the thread's next call does not report it."""
    err, graph = rt.cudaStreamEndCapture(stream.handle)
    if err == rt.cudaError_t.cudaSuccess:
        _call_on(rt, "cudaGraphDestroy", graph)
    rt.cudaGetLastError()
