"""The TensorRT Python API as trtpool uses it, for TensorRT 10.x, 11.x and TensorRT-RTX 1.x.

Everything that differs between those releases, and how each binding reports failure (None,
False, or a RuntimeError whose reason only the logger hears), is decided here; ``call`` turns
every failure into a trtpool error that carries TensorRT's own words. The bindings' behaviour,
with its sources: docs/design/tensorrt-api.md.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

from trtpool.errors import EngineError, TrtpoolError

log = logging.getLogger("trtpool")

MODULES = ("tensorrt", "tensorrt_rtx")  # the builders, in the order a module is looked for
# TensorRT's lean runtime (Runtime, ICudaEngine, IExecutionContext; no builder, no plugin library): it
# deserializes and runs version-compatible engines only. Its metapackage's name, then its bindings
# wheel's own (tensorrt-lean-cu12-bindings, on PyPI with tensorrt-lean-cu12-libs).
LEAN_MODULES = ("tensorrt_lean", "tensorrt_lean_bindings")
LEAN_INSTALL = "pip install tensorrt-lean-cu12-libs tensorrt-lean-cu12-bindings"
INSTALL_HINT = (
    "install TensorRT from NVIDIA's pip index (pip install --extra-index-url https://pypi.nvidia.com "
    "tensorrt-cu12) or serve from the NGC image nvcr.io/nvidia/tritonserver:<yy.mm>-py3, which ships it; "
    f"to run version-compatible engines only, TensorRT's lean runtime is on PyPI: {LEAN_INSTALL}; "
    "on RTX GPUs, TensorRT-RTX is on PyPI: pip install tensorrt-rtx-cu13"
)
# Before TensorRT 10.13, infer_shapes and set_optimization_profile_async set their
# Python error with the GIL released (both are bound with
# py::call_guard<py::gil_scoped_release>; 10.13 added py::gil_scoped_acquire before
# the throw in infer_shapes and bound set_optimization_profile_async without the
# release): their failure may crash the process instead of raising.
SAFE_RAISES_SINCE = (10, 13)

_lock = threading.Lock()
_loggers: dict[ModuleType, Any] = {}
_plugins_registered: set[ModuleType] = set()
_on_thread = threading.local()  # .captures: open tensorrt_errors blocks; .shows: open tensorrt_messages blocks

Show = Callable[[Any, str], None]  # (trt.ILogger.Severity, message)
T = TypeVar("T")


class TensorRTMissing(EngineError):
    """No TensorRT module could be imported; `failures` says why, per module tried (the builder
    words its own install advice from them)."""

    def __init__(self, failures: dict[str, BaseException]) -> None:
        self.failures = failures
        why = "; ".join(f"{name}: {exc}" for name, exc in failures.items())
        super().__init__(f"cannot import {' or '.join(failures)} ({why}); {INSTALL_HINT}")


def import_tensorrt(module_name: str | None, runtime_only: bool = False) -> ModuleType:
    """`tensorrt`, else `tensorrt_rtx`; or exactly the module named. With `runtime_only` (to run
    engines, not build them), TensorRT's lean runtime stands in for `tensorrt` where that is
    not installed (a 110 MB install instead of the full libraries)."""
    failures: dict[str, BaseException] = {}
    for name in _looked_for(module_name, runtime_only):
        try:
            return importlib.import_module(name)
        except (ImportError, OSError) as exc:  # OSError: a shared library failed to load
            failures[name] = exc
    raise TensorRTMissing(failures)


def _looked_for(module_name: str | None, runtime_only: bool) -> tuple[str, ...]:
    lean = LEAN_MODULES if runtime_only else ()
    return tuple(
        found
        for name in ((module_name,) if module_name else MODULES)
        for found in ((name, *lean) if name == "tensorrt" else (name,))
    )


def is_lean(trt: ModuleType) -> bool:
    return trt.__name__ in LEAN_MODULES


def release(trt: ModuleType) -> str:
    """What an engine's sidecar calls the module's release: `tensorrt` for its lean runtime too."""
    return "tensorrt" if is_lean(trt) else trt.__name__


def version(trt: ModuleType) -> tuple[int, ...]:
    """The module's release as numbers: '10.13.3.9' -> (10, 13, 3, 9)."""
    return tuple(int(part) for part in trt.__version__.split(".") if part.isdigit())


def raises_safely(trt: ModuleType) -> bool:
    """Whether a failing infer_shapes raises rather than possibly crashing the process:
    tensorrt 10.13 and later, and tensorrt_rtx (its bindings have set_communicator,
    which NVIDIA/TensorRT's sources gained in 10.16, so they postdate the fix)."""
    return trt.__name__ == "tensorrt_rtx" or version(trt) >= SAFE_RAISES_SINCE


# ---- the logger -------------------------------------------------------------------


@dataclass
class _Capture:
    counting: str | None
    errors: list[str] = field(default_factory=list)


@contextmanager
def _open(blocks: str, block: T) -> Iterator[T]:
    """`block` on this thread's stack of open `blocks` while the with-block runs."""
    stack = _on_thread.__dict__.setdefault(blocks, [])
    stack.append(block)
    try:
        yield block
    finally:
        stack.pop()


@contextmanager
def tensorrt_errors(counting: str | None = None) -> Iterator[list[str]]:
    """The errors TensorRT logs on this thread while the block runs; with `counting`, also
    the messages of any severity that contain it (TensorRT-RTX reports some failures as
    warnings: see trtpool_builder.engine.trt_build).

    TensorRT logs a call's failure synchronously on the calling thread (seen with
    tensorrt_rtx: tests/unit/trtpool/runtimes/test_tensorrt_real_module.py, and its builder logs a
    whole build there), and ILogger::log must be thread-safe because contexts on
    several threads log at once (include/NvInferRuntimeBase.h): one context's
    failure never picks up another's.
    """
    with _open("captures", _Capture(counting)) as capture:
        yield capture.errors


@contextmanager
def tensorrt_messages(show: Show) -> Iterator[None]:
    """While the block runs, every message TensorRT logs on this thread, VERBOSE included,
    goes to ``show(severity, message)`` instead of trtpool's log: for a command-line tool
    that prints TensorRT's log itself (trtpool-build). tensorrt_errors blocks still get
    the errors."""
    with _open("shows", show):
        yield


def process_logger(trt: ModuleType) -> Any:
    """The one ILogger of `trt` in this process, the builder's as well as the runtime's; it
    forwards to trtpool's log (or to a tensorrt_messages block's `show`).

    One for the process, because libnvinfer_plugin keeps a raw pointer to the
    logger it was initialized with (plugin/api/inferPlugin.cpp:109,
    ``gLogger = static_cast<ILogger*>(logger)``), and TensorRT warns when a runtime
    brings another logger than the first one registered.
    """
    with _lock:
        if trt not in _loggers:
            _loggers[trt] = _logger_class(trt)()
        return _loggers[trt]


def _logger_class(trt: ModuleType) -> type:
    severity = trt.ILogger.Severity
    levels = {
        severity.INTERNAL_ERROR: logging.ERROR,
        severity.ERROR: logging.ERROR,
        severity.WARNING: logging.WARNING,
        severity.INFO: logging.DEBUG,
    }  # VERBOSE: dropped

    logger_base: Any = trt.ILogger  # a class of the bindings, which have no type information

    class ProcessLogger(logger_base):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, level: Any, msg: str) -> None:
            python_level = levels.get(level)
            shows = getattr(_on_thread, "shows", None)
            if shows:
                shows[-1](level, msg)
            elif python_level is not None:
                log.log(python_level, "%s: %s", trt.__name__, msg)
            _record(msg, error=python_level == logging.ERROR)

    return ProcessLogger


def _record(message: str, error: bool = True) -> None:
    """Add a message to every tensorrt_errors block open on this thread that keeps it."""
    for capture in getattr(_on_thread, "captures", ()):
        if error or (capture.counting is not None and capture.counting in message):
            capture.errors.append(message)


def register_plugins(trt: ModuleType) -> None:
    """Register TensorRT's bundled plugins (libnvinfer_plugin) once per process, before
    any engine is deserialized: an engine with plugin layers cannot be deserialized
    without them. initLibNvInferPlugins returns true unconditionally and logs what
    it could not register (plugin/api/inferPlugin.cpp); Polygraphy's engine loader
    calls it the same way before deserializing (tools/Polygraphy/polygraphy/backend/
    trt/loader.py). The lean runtime has none (an engine's plugins must travel inside it)."""
    if not hasattr(trt, "init_libnvinfer_plugins"):
        return
    logger = process_logger(trt)
    with _lock:
        if trt not in _plugins_registered:
            trt.init_libnvinfer_plugins(logger, "")
            _plugins_registered.add(trt)


def new_runtime(trt: ModuleType, host_code: bool) -> Any:
    """A trt.Runtime on the process logger. `host_code` lets it deserialize engines that
    carry executable host code: version-compatible engines embed the lean runtime
    (``engine_host_code_allowed``, default False; trtexec sets it for them:
    samples/common/sampleEngines.cpp:137-141).

    A runtime TensorRT could not create (no usable CUDA: the lean runtime logs "CUDA
    initialization failure with error: 35") is still returned by the bindings, over a null
    pointer that crashes the process when it is used or freed (tensorrt_lean_bindings 11.4,
    tests/unit/trtpool/runtimes/test_tensorrt_lean.py): what TensorRT logged while making it is an EngineError
    with TensorRT's words, and that object is never freed."""
    with tensorrt_errors() as errors:
        runtime = trt.Runtime(process_logger(trt))
    if errors:
        _never_free(runtime)
        raise EngineError(f"{trt.__name__} {trt.__version__} could not create its runtime: {said(errors)}")
    if host_code:
        runtime.engine_host_code_allowed = True
    return runtime


def _never_free(obj: Any) -> None:
    """One reference more than anything will drop, so that `obj` outlives even interpreter exit
    (which drops module-level references too): a leak of one object per failed load."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


# ---- calls --------------------------------------------------------------------------


def said(errors: list[str], exc: BaseException | None = None) -> str:
    """What TensorRT said about a failure, as one line."""
    words = " | ".join(errors) or "(TensorRT logged no error)"
    return f"{words} ({type(exc).__name__}: {exc})" if exc is not None else words


def call(what: str, function: Callable[..., Any], *args: Any, failure: type[TrtpoolError]) -> Any:
    """``function(*args)``: a TensorRT binding. Its exception, or a False or None result
    (how each binding reports failure: see the module docstring), becomes `failure`
    with `what` and TensorRT's own words."""
    with tensorrt_errors() as errors:
        try:
            result = function(*args)
        except Exception as exc:  # RuntimeError from the bindings, TypeError from pybind11
            raise failure(f"{what}: {said(errors, exc)}") from exc
    if result is None or result is False:
        raise failure(f"{what}: {said(errors)}")
    return result


# ---- engine queries -------------------------------------------------------------------


def activation_bytes(engine: Any) -> int:
    """Device memory a context allocates for its activations (the STATIC strategy: the
    largest profile's). device_memory_size_v2 exists from TensorRT 10.1 (and in 11.x,
    which removed device_memory_size); TensorRT 10.0 has device_memory_size only."""
    if hasattr(engine, "device_memory_size_v2"):
        return engine.device_memory_size_v2
    return engine.device_memory_size


def dims(value: Any) -> tuple[int, ...]:
    """A trt.Dims (a tuple-like object) as a plain tuple of ints."""
    return tuple(int(d) for d in value)


def output_allocator(
    trt: ModuleType, allocate: Callable[[str, int], int], shaped: Callable[[str, tuple[int, ...]], None]
) -> Any:
    """A trt.IOutputAllocator for outputs whose shape depends on the data.

    TensorRT calls ``reallocate_output_async(tensor_name, memory, size, alignment,
    stream)`` during execute_async_v3 once the size is known, then
    ``notify_shape(tensor_name, shape)`` before execute_async_v3 returns
    (include/NvInferRuntime.h, IOutputAllocator). The bindings' trampoline
    (pyCore.cpp, PyOutputAllocator) would swallow an exception from a callback,
    printing it to stderr, and pass TensorRT a null pointer, which fails the run:
    so ``allocate``'s failure is logged and recorded as an error of the call in
    progress (tensorrt_errors), and the null pointer returned here. Memory from
    cudaMalloc is 256-byte aligned, the alignment TensorRT asks of I/O tensors.
    """

    allocator_base: Any = trt.IOutputAllocator  # a class of the bindings, which have no type information

    class OutputAllocator(allocator_base):
        def __init__(self) -> None:
            trt.IOutputAllocator.__init__(self)

        def reallocate_output_async(self, tensor_name: str, memory: int, size: int, alignment: int, stream: int) -> int:
            try:
                return allocate(tensor_name, size)
            except Exception as exc:  # noqa: BLE001 (reported through the log, see above)
                message = f"allocating {size} bytes for output '{tensor_name}' failed: {exc}"
                log.error("%s: %s", trt.__name__, message)
                _record(message)
                return 0

        def notify_shape(self, tensor_name: str, shape: Any) -> None:
            shaped(tensor_name, dims(shape))

    return OutputAllocator()
