"""Issue 15, item 4: client errors reach clients as client errors, in every mode.

    bad shape trtpool catches (outside the profiles)   HTTP 400, gRPC INVALID_ARGUMENT
    shape the runtime rejects (inside the profiles)    HTTP 400, gRPC INVALID_ARGUMENT, context not rebuilt
    a full decoupled queue ('overloaded')              HTTP 503, gRPC UNAVAILABLE
    a front whose target is not ready                  HTTP 503, gRPC UNAVAILABLE, the target named
    Triton's own refusal (rank, dtype) on a stream      a message without the tag (Triton 2.51)

through sync, pipelined, decoupled (gRPC streaming: a stream error carries a message only, which a
decoupled trtpool model ends with `[status <CODE>]`; no `triton_grpc_error` header, on which
Triton 2.51 dies: tests/reliability/test_grpc_error_stream_abort.py) and the unary front (BLS to the
decoupled model: trtpool.triton.status_relay carries the code across).

The model: Y = Reshape(X, [0, 2, 8]) with profile X = 1x1..64x32. ONNX Runtime
computes n = 16 only; n = 12 is inside the profile but rejected while running;
n = 40 is outside the profile, refused before any context runs.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.doubles.flaky_runtime import SLOW
from tests.harness.clients import TINY_TOLERANCE, grpc_input, http_input
from tests.harness.reshape_model import PROFILE as RESHAPE_PROFILE
from tests.harness.reshape_model import WIDTH as RESHAPE_WIDTH
from tests.harness.reshape_model import reshape_reference, write_reshape_model
from tests.harness.reliability_repo import TINY_PROFILE
from tests.harness.repository import FLAKY_RUNTIME, example_onnx, set_parameters
from tests.harness.server import TritonServer
from tests.harness.streams import StreamClient
from trtpool_builder.examples.tiny import tiny_reference
from trtpool_builder.folder.front import make_front_folder
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder

UNARY = {"sync": "reshape_sync", "pipelined": "reshape_pipe", "front": "reshape_dec_unary"}
RESHAPE_MODELS = ("reshape_sync", "reshape_pipe", "reshape_dec")
OUTSIDE = 40   # beyond the profile's 32
REJECTED = 12  # inside the profile; Reshape to [batch, 2, 8] needs 16
HTTP_CODES = {"INVALID_ARGUMENT": "400", "UNAVAILABLE": "503"}


@dataclass
class Served:
    server: TritonServer
    http: httpclient.InferenceServerClient
    grpc: grpcclient.InferenceServerClient


def build_repository(repo: Path, cache: Path) -> Path:
    reshape = write_reshape_model(cache / "reshape.onnx")
    for name, mode in (("reshape_sync", "sync"), ("reshape_pipe", "pipelined"), ("reshape_dec", "decoupled")):
        # Metrics after every batch: the context counters below are read right after the requests.
        set_parameters(make_model_folder(repo, name, reshape, [RESHAPE_PROFILE],
                                         ServingOptions(mode=mode, contexts="2")), metrics_interval_ms="0")
    make_front_folder(repo, "reshape_dec")
    # One context and a queue of two: a slow batch and two waiting requests fill it.
    set_parameters(make_model_folder(repo, "queue_dec", example_onnx(cache, "tiny"), [TINY_PROFILE],
                                     ServingOptions(mode="decoupled", contexts="1", runtime=FLAKY_RUNTIME)),
                   max_queue_size="2")
    make_front_folder(repo, "queue_dec")
    # A front whose target does not load (contexts past the ceiling): the front loads, the target is never ready.
    make_front_folder(repo, make_model_folder(repo, "absent_dec", example_onnx(cache, "tiny"), [TINY_PROFILE],
                                              ServingOptions(mode="decoupled", contexts="1")).name)
    set_parameters(repo / "absent_dec", contexts="100000")
    return repo


@pytest.fixture(scope="module")
def served(start_server, tmp_path_factory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("status_codes")
    server = start_server(build_repository(base / "repo", base / "onnx"),
                          "--exit-on-error=false", "--strict-readiness=false")
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    yield Served(server, http, grpc)
    http.close()
    grpc.close()


def x_of_width(width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, width)).astype(np.float32)


def unary_error(served: Served, protocol: str, model: str, x: np.ndarray) -> InferenceServerException:
    client, make = (served.http, http_input) if protocol == "http" else (served.grpc, grpc_input)
    with pytest.raises(InferenceServerException) as caught:
        client.infer(model, [make("X", x, "FP32")])
    return caught.value


def expected_status(protocol: str, grpc_code: str) -> str:
    return HTTP_CODES[grpc_code] if protocol == "http" else f"StatusCode.{grpc_code}"


def stream_error(served: Served, model: str, inputs: dict[str, np.ndarray]) -> InferenceServerException:
    """The one error of a stream that sent one request; its code is the message's tag, not a gRPC status."""
    with StreamClient(served.server.grpc_url) as stream:
        stream.send(model, inputs, "bad")
        answers = stream.collect(1, timeout=30)
    assert answers.outputs == {}
    return answers.errors[0]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("mode", sorted(UNARY))
def test_shape_outside_the_profiles_is_invalid_argument(served, mode, protocol):
    error = unary_error(served, protocol, UNARY[mode], x_of_width(OUTSIDE, seed=1))
    assert error.status() == expected_status(protocol, "INVALID_ARGUMENT"), error
    assert "input 'X'" in str(error) and "[2, 40]" in str(error) and "[64, 32]" in str(error), error


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("mode", sorted(UNARY))
def test_shape_the_runtime_rejects_is_invalid_argument(served, mode, protocol):
    error = unary_error(served, protocol, UNARY[mode], x_of_width(REJECTED, seed=2))
    assert error.status() == expected_status(protocol, "INVALID_ARGUMENT"), error
    assert "rejected the input" in str(error) and "Input shape:{2,12}" in str(error), error


@pytest.mark.parametrize("width, fragment", [(OUTSIDE, "input 'X'"), (REJECTED, "rejected the input")])
def test_bad_shapes_on_a_stream_are_invalid_argument(served, width, fragment):
    error = stream_error(served, "reshape_dec", {"X": x_of_width(width, seed=3)})
    assert error.status() is None and str(error).endswith(" [status INVALID_ARG]"), error
    assert fragment in str(error), error


def test_rejected_shapes_do_not_rebuild_contexts_and_good_ones_still_serve(served):
    """Runs after the tests above in this module: every rejected shape ran on a
    context (counted in runs) and none counted as a context failure."""
    x = x_of_width(RESHAPE_WIDTH, seed=4)
    for model in ("reshape_sync", "reshape_pipe", "reshape_dec_unary"):
        np.testing.assert_array_equal(served.http.infer(model, [http_input("X", x, "FP32")]).as_numpy("Y"),
                                      reshape_reference(x))
    for model in RESHAPE_MODELS:
        assert served.server.metric_total("trtpool_context_runs_total", model) > 0, model
        assert served.server.metric_total("trtpool_context_failures_total", model) == 0, model


@contextmanager
def queue_full(served: Served) -> Iterator[None]:
    """queue_dec's one context busy with a slow batch and its queue of two full; on
    the way out, those three requests are answered correctly."""
    slow = np.ones((1, 16), np.float32)
    slow[0, 0] = SLOW
    waiting = np.full((1, 16), 0.25, np.float32)
    with StreamClient(served.server.grpc_url) as stream:
        stream.send("queue_dec", {"INPUT0": slow}, "slow")
        time.sleep(0.3)  # the slow batch has the context now, for SLOW_SECONDS
        stream.send("queue_dec", {"INPUT0": waiting}, "waiting-1")
        stream.send("queue_dec", {"INPUT0": waiting}, "waiting-2")
        time.sleep(0.1)
        yield
        answers = stream.collect(3, timeout=30)
    assert answers.errors == [] and set(answers.outputs) == {"slow", "waiting-1", "waiting-2"}
    for request_id in ("waiting-1", "waiting-2"):
        np.testing.assert_allclose(answers.outputs[request_id]["OUTPUT0"], tiny_reference(waiting), **TINY_TOLERANCE)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_overloaded_through_the_front_is_unavailable(served, protocol):
    client, make = (served.http, http_input) if protocol == "http" else (served.grpc, grpc_input)
    with queue_full(served):
        with pytest.raises(InferenceServerException) as caught:
            client.infer("queue_dec_unary", [make("INPUT0", np.ones((1, 16), np.float32), "FP32")])
    assert caught.value.status() == expected_status(protocol, "UNAVAILABLE"), caught.value
    assert "overloaded" in str(caught.value) and "[status" not in str(caught.value), caught.value


def test_overloaded_on_a_stream_is_unavailable(served):
    with queue_full(served):
        error = stream_error(served, "queue_dec", {"INPUT0": np.ones((1, 16), np.float32)})
    assert error.status() is None and str(error).endswith(" [status UNAVAILABLE]"), error
    assert "overloaded" in str(error), error


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_front_whose_target_is_not_ready_is_unavailable(served, protocol):
    client, make = (served.http, http_input) if protocol == "http" else (served.grpc, grpc_input)
    assert not served.http.is_model_ready("absent_dec") and served.http.is_model_ready("absent_dec_unary")
    with pytest.raises(InferenceServerException) as caught:
        client.infer("absent_dec_unary", [make("INPUT0", np.ones((1, 16), np.float32), "FP32")])
    assert caught.value.status() == expected_status(protocol, "UNAVAILABLE"), caught.value
    assert "model 'absent_dec' (this front's forward_to target) is not ready" in str(caught.value), caught.value


@pytest.mark.parametrize("x, fragment", [
    (np.zeros((2, RESHAPE_WIDTH, 1), np.float32), "unexpected shape for input 'X'"),
    (np.zeros((2, RESHAPE_WIDTH), np.float64), "inference input 'X' data-type is 'FP64'"),
])
def test_tritons_own_checks_on_a_stream_carry_no_code(served, x, fragment):
    """Triton 2.51 refuses a wrong rank or dtype before the model sees the request; on a stream that
    error is a message without trtpool's tag, and the stream goes on: a good request after it is answered."""
    good = x_of_width(RESHAPE_WIDTH, seed=5)
    with StreamClient(served.server.grpc_url) as stream:
        stream.send("reshape_dec", {"X": x}, "bad")
        [error] = stream.collect(1, timeout=30).errors
        stream.send("reshape_dec", {"X": good}, "good")
        answers = stream.collect(1, timeout=30)
    assert error.status() is None and fragment in str(error) and "[status" not in str(error), error
    np.testing.assert_array_equal(answers.outputs["good"]["Y"], reshape_reference(good))
