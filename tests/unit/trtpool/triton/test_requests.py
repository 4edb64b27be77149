"""trtpool.triton.requests against the pb_utils double: request tensors as Triton hands them over
(host arrays, BYTES, BF16 through DLPack, GPU tensors), and probes answered untouched and left out."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from trtpool.triton import bfloat16
from trtpool.triton.probes import PROBE_MARK
from trtpool.triton.requests import request_tensors, without_probes

FINAL = 1


def make_request(pb_utils, tensors: dict, parameters: dict | None = None):
    inputs = [pb_utils.Tensor(name, array) for name, array in tensors.items()]
    return pb_utils.InferenceRequest(model_name="tiny", inputs=inputs, requested_output_names=["OUTPUT0"],
                                     parameters=parameters)


def test_host_tensors_arrive_as_numpy_arrays(pb_utils):
    floats = np.arange(6, dtype=np.float32).reshape(2, 3)
    text = np.array([[b"a"], ["\u00e9".encode()]], dtype=object)
    halves = np.array([[0.5, -3.0]], ml_dtypes.bfloat16)
    request = pb_utils.InferenceRequest(
        model_name="m", requested_output_names=[],
        inputs=[pb_utils.Tensor("F", floats), pb_utils.Tensor("T", text), bfloat16.to_triton(pb_utils, "H", halves)])
    tensors = request_tensors(request)
    assert sorted(tensors) == ["F", "H", "T"]
    assert tensors["F"].dtype == np.float32 and np.array_equal(tensors["F"], floats)
    assert tensors["T"].dtype == object and tensors["T"].tolist() == [[b"a"], ["\u00e9".encode()]]
    # as_numpy() refuses BF16: read through DLPack
    assert tensors["H"].dtype == ml_dtypes.bfloat16 and np.array_equal(tensors["H"], halves)


@pytest.mark.gpu
def test_gpu_tensors_stay_on_the_device(pb_utils):
    """FORCE_CPU_ONLY_INPUT_TENSORS "no": Triton hands GPU inputs over by DLPack; they become torch
    tensors on the same device, uncopied. (bench/gpu/h200.sh's `tests` stage runs it.)"""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU visible to torch (a GPU request tensor)")
    on_gpu = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3)
    request = pb_utils.InferenceRequest(
        model_name="m", requested_output_names=[],
        inputs=[pb_utils.Tensor.from_dlpack("G", on_gpu), pb_utils.Tensor("C", np.ones(2, np.float32))])
    assert not request.inputs()[0].is_cpu()
    tensors = request_tensors(request)
    assert tensors["G"].is_cuda and tensors["G"].dtype == torch.float32 and torch.equal(tensors["G"], on_gpu)
    assert tensors["G"].data_ptr() == on_gpu.data_ptr()   # the memory handed over, not a copy
    assert isinstance(tensors["C"], np.ndarray)


def test_probes_are_answered_with_no_outputs_and_left_out(pb_utils):
    probe = make_request(pb_utils, {}, PROBE_MARK)
    plain = make_request(pb_utils, {"INPUT0": np.ones((1, 16), np.float32)})
    almost = make_request(pb_utils, {}, {"trtpool_probe": "true"})   # a string: not a probe
    assert without_probes(pb_utils, [probe, plain, almost]) == [plain, almost]
    [(answer, flags)] = probe.get_response_sender()._sent
    assert flags == FINAL and not answer.has_error() and answer.output_tensors() == []
    assert plain.get_response_sender()._sent == [] and almost.get_response_sender()._sent == []
