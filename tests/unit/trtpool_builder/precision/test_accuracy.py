from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trtpool.errors import ConfigError
from trtpool.model.shapes import parse_profile
from trtpool.model.signature import Profile, TensorSpec
from trtpool_builder.precision.accuracy import compare, output_error
from trtpool_builder.precision.samples import batches, load_samples, random_samples

IDS = TensorSpec("input_ids", np.dtype(np.int64), (-1, -1))
MASK = TensorSpec("attention_mask", np.dtype(np.int64), (-1, -1))
X = TensorSpec("x", np.dtype(np.float32), (-1, 16))


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


def test_output_error_values() -> None:
    ref = np.array([[1.0, -2.0, 0.0, 4.0]], np.float32)
    got = np.array([[1.1, -2.0, 0.002, 4.0]], np.float32)
    e = output_error("y", ref, got)
    assert e.max_abs == pytest.approx(0.1, rel=1e-5)
    # 0.1 / 1.0 at the first element; the zero reference is floored at 0.1 % of 4.0: 0.002 / 0.004.
    assert e.max_rel == pytest.approx(0.5, rel=1e-4)
    assert e.reference_max == 4.0


def test_compare_keeps_worst_error_per_output() -> None:
    def reference(feed):
        return {"y": feed["x"] * 2}

    def candidate(feed):
        return {"y": feed["x"] * 2 + feed["x"][0, 0] * 0.01}

    feeds = [{"x": np.full((1, 2), v, np.float32)} for v in (1.0, 10.0, 2.0)]
    report = compare(reference, candidate, feeds, "ref", "cand")
    assert report.samples == 3
    assert report.errors[0].max_abs == pytest.approx(0.1, rel=1e-5)
    # The error figure: 0.1 off where the reference's largest magnitude is 20.
    assert report.errors[0].error == pytest.approx(0.005, rel=1e-4)
    assert "y: error 0.005, max abs error 0.1" in report.format()
    assert report.max_error == report.errors[0].error
    assert report.beyond(0.01) == () and report.beyond(0.001) == report.errors


def test_overflow_counts_as_infinite_error() -> None:
    ref = np.array([1.0, -3.0, 0.5], np.float32)
    for bad in (np.inf, np.nan):
        e = output_error("y", ref, np.array([1.0, bad, 0.5], np.float32))
        assert e.error == np.inf and e.max_abs == np.inf
    same = np.array([1.0, np.nan, np.inf], np.float32)
    assert output_error("y", same, same.copy()).error == 0.0


def test_integer_outputs_count_differing_elements() -> None:
    labels = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int64)
    got = labels.copy()
    got[[2, 5]] = 0
    assert output_error("label", labels, got).error == pytest.approx(2 / 8)
