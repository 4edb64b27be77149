"""The fp16 graph's numbers on a CPU: fp32 arithmetic with every fp16 tensor rounded to float16.

ONNX Runtime's CPU provider has few float16 kernels: it wraps float16 nodes in
casts to float32 and then removes the cast pairs between them, so a converted
graph runs there practically in fp32 (an activation of 1e6 does not overflow,
1000 + 0.3 keeps its 0.3). Comparing that with the fp32 model would pass
engines that TensorRT computes differently. This module instead rewrites the
fp32 graph so that each tensor the converted graph holds in float16 passes
through Cast(float16) and Cast(float) where it is made (explicit casts, which
ONNX Runtime keeps), and each constant a float16 node reads is clamped to
+-65504 and rounded as the converter stores it. Nodes kept in fp32, and the
operators the converter never converts, read and write float32 as in the
converted graph. It models float16 storage with float32 arithmetic inside each
operator, as TensorRT's fp16 kernels do; the main graph only (not If/Loop bodies).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtpool_builder.precision.fp16_safety import FP16_MAX
from trtpool_builder.precision.tensor_probe import float_tensors, tensor_types

SUFFIX = "__fp16"


def fp32_op_types() -> frozenset[str]:
    """Operators ONNX Runtime's converter leaves in float32 whatever the block list says."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

    return frozenset(DEFAULT_OP_BLOCK_LIST)


def _as_stored(array: np.ndarray) -> np.ndarray:
    """A float32 constant as the converter stores it in float16, back in float32."""
    return np.clip(array, -FP16_MAX, FP16_MAX).astype(np.float16).astype(np.float32)


def emulate_fp16(model: onnx.ModelProto, kept: Collection[str], types: dict[str, str] | None = None) -> onnx.ModelProto:
    """A float32 graph that computes what the fp16 conversion of `model` (with the nodes named in
    `kept` left in fp32) computes. Nodes must be named (tensor_probe.name_nodes). `types`:
    tensor_types of `model`, where the caller has it already."""
    emulated = onnx.ModelProto()
    emulated.CopyFrom(model)
    graph = emulated.graph
    blocked = fp32_op_types()
    in_fp32 = {n.name for n in graph.node if n.name in kept or n.op_type in blocked}
    floats = float_tensors(emulated, tensor_types(emulated) if types is None else types)
    constants = {init.name: init for init in graph.initializer if init.data_type == TensorProto.FLOAT}
    constant_nodes = {node.output[0]: node for node in graph.node if node.op_type == "Constant"}
    made_in_fp16 = {
        name
        for node in graph.node
        if node.name not in in_fp32 and node.op_type != "Constant"
        for name in node.output
        if name in floats
    }

    added: list[onnx.NodeProto] = []
    node_names = {node.name for node in graph.node}

    def unused(name: str) -> str:
        """`name`, or `name_N` where the graph already has a node of that name."""
        candidate = name
        for number in itertools.count(1):
            if candidate not in node_names:
                break
            candidate = f"{name}_{number}"
        node_names.add(candidate)
        return candidate

    def round_trip(source: str, target: str) -> None:
        half = target + SUFFIX + "_half"
        added.append(helper.make_node("Cast", [source], [half], to=TensorProto.FLOAT16, name=unused(half + "_cast")))
        added.append(helper.make_node("Cast", [half], [target], to=TensorProto.FLOAT, name=unused(target + "_cast")))

    # A tensor made in fp16 is float16 for every reader and for the caller: its maker now writes
    # '<name>__fp32' and the name itself carries the rounded value.
    for node in graph.node:
        for index, name in enumerate(node.output):
            if name in made_in_fp16:
                node.output[index] = name + "__fp32"
                round_trip(name + "__fp32", name)
    # Any other float value (input, constant, output of an fp32 node) is float16 for fp16 readers only.
    stored: dict[str, str] = {}
    for node in graph.node:
        if node.name in in_fp32:
            continue
        for index, name in enumerate(node.input):
            if name in made_in_fp16 or not (name in floats or name in constants):
                continue
            if name not in stored:
                stored[name] = name + SUFFIX
                if name in constants or name in constant_nodes:
                    source = constants[name] if name in constants else constant_nodes[name].attribute[0].t
                    graph.initializer.append(
                        numpy_helper.from_array(_as_stored(numpy_helper.to_array(source)), stored[name])
                    )
                else:
                    round_trip(name, stored[name])
            node.input[index] = stored[name]
    graph.node.extend(added)
    return _reorder(emulated)


def _reorder(model: onnx.ModelProto) -> onnx.ModelProto:
    """Nodes in an order where each input is made before it is read (casts were appended)."""
    graph = model.graph
    available = {v.name for v in graph.input} | {i.name for i in graph.initializer} | {""}
    pending = list(graph.node)
    ordered: list[onnx.NodeProto] = []
    while pending:
        ready = [n for n in pending if all(i in available for i in n.input)]
        if not ready:  # inputs from outer scopes or cycles: keep the rest as they were
            ordered.extend(pending)
            break
        for node in ready:
            ordered.append(node)
            available.update(node.output)
        pending = [n for n in pending if n not in ready]
    del graph.node[:]
    graph.node.extend(ordered)
    return model
