"""A small model with dynamic, unnamed-by-convention dimensions, made for tests:
per token a linear map, and the mean over the tokens.

    tokens [batch, '?', 8] float32 -> per_token [batch, '?', 4], pooled [batch, 4]

Both output shapes follow the input's length, and the file names every
dynamic axis '?' (as some exporters do), so nothing can be inferred from
names: the runtime must report each batch's output shapes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FEATURES, UNITS = 8, 4
RNG = np.random.default_rng(42)
WEIGHT = RNG.standard_normal((FEATURES, UNITS)).astype(np.float32)
BIAS = RNG.standard_normal(UNITS).astype(np.float32)
# Serving profile: batch 1..8, 1..64 tokens.
PROFILE = "tokens=1x1x8:4x16x8:8x64x8"


def write_sequence_model(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["tokens", "weight"], ["projected"]),
         helper.make_node("Add", ["projected", "bias"], ["per_token"]),
         helper.make_node("ReduceMean", ["per_token", "axes"], ["pooled"], keepdims=0)],
        "sequence",
        [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["?", "?", FEATURES])],
        [helper.make_tensor_value_info("per_token", TensorProto.FLOAT, ["?", "?", UNITS]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["?", UNITS])],
        initializer=[numpy_helper.from_array(WEIGHT, "weight"), numpy_helper.from_array(BIAS, "bias"),
                     numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def sequence_reference(tokens: np.ndarray) -> dict[str, np.ndarray]:
    """The model in float64 numpy."""
    per_token = tokens.astype(np.float64) @ WEIGHT.astype(np.float64) + BIAS.astype(np.float64)
    return {"per_token": per_token, "pooled": per_token.mean(axis=1)}
