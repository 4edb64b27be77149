"""FakeCudart: a test double of ``cuda.bindings.runtime``. It proves nothing about CUDA.

Installed in place of the real module (``trtpool.cuda._cudart``) so that
trtpool.cuda, and everything above it, runs on a machine without a GPU:

- device memory is host memory (bytearrays) behind fake, never-dereferenceable
  pointers, so a host pointer passed where a device pointer belongs (or the
  reverse) is refused, as is an access outside an allocation;
- pinned host memory is real host memory (ctypes buffers) at real addresses;
- work queued on a stream (copies, "kernels" from the TensorRT double) runs
  only when that stream or an event recorded on it is synchronized, so a
  caller that reads results before synchronizing sees stale data;
- the current device is per thread, as in CUDA, and a kernel queued on a
  stream of another device than the thread's current one fails;
- every call is counted in ``calls``; ``fail[name] = code`` makes a call fail.

Calls return ``(cudaError_t, *values)`` tuples like cuda-python's.
"""
from __future__ import annotations

import ctypes
import enum
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

GiB = 1 << 30
DEVICE_BASE = 0xD000_0000_0000_0000  # outside any x86-64/arm64 user address space


class cudaError_t(enum.IntEnum):  # noqa: N801 (CUDA's names)
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorInsufficientDriver = 35
    cudaErrorNoDevice = 100
    cudaErrorInvalidDevice = 101
    cudaErrorInvalidResourceHandle = 400
    cudaErrorNotReady = 600
    cudaErrorIllegalAddress = 700


ERROR_STRINGS = {
    cudaError_t.cudaSuccess: "no error",
    cudaError_t.cudaErrorInvalidValue: "invalid argument",
    cudaError_t.cudaErrorMemoryAllocation: "out of memory",
    cudaError_t.cudaErrorInsufficientDriver: "CUDA driver version is insufficient for CUDA runtime version",
    cudaError_t.cudaErrorNoDevice: "no CUDA-capable device is detected",
    cudaError_t.cudaErrorInvalidDevice: "invalid device ordinal",
    cudaError_t.cudaErrorInvalidResourceHandle: "invalid resource handle",
    cudaError_t.cudaErrorNotReady: "device not ready",
    cudaError_t.cudaErrorIllegalAddress: "an illegal memory access was encountered",
}


class cudaMemcpyKind(enum.IntEnum):  # noqa: N801
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3


@dataclass
class cudaDeviceProp:  # noqa: N801
    name: bytes
    major: int
    minor: int
    totalGlobalMem: int  # noqa: N815


@dataclass
class FakeDevice:
    name: str = "NVIDIA GeForce RTX 4090 (double)"
    major: int = 8
    minor: int = 9
    total: int = 24 * GiB


class DoubleError(Exception):
    """A misuse the double refuses; becomes an error code at the call."""

    def __init__(self, code: cudaError_t, why: str) -> None:
        super().__init__(why)
        self.code = code


@dataclass
class _Stream:
    device: int
    queue: list[Callable[[], None]] = field(default_factory=list)


@dataclass
class _Event:
    timing: bool
    done: bool = False
    at: float = 0.0
    stream: int | None = None


class FakeCudart:
    cudaError_t = cudaError_t
    cudaMemcpyKind = cudaMemcpyKind
    cudaStreamNonBlocking = 1
    cudaEventDefault = 0
    cudaEventDisableTiming = 2
    cudaHostAllocDefault = 0
    cudaHostAllocPortable = 1

    def __init__(self, devices: tuple[FakeDevice, ...] = (FakeDevice(),)) -> None:
        self.devices = devices
        self.calls: Counter[str] = Counter()
        self.fail: dict[str, cudaError_t] = {}
        self.misuse: list[str] = []  # why each refused call was refused
        self._lock = threading.Lock()
        self._local = threading.local()
        self._handles = itertools.count(0x1000)
        self._next_device_ptr = DEVICE_BASE
        self.device_memory: dict[int, tuple[int, bytearray]] = {}  # ptr -> (device, bytes)
        self.host_memory: dict[int, ctypes.Array] = {}
        self.streams: dict[int, _Stream] = {}
        self.events: dict[int, _Event] = {}

    # ---- the double's plumbing -------------------------------------------------

    def _enter(self, name: str) -> cudaError_t:
        with self._lock:
            self.calls[name] += 1
        return self.fail.get(name, cudaError_t.cudaSuccess)

    def _refuse(self, exc: DoubleError) -> cudaError_t:
        self.misuse.append(str(exc))
        return exc.code

    def current_device(self) -> int:
        return getattr(self._local, "device", 0)

    def syncs(self) -> int:
        """Host waits so far: stream and event synchronizations."""
        return self.calls["cudaStreamSynchronize"] + self.calls["cudaEventSynchronize"]

    def live(self) -> dict[str, int]:
        return {"device_memory": len(self.device_memory), "host_memory": len(self.host_memory),
                "streams": len(self.streams), "events": len(self.events)}

    def device_view(self, ptr: int, nbytes: int) -> memoryview:
        """The emulated device bytes [ptr, ptr + nbytes), or DoubleError."""
        with self._lock:
            for base, (_, memory) in self.device_memory.items():
                if base <= ptr and ptr + nbytes <= base + len(memory):
                    return memoryview(memory)[ptr - base:ptr - base + nbytes]
        raise DoubleError(cudaError_t.cudaErrorIllegalAddress,
                          f"{nbytes} bytes at {ptr:#x} are not inside one device allocation")

    @staticmethod
    def _check_host(ptr: int) -> None:
        if ptr >= DEVICE_BASE or ptr == 0:
            raise DoubleError(cudaError_t.cudaErrorInvalidValue, f"{ptr:#x} is not a host address")

    def _stream(self, handle: int) -> _Stream:
        stream = self.streams.get(int(handle))
        if stream is None:
            raise DoubleError(cudaError_t.cudaErrorInvalidResourceHandle, f"no stream {handle:#x}")
        return stream

    def enqueue(self, handle: int, work: Callable[[], None]) -> None:
        """Queue a kernel on a stream of the calling thread's current device."""
        stream = self._stream(handle)
        if stream.device != self.current_device():
            raise DoubleError(cudaError_t.cudaErrorInvalidResourceHandle,
                              f"stream {handle:#x} belongs to device {stream.device}, "
                              f"the thread's current device is {self.current_device()}")
        stream.queue.append(work)

    def _drain(self, stream: _Stream, until: _Event | None = None) -> None:
        while stream.queue and not (until and until.done):
            stream.queue.pop(0)()

    # ---- cuda.bindings.runtime's surface ---------------------------------------

    def cudaGetErrorName(self, err: cudaError_t) -> tuple:  # noqa: N802
        return cudaError_t.cudaSuccess, cudaError_t(err).name.encode()

    def cudaGetErrorString(self, err: cudaError_t) -> tuple:  # noqa: N802
        return cudaError_t.cudaSuccess, ERROR_STRINGS[cudaError_t(err)].encode()

    def cudaGetDeviceCount(self) -> tuple:  # noqa: N802
        if err := self._enter("cudaGetDeviceCount"):
            return err, None
        if not self.devices:
            return cudaError_t.cudaErrorNoDevice, None
        return cudaError_t.cudaSuccess, len(self.devices)

    def cudaSetDevice(self, index: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaSetDevice"):
            return (err,)
        if not 0 <= index < len(self.devices):
            return (cudaError_t.cudaErrorInvalidDevice,)
        self._local.device = index
        return (cudaError_t.cudaSuccess,)

    def cudaGetDeviceProperties(self, index: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaGetDeviceProperties"):
            return err, None
        if not 0 <= index < len(self.devices):
            return cudaError_t.cudaErrorInvalidDevice, None
        d = self.devices[index]
        return cudaError_t.cudaSuccess, cudaDeviceProp(d.name.encode().ljust(256, b"\0"), d.major, d.minor, d.total)

    def cudaMemGetInfo(self) -> tuple:  # noqa: N802
        if err := self._enter("cudaMemGetInfo"):
            return err, None, None
        device = self.current_device()
        return cudaError_t.cudaSuccess, self._free(device), self.devices[device].total

    def _free(self, device: int) -> int:
        with self._lock:
            used = sum(len(m) for d, m in self.device_memory.values() if d == device)
        return self.devices[device].total - used

    def cudaStreamCreateWithFlags(self, flags: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaStreamCreateWithFlags"):
            return err, None
        handle = next(self._handles)
        with self._lock:
            self.streams[handle] = _Stream(self.current_device())
        return cudaError_t.cudaSuccess, handle

    def cudaStreamSynchronize(self, handle: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaStreamSynchronize"):
            return (err,)
        try:
            self._drain(self._stream(handle))
        except DoubleError as exc:
            return (self._refuse(exc),)
        return (cudaError_t.cudaSuccess,)

    def cudaStreamDestroy(self, handle: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaStreamDestroy"):
            return (err,)
        with self._lock:
            stream = self.streams.pop(int(handle), None)
        if stream is None:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        return (cudaError_t.cudaSuccess,)

    def cudaEventCreateWithFlags(self, flags: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaEventCreateWithFlags"):
            return err, None
        handle = next(self._handles)
        with self._lock:
            self.events[handle] = _Event(timing=not flags & self.cudaEventDisableTiming)
        return cudaError_t.cudaSuccess, handle

    def cudaEventRecord(self, event: int, stream: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaEventRecord"):
            return (err,)
        ev = self.events.get(int(event))
        if ev is None or int(stream) not in self.streams:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        ev.done = False
        ev.stream = int(stream)

        def mark() -> None:
            ev.done, ev.at = True, time.perf_counter()
        self.streams[int(stream)].queue.append(mark)
        return (cudaError_t.cudaSuccess,)

    def cudaEventSynchronize(self, event: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaEventSynchronize"):
            return (err,)
        ev = self.events.get(int(event))
        if ev is None:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        if not ev.done and ev.stream in self.streams:
            try:
                self._drain(self.streams[ev.stream], until=ev)
            except DoubleError as exc:
                return (self._refuse(exc),)
        return (cudaError_t.cudaSuccess,)

    def cudaEventElapsedTime(self, start: int, end: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaEventElapsedTime"):
            return err, None
        a, b = self.events.get(int(start)), self.events.get(int(end))
        if a is None or b is None:
            return cudaError_t.cudaErrorInvalidResourceHandle, None
        if not (a.timing and b.timing):
            return cudaError_t.cudaErrorInvalidResourceHandle, None
        if not (a.done and b.done):
            return cudaError_t.cudaErrorNotReady, None
        return cudaError_t.cudaSuccess, (b.at - a.at) * 1e3

    def cudaEventDestroy(self, event: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaEventDestroy"):
            return (err,)
        with self._lock:
            ev = self.events.pop(int(event), None)
        return (cudaError_t.cudaSuccess if ev else cudaError_t.cudaErrorInvalidResourceHandle,)

    def cudaMalloc(self, nbytes: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaMalloc"):
            return err, None
        device = self.current_device()
        if nbytes > self._free(device):
            return cudaError_t.cudaErrorMemoryAllocation, None
        with self._lock:
            ptr = self._next_device_ptr
            self._next_device_ptr += (nbytes + 511) // 256 * 256  # aligned, with a gap
            self.device_memory[ptr] = (device, bytearray(nbytes))
        return cudaError_t.cudaSuccess, ptr

    def cudaFree(self, ptr: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaFree"):
            return (err,)
        with self._lock:
            found = self.device_memory.pop(int(ptr), None)
        return (cudaError_t.cudaSuccess if found else cudaError_t.cudaErrorInvalidValue,)

    def cudaHostAlloc(self, nbytes: int, flags: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaHostAlloc"):
            return err, None
        buffer = ctypes.create_string_buffer(nbytes)
        with self._lock:
            self.host_memory[ctypes.addressof(buffer)] = buffer
        return cudaError_t.cudaSuccess, ctypes.addressof(buffer)

    def cudaFreeHost(self, ptr: int) -> tuple:  # noqa: N802
        if err := self._enter("cudaFreeHost"):
            return (err,)
        with self._lock:
            found = self.host_memory.pop(int(ptr), None)
        return (cudaError_t.cudaSuccess if found is not None else cudaError_t.cudaErrorInvalidValue,)

    def cudaMemcpyAsync(self, dst: int, src: int, nbytes: int, kind: cudaMemcpyKind,  # noqa: N802
                        stream: int) -> tuple:
        if err := self._enter("cudaMemcpyAsync"):
            return (err,)
        try:
            queue = self._stream(stream).queue
            if kind == cudaMemcpyKind.cudaMemcpyHostToDevice:
                self._check_host(src)
                target = self.device_view(dst, nbytes)
                queue.append(lambda: target.__setitem__(slice(None), ctypes.string_at(src, nbytes)))
            elif kind == cudaMemcpyKind.cudaMemcpyDeviceToHost:
                self._check_host(dst)
                source = self.device_view(src, nbytes)
                queue.append(lambda: ctypes.memmove(dst, bytes(source), nbytes))
            elif kind == cudaMemcpyKind.cudaMemcpyDeviceToDevice:
                target, source = self.device_view(dst, nbytes), self.device_view(src, nbytes)
                queue.append(lambda: target.__setitem__(slice(None), bytes(source)))
            else:
                raise DoubleError(cudaError_t.cudaErrorInvalidValue, f"copy kind {kind!r} not emulated")
        except DoubleError as exc:
            return (self._refuse(exc),)
        return (cudaError_t.cudaSuccess,)
