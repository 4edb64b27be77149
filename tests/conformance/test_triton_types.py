"""What tritonserver 2.51 itself carries, shown with a plain Python-backend model (no trtpool):
every data type trtpool serves (BF16 by DLPack, as the stub's as_numpy() refuses it), an
empty tensor through a -1 dimension, a model without inputs, and outputs whose shape differs
from config.pbtxt's dims (Triton does not check them), over HTTP and gRPC. trtpool's own
choices rest on these facts (signature.TRITON_DTYPES, model_config.config_dims)."""
from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.harness.python_model import python_model, tensor
from trtpool.model.dtypes import TRITON_DTYPES

CLIENTS = {"http": httpclient, "grpc": grpcclient}
TYPES = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
         "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
         "FP32": np.float32, "FP64": np.float64, "BF16": ml_dtypes.bfloat16, "BYTES": object}

ECHO = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for tensor in request.inputs():
                name = tensor.name() + "_OUT"
                try:
                    outputs.append(pb_utils.Tensor(name, tensor.as_numpy()))
                except Exception:  # BF16: "Use to_dlpack() and from_dlpack() instead"
                    outputs.append(pb_utils.Tensor.from_dlpack(name, tensor.to_dlpack()))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
'''
NO_INPUTS = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        # Outputs shaped unlike config.pbtxt's dims [1]: a scalar and a [2, 3].
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SCALAR", np.array(2.5, np.float32)),
                                            pb_utils.Tensor("WIDE", np.ones((2, 3), np.float32))])
                for _ in requests]
'''


@pytest.fixture(scope="module")
def plain_server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("plain_python")
    python_model(repo, "echo", ECHO, [tensor(t, t, [-1, -1]) for t in TYPES],
                 [tensor(f"{t}_OUT", t, [-1, -1]) for t in TYPES])
    python_model(repo, "no_inputs", NO_INPUTS, [], [tensor("SCALAR", "FP32", [1]), tensor("WIDE", "FP32", [1])])
    python_model(repo, "fp8_echo", ECHO, [tensor("X", "FP8", [2])], [tensor("X_OUT", "FP8", [2])])
    server = start_server(repo, "--exit-on-error=false", "--strict-readiness=false")
    deadline = time.monotonic() + 120
    with httpclient.InferenceServerClient(server.http_url) as client:
        while not (client.is_model_ready("echo") and client.is_model_ready("no_inputs")):
            assert time.monotonic() < deadline, server.log_tail()
            time.sleep(0.5)
    return server


def _url(server, protocol: str) -> str:
    return server.http_url if protocol == "http" else server.grpc_url


@pytest.mark.parametrize("rows", [2, 0], ids=["values", "empty"])
@pytest.mark.parametrize("protocol", sorted(CLIENTS))
def test_every_type_travels_both_ways(plain_server, protocol: str, rows: int) -> None:
    module = CLIENTS[protocol]
    rng = np.random.default_rng(7)
    sent = {}
    for name, dtype in TYPES.items():
        if dtype is object:
            sent[name] = np.array([f"é{i}".encode() for i in range(rows * 3)], dtype=object).reshape(rows, 3)
        else:
            sent[name] = (rng.uniform(0, 100, (rows, 3)) if dtype != np.bool_
                          else rng.integers(0, 2, (rows, 3))).astype(dtype)
    inputs = []
    for name, array in sent.items():
        sent_input = module.InferInput(name, list(array.shape), name)
        sent_input.set_data_from_numpy(array)
        inputs.append(sent_input)
    with module.InferenceServerClient(_url(plain_server, protocol)) as client:
        result = client.infer("echo", inputs)
    for name, array in sent.items():
        got = result.as_numpy(f"{name}_OUT")
        assert got.shape == array.shape and got.dtype == array.dtype, name
        assert np.array_equal(got, array), name


@pytest.mark.parametrize("protocol", sorted(CLIENTS))
def test_a_model_without_inputs_answers_with_shapes_the_config_does_not_fix(plain_server, protocol: str) -> None:
    module = CLIENTS[protocol]
    with module.InferenceServerClient(_url(plain_server, protocol)) as client:
        result = client.infer("no_inputs", [])
    assert result.as_numpy("SCALAR").shape == () and float(result.as_numpy("SCALAR")) == 2.5
    assert result.as_numpy("WIDE").shape == (2, 3)


def test_triton_has_no_type_for_what_trtpool_refuses() -> None:
    """Triton's own list of data types (model_config.proto, as tritonclient ships it) is
    exactly what trtpool serves: float8, float4, int4, uint4, int2 and uint2 have none."""
    from tritonclient.grpc import model_config_pb2

    triton = set(model_config_pb2.DataType.keys()) - {"TYPE_INVALID"}
    assert triton == set(TRITON_DTYPES.values())


def test_a_plain_python_model_cannot_declare_float8(plain_server) -> None:
    """The same server refuses the config of a plain Python-backend model declaring TYPE_FP8,
    and serves the other models of the repository."""
    with httpclient.InferenceServerClient(plain_server.http_url) as client:
        assert not client.is_model_ready("fp8_echo")
        assert client.is_model_ready("echo")
    assert 'Unknown enumeration value of "TYPE_FP8"' in plain_server.log_text()
