"""Look inside a graph on ONNX Runtime: every intermediate tensor, a few at a time.

Intermediate tensors become extra graph outputs (ONNX Runtime infers their
types), `CHUNK` of them per session so that a large model's activations are
never all held at once; each is reduced to what the caller needs as soon as
it is computed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import onnx

from trtpool_builder.precision.ort_cpu import cpu_session
from trtpool_builder.precision.samples import Samples

CHUNK = 128


def node_outputs(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, str]]:
    """(node, output name) for every node output of the main graph, in graph order."""
    return [(node, name) for node in model.graph.node for name in node.output if name]


def name_nodes(model: onnx.ModelProto) -> None:
    """Give every unnamed node a unique name ('<op>_<index>'), so that it can be named in messages
    and block lists."""
    taken = {node.name for node in model.graph.node if node.name}
    for index, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)


def _session(model: onnx.ModelProto, extra: Sequence[str]):
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    declared = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=name) for name in extra if name not in declared)
    return cpu_session(probe.SerializeToString(), "the graph to inspect its tensors")


def probe(model: onnx.ModelProto, names: Sequence[str], feeds: Sequence[Samples]) -> Iterator[dict[str, np.ndarray]]:
    """{name: value} for every chunk of `names` and every feed (feeds vary fastest)."""
    for start in range(0, len(names), CHUNK):
        chunk = list(names[start : start + CHUNK])
        session = _session(model, chunk)
        for feed in feeds:
            yield dict(zip(chunk, session.run(chunk, feed), strict=True))


def reduce_tensors(
    model: onnx.ModelProto, names: Sequence[str], feeds: Sequence[Samples], reduce: Callable[[np.ndarray], float]
) -> dict[str, float]:
    """The largest `reduce(value)` of each named tensor over all feeds."""
    result: dict[str, float] = {}
    for values in probe(model, names, feeds):
        for name, value in values.items():
            if isinstance(value, np.ndarray) and value.size:
                result[name] = max(result.get(name, -np.inf), reduce(value))
    return result


def tensor_types(model: onnx.ModelProto) -> dict[str, str]:
    """ONNX Runtime's type ('tensor(float)', ...) of every node output of the main graph."""
    session = _session(model, [name for _, name in node_outputs(model)])
    return {o.name: o.type for o in session.get_outputs()}


def declared_types(model: onnx.ModelProto) -> dict[str, int]:
    """The ONNX element type of every input and initializer of the main graph (an initializer's
    wins where it shares an input's name)."""
    graph = model.graph
    declared = {v.name: v.type.tensor_type.elem_type for v in graph.input}
    declared.update((init.name, init.data_type) for init in graph.initializer)
    return declared


def float_tensors(model: onnx.ModelProto, types: dict[str, str]) -> set[str]:
    """The float32 tensors of the main graph: inputs and initializers declared float, and the
    node outputs `types` (tensor_types of `model`) calls 'tensor(float)'."""
    declared = declared_types(model)
    return {name for name, kind in types.items() if kind == "tensor(float)" and name not in declared} | {
        name for name, elem_type in declared.items() if elem_type == onnx.TensorProto.FLOAT
    }
