"""The ONNX node-test corpus through trtpool's load path, both variants, every valid case.

The whole corpus runs (about 1,550 valid cases per variant, a minute or three each on
two cores): each case is a folder written by trtpool-model's code, loaded as
the server loads it, and one request through the batch runner, compared with
the case's expected outputs (node_suite.RTOL/ATOL; exact for integers,
booleans and strings). bench/conformance.py runs the same and writes the
figures (bench/results/conformance.json).
"""
from __future__ import annotations

import pytest

from tests.conformance.node_suite import VARIANTS, collect, refusal_mistakes, run_corpus, uncarriable

# The corpus must not shrink unnoticed (onnx 1.23.2: 1,586 valid as exported, 1,553 dynamic).
AT_LEAST_VALID = 1500


@pytest.fixture(scope="module")
def cases():
    return collect()


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_onnxruntime_valid_node_case_is_answered_right(cases, variant):
    result = run_corpus(cases, variant)
    assert result.valid >= AT_LEAST_VALID, f"only {result.valid} valid cases: the corpus shrank"
    failures = "\n".join(f"{name}: {message}" for name, message in sorted(result.failures.items()))
    assert result.right == result.valid, f"{result.valid - result.right} of {result.valid} wrong:\n{failures}"


def test_every_case_triton_cannot_carry_is_refused_by_name(cases):
    """The cases left out of the count (types Triton lacks; sequence, map or optional values)
    get a refusal naming the tensor and its type from trtpool-model, never a traceback."""
    left_out = uncarriable(cases)
    assert len(left_out) >= 150, f"only {len(left_out)} such cases: the corpus changed"
    assert refusal_mistakes(left_out) == {}
