"""How a request is answered outside execute()'s return value: through its
response sender, exactly once, with Triton's status code for the error class."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from trtpool.errors import Cancelled, InvalidInput, Overloaded, Unavailable
from trtpool.model.dtypes import BFLOAT16
from trtpool.triton import bfloat16
from trtpool.triton.pb_api import InferenceRequest, InferenceResponse, PbUtils, Tensor, TritonError

log = logging.getLogger("trtpool")


def triton_error(pb_utils: PbUtils, error: Exception) -> TritonError:
    """A pb_utils.TritonError with the code a client can act on: a bad request is
    INVALID_ARG (HTTP 400), a full queue or a restarting engine host UNAVAILABLE (503: retry), a cancelled one
    CANCELLED, anything else INTERNAL (500)."""
    codes = pb_utils.TritonError
    code = (
        codes.INVALID_ARG
        if isinstance(error, InvalidInput)
        else codes.UNAVAILABLE
        if isinstance(error, Overloaded | Unavailable)
        else codes.CANCELLED
        if isinstance(error, Cancelled)
        else codes.INTERNAL
    )
    return pb_utils.TritonError(str(error), code)


def response(pb_utils: PbUtils, outputs: dict[str, np.ndarray]) -> InferenceResponse:
    """An InferenceResponse over host arrays, not copied: the stub copies them into
    shared memory when the response is sent (or when execute() returns it)."""
    return pb_utils.InferenceResponse(
        output_tensors=[_tensor(pb_utils, name, array) for name, array in outputs.items()]
    )


def _tensor(pb_utils: PbUtils, name: str, array: np.ndarray) -> Tensor:
    return bfloat16.to_triton(pb_utils, name, array) if array.dtype == BFLOAT16 else pb_utils.Tensor(name, array)


def error_response(pb_utils: PbUtils, error: Exception) -> InferenceResponse:
    return pb_utils.InferenceResponse(error=triton_error(pb_utils, error))


class SenderResponder:
    """Answers one request through its response sender, with the final flag."""

    def __init__(self, pb_utils: PbUtils, request: InferenceRequest) -> None:
        self.pb = pb_utils
        self.sender = request.get_response_sender()
        self._answered = False

    def _final(self, make_response: Callable[..., InferenceResponse], *args: object) -> None:
        if self._answered:
            return
        built = make_response(self.pb, *args)
        self._answered = True
        try:
            self.sender.send(built, flags=self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception:  # the client may be gone; nothing else can be done for it
            log.exception("sending a response")

    def send(self, outputs: dict[str, np.ndarray]) -> None:
        try:
            self._final(response, outputs)
        except Exception as exc:  # a response that cannot be built still answers
            log.exception("building a response")
            self.fail(exc)

    def fail(self, error: Exception) -> None:
        self._final(error_response, error)

    def cancelled(self) -> bool:
        # The response sender is what learns of a cancellation; asking is a round trip.
        return self.sender.is_cancelled()


class ListResponder:
    """Answers one request by placing its response in the list execute() returns (sync mode's
    batch faces: no round trip to the server per response)."""

    def __init__(self, pb_utils: PbUtils, responses: list[InferenceResponse | None], index: int) -> None:
        self.pb = pb_utils
        self.responses = responses
        self.index = index

    def send(self, outputs: dict[str, np.ndarray]) -> None:
        if self.responses[self.index] is not None:
            return
        try:
            self.responses[self.index] = response(self.pb, outputs)
        except Exception as exc:  # a response that cannot be built still answers
            log.exception("building a response")
            self.responses[self.index] = error_response(self.pb, exc)

    def fail(self, error: Exception) -> None:
        if self.responses[self.index] is None:
            self.responses[self.index] = error_response(self.pb, error)

    def cancelled(self) -> bool:
        return False
