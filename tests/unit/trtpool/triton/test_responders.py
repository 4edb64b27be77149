"""trtpool.triton.responders against the pb_utils double: each request answered once, errors with the
status code a client acts on, outputs handed over uncopied (BF16 ones through DLPack)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from trtpool.triton import bfloat16
from trtpool.errors import Cancelled, ContextFailure, InvalidInput, Overloaded, Unavailable
from trtpool.triton.responders import ListResponder, SenderResponder, error_response, response, triton_error

FINAL = 1


def request(pb_utils):
    return pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=["Y"])


@pytest.mark.parametrize("error, code", [
    (InvalidInput("input 'X': dimension 1 is 15, expected 16"), "INVALID_ARG"),
    (Overloaded("overloaded: 2 requests are waiting (max_queue_size 2); retry later"), "UNAVAILABLE"),
    (Unavailable("the engine host is restarting"), "UNAVAILABLE"),
    (Cancelled("cancelled by the client"), "CANCELLED"),
    (ContextFailure("context 0 failed"), "INTERNAL"),
    (RuntimeError("boom"), "INTERNAL"),
])
def test_each_error_class_has_its_status_code(pb_utils, error, code):
    made = triton_error(pb_utils, error)
    assert (made.code(), made.message()) == (getattr(pb_utils.TritonError, code), str(error))
    answer = error_response(pb_utils, error)
    assert answer.has_error() and answer.error().code() == getattr(pb_utils.TritonError, code)
    assert answer.output_tensors() == []


def test_a_response_holds_the_arrays_themselves(pb_utils):
    outputs = {"A": np.arange(6, dtype=np.float32).reshape(2, 3), "B": np.array([b"x", b"yz"], dtype=object)}
    answer = response(pb_utils, outputs)
    assert not answer.has_error()
    assert [t.name() for t in answer.output_tensors()] == ["A", "B"]
    for tensor, array in zip(answer.output_tensors(), outputs.values()):
        assert tensor.as_numpy() is array   # not copied: the stub copies when the response is sent


def test_a_bfloat16_output_goes_out_through_dlpack(pb_utils):
    values = np.array([[1.5, -2.0, 0.25]], ml_dtypes.bfloat16)
    [tensor] = response(pb_utils, {"H": values}).output_tensors()
    with pytest.raises(pb_utils.TritonModelException, match="BF16"):
        tensor.as_numpy()   # the stub has no numpy type for it
    assert tensor.shape() == [1, 3]
    back = bfloat16.from_triton(tensor)
    assert back.dtype == ml_dtypes.bfloat16 and np.array_equal(back, values)


def test_an_output_the_stub_refuses_is_answered_as_an_error(pb_utils):
    """complex64 has no Triton type: pb_utils.Tensor refuses it, and the request still gets
    one answer, INTERNAL, with the stub's reason."""
    unanswerable = {"Y": np.zeros(2, np.complex64)}
    sent = request(pb_utils)
    SenderResponder(pb_utils, sent).send(unanswerable)
    [(answer, flags)] = sent.get_response_sender()._sent
    assert flags == FINAL and answer.error().code() == pb_utils.TritonError.INTERNAL
    assert "NumPy dtype is not supported" in answer.error().message()
    responses = [None]
    ListResponder(pb_utils, responses, 0).send(unanswerable)
    assert responses[0].error().code() == pb_utils.TritonError.INTERNAL


def test_a_sender_responder_answers_once_with_the_final_flag(pb_utils):
    sent = request(pb_utils)
    responder = SenderResponder(pb_utils, sent)
    responder.send({"Y": np.ones(2, np.float32)})
    responder.send({"Y": np.zeros(2, np.float32)})
    responder.fail(InvalidInput("too late"))
    [(answer, flags)] = sent.get_response_sender()._sent
    assert flags == FINAL and not answer.has_error()
    assert answer.output_tensors()[0].as_numpy().tolist() == [1.0, 1.0]


def test_a_sender_responder_fails_once_with_the_code(pb_utils):
    sent = request(pb_utils)
    responder = SenderResponder(pb_utils, sent)
    responder.fail(Overloaded("full"))
    responder.send({"Y": np.ones(2, np.float32)})
    [(answer, flags)] = sent.get_response_sender()._sent
    assert flags == FINAL
    assert (answer.error().code(), answer.error().message()) == (pb_utils.TritonError.UNAVAILABLE, "full")


def test_a_sender_that_refuses_is_logged_not_raised(pb_utils, caplog):
    """A request answered elsewhere already (its sender closed): the stub refuses the send; the
    responder logs it and does not raise into the thread that completes the batch."""
    sent = request(pb_utils)
    sent.get_response_sender().send(None, flags=FINAL)
    SenderResponder(pb_utils, sent).send({"Y": np.ones(2, np.float32)})
    assert "sending a response" in caplog.text and "Response sender has been closed" in caplog.text
    assert len(sent.get_response_sender()._sent) == 1


def test_a_sender_responder_asks_the_sender_about_cancellation(pb_utils):
    sent = request(pb_utils)
    responder = SenderResponder(pb_utils, sent)
    assert responder.cancelled() is False
    sent.get_response_sender()._cancelled = True   # the client cancelled
    assert responder.cancelled() is True


def test_a_list_responder_fills_its_slot_once(pb_utils):
    responses = [None, None]
    first, second = ListResponder(pb_utils, responses, 0), ListResponder(pb_utils, responses, 1)
    first.send({"Y": np.ones(1, np.float32)})
    first.fail(InvalidInput("too late"))
    second.fail(InvalidInput("input 'X': data type INT32 given, expected FP32"))
    second.send({"Y": np.ones(1, np.float32)})
    assert not responses[0].has_error() and responses[0].output_tensors()[0].name() == "Y"
    assert responses[1].error().code() == pb_utils.TritonError.INVALID_ARG
    assert responses[1].error().message() == "input 'X': data type INT32 given, expected FP32"
    assert first.cancelled() is False   # sync mode never asks the server
