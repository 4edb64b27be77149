"""Bad input through a real server: a precise error for that request, and the
server keeps serving every other request and model."""
from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.doubles.flaky_runtime import SENTINEL
from trtpool_builder.examples.tiny import tiny_reference

from tests.harness.clients import TINY_TOLERANCE, grpc_input, http_input, infer_concurrently


def still_serves(served) -> None:
    x = np.full((1, 16), 0.5, np.float32)
    result = served.grpc.infer("tiny", [grpc_input("INPUT0", x, "FP32")])
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), tiny_reference(x), **TINY_TOLERANCE)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("case, make_inputs, fragments", [
    ("wrong dtype", lambda make: [make("INPUT0", np.ones((1, 16), np.int32), "INT32")],
     ["INPUT0", "FP32", "INT32"]),
    ("wrong shape", lambda make: [make("INPUT0", np.ones((1, 15), np.float32), "FP32")],
     ["INPUT0", "[-1,16]"]),
    ("wrong rank", lambda make: [make("INPUT0", np.ones((1, 4, 4), np.float32), "FP32")],
     ["INPUT0", "[-1,16]"]),
    ("missing input", lambda make: [],
     ["INPUT0"]),
    ("unknown input", lambda make: [make("INPUT0", np.ones((1, 16), np.float32), "FP32"),
                                    make("EXTRA", np.ones((1, 16), np.float32), "FP32")],
     ["EXTRA"]),
    ("batch above the limit", lambda make: [make("INPUT0", np.ones((65, 16), np.float32), "FP32")],
     ["batch-size", "64"]),
])
def test_bad_input_gets_a_precise_error(served, protocol, case, make_inputs, fragments):
    client, make = (served.http, http_input) if protocol == "http" else (served.grpc, grpc_input)
    with pytest.raises(InferenceServerException) as error:
        client.infer("tiny", make_inputs(make))
    message = str(error.value)
    for fragment in fragments:
        assert fragment in message, f"{case}: '{fragment}' not in: {message}"
    still_serves(served)


def test_dimension_outside_the_profile_names_input_and_range(served):
    ids = np.ones((1, 600), np.int64)
    with pytest.raises(InferenceServerException) as error:
        served.http.infer("bert_base", [http_input("input_ids", ids, "INT64"),
                                        http_input("attention_mask", ids, "INT64")])
    message = str(error.value)
    assert "input 'input_ids'" in message and "[1, 600]" in message and "[32, 512]" in message
    still_serves(served)


def test_models_that_cannot_load_say_why_and_others_serve(served):
    index = {m["name"]: m for m in served.http.get_model_repository_index()}
    for name, fragment in served.broken.items():
        assert index[name]["state"] == "UNAVAILABLE", name
        assert fragment in index[name]["reason"], f"{name}: {index[name]['reason']}"
        assert not served.http.is_model_ready(name)
    still_serves(served)


@pytest.mark.parametrize("model", ["tiny_flaky", "tiny_pipelined_flaky"])
def test_context_failure_under_load_loses_no_other_request(served, model):
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(64)]
    poisoned = {10, 40}
    for i in poisoned:
        inputs[i][0, 0] = SENTINEL
    failures_before = served.server.metric_total("trtpool_context_failures_total", model)

    results = infer_concurrently(served.server.grpc_url, model, inputs)
    for i, (x, result) in enumerate(zip(inputs, results)):
        if i in poisoned:
            assert isinstance(result, InferenceServerException) and "injected failure" in str(result)
        else:
            assert isinstance(result, np.ndarray), f"request {i} failed: {result}"
            np.testing.assert_allclose(result, tiny_reference(x), **TINY_TOLERANCE)
    expected = failures_before + len(poisoned)
    assert served.server.wait_for_metric("trtpool_context_failures_total", model, expected) >= expected
