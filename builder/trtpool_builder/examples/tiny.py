"""`tiny`: a two-layer perceptron, small enough to check exactly against numpy."""

from __future__ import annotations

import numpy as np
import onnx

from trtpool_builder.examples.graph import FLOAT, GraphBuilder, tensor

IN_FEATURES, HIDDEN, OUT_FEATURES = 16, 32, 4


def tiny_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    return {
        "w1": normal(IN_FEATURES, HIDDEN, std=np.sqrt(2.0 / IN_FEATURES)),
        "b1": normal(HIDDEN, std=0.1),
        "w2": normal(HIDDEN, OUT_FEATURES, std=np.sqrt(1.0 / HIDDEN)),
        "b2": normal(OUT_FEATURES, std=0.1),
    }


def tiny_reference(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """The model's output computed in float64 from the same float32 weights."""
    w = {k: v.astype(np.float64) for k, v in tiny_weights(seed).items()}
    hidden = np.maximum(np.asarray(x, np.float64) @ w["w1"] + w["b1"], 0.0)
    return hidden @ w["w2"] + w["b2"]


def build_tiny(seed: int = 0) -> onnx.ModelProto:
    w = tiny_weights(seed)
    g = GraphBuilder()
    x = g.op("MatMul", ["INPUT0", g.const("fc1.weight", w["w1"])], "fc1.MatMul")
    x = g.op("Add", [x, g.const("fc1.bias", w["b1"])], "fc1.Add")
    x = g.op("Relu", [x], "fc1.Relu")
    x = g.op("MatMul", [x, g.const("fc2.weight", w["w2"])], "fc2.MatMul")
    g.output("Add", [x, g.const("fc2.bias", w["b2"])], "OUTPUT0")
    return g.model(
        "tiny",
        [tensor("INPUT0", FLOAT, ["batch", IN_FEATURES])],
        [tensor("OUTPUT0", FLOAT, ["batch", OUT_FEATURES])],
    )
