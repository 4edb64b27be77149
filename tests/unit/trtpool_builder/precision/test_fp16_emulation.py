"""trtpool_builder.precision.fp16_emulation: the fp16 graph's numbers on the CPU, as a graph ONNX
Runtime loads and runs."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from trtpool_builder.precision.fp16_emulation import emulate_fp16


def test_emulated_fp16_casts_never_take_a_name_the_graph_has():
    """The accuracy check's Cast nodes are named '<tensor>_cast'; a graph that already has a
    node of that name (here the Relu making 'y' is called 'y_cast') still gets a valid
    graph, which ONNX Runtime loads and runs."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="y_cast"),
             helper.make_node("Mul", ["y", "scale"], ["z"], name="scale_it")]
    graph = helper.make_graph(nodes, "clash", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array([2.0, 3.0], np.float32), "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    emulated = emulate_fp16(model, kept=())
    names = [node.name for node in emulated.graph.node]
    assert len(names) == len(set(names)), names
    onnx.checker.check_model(emulated)
    session = ort.InferenceSession(emulated.SerializeToString(), providers=["CPUExecutionProvider"])
    [z] = session.run(None, {"x": np.array([-1.0, 0.1], np.float32)})
    np.testing.assert_array_equal(z, np.array([0.0, np.float16(0.1) * np.float16(3.0)], np.float32))
