"""A model that ONNX Runtime refuses for shapes its profile admits, made for tests:

    X [batch, n] float32 -> Y = Reshape(X, [0, 2, 8]) [batch, 2, 8]

n is dynamic in the file, so a profile may admit n = 1..32, yet the Reshape
computes with n = 16 only: every other n fails while running, as the client's
error (a shape the model rejects), not the context's.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Serving profile: batch 1..64, n 1..32.
PROFILE = "X=1x1:8x16:64x32"
WIDTH = 16  # the only n the model computes with


def write_reshape_model(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["X", "shape"], ["Y"])],
        "reshape",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", "n"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 2, 8])],
        initializer=[numpy_helper.from_array(np.array([0, 2, 8], np.int64), "shape")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def reshape_reference(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], 2, 8)
