"""Issue 15, items 2, 5 and 6 through a real server: what cannot work, or would
widen what a config can reach, does not load, and the reason says why.

    fronts      forward_to itself, to no model, to a sync model, to a non-trtpool
                model, out of the repository; a decoupled front
    model_file  an absolute path, '..' out of the version folder, a symlink out, a NUL byte,
                a 5,000-character name, a symlink loop
    bounds      contexts and batch_wait_microseconds past their ceilings
    runtime     module:Class (code), a name nobody registered
    profile     a fixed dimension or a rank the ONNX file contradicts
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.harness.clients import TINY_TOLERANCE, http_input
from tests.harness.reliability_repo import TINY_PROFILE
from tests.harness.repository import FLAKY_RUNTIME, example_onnx, set_parameters
from trtpool_builder.examples.tiny import tiny_reference
from trtpool_builder.folder.front import make_front_folder
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config, write_config

# model -> fragments its load error must contain
REFUSED = {
    "front_self": ["parameter 'forward_to': 'front_self' is this model itself"],
    "front_missing": ["parameter 'forward_to': 'nope'", "no model 'nope'", "in the front's own repository"],
    "front_to_sync": ["parameter 'forward_to': 'tiny'", "is not decoupled"],
    "front_to_python": ["parameter 'forward_to': 'py_model'", "is not a trtpool model", "backend 'python'"],
    "front_out_of_repository": ["parameter 'forward_to': '../elsewhere' is not a model name"],
    "front_decoupled": ["must not be decoupled"],
    "file_absolute": ["parameter 'model_file': '/etc/passwd' is an absolute path"],
    "file_dotdot": ["parameter 'model_file': '../../tiny/1/model.onnx' resolves to",
                    "outside the model's version folder"],
    "file_symlink_out": ["parameter 'model_file': 'link.onnx' resolves to", "outside the model's version folder"],
    "runtime_code": ["parameter 'runtime': 'os:system' is not accepted", "never code such as module:Class"],
    "runtime_unregistered": ["parameter 'runtime': 'nonesuch'", "entry point group 'trtpool.runtimes'",
                             f"registered: {FLAKY_RUNTIME}"],
    "contexts_huge": ["parameter 'contexts': 99999999999999999999 is too large; expected a whole number from 1 to 64"],
    "batch_wait_huge": ["parameter 'batch_wait_microseconds': 1000000000000 is too large; expected a whole number "
                        "from 0 to 1000000"],
    "file_nul": ["parameter 'model_file' contains a NUL byte"],
    "file_long": ["parameter 'model_file' is 5005 characters long"],
    "file_loop": ["parameter 'model_file': 'loop.onnx' cannot be resolved"],
    "profile_dim": ["input 'INPUT0' dimension 1 is fixed at 16 in the model but the profile gives 17..17"],
    "profile_rank": ["input 'INPUT0' has rank 2", "the profile gives rank 3"],
}
READY = ("tiny", "tiny_dec", "tiny_dec_unary", "file_symlink_inside", "runtime_registered")


def front(repo: Path, name: str, target: str) -> Path:
    folder = make_front_folder(repo, "tiny_dec", name)
    set_parameters(folder, forward_to=target)
    return folder


def tiny_model(repo: Path, cache: Path, name: str, mode: str = "sync", **parameters: str) -> Path:
    folder = make_model_folder(repo, name, example_onnx(cache, "tiny"), [TINY_PROFILE],
                               ServingOptions(mode=mode, contexts="1"))
    set_parameters(folder, **parameters)
    return folder


def build_repository(repo: Path, cache: Path) -> Path:
    tiny_model(repo, cache, "tiny")
    tiny_model(repo, cache, "tiny_dec", mode="decoupled")
    make_front_folder(repo, "tiny_dec")
    python = repo / "py_model"  # a decoupled Python-backend model's config (no version: Triton skips it)
    python.mkdir()
    (python / "config.pbtxt").write_text('name: "py_model"\nbackend: "python"\n'
                                         "model_transaction_policy { decoupled: true }\n")

    front(repo, "front_self", "front_self")
    front(repo, "front_missing", "nope")
    front(repo, "front_to_sync", "tiny")
    front(repo, "front_to_python", "py_model")
    front(repo, "front_out_of_repository", "../elsewhere")
    decoupled_front = front(repo, "front_decoupled", "tiny_dec")
    config = read_config(decoupled_front)
    config.model_transaction_policy.decoupled = True
    write_config(decoupled_front, config)

    tiny_model(repo, cache, "file_absolute", model_file="/etc/passwd")
    tiny_model(repo, cache, "file_dotdot", model_file="../../tiny/1/model.onnx")
    (tiny_model(repo, cache, "file_symlink_out", model_file="link.onnx") / "1" / "link.onnx").symlink_to(
        repo / "tiny" / "1" / "model.onnx")
    (tiny_model(repo, cache, "file_symlink_inside", model_file="alias.onnx") / "1" / "alias.onnx").symlink_to(
        "model.onnx")

    tiny_model(repo, cache, "file_nul", model_file="model\0.onnx")
    tiny_model(repo, cache, "file_long", model_file="m" * 5000 + ".onnx")
    (tiny_model(repo, cache, "file_loop", model_file="loop.onnx") / "1" / "loop.onnx").symlink_to("loop.onnx")
    tiny_model(repo, cache, "contexts_huge", contexts="99999999999999999999")
    tiny_model(repo, cache, "batch_wait_huge", mode="decoupled", batch_wait_microseconds="1000000000000")

    tiny_model(repo, cache, "runtime_code", runtime="os:system")
    tiny_model(repo, cache, "runtime_unregistered", runtime="nonesuch")
    tiny_model(repo, cache, "runtime_registered", runtime=FLAKY_RUNTIME)

    tiny_model(repo, cache, "profile_dim", profile="INPUT0=1x17:8x17:64x17")
    tiny_model(repo, cache, "profile_rank", profile="INPUT0=1x16x1:8x16x1:64x16x1")
    return repo


@pytest.fixture(scope="module")
def index(start_server, tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("refused")
    repo = build_repository(base / "repo", base / "onnx")
    server = start_server(repo, "--exit-on-error=false", "--strict-readiness=false")
    client = httpclient.InferenceServerClient(server.http_url)
    expected = set(REFUSED) | set(READY)
    deadline = time.monotonic() + 120
    while True:
        models = {m["name"]: m for m in client.get_model_repository_index()}
        if set(models) >= expected and all(m.get("state") in ("READY", "UNAVAILABLE") for m in models.values()):
            break
        assert time.monotonic() < deadline, f"models still loading: {models}"
        time.sleep(0.5)
    yield {"models": models, "client": client}
    client.close()


@pytest.mark.parametrize("model", sorted(REFUSED))
def test_refused_at_load_with_the_reason(index, model):
    entry = index["models"][model]
    assert entry["state"] == "UNAVAILABLE", entry
    for fragment in REFUSED[model]:
        assert fragment in entry["reason"], f"{model}: '{fragment}' not in: {entry['reason']}"


@pytest.mark.parametrize("model", sorted(REFUSED))
def test_a_refusal_ends_at_trtpools_own_words(index, model):
    """No frames from inside trtpool after the refusal: the Python backend appends the frames
    from where the exception was raised up to the entry point, so trtpool raises its refusals
    again at the entry point (model.py), and only that line follows."""
    reason = index["models"][model]["reason"]
    assert "trtpool: " in reason, reason
    frames = [line.strip() for line in reason.split("At:", 1)[1].splitlines() if line.strip()] \
        if "At:" in reason else []
    assert len(frames) <= 1 and all(re.search(r"/model\.py\(\d+\): (auto_complete_config|initialize)$", frame)
                                    for frame in frames), reason


def test_what_can_work_loads_and_serves(index):
    client = index["client"]
    x = np.random.default_rng(152).standard_normal((2, 16)).astype(np.float32)
    for model in READY:
        assert index["models"][model]["state"] == "READY", index["models"][model]
        if model != "tiny_dec":  # decoupled: streaming clients only
            result = client.infer(model, [http_input("INPUT0", x, "FP32")])
            np.testing.assert_allclose(result.as_numpy("OUTPUT0"), tiny_reference(x), **TINY_TOLERANCE)

