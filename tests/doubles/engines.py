"""Engine files for the TensorRT double, with the sidecars trtpool needs next to them,
and the small ONNX models they carry (each with a float64 numpy reference)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtpool.model.shapes import format_profile
from trtpool.model.sidecar import Precision, Sidecar, Target, TensorInfo, write_sidecar
from trtpool.model.signature import ShapeRange

GPU_NAME = "NVIDIA GeForce RTX 4090 (double)"
Profiles = list[dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]]


def _model(nodes: list, inputs: list, outputs: list, initializers: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "double", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def linear_model(w: np.ndarray, b: np.ndarray) -> onnx.ModelProto:
    """x [batch, K] -> y = x @ W + b [batch, N] (float32), top = argmax(y, 1) [batch] (int64)."""
    k, n = w.shape
    return _model(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"]),
         helper.make_node("ArgMax", ["y"], ["top"], axis=1, keepdims=0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n]),
         helper.make_tensor_value_info("top", TensorProto.INT64, ["batch"])],
        {"W": w.astype(np.float32), "b": b.astype(np.float32)})


def linear_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    y = x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64)
    return {"y": y, "top": y.argmax(axis=1)}


def positive_model(w: np.ndarray, b: np.ndarray) -> onnx.ModelProto:
    """The linear model plus where = NonZero(y > 0) [2, count]: a data-dependent shape."""
    model = linear_model(w, b)
    model.graph.node.extend([helper.make_node("Constant", [], ["zero"], value_float=0.0),
                             helper.make_node("Greater", ["y", "zero"], ["positive"]),
                             helper.make_node("NonZero", ["positive"], ["where"])])
    model.graph.output.append(helper.make_tensor_value_info("where", TensorProto.INT64, [2, "count"]))
    return model


def column_sums_model(w: np.ndarray, b: np.ndarray) -> onnx.ModelProto:
    """The linear model plus sums = y summed over the batch [N]: an output that is not batched."""
    model = linear_model(w, b)
    model.graph.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "batch_axis"))
    model.graph.node.append(helper.make_node("ReduceSum", ["y", "batch_axis"], ["sums"], keepdims=0))
    model.graph.output.append(helper.make_tensor_value_info("sums", TensorProto.FLOAT, [w.shape[1]]))
    return model


def masked_model() -> onnx.ModelProto:
    """tokens [batch, length] (float32) and mask [batch, length] -> total = sum(tokens * mask, 1):
    the two inputs' lengths must agree, which only the model knows."""
    return _model(
        [helper.make_node("Mul", ["tokens", "mask"], ["kept"]),
         helper.make_node("ReduceSum", ["kept", "axes"], ["total"], keepdims=0)],
        [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", "length"]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "length"])],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, ["batch"])],
        {"axes": np.array([1], np.int64)})


def profile_text(ranges: dict[str, tuple[tuple[int, ...], ...]]) -> str:
    return format_profile({name: ShapeRange(*map(tuple, r)) for name, r in ranges.items()})


def write_engine(folder: Path, data: bytes, profiles: Profiles, inputs: list[TensorInfo],
                 outputs: list[TensorInfo], *, version: str, module: str = "tensorrt",
                 capability: str = "8.9", version_compatible: bool = False) -> Path:
    """`folder`/model.plan holding `data`, with the sidecar trtpool checks at load."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.plan"
    path.write_bytes(data)
    texts = tuple(profile_text(p) for p in profiles)
    write_sidecar(path, Sidecar(
        engine=str(path), module=module, module_version=version,
        target=Target((capability,), None if module == "tensorrt_rtx" else GPU_NAME,
                      version_compatible=version_compatible),
        precision=Precision("fp32", strongly_typed=True), profiles=texts,
        inputs=tuple(inputs), outputs=tuple(outputs), onnx_path="model.onnx", onnx_sha256="0" * 64,
        build_options={"onnx": "model.onnx", "output": str(path), "trt_module": module, "shapes": list(texts)},
    ))
    return path
