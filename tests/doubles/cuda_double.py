"""FakeCudart: a test double of ``cuda.bindings.runtime``. It proves nothing about CUDA.

Installed in place of the real module (``trtpool.gpu.cuda._cudart``) so that
trtpool.gpu.cuda, and everything above it, runs on a machine without a GPU. Its
call names, parameter names and enum values are checked against the installed
cuda-python by tests/unit/doubles/test_cuda_double.py; the behaviour below follows
the CUDA runtime documentation (cuda.bindings.runtime's docstrings quote it):

- device memory is host memory (bytearrays) behind fake, never-dereferenceable
  pointers, so a host pointer passed where a device pointer belongs (or the
  reverse) is refused, as is an access outside an allocation;
- pinned host memory is real host memory (ctypes buffers) at real addresses;
- work queued on a stream (copies, memsets, "kernels" from the TensorRT double,
  graph launches) runs only when that stream or an event recorded on it is
  synchronized, so a caller that reads results before synchronizing sees stale
  data;
- the current device is per thread, as in CUDA, and a kernel queued on a
  stream of another device than the thread's current one fails;
- stream capture: between cudaStreamBeginCapture and cudaStreamEndCapture the
  work queued on the stream is recorded, not run. Synchronizing the capturing
  stream, waiting on an event recorded in it, a copy from pageable host memory
  into it, and (in the global and thread-local modes) an allocation or a
  synchronization from the capturing thread are refused and invalidate the
  capture, whose end then reports cudaErrorStreamCaptureInvalidated and no
  graph. cudaGraphInstantiate costs device memory (GRAPH_BYTES_PER_NODE per
  node); cudaGraphLaunch queues the recorded work again, with the addresses
  and sizes it was recorded with;
- every call is counted in ``calls``; ``fail[name] = code`` makes a call fail;
  a failed call's code is what cudaGetLastError returns next on that thread.

Calls return ``(cudaError_t, *values)`` tuples like cuda-python's.
"""
from __future__ import annotations

import ctypes
import enum
import functools
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

GiB = 1 << 30
DEVICE_BASE = 0xD000_0000_0000_0000  # outside any x86-64/arm64 user address space
GRAPH_BYTES_PER_NODE = 64 << 10      # what an instantiated graph holds on the device, per node


class cudaError_t(enum.IntEnum):  # noqa: N801 (CUDA's names)
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorInsufficientDriver = 35
    cudaErrorNoDevice = 100
    cudaErrorInvalidDevice = 101
    cudaErrorInvalidResourceHandle = 400
    cudaErrorIllegalState = 401
    cudaErrorNotReady = 600
    cudaErrorHostMemoryAlreadyRegistered = 712
    cudaErrorHostMemoryNotRegistered = 713
    cudaErrorIllegalAddress = 700
    cudaErrorStreamCaptureUnsupported = 900
    cudaErrorStreamCaptureInvalidated = 901
    cudaErrorCapturedEvent = 907
    cudaErrorStreamCaptureWrongThread = 908


ERROR_STRINGS = {
    cudaError_t.cudaSuccess: "no error",
    cudaError_t.cudaErrorInvalidValue: "invalid argument",
    cudaError_t.cudaErrorMemoryAllocation: "out of memory",
    cudaError_t.cudaErrorInsufficientDriver: "CUDA driver version is insufficient for CUDA runtime version",
    cudaError_t.cudaErrorNoDevice: "no CUDA-capable device is detected",
    cudaError_t.cudaErrorInvalidDevice: "invalid device ordinal",
    cudaError_t.cudaErrorInvalidResourceHandle: "invalid resource handle",
    cudaError_t.cudaErrorIllegalState: "the operation cannot be performed in the present state",
    cudaError_t.cudaErrorNotReady: "device not ready",
    cudaError_t.cudaErrorHostMemoryAlreadyRegistered: "part or all of the requested memory range is already mapped",
    cudaError_t.cudaErrorHostMemoryNotRegistered: "pointer does not correspond to a registered memory region",
    cudaError_t.cudaErrorIllegalAddress: "an illegal memory access was encountered",
    cudaError_t.cudaErrorStreamCaptureUnsupported: "operation not permitted when stream is capturing",
    cudaError_t.cudaErrorStreamCaptureInvalidated: "operation failed due to a previous error during capture",
    cudaError_t.cudaErrorCapturedEvent: "operation not permitted on an event last recorded in a capturing stream",
    cudaError_t.cudaErrorStreamCaptureWrongThread: "attempt to terminate a thread-local capture sequence "
                                                   "from another thread",
}


class cudaMemcpyKind(enum.IntEnum):  # noqa: N801
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3


class cudaStreamCaptureMode(enum.IntEnum):  # noqa: N801
    cudaStreamCaptureModeGlobal = 0
    cudaStreamCaptureModeThreadLocal = 1
    cudaStreamCaptureModeRelaxed = 2


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


Work = Callable[[], None]


@dataclass
class _Capture:
    mode: cudaStreamCaptureMode
    thread: int
    nodes: list[tuple[str, Work]] = field(default_factory=list)
    invalid: str | None = None  # why CUDA invalidated it


@dataclass
class _Stream:
    device: int
    queue: list[Work] = field(default_factory=list)
    capture: _Capture | None = None


@dataclass
class _Event:
    timing: bool
    done: bool = False
    at: float = 0.0
    stream: int | None = None
    captured: bool = False  # last recorded in a capturing stream


@dataclass
class _GraphExec:
    nodes: tuple[tuple[str, Work], ...]
    memory: int  # its device allocation
    launches: int = 0


def api(outputs: int = 0) -> Callable[[Callable[..., tuple]], Callable[..., tuple]]:
    """Mark a method as a cuda.bindings.runtime call that returns `outputs` values after
    its error code: counted, failed on request, refused while misused during a capture,
    its error kept for cudaGetLastError."""

    def wrap(method: Callable[..., tuple]) -> Callable[..., tuple]:
        name = method.__name__

        @functools.wraps(method)
        def call(self: FakeCudart, *args: Any) -> tuple:
            with self._lock:
                self.calls[name] += 1
            try:
                self._refuse_while_capturing(name)
                result = (self.fail[name], *[None] * outputs) if name in self.fail else method(self, *args)
            except DoubleError as exc:
                self.misuse.append(f"{name}: {exc}")
                result = (exc.code, *[None] * outputs)
            if result[0] != cudaError_t.cudaSuccess:
                self._local.last_error = result[0]
            return result

        return call

    return wrap


# Calls the global and thread-local capture modes forbid on the capturing thread
# ("potentially unsafe API calls", cudaThreadExchangeStreamCaptureMode's docs).
UNSAFE_WHILE_CAPTURING = frozenset({"cudaMalloc", "cudaFree", "cudaHostAlloc", "cudaFreeHost",
                                    "cudaStreamSynchronize", "cudaEventSynchronize"})
OK = (cudaError_t.cudaSuccess,)


class FakeCudart:
    cudaError_t = cudaError_t
    cudaMemcpyKind = cudaMemcpyKind
    cudaStreamCaptureMode = cudaStreamCaptureMode
    cudaStreamNonBlocking = 1
    cudaEventDefault = 0
    cudaEventDisableTiming = 2
    cudaHostAllocDefault = 0
    cudaHostAllocPortable = 1
    cudaHostRegisterPortable = 1

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
        self.registered: dict[int, int] = {}  # host memory page-locked in place: address -> bytes
        self.streams: dict[int, _Stream] = {}
        self.events: dict[int, _Event] = {}
        self.graphs: dict[int, tuple[tuple[str, Work], ...]] = {}
        self.graph_execs: dict[int, _GraphExec] = {}

    # ---- the double's plumbing -------------------------------------------------

    def current_device(self) -> int:
        return getattr(self._local, "device", 0)

    def syncs(self) -> int:
        """Host waits so far: stream and event synchronizations."""
        return self.calls["cudaStreamSynchronize"] + self.calls["cudaEventSynchronize"]

    def live(self) -> dict[str, int]:
        return {"device_memory": len(self.device_memory), "host_memory": len(self.host_memory),
                "streams": len(self.streams), "events": len(self.events),
                "graphs": len(self.graphs), "graph_execs": len(self.graph_execs)}

    def device_view(self, ptr: int, nbytes: int) -> memoryview:
        """The emulated device bytes [ptr, ptr + nbytes), or DoubleError."""
        with self._lock:
            for base, (_, memory) in self.device_memory.items():
                if base <= ptr and ptr + nbytes <= base + len(memory):
                    return memoryview(memory)[ptr - base:ptr - base + nbytes]
        raise DoubleError(cudaError_t.cudaErrorIllegalAddress,
                          f"{nbytes} bytes at {ptr:#x} are not inside one device allocation")

    def _is_pinned(self, ptr: int, nbytes: int) -> bool:
        return any(base <= ptr and ptr + nbytes <= base + ctypes.sizeof(buffer)
                   for base, buffer in self.host_memory.items()) or any(
            base <= ptr and ptr + nbytes <= base + size for base, size in self.registered.items())

    @staticmethod
    def _check_host(ptr: int) -> None:
        if ptr >= DEVICE_BASE or ptr == 0:
            raise DoubleError(cudaError_t.cudaErrorInvalidValue, f"{ptr:#x} is not a host address")

    def _stream(self, handle: int) -> _Stream:
        stream = self.streams.get(int(handle))
        if stream is None:
            raise DoubleError(cudaError_t.cudaErrorInvalidResourceHandle, f"no stream {int(handle):#x}")
        return stream

    def _submit(self, stream: _Stream, kind: str, work: Work) -> None:
        """Queue work on a stream, or record it when the stream is capturing."""
        if stream.capture is not None:
            stream.capture.nodes.append((kind, work))
        else:
            stream.queue.append(work)

    def enqueue(self, handle: int, work: Work) -> None:
        """Queue a kernel on a stream of the calling thread's current device."""
        stream = self._stream(handle)
        if stream.device != self.current_device():
            raise DoubleError(cudaError_t.cudaErrorInvalidResourceHandle,
                              f"stream {handle:#x} belongs to device {stream.device}, "
                              f"the thread's current device is {self.current_device()}")
        self._submit(stream, "kernel", work)

    def refuse_if_capturing(self, handle: int, what: str) -> None:
        """For a library's double: `what` is work that a stream capture cannot contain
        (a synchronization, an allocation); it invalidates a capture on the stream."""
        stream = self._stream(handle)
        if stream.capture is not None:
            raise self._invalidate(stream.capture, what)

    def _thread_capture(self) -> _Capture | None:
        """The global or thread-local capture this thread has begun, if any."""
        for stream in self.streams.values():
            capture = stream.capture
            if capture and capture.thread == threading.get_ident() and \
                    capture.mode != cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed:
                return capture
        return None

    def _invalidate(self, capture: _Capture, why: str) -> DoubleError:
        capture.invalid = capture.invalid or why
        return DoubleError(cudaError_t.cudaErrorStreamCaptureUnsupported, why)

    def _refuse_while_capturing(self, name: str) -> None:
        capture = self._thread_capture() if name in UNSAFE_WHILE_CAPTURING else None
        if capture is not None:
            raise self._invalidate(capture, f"{name} while this thread captures a stream")

    def _drain(self, stream: _Stream, until: _Event | None = None) -> None:
        while stream.queue and not (until and until.done):
            stream.queue.pop(0)()

    def _allocate(self, device: int, nbytes: int) -> int:
        if nbytes > self._free(device):
            raise DoubleError(cudaError_t.cudaErrorMemoryAllocation, f"{nbytes} bytes do not fit")
        with self._lock:
            ptr = self._next_device_ptr
            self._next_device_ptr += (nbytes + 511) // 256 * 256  # aligned, with a gap
            self.device_memory[ptr] = (device, bytearray(nbytes))
        return ptr

    def _free(self, device: int) -> int:
        with self._lock:
            used = sum(len(m) for d, m in self.device_memory.values() if d == device)
        return self.devices[device].total - used

    # ---- cuda.bindings.runtime's surface ---------------------------------------

    def cudaGetErrorName(self, error: cudaError_t) -> tuple:  # noqa: N802
        return cudaError_t.cudaSuccess, cudaError_t(error).name.encode()

    def cudaGetErrorString(self, error: cudaError_t) -> tuple:  # noqa: N802
        return cudaError_t.cudaSuccess, ERROR_STRINGS[cudaError_t(error)].encode()

    def cudaGetLastError(self) -> tuple:  # noqa: N802
        """The last error a call returned on this thread, which it clears."""
        error = getattr(self._local, "last_error", cudaError_t.cudaSuccess)
        self._local.last_error = cudaError_t.cudaSuccess
        return (error,)

    @api(outputs=1)
    def cudaGetDeviceCount(self) -> tuple:  # noqa: N802
        if not self.devices:
            return cudaError_t.cudaErrorNoDevice, None
        return cudaError_t.cudaSuccess, len(self.devices)

    @api()
    def cudaSetDevice(self, device: int) -> tuple:  # noqa: N802
        if not 0 <= device < len(self.devices):
            return (cudaError_t.cudaErrorInvalidDevice,)
        self._local.device = device
        return OK

    @api(outputs=1)
    def cudaGetDeviceProperties(self, device: int) -> tuple:  # noqa: N802
        if not 0 <= device < len(self.devices):
            return cudaError_t.cudaErrorInvalidDevice, None
        d = self.devices[device]
        return cudaError_t.cudaSuccess, cudaDeviceProp(d.name.encode().ljust(256, b"\0"), d.major, d.minor, d.total)

    @api(outputs=2)
    def cudaMemGetInfo(self) -> tuple:  # noqa: N802
        device = self.current_device()
        return cudaError_t.cudaSuccess, self._free(device), self.devices[device].total

    @api(outputs=1)
    def cudaStreamCreateWithFlags(self, flags: int) -> tuple:  # noqa: N802
        handle = next(self._handles)
        with self._lock:
            self.streams[handle] = _Stream(self.current_device())
        return cudaError_t.cudaSuccess, handle

    @api()
    def cudaStreamSynchronize(self, stream: int) -> tuple:  # noqa: N802
        target = self._stream(stream)
        if target.capture is not None:
            raise self._invalidate(target.capture, "synchronizing a capturing stream")
        self._drain(target)
        return OK

    @api()
    def cudaStreamDestroy(self, stream: int) -> tuple:  # noqa: N802
        with self._lock:
            found = self.streams.pop(int(stream), None)
        return OK if found else (cudaError_t.cudaErrorInvalidResourceHandle,)

    @api(outputs=1)
    def cudaEventCreateWithFlags(self, flags: int) -> tuple:  # noqa: N802
        handle = next(self._handles)
        with self._lock:
            self.events[handle] = _Event(timing=not flags & self.cudaEventDisableTiming)
        return cudaError_t.cudaSuccess, handle

    @api()
    def cudaEventRecord(self, event: int, stream: int) -> tuple:  # noqa: N802
        ev, target = self.events.get(int(event)), self._stream(stream)
        if ev is None:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        ev.done, ev.stream, ev.captured = False, int(stream), target.capture is not None
        if not ev.captured:
            def mark() -> None:
                ev.done, ev.at = True, time.perf_counter()
            target.queue.append(mark)
        return OK

    @api()
    def cudaEventSynchronize(self, event: int) -> tuple:  # noqa: N802
        ev = self.events.get(int(event))
        if ev is None:
            return (cudaError_t.cudaErrorInvalidResourceHandle,)
        if ev.captured:
            return (cudaError_t.cudaErrorCapturedEvent,)
        if not ev.done and ev.stream in self.streams:
            self._drain(self.streams[ev.stream], until=ev)
        return OK

    @api(outputs=1)
    def cudaEventElapsedTime(self, start: int, end: int) -> tuple:  # noqa: N802
        a, b = self.events.get(int(start)), self.events.get(int(end))
        if a is None or b is None or not (a.timing and b.timing):
            return cudaError_t.cudaErrorInvalidResourceHandle, None
        if not (a.done and b.done):
            return cudaError_t.cudaErrorNotReady, None
        return cudaError_t.cudaSuccess, (b.at - a.at) * 1e3

    @api()
    def cudaEventDestroy(self, event: int) -> tuple:  # noqa: N802
        with self._lock:
            ev = self.events.pop(int(event), None)
        return OK if ev else (cudaError_t.cudaErrorInvalidResourceHandle,)

    @api(outputs=1)
    def cudaMalloc(self, size: int) -> tuple:  # noqa: N802
        return cudaError_t.cudaSuccess, self._allocate(self.current_device(), size)

    @api()
    def cudaFree(self, devPtr: int) -> tuple:  # noqa: N802, N803
        with self._lock:
            found = self.device_memory.pop(int(devPtr), None)
        return OK if found else (cudaError_t.cudaErrorInvalidValue,)

    @api(outputs=1)
    def cudaHostAlloc(self, size: int, flags: int) -> tuple:  # noqa: N802
        buffer = ctypes.create_string_buffer(size)
        with self._lock:
            self.host_memory[ctypes.addressof(buffer)] = buffer
        return cudaError_t.cudaSuccess, ctypes.addressof(buffer)

    @api()
    def cudaFreeHost(self, ptr: int) -> tuple:  # noqa: N802
        with self._lock:
            found = self.host_memory.pop(int(ptr), None)
        return OK if found is not None else (cudaError_t.cudaErrorInvalidValue,)

    @api()
    def cudaHostRegister(self, ptr: int, size: int, flags: int) -> tuple:  # noqa: N802
        """Page-locks existing host memory in place; a range overlapping one registered already is
        refused (cudaErrorHostMemoryAlreadyRegistered), as CUDA does."""
        self._check_host(ptr)
        if size <= 0:
            return (cudaError_t.cudaErrorInvalidValue,)
        with self._lock:
            if any(ptr < base + length and base < ptr + size for base, length in self.registered.items()):
                return (cudaError_t.cudaErrorHostMemoryAlreadyRegistered,)
            self.registered[int(ptr)] = int(size)
        return OK

    @api()
    def cudaHostUnregister(self, ptr: int) -> tuple:  # noqa: N802
        """Only the address a registration began at unregisters it (CUDA's rule)."""
        with self._lock:
            found = self.registered.pop(int(ptr), None)
        return OK if found is not None else (cudaError_t.cudaErrorHostMemoryNotRegistered,)

    @api()
    def cudaMemcpyAsync(self, dst: int, src: int, count: int, kind: cudaMemcpyKind,  # noqa: N802
                        stream: int) -> tuple:
        target = self._stream(stream)
        host = {cudaMemcpyKind.cudaMemcpyHostToDevice: src, cudaMemcpyKind.cudaMemcpyDeviceToHost: dst}.get(kind)
        if host is not None:
            self._check_host(host)
            if target.capture is not None and not self._is_pinned(host, count):
                raise self._invalidate(target.capture, "a copy from pageable host memory into a capture")
        if kind == cudaMemcpyKind.cudaMemcpyHostToDevice:
            into = self.device_view(dst, count)
            work = lambda: into.__setitem__(slice(None), ctypes.string_at(src, count))  # noqa: E731
        elif kind == cudaMemcpyKind.cudaMemcpyDeviceToHost:
            source = self.device_view(src, count)
            work = lambda: ctypes.memmove(dst, bytes(source), count)  # noqa: E731
        elif kind == cudaMemcpyKind.cudaMemcpyDeviceToDevice:
            into, source = self.device_view(dst, count), self.device_view(src, count)
            work = lambda: into.__setitem__(slice(None), bytes(source))  # noqa: E731
        else:
            raise DoubleError(cudaError_t.cudaErrorInvalidValue, f"copy kind {kind!r} not emulated")
        self._submit(target, "memcpy", work)
        return OK

    @api()
    def cudaMemsetAsync(self, devPtr: int, value: int, count: int, stream: int) -> tuple:  # noqa: N802, N803
        target, into = self._stream(stream), self.device_view(devPtr, count)
        self._submit(target, "memset", lambda: into.__setitem__(slice(None), bytes([value & 0xFF]) * count))
        return OK

    # ---- stream capture and graphs -------------------------------------------------

    @api()
    def cudaStreamBeginCapture(self, stream: int, mode: cudaStreamCaptureMode) -> tuple:  # noqa: N802
        target = self._stream(stream)
        if target.capture is not None:
            return (cudaError_t.cudaErrorIllegalState,)
        target.capture = _Capture(cudaStreamCaptureMode(mode), threading.get_ident())
        return OK

    @api(outputs=1)
    def cudaStreamEndCapture(self, stream: int) -> tuple:  # noqa: N802
        target = self._stream(stream)
        capture = target.capture
        if capture is None:
            return cudaError_t.cudaErrorIllegalState, None
        if capture.mode != cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed and \
                capture.thread != threading.get_ident():
            return cudaError_t.cudaErrorStreamCaptureWrongThread, None
        target.capture = None
        if capture.invalid:
            self.misuse.append(f"capture invalidated: {capture.invalid}")
            return cudaError_t.cudaErrorStreamCaptureInvalidated, None
        handle = next(self._handles)
        self.graphs[handle] = tuple(capture.nodes)
        return cudaError_t.cudaSuccess, handle

    @api(outputs=1)
    def cudaGraphInstantiate(self, graph: int, flags: int) -> tuple:  # noqa: N802
        nodes = self.graphs.get(int(graph))
        if nodes is None:
            return cudaError_t.cudaErrorInvalidValue, None
        memory = self._allocate(self.current_device(), GRAPH_BYTES_PER_NODE * len(nodes))
        handle = next(self._handles)
        self.graph_execs[handle] = _GraphExec(nodes, memory)
        return cudaError_t.cudaSuccess, handle

    @api()
    def cudaGraphLaunch(self, graphExec: int, stream: int) -> tuple:  # noqa: N802, N803
        graph, target = self.graph_execs.get(int(graphExec)), self._stream(stream)
        if graph is None:
            return (cudaError_t.cudaErrorInvalidValue,)
        graph.launches += 1
        for kind, work in graph.nodes:
            self._submit(target, kind, work)
        return OK

    @api()
    def cudaGraphDestroy(self, graph: int) -> tuple:  # noqa: N802
        return OK if self.graphs.pop(int(graph), None) is not None else (cudaError_t.cudaErrorInvalidValue,)

    @api()
    def cudaGraphExecDestroy(self, graphExec: int) -> tuple:  # noqa: N802, N803
        graph = self.graph_execs.pop(int(graphExec), None)
        if graph is None:
            return (cudaError_t.cudaErrorInvalidValue,)
        with self._lock:
            self.device_memory.pop(graph.memory, None)
        return OK
