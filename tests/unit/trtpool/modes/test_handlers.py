"""trtpool.modes' handlers against the pb_utils double: each mode's handler over a real
ModelInstance (ONNX Runtime on the tiny example), or over a real engine host for the host
handler, answering good requests with the model's outputs and bad ones with INVALID_ARG naming
the tensor and the expected value. (How requests' tensors and probes are taken:
tests/unit/trtpool/triton/test_requests.py.)"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from tests.harness.repository import add_example, set_parameters
from tests.unit.trtpool.host.conftest import host_processes, wait_until
from tests.unit.trtpool.triton.test_requests import FINAL, make_request
from trtpool.modes.decoupled import DecoupledHandler
from trtpool.modes.hosted import HostHandler
from trtpool.modes.pipelined import PipelinedHandler
from trtpool.modes.sync import SyncHandler
from trtpool.host.client import HostClient
from trtpool.host.launch import Launcher
from trtpool.instance import ModelInstance
from trtpool.triton.metrics import PoolMetrics
from trtpool.triton.probes import PROBE_MARK
from trtpool_builder.examples.tiny import tiny_reference
from trtpool_builder.folder.load_check import as_triton_hands_it
from trtpool_builder.folder.model_folder import read_config

TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # float32 ONNX Runtime against float64 numpy
# (inputs, the message each refusal must carry), for the tiny model: INPUT0 [-1, 16] FP32
REFUSED = [
    ({"INPUT0": np.ones((1, 16), np.int32)}, "input 'INPUT0': data type INT32 given, expected FP32"),
    ({"INPUT0": np.ones((1, 15), np.float32)},
     "input 'INPUT0': dimension 1 is 15, expected 16 (shape [-1, 16], -1 = any)"),
    ({"INPUT0": np.ones(16, np.float32)},
     "input 'INPUT0': rank 1 (shape [16]) given, expected rank 2 (shape [-1, 16], -1 = any)"),
    ({}, "missing input tensor(s) ['INPUT0']; the model expects ['INPUT0']"),
    ({"INPUT0": np.ones((1, 16), np.float32), "EXTRA": np.ones(1, np.float32)},
     "unknown input tensor(s) ['EXTRA']; the model expects ['INPUT0']"),
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """The tiny example in each mode, one context, metrics after every batch."""
    base = tmp_path_factory.mktemp("handlers")
    made = {}
    for mode in ("sync", "pipelined", "decoupled"):
        folder = add_example(base / "repo", base / "cache", "tiny", f"tiny_{mode}", contexts="1", mode=mode)
        set_parameters(folder, metrics_interval_ms="0")
        made[mode] = folder
    return made


@pytest.fixture
def served(pb_utils, folders):
    """served(mode) -> (instance, metrics) as model.py makes them; closed after the test."""
    made = []

    def serve(mode: str) -> tuple[ModelInstance, PoolMetrics]:
        config = as_triton_hands_it(read_config(folders[mode]))
        metrics = PoolMetrics(pb_utils.MetricFamily, config["name"])
        instance = ModelInstance(config, folders[mode] / "1", "cpu", metrics.record_batch, metrics.record_stage)
        metrics.start(instance.pool.stats, instance.cfg.metrics_interval_ms)
        made.append((instance, metrics))
        return instance, metrics

    yield serve
    for instance, metrics in made:
        metrics.close()
        instance.close()


def batches_total(pb_utils, model: str) -> float:
    return sum(value for labels, value in pb_utils._families["trtpool_batches_total"].series.items()
               if ("model", model) in labels)


def check_answers(pb_utils, answers: list, good: list[np.ndarray]) -> None:
    """The first len(good) answers hold the model's outputs, the rest REFUSED's refusals in order."""
    for answer, x in zip(answers, good):
        assert not answer.has_error(), answer.error().message()
        [output] = answer.output_tensors()
        assert output.name() == "OUTPUT0"
        np.testing.assert_allclose(output.as_numpy(), tiny_reference(x), **TOLERANCE)
    refusals = answers[len(good):]
    assert [(a.error().code(), a.error().message()) for a in refusals] == \
        [(pb_utils.TritonError.INVALID_ARG, message) for _, message in REFUSED]


def good_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal((rows, 16)).astype(np.float32) for rows in (3, 1)]


def test_sync_mode_returns_every_answer_from_execute(pb_utils, served):
    instance, metrics = served("sync")
    good = good_inputs()
    requests = [make_request(pb_utils, {"INPUT0": x}) for x in good] + \
        [make_request(pb_utils, tensors) for tensors, _ in REFUSED]
    answers = SyncHandler(pb_utils, instance, metrics)(requests)
    assert len(answers) == len(requests)
    check_answers(pb_utils, answers, good)
    assert all(r.get_response_sender()._sent == [] for r in requests)   # nothing through the senders
    assert batches_total(pb_utils, "tiny_sync") == 1   # the good requests ran as one batch, flushed after it


def answered(requests: list, timeout_s: float = 30.0) -> list:
    """Each request's one final response, once all have come through the senders."""
    deadline = time.monotonic() + timeout_s
    while not all(r.get_response_sender()._sent for r in requests):
        assert time.monotonic() < deadline, "not every request was answered"
        time.sleep(0.01)
    answers = []
    for request in requests:
        [(answer, flags)] = request.get_response_sender()._sent
        assert flags == FINAL
        answers.append(answer)
    return answers


@pytest.mark.parametrize("mode, handler_class", [("pipelined", PipelinedHandler), ("decoupled", DecoupledHandler)])
def test_the_other_modes_answer_through_the_senders(pb_utils, served, mode, handler_class):
    instance, metrics = served(mode)
    handler = handler_class(pb_utils, instance, metrics)
    good = good_inputs()
    requests = [make_request(pb_utils, {"INPUT0": x}) for x in good] + \
        [make_request(pb_utils, tensors) for tensors, _ in REFUSED]
    try:
        assert handler(requests) is None
        check_answers(pb_utils, answered(requests), good)
    finally:
        handler.close()
    assert batches_total(pb_utils, f"tiny_{mode}") >= 1


def test_the_host_handler_checks_each_request_before_the_host_runs_the_rest(pb_utils, folders):
    """engine_host on: the instance checks each request against the engine's signature and
    answers the bad ones itself; the host runs the good ones and a probe, as one batch."""
    spec = {"model_config": as_triton_hands_it(read_config(folders["sync"])), "version_dir": str(folders["sync"] / "1"),
            "device": "cpu", "server_pid": os.getpid()}
    client = HostClient(Launcher(spec))
    metrics = PoolMetrics(pb_utils.MetricFamily, "tiny_sync")
    try:
        client.attach()
        good = good_inputs()
        probe = make_request(pb_utils, {"INPUT0": np.zeros((1, 16), np.float32)}, PROBE_MARK)
        requests = [make_request(pb_utils, {"INPUT0": x}) for x in good] + \
            [make_request(pb_utils, tensors) for tensors, _ in REFUSED] + [probe]
        answers = HostHandler(pb_utils, client, metrics)(requests)
        check_answers(pb_utils, answers[:-1], good)
        np.testing.assert_allclose(answers[-1].output_tensors()[0].as_numpy(), tiny_reference(np.zeros((1, 16))),
                                   **TOLERANCE)   # no process file: a probe runs as any request
        assert sum(client.stats()["batch_sizes"].values()) == 1
    finally:
        metrics.close()
        client.close()
    wait_until(lambda: not host_processes(), 10, "the engine host outlived its one instance")
