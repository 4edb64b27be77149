"""Triton 2.51's size-overflow defect (issue 22, docs/reliability.md): a gRPC request
whose declared shape's byte size wraps around 64 bits passes Triton's size check and
kills the model's stub while the stub makes the input's numpy array, before any
model code runs. Shown with a plain Python-backend model and a trtpool model on one
server: both stubs die with the same message, the server and a third model serve on.

The request is built from tritonclient's own gRPC messages: tritonclient's InferInput
derives the byte size from the shape and never sends such a request."""
from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.harness.clients import TINY_TOLERANCE, infer_concurrently
from tests.harness.python_model import python_model, tensor
from tests.harness.repository import add_example
from tests.harness.server import TritonServer
from trtpool_builder.examples.tiny import tiny_reference
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder

# 1 x (2**59 + 5) x 8 float32 = 2**64 + 160 bytes: wraps to the 160 bytes sent.
WRAPPING_SHAPE = [1, 2**59 + 5, 8]
SENT_BYTES = 160
DEATH = "ValueError: array is too big"

PLAIN_MODEL = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(request, "X").as_numpy())]) for request in requests]
'''


def identity_onnx(path: Path) -> Path:
    """X -> Y, float32 [a, b, 8] with both leading axes dynamic."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])], "identity",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["a", "b", 8])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["a", "b", 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def wrapping_request(url: str, model: str) -> grpc.RpcError:
    channel = grpc.insecure_channel(url)
    request = service_pb2.ModelInferRequest(model_name=model)
    wrapping = request.inputs.add(name="X", datatype="FP32")
    wrapping.shape.extend(WRAPPING_SHAPE)
    request.raw_input_contents.append(bytes(SENT_BYTES))
    with channel:
        with pytest.raises(grpc.RpcError) as raised:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=60)
    return raised.value


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> TritonServer:
    base = tmp_path_factory.mktemp("size_overflow")
    repo = base / "repo"
    python_model(repo, "plain", PLAIN_MODEL, [tensor("X", "FP32", [-1, -1, 8])], [tensor("Y", "FP32", [-1, -1, 8])])
    make_model_folder(repo, "identity", identity_onnx(base / "identity.onnx"), ["X=1x1x8:1x4x8:2x64x8"],
                      ServingOptions(contexts="1", max_batch_size=0), log=lambda note: None)
    add_example(repo, base / "onnx", "tiny", contexts="1")
    started = TritonServer(repo, base / "server.log").start()
    yield started
    started.stop()


@pytest.mark.parametrize("model", ["plain", "identity"])
def test_a_wrapping_shape_kills_the_stub_before_the_model_sees_it(server: TritonServer, model: str):
    deaths = server.log_text().count(DEATH)
    error = wrapping_request(server.grpc_url, model)
    assert error.code() == grpc.StatusCode.INTERNAL, error
    assert f"Stub process '{model}_0' is not healthy" in error.details(), error.details()
    assert server.log_text().count(DEATH) == deaths + 1
    # The server and the other models serve on.
    assert server.process.poll() is None and server.ready()
    inputs = [np.random.default_rng(seed).standard_normal((2, 16)).astype(np.float32) for seed in range(4)]
    for array, output in zip(inputs, infer_concurrently(server.grpc_url, "tiny", inputs)):
        assert isinstance(output, np.ndarray), output
        np.testing.assert_allclose(output, tiny_reference(array), **TINY_TOLERANCE)
