"""Where a converted graph (fp16, int8) first departs from the fp32 one, named for the user.

Both graphs run on ONNX Runtime with their intermediate tensors exposed; the
tensors they share by name are compared in graph order with the accuracy
module's error figure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from trtpool_builder.precision.accuracy import output_error
from trtpool_builder.precision.samples import Samples
from trtpool_builder.precision.tensor_probe import CHUNK, name_nodes, node_outputs, probe


def first_divergence(
    reference: onnx.ModelProto, candidate: onnx.ModelProto, feeds: Sequence[Samples], limit: float
) -> str | None:
    """The first node, in graph order, whose float output in `candidate` differs from `reference`'s
    beyond `limit` (accuracy's error figure), described; None if none does.

    Unnamed nodes of `reference` are named as the conversion named them (tensor_probe.name_nodes)."""
    name_nodes(reference)
    present = {name for _, name in node_outputs(candidate)}
    computed = [(node, name) for node, name in node_outputs(reference) if name in present]
    names = [name for _, name in computed]
    producer = {name: node for node, name in computed}
    failing: dict[str, float] = {}
    for start in range(0, len(names), CHUNK):
        chunk = names[start : start + CHUNK]
        pairs = zip(probe(reference, chunk, feeds), probe(candidate, chunk, feeds), strict=True)
        for expected, got in pairs:
            for name in chunk:
                ref, cand = expected.get(name), got.get(name)
                if (
                    not isinstance(ref, np.ndarray)
                    or ref.dtype.kind != "f"
                    or cand is None
                    or ref.shape != np.shape(cand)
                ):
                    continue
                error = output_error(name, ref, np.asarray(cand)).error
                if not error <= limit:
                    failing[name] = max(failing.get(name, 0.0), error)
        if failing:
            name = min(failing, key=names.index)
            node = producer[name]
            return (
                f"node '{node.name}' ({node.op_type}) is the first whose output '{name}' differs "
                f"beyond it (error {failing[name]:.3g})"
            )
    return None
