"""A test double of ``triton_python_backend_utils`` (pb_utils). It proves nothing about Triton.

pb_utils exists only inside the Python backend's stub (a pybind module built into
``triton_python_backend_stub``), so trtpool's Triton-facing code cannot import it in a
plain test. This double covers the slice trtpool uses: Tensor (numpy and DLPack, BF16 and
device tensors by DLPack), InferenceRequest (inputs, parameters, its response sender),
InferenceResponse, TritonError and its codes, TritonModelException, MetricFamily and its
metrics, Logger, TRITONSERVER_RESPONSE_COMPLETE_FINAL. Nothing else: code that reaches
for another name fails here as it would not in Triton, never the other way round.

It is never kinder than the real module: tests/unit/doubles/test_pb_utils_double.py
asks tritonserver 2.51's stub, through a plain Python-backend model, for the names,
signatures, code values and behaviour of everything defined here (tests/harness/
pb_utils_report.py) and requires the same answers from this double. One thing the real
stub does cannot be asked there, because it kills the server: ``is_cancelled()`` on a
response sender after its final response (SIGSEGV in TRITONBACKEND_ResponseFactoryIsCancelled,
seen 2026-12-05 on this machine's tritonserver 2.51). The double raises _StubCrash (a
RuntimeError) there instead. Nor are the metric calls the server refuses (a counter set or
decremented, a label value that is no string, a family name taken by another kind or not
a metric name): a refusal from the server can abort it (boost::interprocess::lock_exception).
The double refuses them with the messages a probe of the stub got (2026-12-05).

What a test reads back goes through names with a leading underscore, which pb_utils
does not have: a sender's ``_sent`` (response, flags) pairs and ``_cancelled`` flag,
the module's ``_logged`` (level, message) pairs and ``_families`` (the server's
metric families, by name). ``_reset()`` empties them between tests.
"""
from __future__ import annotations

import ctypes
import enum
import json
import re
import weakref
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

# DLPack's C structs have one home, beside the code that lends the stub BF16 tensors by them.
from trtpool.triton.bfloat16 import KDL_BFLOAT as _KDL_BFLOAT, KDL_CPU as _KDL_CPU, _capsule_pointer, _DLManagedTensor

__all__ = ["InferenceRequest", "InferenceResponse", "Logger", "MetricFamily", "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
           "Tensor", "TritonError", "TritonModelException"]   # the names pb_utils has: nothing else is public

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
_INSTANCE = "double_0"   # the model instance named in the messages the server side writes


class _StubCrash(RuntimeError):
    """What kills the real server (the module docstring says what)."""


class TritonModelException(Exception):
    """The stub's exception for what it refuses (pb_utils.TritonModelException)."""


_ErrorCode = enum.IntEnum("__ErrorCode", [("UNKNOWN", 0), ("INTERNAL", 1), ("NOT_FOUND", 2), ("INVALID_ARG", 3),
                                          ("UNAVAILABLE", 4), ("UNSUPPORTED", 5), ("ALREADY_EXISTS", 6),
                                          ("CANCELLED", 7)])


def _refuse_arguments(function: str, *given: Any) -> TypeError:
    """pybind's refusal of arguments of the wrong type."""
    return TypeError(f"{function}(): incompatible function arguments. Invoked with: {given!r}")


class TritonError:
    """An error a response carries: a message and a status code (not an exception)."""

    UNKNOWN = _ErrorCode.UNKNOWN
    INTERNAL = _ErrorCode.INTERNAL
    NOT_FOUND = _ErrorCode.NOT_FOUND
    INVALID_ARG = _ErrorCode.INVALID_ARG
    UNAVAILABLE = _ErrorCode.UNAVAILABLE
    UNSUPPORTED = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = _ErrorCode.ALREADY_EXISTS
    CANCELLED = _ErrorCode.CANCELLED

    def __init__(self, message: str, code: _ErrorCode = _ErrorCode.INTERNAL) -> None:
        if not isinstance(message, str) or not isinstance(code, _ErrorCode):  # a bare int is no code
            raise _refuse_arguments("__init__", message, code)
        self._message, self._code = message, code

    def code(self) -> _ErrorCode:
        return self._code

    def message(self) -> str:
        return self._message


# ---- tensors --------------------------------------------------------------------------------------

# numpy dtypes Tensor(name, array) takes (triton_python_backend_utils.numpy_to_triton_type);
# object and bytes ("S") arrays are BYTES tensors.
_NUMPY_TYPES = {np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                      np.uint32, np.uint64, np.float16, np.float32, np.float64, np.object_)}
# DLPack (type code, bits) <-> numpy, as the stub maps Triton's types (bool is kDLBool, BF16 kDLBfloat).
_DLPACK_TYPES = {(0, 8): np.int8, (0, 16): np.int16, (0, 32): np.int32, (0, 64): np.int64,
                 (1, 8): np.uint8, (1, 16): np.uint16, (1, 32): np.uint32, (1, 64): np.uint64,
                 (2, 16): np.float16, (2, 32): np.float32, (2, 64): np.float64,
                 (4, 16): ml_dtypes.bfloat16, (6, 8): np.bool_}
_KDL_CUDA, _KDL_CUDA_HOST = 2, 3
_capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
_capsule_set_name.restype, _capsule_set_name.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
# DLPack's name for a used capsule (the stub writes "used_dlpack", which numpy's capsules then
# report as an error when they are freed). Kept alive: a capsule keeps a pointer to its name.
_USED = ctypes.c_char_p(b"used_dltensor")


def _is_capsule(value: Any) -> bool:
    return type(value).__name__ == "PyCapsule"


class Tensor:
    """A named tensor: a host numpy array, or (from DLPack) one on the GPU."""

    def __init__(self, name: str, array: np.ndarray, /) -> None:
        if not isinstance(name, str) or not isinstance(array, np.ndarray):
            raise _refuse_arguments("__init__", name, array)
        if array.dtype not in _NUMPY_TYPES and array.dtype.kind != "S":
            raise TritonModelException("NumPy dtype is not supported.")
        self._named(name)
        # The stub keeps the array itself (a copy only if it is not C-contiguous): the tensor sees
        # later writes to it.
        self._array: np.ndarray | None = array if array.flags.c_contiguous else np.ascontiguousarray(array)
        self._device: Any = None   # a GPU tensor's producer (it has __dlpack__)
        self._shape = list(array.shape)

    def _named(self, name: str) -> None:
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        self._name = name

    def name(self) -> str:
        return self._name

    def is_cpu(self) -> bool:
        return self._device is None

    def shape(self) -> list[int]:
        return list(self._shape)

    def as_numpy(self) -> np.ndarray:
        if self._device is not None:
            raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")
        if self._array.dtype == ml_dtypes.bfloat16:
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead.")
        return self._array

    def to_dlpack(self) -> Any:
        if self._device is not None:
            return self._device.__dlpack__(stream=None)
        if self._array.dtype.kind in "OS":
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self._array.dtype != ml_dtypes.bfloat16:
            return self._array.__dlpack__()
        capsule = self._array.view(np.uint16).__dlpack__()   # numpy has no DLPack bfloat16: relabel it
        _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor")).dl_tensor.dtype.code = _KDL_BFLOAT
        return capsule

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device.__dlpack_device__() if self._device is not None else (_KDL_CPU, 0)

    @staticmethod
    def from_dlpack(name: str, tensor: Any, /) -> Tensor:
        """A tensor of a DLPack capsule, or of an object with __dlpack__ and __dlpack_device__.
        Host memory is copied (the stub copies it into a numpy array of its own); a GPU
        tensor is kept by its producer, which must be such an object here."""
        if not isinstance(name, str):
            raise _refuse_arguments("from_dlpack", name, tensor)
        producer = None
        if not _is_capsule(tensor):
            if not (hasattr(tensor, "__dlpack__") and hasattr(tensor, "__dlpack_device__")):
                raise TritonModelException("Provided tensor is not supported. Tensor must be a DLPack capsule "
                                           "        or have `__dlpack__` and `__dlpack_device__` attributes")
            producer, tensor = tensor, tensor.__dlpack__(stream=None)
        made = Tensor.__new__(Tensor)
        made._named(name)
        made._array, made._device, made._shape = _consume(tensor, producer)
        return made


def _consume(capsule: Any, producer: Any) -> tuple[np.ndarray | None, Any, list[int]]:
    """(host copy, GPU producer, shape) of a DLPack capsule, which is used up (renamed, its
    memory released) as the stub does."""
    managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    dl = managed.dl_tensor
    shape = [dl.shape[axis] for axis in range(dl.ndim)]
    if dl.strides:   # the stub's check, which leaves the first axis out
        expected = 1
        for axis in range(dl.ndim - 1, 0, -1):
            if dl.strides[axis] != expected:
                raise TritonModelException("DLPack tensor is not contiguous. Only contiguous DLPack tensors that "
                                           "are stored in C-Order are supported.")
            expected *= shape[axis]
    if dl.device_type not in (_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST):
        raise TritonModelException(f"DLDevice type {dl.device_type} is not support by Python backend.")
    array = None
    if dl.device_type == _KDL_CUDA:
        if producer is None:
            raise NotImplementedError("the double keeps a GPU tensor only by an object with __dlpack__, not a bare "
                                      "capsule")
    else:
        array, producer = np.empty(shape, _DLPACK_TYPES[(dl.dtype.code, dl.dtype.bits)]), None
        if array.nbytes:
            ctypes.memmove(array.ctypes.data, dl.data + dl.byte_offset, array.nbytes)
    _capsule_set_name(capsule, _USED)
    if managed.deleter:
        managed.deleter(ctypes.addressof(managed))
    return array, producer, shape


# ---- requests and responses -------------------------------------------------------------------------

class InferenceResponse:
    """A response: output tensors, or an error, or both."""

    # pb_utils' default, [], never changed: the tensors are copied into a list of the response's own
    def __init__(self, output_tensors: list[Tensor] = [], error: TritonError | None = None) -> None:  # noqa: B006
        tensors = list(output_tensors)
        if not all(isinstance(t, Tensor) for t in tensors) or not isinstance(error, TritonError | None):
            raise _refuse_arguments("__init__", output_tensors, error)
        self._tensors, self._error = tensors, error

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class _ResponseSender:
    """The stub's InferenceResponseSender (pb_utils has no name for it): answers one request.
    After the final response it is closed."""

    def __init__(self) -> None:
        self._sent: list[tuple[InferenceResponse | None, int]] = []
        self._cancelled = False   # a test sets it: the client cancelled
        self._closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if not isinstance(response, InferenceResponse | None) or not isinstance(flags, int):
            raise _refuse_arguments("send", response, flags)
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        self._sent.append((response, flags))
        self._closed = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def is_cancelled(self) -> bool:
        if self._closed:
            raise _StubCrash("is_cancelled() after the final response: tritonserver 2.51 dies of SIGSEGV here")
        return self._cancelled


class InferenceRequest:
    """A request: built by a test as the stub hands it to execute(), or as a BLS call makes it.
    Its inputs, its parameters (JSON) and its one response sender."""

    def __init__(self, request_id: str = "", correlation_id: Any = 0, *, inputs: list[Tensor],
                 requested_output_names: list[str], model_name: str, parameters: Any = None) -> None:
        inputs, names = list(inputs), list(requested_output_names)
        if (not all(isinstance(t, Tensor) for t in inputs) or not all(isinstance(n, str) for n in names)
                or not isinstance(model_name, str) or not isinstance(request_id, str)):
            raise _refuse_arguments("__init__", inputs, requested_output_names, model_name)
        parameters = {} if parameters is None else parameters
        if not isinstance(parameters, dict):
            raise TritonModelException(f"Expect N8pybind114dictE, got {type(parameters)}")
        for value in parameters.values():
            if not isinstance(value, bool | int | str):
                raise TritonModelException(f"Expect parameters values to have type bool/int/str, found type "
                                           f"{type(value)}")
        self._inputs = inputs
        self._parameters = json.dumps(parameters)
        self._sender = _ResponseSender()

    def inputs(self) -> list[Tensor]:
        return list(self._inputs)

    def parameters(self) -> str:
        return self._parameters

    def get_response_sender(self) -> _ResponseSender:
        return self._sender


# ---- metrics ------------------------------------------------------------------------------------------

_MetricKind = enum.IntEnum("MetricKind", [("COUNTER", 0), ("GAUGE", 1)])
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@dataclass
class _Family:
    """A metric family on the server side: shared by every MetricFamily object of its name,
    gone (with its values) once the last one is deleted."""

    kind: _MetricKind
    series: dict[tuple, float] = field(default_factory=dict)
    live: int = 0


_families: dict[str, _Family] = {}
_logged: list[tuple[Any, str]] = []


def _server_error(action: str, message: str) -> TritonModelException:
    return TritonModelException(f"{action}: Failed to process the request for model '{_INSTANCE}', message: {message}")


class MetricFamily:
    """A family of metrics (COUNTER or GAUGE) on Triton's metrics endpoint."""

    COUNTER = _MetricKind.COUNTER
    GAUGE = _MetricKind.GAUGE

    def __init__(self, name: str, description: str, kind: _MetricKind) -> None:
        if not isinstance(name, str) or not isinstance(description, str) or not isinstance(kind, _MetricKind):
            raise _refuse_arguments("__init__", name, description, kind)
        if not _METRIC_NAME.fullmatch(name):
            raise _server_error("Error when creating MetricFamily", "Invalid metric name")
        family = _families.setdefault(name, _Family(kind))
        if family.kind != kind:
            raise _server_error("Error when creating MetricFamily", "Family name already exists with different type")
        family.live += 1
        self._family, self._name = family, name

    def __del__(self) -> None:
        family = getattr(self, "_family", None)
        if family is None:   # refused in __init__
            return
        family.live -= 1
        if family.live == 0 and _families.get(self._name) is family:
            del _families[self._name]

    def Metric(self, labels: Any = None, buckets: Any = None) -> _Metric:  # noqa: N802 (pb_utils' name)
        labels = {} if labels is None else labels
        if not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        if not all(isinstance(v, str) for v in [*labels, *labels.values()]):
            raise _server_error("Error when creating Metric", "attempt to access JSON non-string as string")
        return _Metric(self, tuple(sorted(labels.items())))


class _Metric:
    """The stub's Metric (pb_utils has no name for it): one series of a family. It holds no
    reference to its family: once that object is deleted the metric is unusable, as in the stub."""

    def __init__(self, family: MetricFamily, labels: tuple) -> None:
        self._owner = weakref.ref(family)
        self._family, self._labels = family._family, labels
        self._family.series.setdefault(labels, 0.0)

    def _series(self, verb: str) -> dict[tuple, float]:
        if self._owner() is None:
            raise TritonModelException(
                f"Failed to {verb} metric value: Invalid metric operation as the corresponding 'MetricFamily' has "
                "been deleted. The 'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects "
                "have been deleted.")
        return self._family.series

    def increment(self, value: float, /) -> None:
        series = self._series("increment")
        if self._family.kind == _MetricKind.COUNTER and value < 0:
            raise _server_error("Failed to increment metric value", "TRITONSERVER_METRIC_KIND_COUNTER can only be "
                                "incremented monotonically by non-negative values.")
        series[self._labels] += float(value)

    def set(self, value: float, /) -> None:
        series = self._series("set")
        if self._family.kind == _MetricKind.COUNTER:
            raise _server_error("Failed to set metric value", "TRITONSERVER_METRIC_KIND_COUNTER does not support Set")
        series[self._labels] = float(value)

    def value(self) -> float:
        return self._series("get")[self._labels]


# ---- logging -------------------------------------------------------------------------------------------

class Logger:
    """Triton's log, at a level (static methods only; it has no constructor)."""

    LogLevel = enum.IntEnum("LogLevel", [("INFO", 0), ("WARNING", 1), ("ERROR", 2), ("VERBOSE", 3)])
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    def __init__(self) -> None:
        raise TypeError("c_python_backend_utils.Logger: No constructor defined!")

    @staticmethod
    def log(message: str, level: LogLevel = LogLevel.INFO) -> None:
        if not isinstance(message, str) or not isinstance(level, Logger.LogLevel):
            raise _refuse_arguments("log", message, level)
        _logged.append((level, message))


def _reset() -> None:
    """Empty what a test reads back: the log and the server's metric families."""
    _logged.clear()
    _families.clear()
