"""trtpool_builder.precision.accuracy: each output's error against the fp32 reference (relative to
the reference's largest magnitude, infinite where a value overflows, the share of differing elements
for integers), and the worst error per output kept over the samples."""
from __future__ import annotations

import numpy as np
import pytest

from trtpool_builder.precision.accuracy import compare, output_error


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
