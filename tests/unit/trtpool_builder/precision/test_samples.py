"""Calibration and accuracy samples for inputs without a batch axis: a state beside a batched
input (an RNN's h0), and a model without a batch axis whose file counts samples on axis 0."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from trtpool.errors import ConfigError
from trtpool.model.signature import TensorSpec
from trtpool_builder.folder.accuracy_run import run_accuracy
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder
from trtpool_builder.precision.samples import load_samples

BATCHED = TensorSpec("input", np.dtype(np.float32), (-1, 4))
STATE = TensorSpec("h0", np.dtype(np.float32), (1, 1, 4))
FIXED = TensorSpec("x", np.dtype(np.float32), (3, 4))


def _npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


def test_a_state_given_once_goes_with_every_sample(tmp_path):
    rows = np.arange(40, dtype=np.float32).reshape(10, 4)
    state = np.ones((1, 1, 4), np.float32)
    samples = load_samples(_npz(tmp_path / "s.npz", input=rows, h0=state), [BATCHED, STATE])
    feeds = samples.feeds()
    assert [f["input"].shape for f in feeds] == [(1, 4)] * 10  # one sample per feed: the state is not a batch
    assert all(np.array_equal(f["h0"], state) for f in feeds)
    assert np.array_equal(np.concatenate([f["input"] for f in feeds]), rows)


def test_a_state_per_sample_is_given_with_a_sample_axis(tmp_path):
    rows = np.zeros((4, 4), np.float32)
    states = np.arange(16, dtype=np.float32).reshape(4, 1, 1, 4)
    feeds = load_samples(_npz(tmp_path / "s.npz", input=rows, h0=states), [BATCHED, STATE]).feeds()
    assert [f["h0"].shape for f in feeds] == [(1, 1, 4)] * 4
    assert np.array_equal(feeds[2]["h0"], states[2])


def test_a_model_without_a_batch_axis_takes_one_sample_at_a_time(tmp_path):
    stacked = np.random.default_rng(0).standard_normal((5, 3, 4)).astype(np.float32)
    feeds = load_samples(_npz(tmp_path / "s.npz", x=stacked), [FIXED]).feeds(limit=3)
    assert [f["x"].shape for f in feeds] == [(3, 4)] * 3


def test_counts_that_disagree_are_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match=r"different sample counts \{'input': 10, 'h0': 3\}"):
        load_samples(_npz(tmp_path / "s.npz", input=np.zeros((10, 4), np.float32),
                          h0=np.zeros((3, 1, 1, 4), np.float32)), [BATCHED, STATE])


def test_trtpool_accuracy_runs_a_stateful_model_on_its_samples(tmp_path):
    """y = input + h0 (the state broadcast over the rows), served by trtpool against ONNX Runtime."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["h0", "row"], ["h"]), helper.make_node("Add", ["input", "h"], ["y"])],
        "stateful", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 4]),
                     helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, 1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        initializer=[helper.make_tensor("row", TensorProto.INT64, [2], [1, 4])])
    path = tmp_path / "stateful.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    folder = make_model_folder(tmp_path / "repo", "stateful", path, ["input=1x4:1x4:1x4"],
                               ServingOptions(contexts="1", instance_kind="cpu"), log=lambda _: None)
    inputs = _npz(tmp_path / "s.npz", input=np.arange(16, dtype=np.float32).reshape(4, 4),
                  h0=np.full((1, 1, 4), 0.5, np.float32))
    report = run_accuracy(folder, inputs=inputs)
    assert report.samples == 4 and report.max_error == 0.0
