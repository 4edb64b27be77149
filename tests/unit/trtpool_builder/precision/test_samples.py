"""trtpool_builder.precision.samples: calibration and accuracy samples loaded from .npy/.npz files
(a folder of them concatenated and cast, what does not fit the model refused by name) or made at
random, and for inputs without a batch axis: a state beside a batched input (an RNN's h0), and a
model without a batch axis whose file counts samples on axis 0."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from trtpool.errors import ConfigError
from trtpool.model.shapes import parse_profile
from trtpool.model.signature import Profile, TensorSpec
from trtpool_builder.folder.accuracy_run import run_accuracy
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder
from trtpool_builder.precision.samples import batches, load_samples, random_samples

BATCHED = TensorSpec("input", np.dtype(np.float32), (-1, 4))
STATE = TensorSpec("h0", np.dtype(np.float32), (1, 1, 4))
FIXED = TensorSpec("x", np.dtype(np.float32), (3, 4))
IDS = TensorSpec("input_ids", np.dtype(np.int64), (-1, -1))
MASK = TensorSpec("attention_mask", np.dtype(np.int64), (-1, -1))
X = TensorSpec("x", np.dtype(np.float32), (-1, 16))


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


def test_folder_of_npz_files_is_concatenated_and_cast(tmp_path: Path) -> None:
    for i in range(3):
        np.savez(tmp_path / f"part{i}.npz", input_ids=np.full((2, 5), i, np.int32),
                 attention_mask=np.ones((2, 5), np.int64))
    samples = load_samples(tmp_path, [IDS, MASK]).arrays
    assert samples["input_ids"].shape == (6, 5) and samples["input_ids"].dtype == np.int64
    assert [len(b["attention_mask"]) for b in batches(samples, 4)] == [4, 2]


def test_npy_only_for_single_input_models(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.zeros((3, 16), np.float64))
    assert load_samples(tmp_path / "x.npy", [X]).arrays["x"].dtype == np.float32
    with pytest.raises(ConfigError, match="use a .npz file with one array per input"):
        load_samples(tmp_path / "x.npy", [IDS, MASK])


@pytest.mark.parametrize("arrays, message", [
    ({"input_ids": np.zeros((2, 5), np.int64)}, r"missing \['attention_mask'\]"),
    ({"input_ids": np.zeros((2, 5), np.int64), "attention_mask": np.zeros((2, 5), np.int64),
      "extra": np.zeros(1)}, r"unknown \['extra'\]"),
    ({"input_ids": np.zeros((2, 5), np.float32), "attention_mask": np.zeros((2, 5), np.int64)},
     r"array 'input_ids' is float32, the model's input is int64"),
    ({"input_ids": np.zeros((2,), np.int64), "attention_mask": np.zeros((2, 5), np.int64)},
     r"array 'input_ids' has shape \[2\]; the model's input has rank 2"),
    ({"input_ids": np.zeros((3, 5), np.int64), "attention_mask": np.zeros((2, 5), np.int64)},
     r"different sample counts"),
])
def test_bad_samples_are_named(tmp_path: Path, arrays: dict, message: str) -> None:
    np.savez(tmp_path / "calib.npz", **arrays)
    with pytest.raises(ConfigError, match=message):
        load_samples(tmp_path / "calib.npz", [IDS, MASK])


def test_random_samples_use_opt_shapes_and_valid_ids() -> None:
    profile = Profile(0, parse_profile("input_ids=1x1:4x9:8x16,attention_mask=1x1:4x9:8x16"))
    samples = random_samples([IDS, MASK], profile)
    assert samples["input_ids"].shape == (4, 9) and samples["input_ids"].dtype == np.int64
    assert set(np.unique(samples["attention_mask"])) <= {0, 1}
