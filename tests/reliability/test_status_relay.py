"""trtpool.triton.status_relay in-process, against the pb_utils double (held to the 24.10 stub's
TritonError: TritonError(message, code=INTERNAL), .code(), .message(), class-level codes).
test_status_codes proves the relay through a real server and BLS."""
from __future__ import annotations

import numpy as np
import pytest

from tests.doubles import pb_utils_double as pb_utils
from trtpool.errors import InvalidInput, Overloaded
from trtpool.triton.responders import error_response, triton_error
from trtpool.triton.status_relay import tagging, untagged, untagging

TritonError = pb_utils.TritonError


def bls_hop(error: TritonError) -> TritonError:
    """What the front receives from BLS in 24.10: the message, code INTERNAL."""
    return TritonError(error.message())


@pytest.mark.parametrize("error, code", [
    (InvalidInput("input 'X': shape [2, 40] is outside the engine's optimization profiles"), "INVALID_ARG"),
    (Overloaded("overloaded: 2 requests are waiting (max_queue_size 2); retry later"), "UNAVAILABLE"),
])
def test_a_code_survives_the_hop(error, code):
    sent = triton_error(tagging(pb_utils), error)  # the target's responder, as model.py wires it
    assert sent.code() == getattr(TritonError, code)
    assert sent.message() == f"{error} [status {code}]"

    response = untagging(pb_utils).InferenceResponse(error=bls_hop(sent))  # the front's ForwardHandler
    assert response.error().code() == getattr(TritonError, code)
    assert response.error().message() == str(error)


def test_internal_errors_are_not_tagged():
    sent = triton_error(tagging(pb_utils), RuntimeError("boom"))
    assert (sent.code(), sent.message()) == (TritonError.INTERNAL, "boom")
    assert untagged(pb_utils, bls_hop(sent)).code() == TritonError.INTERNAL


def test_a_tag_that_names_no_code_is_left_alone():
    error = TritonError("value [status BOGUS]")
    assert untagged(pb_utils, error) is error


def test_the_views_pass_everything_else_through():
    assert tagging(pb_utils).TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert tagging(pb_utils).TritonError.UNAVAILABLE == TritonError.UNAVAILABLE
    tensor = pb_utils.Tensor("t", np.zeros(1))
    ok = untagging(pb_utils).InferenceResponse(output_tensors=[tensor])
    assert ok.output_tensors() == [tensor] and ok.error() is None
    assert error_response(tagging(pb_utils), Overloaded("full")).error().message() == "full [status UNAVAILABLE]"
