"""Scalar (rank-0) inputs and outputs, taken as one-element tensors [1] in the copy that is served.

Triton 2.51 serves no scalar tensors in a model without a batch axis ("model
input 'sr' cannot have empty reshape for non-batching model as scalar tensors
are not supported"), and a model with a scalar input has no batch axis.
silero VAD's sample rate is such an input. So the copy that is built or
served takes each scalar as [1] and a Reshape at the graph's edge turns it
back into the scalar the rest of the graph reads (and a scalar output into
[1]); clients send and receive shape [1]. The user's file is not changed. An
output declared as a scalar that the graph computes per row is no scalar: the
served copy declares its real shape first (served_copy.declare_row_outputs).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import helper, numpy_helper

SUFFIX = "__scalar"


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph (If/Loop bodies) below it, which may read outer names."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from _graphs(sub)


def _rename_uses(graph: onnx.GraphProto, old: str, new: str) -> None:
    for g in _graphs(graph):
        for node in g.node:
            node.input[:] = [new if name == old else name for name in node.input]
            node.output[:] = [new if name == old else name for name in node.output]


def is_scalar(value: onnx.ValueInfoProto) -> bool:
    """Whether `value` is declared a tensor of rank 0."""
    kind = value.type.tensor_type
    return kind.HasField("shape") and not kind.shape.dim


def lift_scalars(model: onnx.ModelProto) -> list[str]:
    """Make every scalar graph input and output of `model` a [1] tensor; return their names."""
    graph = model.graph
    weights = {init.name for init in graph.initializer}
    lifted, entry, exit_ = [], [], []
    for value in graph.input:
        if value.name in weights or not is_scalar(value):
            continue
        inner = value.name + SUFFIX
        _rename_uses(graph, value.name, inner)
        entry.append(helper.make_node("Reshape", [value.name, inner + "_shape"], [inner], name=inner + "_reshape"))
        graph.initializer.append(numpy_helper.from_array(np.array([], np.int64), inner + "_shape"))
        value.type.tensor_type.shape.dim.add().dim_value = 1
        lifted.append(value.name)
    for value in graph.output:
        if not is_scalar(value):
            continue
        inner = value.name + SUFFIX
        _rename_uses(graph, value.name, inner)
        exit_.append(helper.make_node("Reshape", [inner, inner + "_shape"], [value.name], name=inner + "_reshape"))
        graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), inner + "_shape"))
        value.type.tensor_type.shape.dim.add().dim_value = 1
        lifted.append(value.name)
    nodes = [*entry, *graph.node, *exit_]
    del graph.node[:]
    graph.node.extend(nodes)
    return lifted


def describe_lifted(names: list[str]) -> str:
    return (
        f"scalar tensor(s) {names} are taken as shape [1] in the copy that is built or served "
        "(Triton serves no scalar tensors in a model without a batch axis); clients send and "
        "receive them as [1]"
    )
