"""Graphs whose output is declared as a scalar but computed with one element per row, as
exporters write them when they trace on one row (torch.onnx's `.sum(dim=1)`, `.argmax(1)`,
`.squeeze(1)` with the output shape taken from the traced example): ONNX Runtime answers [1]
for one row and [N] for N. `squeeze_axisless` is older torch.onnx's `.squeeze()`, a Squeeze
without axes after a per-row [N, 1], then elementwise ops: ONNX shape inference loses its
rank, and ONNX Runtime answers a scalar for one row and [N] for N."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

WIDTH = {"rowsum": 4, "argmax": 4, "squeeze": 1, "squeeze_axisless": 4}  # the input's second dimension
PROFILE = {name: f"x=1x{w}:4x{w}:8x{w}" for name, w in WIDTH.items()}


def _squeeze_axisless() -> list[onnx.NodeProto]:
    """sigmoid(0.5 * squeeze(x.sum(1, keepdim=True)) - 0.25)."""
    return [helper.make_node("ReduceSum", ["x", "axes"], ["rows"], keepdims=1),
            helper.make_node("Squeeze", ["rows"], ["squeezed"]),
            helper.make_node("Mul", ["squeezed", "half"], ["scaled"]),
            helper.make_node("Sub", ["scaled", "quarter"], ["shifted"]),
            helper.make_node("Sigmoid", ["shifted"], ["y"])]


def row_scalar_model(name: str) -> onnx.ModelProto:
    """x [n, WIDTH] -> y declared [] (ReduceSum, ArgMax or Squeeze over axis 1, or _squeeze_axisless)."""
    nodes, out_type = {
        "rowsum": ([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)], TensorProto.FLOAT),
        "argmax": ([helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], TensorProto.INT64),
        "squeeze": ([helper.make_node("Squeeze", ["x", "axes"], ["y"])], TensorProto.FLOAT),
        "squeeze_axisless": (_squeeze_axisless(), TensorProto.FLOAT),
    }[name]
    constants = [helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
                 helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
                 helper.make_tensor("quarter", TensorProto.FLOAT, [], [0.25])]
    used = {i for node in nodes for i in node.input}
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", WIDTH[name]])],
                              [helper.make_tensor_value_info("y", out_type, [])],
                              initializer=[c for c in constants if c.name in used])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def rows(name: str, count: int) -> np.ndarray:
    return np.random.default_rng(count).standard_normal((count, WIDTH[name])).astype(np.float32)
