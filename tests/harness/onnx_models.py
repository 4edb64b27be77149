"""Two tiny ONNX graphs for reliability and status-code tests, with their references.

    affine    Y = 2 X + 1, X and Y [batch, seq] with seq dynamic: requests of
              different sequence lengths cannot share a batch
    reshape   Y = Reshape(X, [0, 2, 8]), X [batch, n] with n dynamic: ONNX
              Runtime refuses every n but 16 while running, so a profile
              n = 1..32 admits shapes the model itself rejects
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # read by every ONNX Runtime the project supports
AFFINE_PROFILE = "X=1x1:4x16:64x32"
RESHAPE_PROFILE = "X=1x1:8x16:64x32"
RESHAPE_WIDTH = 16  # the only n the reshape model computes with


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def write_affine(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "two"], ["doubled"]), helper.make_node("Add", ["doubled", "one"], ["Y"])],
        "affine",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", "seq"])],
        initializer=[numpy_helper.from_array(np.array(2.0, np.float32), "two"),
                     numpy_helper.from_array(np.array(1.0, np.float32), "one")],
    )
    return _save(graph, path)


def affine_reference(x: np.ndarray) -> np.ndarray:
    """Exact in float32: the same two operations."""
    return x * np.float32(2.0) + np.float32(1.0)


def write_reshape(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["X", "shape"], ["Y"])],
        "reshape",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", "n"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 2, 8])],
        initializer=[numpy_helper.from_array(np.array([0, 2, 8], np.int64), "shape")],
    )
    return _save(graph, path)


def reshape_reference(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], 2, 8)
