"""Exporters' quirks served for real: one tritonserver, tritonclient over HTTP and gRPC, each
answer compared with ONNX Runtime on the user's own file (exact: sums of four floats, argmax
indices and the classifier's probabilities come out of the same ONNX Runtime kernels).

    row scalars  outputs declared rank 0 that the graph computes per row (row_scalars.py),
                 through trtpool-model's folders: one element per row, as ONNX Runtime answers
                 ([1] for one row, [N] for N; a scalar for one row after a Squeeze without
                 axes), served batched like any per-row output; and the user's file in a
                 folder without a batch axis: ONNX Runtime's shapes
    zipmap       skl2onnx's iris classifier with its ZipMap output, in a folder with the
                 smallest config (backend "trtpool", the user's file, auto-complete): the
                 load path serves the probabilities as trtpool-model does
"""
from __future__ import annotations

import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conformance.row_scalars import PROFILE, row_scalar_model, rows
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder

CLIENTS = {"http": httpclient, "grpc": grpcclient}


@pytest.fixture(scope="module")
def served(start_server, tmp_path_factory, zipmap_classifier):
    """(server, {model name: the user's ONNX file}, {model name: its repository index entry})."""
    workdir = tmp_path_factory.mktemp("quirks")
    repo = workdir / "repo"
    files = {}
    for name in PROFILE:
        files[name] = workdir / f"{name}.onnx"
        onnx.save(row_scalar_model(name), str(files[name]))
        make_model_folder(repo, name, files[name], [PROFILE[name]],
                          ServingOptions(instance_kind="cpu", contexts="1"), log=lambda _: None)
        own = repo / f"{name}_own"  # the user's file in a folder of their own, without a batch axis
        (own / "1").mkdir(parents=True)
        (own / "config.pbtxt").write_text(f'backend: "trtpool"\nmax_batch_size: 0\n'
                                          f'parameters {{ key: "profile" value: {{ string_value: "{PROFILE[name]}" }} }}\n')
        (own / "1" / "model.onnx").write_bytes(files[name].read_bytes())
        files[own.name] = files[name]
    (repo / "iris" / "1").mkdir(parents=True)
    (repo / "iris" / "config.pbtxt").write_text('backend: "trtpool"\n')
    (repo / "iris" / "1" / "model.onnx").write_bytes(zipmap_classifier.read_bytes())
    files["iris"] = zipmap_classifier
    server = start_server(repo, "--exit-on-error=false", "--strict-readiness=false")
    deadline = time.monotonic() + 180
    with httpclient.InferenceServerClient(server.http_url) as client:
        while True:  # every model loaded or refused; each test asserts its own is ready
            states = {m["name"]: m for m in client.get_model_repository_index()}
            if set(states) >= set(files) and all(s.get("state") in ("READY", "UNAVAILABLE") for s in states.values()):
                break
            assert time.monotonic() < deadline, f"models still loading: {states}"
            time.sleep(0.5)
    return server, files, states


def _ready(states: dict, model: str) -> None:
    assert states[model]["state"] == "READY", states[model]


def _infer(protocol: str, server, model: str, x: np.ndarray, outputs: list[str], name: str = "x") -> dict:
    module = CLIENTS[protocol]
    tensor = module.InferInput(name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    with module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url) as client:
        result = client.infer(model, [tensor], outputs=[module.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


COUNTS = [1, 3, 8]  # one row, and up to the profiles' largest batch


def _onnx_runtime(path, x: np.ndarray) -> np.ndarray:
    """What ONNX Runtime answers on the user's file (quiet: it warns that y is not the [] declared)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    [y] = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    return y


@pytest.mark.parametrize("protocol", sorted(CLIENTS))
@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("model", sorted(PROFILE))
def test_an_output_declared_rank_0_is_answered_as_onnx_runtime_computes_it(served, model, count, protocol):
    server, files, states = served
    _ready(states, model)
    x = rows(model, count)
    expected = _onnx_runtime(files[model], x)
    assert expected.size == count  # one element per row, whatever it declares (a scalar for one row, axisless)
    got = _infer(protocol, server, model, x, ["y"])["y"]
    # Served batched, as a model that declares y [n] is: Triton answers each row's element as
    # dims [1] says (config.pbtxt: dims [1], reshape []), so a request of `count` rows gets [count, 1].
    assert got.shape == (count, 1) and got.dtype == expected.dtype, (got.shape, got.dtype)
    np.testing.assert_array_equal(got[:, 0], expected.reshape(count))


@pytest.mark.parametrize("protocol", sorted(CLIENTS))
@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("model", sorted(PROFILE))
def test_the_load_path_answers_an_output_declared_rank_0_as_onnx_runtime(served, model, count, protocol):
    """The user's file in a folder without a batch axis: the answer has ONNX Runtime's shape,
    [1] for one row (it used to be [], from a buffer sized by the declaration) and [N] for N;
    after a Squeeze without axes, a scalar for one row."""
    server, files, states = served
    _ready(states, f"{model}_own")
    x = rows(model, count)
    expected = _onnx_runtime(files[model], x)
    got = _infer(protocol, server, f"{model}_own", x, ["y"])["y"]
    assert got.shape == expected.shape and got.dtype == expected.dtype, (got.shape, expected.shape, got.dtype)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("protocol", sorted(CLIENTS))
def test_a_zipmap_model_in_a_folder_with_the_smallest_config_serves_its_probabilities(served, protocol):
    server, files, states = served
    _ready(states, "iris")
    features = np.random.default_rng(7).uniform(0, 7, (3, 4)).astype(np.float32)
    label, maps = ort.InferenceSession(str(files["iris"]), providers=["CPUExecutionProvider"]).run(
        None, {"features": features})
    classes = sorted(maps[0])
    got = _infer(protocol, server, "iris", features, ["output_label", "output_probability"], name="features")
    np.testing.assert_array_equal(got["output_label"][:, 0], label)  # per-row scalar: dims [1]
    np.testing.assert_array_equal(got["output_probability"],
                                  np.array([[row[c] for c in classes] for row in maps], np.float32))
