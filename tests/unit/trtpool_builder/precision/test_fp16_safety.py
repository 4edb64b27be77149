"""fp16 conversion: values that float16 flushes to 0 where a 0 becomes an infinity.

A log-power spectrum of a quiet signal (x * x, then Log) is the case: in float16 the square
of |x| < 1.7e-4 is 0 and Log(0) is -inf. Random N(0, 1) inputs rarely reach it, so the range
check also runs the inputs made quiet (fp16_safety.QUIET)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from trtpool.model.signature import ShapeRange, Profile, TensorSpec
from trtpool_builder.precision.fp16_safety import keep_in_fp32
from trtpool_builder.precision.samples import sample_feeds
from trtpool_builder.precision.tensor_probe import name_nodes


def _log_power(sensitive: str = "Log") -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["x", "x"], ["power"], name="square"),
             helper.make_node(sensitive, ["power"], ["y"], name="sensitive"),
             helper.make_node("Relu", ["x"], ["z"], name="relu")]
    graph = helper.make_graph(nodes, "log_power", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    name_nodes(model)
    return model


def _default_feeds():
    spec = TensorSpec("x", np.dtype(np.float32), (2, 64))
    return sample_feeds(None, [spec], [Profile(0, {"x": ShapeRange((2, 64), (2, 64), (2, 64))})])


def test_a_log_of_values_float16_flushes_to_zero_stays_in_fp32_with_the_default_inputs():
    kept = {k.node: k.reason for k in keep_in_fp32(_log_power(), _default_feeds())}
    assert set(kept) == {"square", "sensitive"}, kept
    assert "float16 makes 0" in kept["sensitive"]


def test_a_reciprocal_is_kept_too_and_a_relu_is_not():
    kept = {k.node for k in keep_in_fp32(_log_power("Reciprocal"), _default_feeds())}
    assert kept == {"square", "sensitive"}


def test_values_float16_holds_keep_nothing_in_fp32():
    feeds = [{"x": np.full((2, 64), 3.0, np.float32)}]
    model = _log_power()
    # 3.0 and its quiet copy 3e-4 square to 9 and 9e-8: both above float16's flush limit.
    assert keep_in_fp32(model, feeds) == []
