"""Each corpus model written by trtpool-model and served on CPU by a real tritonserver: answers
compared with ONNX Runtime in-process at several shapes, over HTTP and gRPC, and from concurrent
clients sending mixed shapes, to the model as written and to a copy whose two instances forward
to one engine host (engine_host on: the batches of both merged, the slabs written input by input).

They rely on the runtime's real-model support (issue 12); a model that
trtpool-model refuses or the server does not load fails with that message.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

from tests.corpus.manifest import CORPUS, CorpusModel
from tests.harness.server import TritonServer
from trtpool.errors import TrtpoolError
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config, write_config
from trtpool_ops.probe import probe_model

pytestmark = pytest.mark.corpus_runtime

CLIENTS = {"http": httpclient, "grpc": grpcclient}
QUEUE_DELAY_US = 20_000  # concurrent requests of one shape meet in a batch
HOSTED = "_host"  # the name's suffix of each model's copy served through an engine host
CONCURRENT_REQUESTS = 24


@dataclass
class CorpusServer:
    server: TritonServer
    refused: dict[str, str]  # model -> why trtpool-model did not write it
    sessions: dict[str, ort.InferenceSession] = field(default_factory=dict)

    def client(self, protocol: str):
        module = CLIENTS[protocol]
        return module.InferenceServerClient(self.server.http_url if protocol == "http" else self.server.grpc_url)

    def why_unavailable(self, name: str) -> str | None:
        if name in self.refused:
            return f"trtpool-model refused to write it: {self.refused[name]}"
        with httpclient.InferenceServerClient(self.server.http_url) as client:
            if client.is_model_ready(name):
                return None
            states = {m["name"]: m for m in client.get_model_repository_index()}
        return f"tritonserver did not load it: {states.get(name, {}).get('reason', 'not in the repository')}"

    def reshaped(self, name: str) -> set[str]:
        """Tensors that clients see with a trailing 1 (scalars: dims [1], reshape [] for the model)."""
        with httpclient.InferenceServerClient(self.server.http_url) as client:
            config = client.get_model_config(name)
        return {t["name"] for t in (*config.get("input", []), *config.get("output", [])) if "reshape" in t}


@pytest.fixture(scope="module")
def corpus_server(start_server, corpus_files: dict[str, Path], tmp_path_factory) -> CorpusServer:
    repo = tmp_path_factory.mktemp("corpus_repo")
    refused = {}
    options = ServingOptions(instance_kind="cpu", max_queue_delay_microseconds=QUEUE_DELAY_US)
    hosted = replace(options, parameters=(("engine_host", "on"),))
    for entry in CORPUS:
        try:
            make_model_folder(repo, entry.name, corpus_files[entry.name], entry.profile_texts(), options)
            folder = make_model_folder(repo, entry.name + HOSTED, corpus_files[entry.name], entry.profile_texts(),
                                       hosted)
            config = read_config(folder)
            config.instance_group[0].count = 2
            write_config(folder, config)
        except TrtpoolError as exc:
            refused[entry.name] = refused[entry.name + HOSTED] = str(exc)
    server = start_server(repo, "--exit-on-error=false", "--strict-readiness=false")
    served = CorpusServer(server, refused)
    deadline = time.monotonic() + 180
    with httpclient.InferenceServerClient(server.http_url) as client:
        while time.monotonic() < deadline:
            states = {m["name"]: m.get("state") for m in client.get_model_repository_index()}
            names = [e.name + variant for e in CORPUS for variant in ("", HOSTED) if e.name not in refused]
            if all(states.get(name) in ("READY", "UNAVAILABLE") for name in names):
                break
            time.sleep(0.5)
    for entry in CORPUS:
        served.sessions[entry.name] = ort.InferenceSession(str(corpus_files[entry.name]),
                                                           providers=["CPUExecutionProvider"])
    return served


def _infer(module, client, model: str, feed: dict[str, np.ndarray], outputs: list[str],
           reshaped: set[str]) -> dict[str, np.ndarray]:
    """The model's answer as the model shapes it: a reshaped tensor, and a scalar (which
    trtpool-model's copy takes as [1]), go out with the trailing 1 that clients see."""
    tensors = []
    for name, array in feed.items():
        sent = array.reshape(*array.shape, 1) if name in reshaped or array.ndim == 0 else array
        tensor = module.InferInput(name, list(sent.shape), np_to_triton_dtype(sent.dtype))
        tensor.set_data_from_numpy(sent)
        tensors.append(tensor)
    result = client.infer(model, tensors, outputs=[module.InferRequestedOutput(n) for n in outputs])
    answers = {}
    for name in outputs:
        answer = result.as_numpy(name)
        if name in reshaped:
            assert answer.shape[-1:] == (1,), f"output '{name}' came back as {answer.shape}"
            answer = answer.reshape(answer.shape[:-1])
        answers[name] = answer
    return answers


def _expect_same(entry: CorpusModel, served: CorpusServer, feed: dict[str, np.ndarray],
                 got: dict[str, np.ndarray], where: str) -> None:
    session = served.sessions[entry.name]
    names = [o.name for o in session.get_outputs()]
    expected = dict(zip(names, session.run(names, feed)))
    for name in names:
        np.testing.assert_allclose(got[name], expected[name], rtol=entry.rtol, atol=entry.atol,
                                   err_msg=f"{entry.name} output '{name}' {where}")


def _available(name: str, served: CorpusServer) -> None:
    why = served.why_unavailable(name)
    if why:
        pytest.fail(f"{name}: {why}")


@pytest.mark.parametrize("protocol", sorted(CLIENTS))
@pytest.mark.parametrize("entry", CORPUS, ids=lambda m: m.name)
def test_answers_like_onnxruntime_at_several_shapes(entry: CorpusModel, protocol: str,
                                                   corpus_server: CorpusServer) -> None:
    _available(entry.name, corpus_server)
    outputs = [o.name for o in corpus_server.sessions[entry.name].get_outputs()]
    reshaped = corpus_server.reshaped(entry.name)
    client = corpus_server.client(protocol)
    try:
        for index, shapes in enumerate(entry.shapes):
            feed = entry.make_inputs(shapes, np.random.default_rng(100 + index))
            got = _infer(CLIENTS[protocol], client, entry.name, feed, outputs, reshaped)
            assert {n: a.shape for n, a in got.items()} == entry.output_shapes(shapes)
            _expect_same(entry, corpus_server, feed, got, f"over {protocol} at {shapes}")
    finally:
        client.close()


@pytest.mark.parametrize("variant", ["", HOSTED], ids=["instance", "engine_host"])
@pytest.mark.parametrize("entry", CORPUS, ids=lambda m: m.name)
def test_concurrent_clients_with_mixed_shapes(entry: CorpusModel, variant: str, corpus_server: CorpusServer) -> None:
    name = entry.name + variant
    _available(name, corpus_server)
    outputs = [o.name for o in corpus_server.sessions[entry.name].get_outputs()]
    reshaped = corpus_server.reshaped(name)
    feeds = [entry.make_inputs(entry.shapes[i % len(entry.shapes)], np.random.default_rng(200 + i))
             for i in range(CONCURRENT_REQUESTS)]

    def one(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        client = corpus_server.client("grpc")
        try:
            return _infer(grpcclient, client, name, feed, outputs, reshaped)
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(one, feeds))
    for index, (feed, got) in enumerate(zip(feeds, answers)):
        _expect_same(entry, corpus_server, feed, got, f"in concurrent request {index} to {name}")


@pytest.mark.parametrize("entry", CORPUS, ids=lambda m: m.name)
def test_the_liveness_probe_answers_without_an_error(entry: CorpusModel, corpus_server: CorpusServer) -> None:
    """trtpool-health and the watchdog probe at the profile's smallest shapes: a healthy model whose
    profile starts above 1 (silero_vad_streaming's 512 samples: 1 breaks its Pad) answers the probe
    itself, not with an error that only proves its stub is alive."""
    _available(entry.name, corpus_server)
    result = probe_model(corpus_server.server.grpc_url, entry.name)
    assert (result.alive, result.detail) == (True, "answered"), result
