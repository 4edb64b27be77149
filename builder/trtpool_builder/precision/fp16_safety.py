"""Which nodes an fp16 conversion must leave in fp32.

float16 holds magnitudes up to 65504. The converter clamps a larger constant
to that (PaddleOCR's text detector keeps a BatchNorm variance of 9.8e7: at
65504 its output is wrong everywhere) and an activation beyond it overflows
to infinity. Both are found before converting: constants by reading them,
activations by running the fp32 graph on the sample inputs. The nodes that
make or read such a value stay in fp32 (the converter's node block list,
which wraps them in casts). At the other end, float16 makes magnitudes below
3e-8 zero: where a Log, a division or a reciprocal reads such a value, the
answer becomes infinite, so those nodes stay in fp32 too. And arithmetic on
sizes and indices an exporter casts to float (shape_arithmetic) stays in fp32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from trtpool_builder.precision.samples import Samples
from trtpool_builder.precision.tensor_probe import (
    declared_types,
    float_tensors,
    node_outputs,
    reduce_tensors,
    tensor_types,
)

FP16_MAX = float(np.finfo(np.float16).max)  # 65504
# Magnitudes below half the smallest float16 subnormal (2**-25) round to 0 in float16.
FP16_FLUSH = float(np.finfo(np.float16).smallest_subnormal) / 2
# Inputs whose values flushed to 0 turn into -inf, inf or NaN (Log(0), 1/0, 0**-p) or lose all
# relative precision (Sqrt), by operator: the input positions that matter.
ZERO_SENSITIVE = {"Log": (0,), "Reciprocal": (0,), "Div": (1,), "Sqrt": (0,), "Pow": (0,)}
# The sample inputs scaled down by this too: real signals are quieter than N(0, 1) (a silent
# audio frame's spectrum), and random inputs alone let underflows through.
QUIET = 1e-4
# Element types an exporter casts to float when it computes with sizes and indices (shape_arithmetic).
_INTEGER_TYPES = frozenset(
    t for name, t in onnx.TensorProto.DataType.items() if name.startswith(("INT", "UINT", "BOOL"))
)
_INTEGER_KINDS = ("tensor(int", "tensor(uint", "tensor(bool")


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


def _flushes_to_zero(value: np.ndarray) -> float:
    """1 when a float array holds non-zero values that float16 rounds to 0, else 0."""
    if value.dtype.kind != "f" or not value.size:
        return 0.0
    magnitude = np.abs(value)
    return float(np.any((magnitude > 0) & (magnitude < FP16_FLUSH)))


def quieted(feeds: Sequence[Samples]) -> list[Samples]:
    """The feeds, and each again with its float inputs scaled by QUIET."""
    return [
        *feeds,
        *({name: a * a.dtype.type(QUIET) if a.dtype.kind == "f" else a for name, a in feed.items()} for feed in feeds),
    ]


def keep_in_fp32(model: onnx.ModelProto, feeds: Sequence[Samples]) -> list[KeptInFp32]:
    """The nodes to leave in fp32, in graph order. Nodes must be named (tensor_probe.name_nodes).

    Beyond float16's range: constants, and activations on `feeds`. Below it: a value that
    float16 flushes to 0 on `feeds` or on them made quiet (QUIET), read where a 0 turns
    into an infinity (ZERO_SENSITIVE): the reader and the node that computes the value."""
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
    producers = {name: node for node, name in computed}
    sensitive = [
        (node, node.input[i])
        for node in graph.node
        for i in ZERO_SENSITIVE.get(node.op_type, ())
        if i < len(node.input) and node.input[i] in producers
    ]
    flushed = reduce_tensors(model, sorted({tensor for _, tensor in sensitive}), quieted(feeds), _flushes_to_zero)
    for node, tensor in sensitive:
        if flushed.get(tensor, 0.0) > 0:
            why = f"'{tensor}' holds values below {FP16_FLUSH:.2g} on the sample inputs, which float16 makes 0"
            keep(producers[tensor], f"computes {why}")
            keep(node, f"reads {why}")
    order = {node.name: index for index, node in enumerate(graph.node)}
    return sorted(kept.values(), key=lambda k: order[k.node])


def shape_arithmetic(model: onnx.ModelProto, types: dict[str, str] | None = None) -> list[str]:
    """The float nodes that compute from sizes and indices, in graph order: they stay in fp32.

    Exporters cast integer sizes to float to compute with them: ultralytics 8.3's anchor grid,
    torch.arange(w, dtype=float32) under torch.onnx's TorchScript exporter, is
    Range(0.0, Cast(Gather(Shape(x)), to=float), 1.0). Converted, that Cast writes float16, which
    holds integers exactly only up to 2048, and TensorRT-RTX refuses the Range whose limit went
    through float16 ("Input 0's element type (float) differs from input 1's element type (half)").
    A node is kept when it casts an integer (or bool) to float, or reads a value such a node made
    and otherwise only integers and float constants; the activations it meets later are fp16 as
    usual. Main graph only. Nodes must be named (tensor_probe.name_nodes). `types`: tensor_types
    of `model`, where the caller has it already."""
    graph = model.graph
    types = tensor_types(model) if types is None else types
    declared = declared_types(model)
    floats = float_tensors(model, types)

    def integer(name: str) -> bool:
        if name in declared:
            return declared[name] in _INTEGER_TYPES
        return types.get(name, "").startswith(_INTEGER_KINDS)

    constants = {init.name for init in graph.initializer}
    constants |= {node.output[0] for node in graph.node if node.op_type == "Constant"}
    from_sizes: set[str] = set()
    kept: list[str] = []
    for node in graph.node:
        reads = [name for name in node.input if name]
        casts_integers = node.op_type == "Cast" and node.output[0] in floats and integer(reads[0])
        if not (casts_integers or any(name in from_sizes for name in reads)):
            continue
        if all(name in from_sizes or name in constants or name not in floats for name in reads):
            kept.append(node.name)
            from_sizes.update(name for name in node.output if name in floats)
    return kept


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
        unread = [
            node
            for node in graph.node
            if node.op_type == "Cast"
            and node.output[0] not in read
            and node.name.endswith(("_cast_to_fp16_node", "_cast_to_fp32_node"))
        ]
        if not unread:
            return
        for node in unread:
            graph.node.remove(node)
