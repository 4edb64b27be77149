"""Issue 15, item 1: decoupled workers died on mixed shapes and left requests
unanswered (6 of 30 answered with batch sizes 60, 8, 1 on one stream; 4 of 20
with alternating sequence lengths). Every request must now be answered, and
correctly."""
from __future__ import annotations

import itertools

import numpy as np

from tests.harness.clients import TINY_TOLERANCE
from tests.harness.sequence_model import FEATURES, sequence_reference
from tests.harness.streams import run_on_stream
from trtpool_builder.examples.tiny import tiny_reference


def test_batch_sizes_60_8_1_on_one_stream_are_all_answered_correctly(reliability):
    rng = np.random.default_rng(150)
    sizes = itertools.islice(itertools.cycle((60, 8, 1)), 30)
    requests = {str(i): {"INPUT0": rng.standard_normal((size, 16)).astype(np.float32)} for i, size in enumerate(sizes)}

    answers = run_on_stream(reliability.server.grpc_url, "tiny_dec", requests, timeout=60)

    assert [str(e) for e in answers.errors] == []
    assert sorted(answers.outputs, key=int) == sorted(requests, key=int)
    for request_id, inputs in requests.items():
        np.testing.assert_allclose(answers.outputs[request_id]["OUTPUT0"], tiny_reference(inputs["INPUT0"]),
                                   **TINY_TOLERANCE)


def test_alternating_sequence_lengths_are_all_answered_correctly(reliability):
    rng = np.random.default_rng(151)
    lengths = itertools.islice(itertools.cycle((8, 24)), 20)
    requests = {str(i): {"tokens": rng.standard_normal((1 + i % 3, length, FEATURES)).astype(np.float32)}
                for i, length in enumerate(lengths)}

    answers = run_on_stream(reliability.server.grpc_url, "seq_dec", requests, timeout=60)

    assert [str(e) for e in answers.errors] == []
    assert sorted(answers.outputs, key=int) == sorted(requests, key=int)
    for request_id, inputs in requests.items():
        for name, expected in sequence_reference(inputs["tokens"]).items():
            np.testing.assert_allclose(answers.outputs[request_id][name], expected, **TINY_TOLERANCE)
