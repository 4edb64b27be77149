"""The slice of pb_utils that trtpool calls, as Protocols: the types of what the Triton-facing code takes.

pb_utils (triton_python_backend_utils) exists only inside the Python backend's stub, so trtpool
takes the module, and what it makes, as arguments typed by these Protocols; the type checker
then holds trtpool's calls to these names and signatures. Both tritonserver 2.51's stub and the
test double (tests/doubles/pb_utils_double.py, held to the stub by its faithfulness test) have
every one of them, except InferenceRequest.exec (BLS), which only the front calls and the
double leaves out: BlsPbUtils adds it. model.py's own calls (Logger, TritonModelException at
load) go to the module it imports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

import numpy as np

# Values of enums the stub defines in C++ (TritonError.INTERNAL, ..., MetricFamily.COUNTER,
# GAUGE): trtpool compares them and passes them back, and they have no Python type to name.
ErrorCode = Any
MetricKind = Any


class Tensor(Protocol):
    """A named tensor: a host numpy array, or (DLPack) one on the GPU."""

    def name(self) -> str: ...

    def is_cpu(self) -> bool: ...

    def as_numpy(self) -> np.ndarray: ...

    def to_dlpack(self) -> object: ...


class TensorType(Protocol):
    """pb_utils.Tensor."""

    def __call__(self, name: str, array: np.ndarray, /) -> Tensor: ...

    def from_dlpack(self, name: str, tensor: object, /) -> Tensor: ...


class TritonError(Protocol):
    """An error a response carries (not an exception): a message and a status code."""

    def message(self) -> str: ...


class TritonErrorType(Protocol):
    """pb_utils.TritonError: makes errors, and names the status codes."""

    @property
    def INTERNAL(self) -> ErrorCode: ...

    @property
    def INVALID_ARG(self) -> ErrorCode: ...

    @property
    def UNAVAILABLE(self) -> ErrorCode: ...

    @property
    def CANCELLED(self) -> ErrorCode: ...

    def __call__(self, message: str, code: ErrorCode = ..., /) -> TritonError: ...


class InferenceResponse(Protocol):
    """A response: output tensors, or an error."""

    def output_tensors(self) -> list[Tensor]: ...

    def error(self) -> TritonError | None: ...


class InferenceResponseType(Protocol):
    """pb_utils.InferenceResponse."""

    def __call__(
        self, output_tensors: Sequence[Tensor] = ..., error: TritonError | None = ...
    ) -> InferenceResponse: ...


class ResponseSender(Protocol):
    """A request's response sender (decoupled and pipelined answers)."""

    def send(self, response: InferenceResponse | None = ..., flags: int = ...) -> None: ...

    def is_cancelled(self) -> bool: ...


class InferenceRequest(Protocol):
    """A request as execute() gets it."""

    def inputs(self) -> list[Tensor]: ...

    def parameters(self) -> str: ...

    def get_response_sender(self) -> ResponseSender: ...


class BlsRequest(Protocol):
    """A request a model makes to another (BLS)."""

    def exec(self, *, decoupled: Literal[True]) -> Iterable[InferenceResponse]: ...


class BlsRequestType(Protocol):
    """pb_utils.InferenceRequest, as the front makes one."""

    def __call__(
        self,
        *,
        model_name: str,
        inputs: Sequence[Tensor],
        requested_output_names: list[str],
        parameters: Mapping[str, bool | int | str],
    ) -> BlsRequest: ...


class Metric(Protocol):
    """One series of a metric family."""

    def increment(self, value: float, /) -> None: ...

    def set(self, value: float, /) -> None: ...


class MetricFamily(Protocol):
    def Metric(self, labels: dict[str, str] | None = ...) -> Metric: ...


class MetricFamilyType(Protocol):
    """pb_utils.MetricFamily."""

    @property
    def COUNTER(self) -> MetricKind: ...

    @property
    def GAUGE(self) -> MetricKind: ...

    def __call__(self, name: str, description: str, kind: MetricKind) -> MetricFamily: ...


class PbUtils(Protocol):
    """The module, as the handlers, responders and request readers take it."""

    @property
    def Tensor(self) -> TensorType: ...

    @property
    def TritonError(self) -> TritonErrorType: ...

    @property
    def InferenceResponse(self) -> InferenceResponseType: ...

    @property
    def TritonModelException(self) -> type[Exception]: ...

    @property
    def TRITONSERVER_RESPONSE_COMPLETE_FINAL(self) -> int: ...


class BlsPbUtils(PbUtils, Protocol):
    """The module as a front takes it: requests to its target too."""

    @property
    def InferenceRequest(self) -> BlsRequestType: ...
