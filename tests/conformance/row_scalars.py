"""Graphs whose output is declared as a scalar but computed with one element per row, as
exporters write them when they trace on one row (torch.onnx's `.sum(dim=1)`, `.argmax(1)`,
`.squeeze(1)` with the output shape taken from the traced example): ONNX Runtime answers [1]
for one row and [N] for N."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

WIDTH = {"rowsum": 4, "argmax": 4, "squeeze": 1}  # the input's second dimension
PROFILE = {name: f"x=1x{w}:4x{w}:8x{w}" for name, w in WIDTH.items()}


def row_scalar_model(name: str) -> onnx.ModelProto:
    """x [n, WIDTH] -> y declared [] (ReduceSum, ArgMax or Squeeze over axis 1)."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    node, out_type = {
        "rowsum": (helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0), TensorProto.FLOAT),
        "argmax": (helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0), TensorProto.INT64),
        "squeeze": (helper.make_node("Squeeze", ["x", "axes"], ["y"]), TensorProto.FLOAT),
    }[name]
    graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", WIDTH[name]])],
                              [helper.make_tensor_value_info("y", out_type, [])],
                              initializer=[axes] if "axes" in node.input else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def rows(name: str, count: int) -> np.ndarray:
    return np.random.default_rng(count).standard_normal((count, WIDTH[name])).astype(np.float32)
