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


def test_probe_inputs_take_the_first_profiles_minimum_where_the_config_gives_one():
    """A model that takes 576 samples at least is probed with 576, not 1; a scalar the config
    declares [1] (profile rank 0) and a process file's input (not in the profile) keep the config's shape."""
    config = {"max_batch_size": 0, "parameters": {"profile": {
        "string_value": "input=1x576:1x576:8x576,sr=::,state=2x1x128:2x1x128:2x8x128;input=1x9:1x9:1x9"}},
        "input": [{"name": "input", "data_type": "TYPE_FP32", "dims": ["-1", "-1"]},
                  {"name": "sr", "data_type": "TYPE_INT64", "dims": ["1"]},
                  {"name": "state", "data_type": "TYPE_FP32", "dims": ["2", "-1", "128"]},
                  {"name": "IMAGE", "data_type": "TYPE_STRING", "dims": ["1"]}]}
    shapes = {t.name(): t.shape() for t in probe_inputs(config)}
    assert shapes == {"input": [1, 576], "sr": [1], "state": [2, 1, 128], "IMAGE": [1]}
    batched = {"max_batch_size": 8, "parameters": {"profile": {"string_value": "x=2x3x32x32:4x3x64x64:8x3x64x64"}},
               "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["3", "-1", "-1"]}]}
    assert probe_inputs(batched)[0].shape() == [2, 3, 32, 32]
    unreadable = {"max_batch_size": 0, "parameters": {"profile": {"string_value": "x=oops"}},
                  "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["-1"]}]}
    assert probe_inputs(unreadable)[0].shape() == [1]


def test_only_a_dead_stub_or_silence_counts_as_dead():
    assert verdict("m", None).alive
    refused = verdict("m", InferenceServerException("input 'x' dims: expected [16]"))
    assert refused.alive and "answered with an error" in refused.detail
    for message in ("Stub process 'm_0' is not healthy.", "Failed to obtain the health mutex.",
                    "[StatusCode.DEADLINE_EXCEEDED] Deadline Exceeded"):
        assert not verdict("m", InferenceServerException(message)).alive, message
