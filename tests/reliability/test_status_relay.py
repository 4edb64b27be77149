"""trtpool.triton.status_relay in-process, against a stand-in for pb_utils with the
same TritonError surface as the 24.10 stub (pb_stub.cc: TritonError(message,
code=INTERNAL), .code(), .message(), class-level codes). test_status_codes
proves the relay through a real server and BLS."""
from __future__ import annotations

import pytest

from trtpool.errors import InvalidInput, Overloaded
from trtpool.triton.responders import error_response, triton_error
from trtpool.triton.status_relay import tagging, untagged, untagging


class FakeTritonError:
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = 1) -> None:
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class FakeResponse:
    def __init__(self, output_tensors=None, error=None) -> None:
        self.output_tensors, self.error = output_tensors, error


class FakePbUtils:
    TritonError = FakeTritonError
    InferenceResponse = FakeResponse
    TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


def bls_hop(error: FakeTritonError) -> FakeTritonError:
    """What the front receives from BLS in 24.10: the message, code INTERNAL."""
    return FakeTritonError(error.message())


@pytest.mark.parametrize("error, code", [
    (InvalidInput("input 'X': shape [2, 40] is outside the engine's optimization profiles"), "INVALID_ARG"),
    (Overloaded("overloaded: 2 requests are waiting (max_queue_size 2); retry later"), "UNAVAILABLE"),
])
def test_a_code_survives_the_hop(error, code):
    sent = triton_error(tagging(FakePbUtils), error)  # the target's responder, as model.py wires it
    assert sent.code() == getattr(FakeTritonError, code)
    assert sent.message() == f"{error} [status {code}]"

    response = untagging(FakePbUtils).InferenceResponse(error=bls_hop(sent))  # the front's ForwardHandler
    assert response.error.code() == getattr(FakeTritonError, code)
    assert response.error.message() == str(error)


def test_internal_errors_are_not_tagged():
    sent = triton_error(tagging(FakePbUtils), RuntimeError("boom"))
    assert (sent.code(), sent.message()) == (FakeTritonError.INTERNAL, "boom")
    assert untagged(FakePbUtils, bls_hop(sent)).code() == FakeTritonError.INTERNAL


def test_a_tag_that_names_no_code_is_left_alone():
    error = FakeTritonError("value [status BOGUS]")
    assert untagged(FakePbUtils, error) is error


def test_the_views_pass_everything_else_through():
    assert tagging(FakePbUtils).TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert tagging(FakePbUtils).TritonError.UNAVAILABLE == FakeTritonError.UNAVAILABLE
    ok = untagging(FakePbUtils).InferenceResponse(output_tensors=["t"])
    assert ok.output_tensors == ["t"] and ok.error is None
    assert error_response(tagging(FakePbUtils), Overloaded("full")).error.message() == "full [status UNAVAILABLE]"
