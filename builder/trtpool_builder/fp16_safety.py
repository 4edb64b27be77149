"""Which nodes an fp16 conversion must leave in fp32.

float16 holds magnitudes up to 65504. The converter clamps a larger constant
to that (PaddleOCR's text detector keeps a BatchNorm variance of 9.8e7: at
65504 its output is wrong everywhere) and an activation beyond it overflows
to infinity. Both are found before converting: constants by reading them,
activations by running the fp32 graph on the sample inputs. The nodes that
make or read such a value stay in fp32 (the converter's node block list,
which wraps them in casts).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from trtpool_builder.samples import Samples
from trtpool_builder.tensor_probe import node_outputs, reduce_tensors

FP16_MAX = float(np.finfo(np.float16).max)  # 65504


@dataclass(frozen=True)
class KeptInFp32:
    node: str
    op_type: str
    reason: str

    def describe(self) -> str:
        return f"'{self.node}' ({self.op_type}) {self.reason}"


def _peak(value: np.ndarray) -> float:
    """The largest finite magnitude of a float array (0 for other types)."""
    if value.dtype.kind != "f" or not value.size:
        return 0.0
    finite = np.abs(value[np.isfinite(value)])
    return float(finite.max()) if finite.size else 0.0


def keep_in_fp32(model: onnx.ModelProto, feeds: Sequence[Samples]) -> list[KeptInFp32]:
    """The nodes to leave in fp32, in graph order. Nodes must be named (tensor_probe.name_nodes)."""
    graph = model.graph
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    kept: dict[str, KeptInFp32] = {}

    def keep(node: onnx.NodeProto, reason: str) -> None:
        kept.setdefault(node.name, KeptInFp32(node.name, node.op_type, reason))

    def keep_readers(tensor: str, peak: float, where: str) -> None:
        for reader in readers.get(tensor, ()):
            keep(reader, f"reads '{tensor}' (|value| up to {peak:.3g}{where})")

    for init in graph.initializer:
        peak = _peak(numpy_helper.to_array(init))
        if peak > FP16_MAX:
            keep_readers(init.name, peak, ", a constant")
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            peak = _peak(numpy_helper.to_array(node.attribute[0].t))
            if peak > FP16_MAX:
                keep(node, f"holds a constant up to {peak:.3g}")
                keep_readers(node.output[0], peak, ", a constant")

    computed = [(node, name) for node, name in node_outputs(model) if node.op_type != "Constant"]
    peaks = reduce_tensors(model, [name for _, name in computed], feeds, _peak)
    for node, name in computed:
        peak = peaks.get(name, 0.0)
        if peak > FP16_MAX:
            keep(node, f"computes '{name}' up to {peak:.3g} on the sample inputs")
            keep_readers(name, peak, " on the sample inputs")
    order = {node.name: index for index, node in enumerate(graph.node)}
    return sorted(kept.values(), key=lambda k: order[k.node])



def skip_fp16_round_trips(model: onnx.ModelProto) -> int:
    """Let fp32 nodes hand fp32 values to each other directly; return how many hand-overs changed.

    ONNX Runtime's converter wraps every blocked node in casts, so a value passed
    from one blocked node (or fp32 constant) to another still goes through
    float16 on the way (Cast to fp16, then back to fp32) and overflows there.
    The inner pair of casts the converter inserted ('<name>_cast_to_fp16_node'
    feeding '<name>_cast_to_fp32_node') is bypassed; casts left without a reader
    are removed."""
    graph = model.graph
    producer = {name: node for node in graph.node for name in node.output}
    changed = 0
    for node in graph.node:
        for index, name in enumerate(node.input):
            back = producer.get(name)
            if back is None or back.op_type != "Cast" or not back.name.endswith("_cast_to_fp32_node"):
                continue
            down = producer.get(back.input[0])
            if down is not None and down.op_type == "Cast" and down.name.endswith("_cast_to_fp16_node"):
                node.input[index] = down.input[0]
                changed += 1
    _drop_unread_casts(graph)
    return changed


def _drop_unread_casts(graph: onnx.GraphProto) -> None:
    while True:
        read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        unread = [node for node in graph.node if node.op_type == "Cast" and node.output[0] not in read
                  and node.name.endswith(("_cast_to_fp16_node", "_cast_to_fp32_node"))]
        if not unread:
            return
        for node in unread:
            graph.node.remove(node)
