"""trtpool_ops.probe: the tiny request built from a model's config, and how an answer is judged."""
from __future__ import annotations

from tritonclient.utils import InferenceServerException

from trtpool_ops.probe import probe_inputs, verdict


def test_probe_inputs_are_batch_one_zeros_with_variable_dimensions_one():
    config = {"max_batch_size": 8, "input": [
        {"name": "ids", "data_type": "TYPE_INT64", "dims": ["-1"]},
        {"name": "image", "data_type": "TYPE_FP32", "dims": ["3", "4", "4"]},
        {"name": "text", "data_type": "TYPE_STRING", "dims": ["1"]},
        {"name": "extra", "data_type": "TYPE_FP32", "dims": ["2"], "optional": True},
    ]}
    tensors = {t.name(): t for t in probe_inputs(config)}
    assert sorted(tensors) == ["ids", "image", "text"]
    assert tensors["ids"].shape() == [1, 1] and tensors["ids"].datatype() == "INT64"
    assert tensors["image"].shape() == [1, 3, 4, 4] and tensors["image"].datatype() == "FP32"
    assert tensors["text"].datatype() == "BYTES"
    unbatched = probe_inputs({"max_batch_size": 0, "input": [{"name": "x", "data_type": "TYPE_FP16", "dims": ["2"]}]})
    assert unbatched[0].shape() == [2]
    assert unbatched[0].datatype() == "FP16"


def test_only_a_dead_stub_or_silence_counts_as_dead():
    assert verdict("m", None).alive
    refused = verdict("m", InferenceServerException("input 'x' dims: expected [16]"))
    assert refused.alive and "answered with an error" in refused.detail
    for message in ("Stub process 'm_0' is not healthy.", "Failed to obtain the health mutex.",
                    "[StatusCode.DEADLINE_EXCEEDED] Deadline Exceeded"):
        assert not verdict("m", InferenceServerException(message)).alive, message
