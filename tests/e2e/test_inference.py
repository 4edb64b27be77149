"""Requests over real HTTP and gRPC to a real tritonserver running trtpool."""
from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient

from tests.harness.clients import LARGE_TOLERANCE, TINY_TOLERANCE, grpc_input, http_input, infer_concurrently
from trtpool.model.config_pbtxt import DEFAULT_ONNX_MAX_BATCH
from trtpool_builder.examples import write_example
from trtpool_builder.examples.tiny import tiny_reference

@pytest.fixture(scope="module")
def onnx_reference(tmp_path_factory):
    """In-process ONNX Runtime sessions over the same generated files."""
    folder = tmp_path_factory.mktemp("reference")
    sessions = {}

    def session(name: str) -> ort.InferenceSession:
        if name not in sessions:
            sessions[name] = ort.InferenceSession(str(write_example(name, folder / f"{name}.onnx")))
        return sessions[name]

    return session


def test_tiny_over_http_matches_float64_reference(served):
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    result = served.http.infer("tiny", [http_input("INPUT0", x, "FP32")])
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), tiny_reference(x), **TINY_TOLERANCE)


def test_tiny_over_grpc_matches_float64_reference(served):
    x = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    result = served.grpc.infer("tiny", [grpc_input("INPUT0", x, "FP32")])
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), tiny_reference(x), **TINY_TOLERANCE)


def test_resnet50_over_grpc_matches_onnxruntime(served, onnx_reference):
    x = np.random.default_rng(2).standard_normal((2, 3, 224, 224)).astype(np.float32)
    result = served.grpc.infer("resnet50", [grpc_input("input", x, "FP32")])
    [expected] = onnx_reference("resnet50").run(None, {"input": x})
    logits = result.as_numpy("logits")
    assert logits.shape == (2, 1000)
    np.testing.assert_allclose(logits, expected, **LARGE_TOLERANCE)
    assert np.ptp(logits) > 0  # a real signal, not a constant


def test_bert_base_over_http_matches_onnxruntime(served, onnx_reference):
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 30522, size=(2, 24), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, 17:] = 0  # padding on the second sequence
    result = served.http.infer("bert_base", [http_input("input_ids", ids, "INT64"),
                                             http_input("attention_mask", mask, "INT64")])
    expected = onnx_reference("bert_base").run(None, {"input_ids": ids, "attention_mask": mask})
    np.testing.assert_allclose(result.as_numpy("last_hidden_state"), expected[0], **LARGE_TOLERANCE)
    np.testing.assert_allclose(result.as_numpy("pooler_output"), expected[1], **LARGE_TOLERANCE)


def inference_stats(client: grpcclient.InferenceServerClient, model: str) -> tuple[int, int]:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


def test_concurrent_clients_are_batched_and_all_correct(served):
    before_inferences, before_executions = inference_stats(served.grpc, "tiny")
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(96)]

    outputs = infer_concurrently(served.server.grpc_url, "tiny", inputs)
    for x, y in zip(inputs, outputs):
        np.testing.assert_allclose(y, tiny_reference(x), **TINY_TOLERANCE)
    after_inferences, after_executions = inference_stats(served.grpc, "tiny")
    inferences = after_inferences - before_inferences
    executions = after_executions - before_executions
    assert inferences == 96
    assert executions < inferences, f"{executions} executions for {inferences} inferences: no batching"


def test_auto_complete_fills_config_from_the_model(served):
    config = served.http.get_model_config("tiny_autocomplete")
    # An ONNX file carries no batch limit and this folder sets no profile.
    assert config["max_batch_size"] == DEFAULT_ONNX_MAX_BATCH
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [("INPUT0", "TYPE_FP32", [16])]
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [("OUTPUT0", "TYPE_FP32", [4])]
    x = np.ones((2, 16), np.float32)
    result = served.http.infer("tiny_autocomplete", [http_input("INPUT0", x, "FP32")])
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), tiny_reference(x), **TINY_TOLERANCE)


def test_custom_metrics_are_exported(served):
    """`tiny` has the default metrics_interval_ms (1000): a background flush delivers them."""
    server = served.server
    time.sleep(1.5)  # earlier tests' batches have reached the endpoint: the count below is exact
    before = server.metric_total("trtpool_batches_total", "tiny", batch_size="7")
    x = np.ones((7, 16), np.float32)
    served.http.infer("tiny", [http_input("INPUT0", x, "FP32")])
    assert server.wait_for_metric("trtpool_batches_total", "tiny", before + 1, batch_size="7") == before + 1
    assert server.metric_total("trtpool_context_busy_us_total", "tiny") > 0
    text = server.metrics()
    assert "trtpool_queue_wait_us_total{" in text
    assert "trtpool_context_runs_total{" in text
