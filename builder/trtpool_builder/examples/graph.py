"""A small helper for writing ONNX graphs node by node with named weights."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
# IR version 8 is the one that belongs to opset 17: older ONNX Runtime and
# TensorRT parsers refuse files stamped with a newer IR version.
IR_VERSION = 8


class GraphBuilder:
    """Collects nodes and initializers; every op returns its output's name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()

    def _unique(self, name: str) -> str:
        candidate, suffix = name, 1
        while candidate in self._names:
            suffix += 1
            candidate = f"{name}_{suffix}"
        self._names.add(candidate)
        return candidate

    def const(self, name: str, value: np.ndarray) -> str:
        name = self._unique(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], name: str, **attrs) -> str:
        """Add a node named `name` with one output, also named `name`."""
        name = self._unique(name)
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        return name

    def output(self, op_type: str, inputs: Sequence[str], graph_output: str, **attrs) -> str:
        """Add a node whose output is a graph output called `graph_output`."""
        self._names.add(graph_output)
        self.nodes.append(
            helper.make_node(op_type, list(inputs), [graph_output], name=f"{graph_output}.{op_type}", **attrs)
        )
        return graph_output

    def model(
        self, name: str, inputs: Sequence[onnx.ValueInfoProto], outputs: Sequence[onnx.ValueInfoProto]
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, list(inputs), list(outputs), initializer=self.initializers)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="trtpool-examples"
        )
        model.ir_version = IR_VERSION
        return model


def tensor(name: str, elem_type: int, shape: Sequence[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, list(shape))


FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
