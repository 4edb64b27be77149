"""What to tell the user when TensorRT refuses a graph: the tensor, axis or node, and what to pass.

TensorRT's own messages name its internal layers. Two causes are found here
in terms of the user's model:

- operators outside the standard ONNX domain (ai.onnx.ml from scikit-learn
  converters, com.microsoft contrib ops): TensorRT's parser has no importer for
  them and looks for a plugin of that name;
- a profile range the model itself does not accept on some axis (a text
  recognizer that only works at height 48, say): ONNX Runtime runs the fp32
  graph at each profile's opt shapes and then with one axis at a time moved to
  its min or max, so the first refused (input, axis, size) is named.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx

from trtpool.model.shapes import format_profile
from trtpool.model.signature import Profile, TensorSpec
from trtpool_builder.errors import BuildError
from trtpool_builder.graph.dim_names import Renamed, axes_named
from trtpool_builder.precision.accuracy import Runner, onnxruntime_runner
from trtpool_builder.precision.samples import random_feed

STANDARD_DOMAINS = ("", "ai.onnx")


def foreign_operators(model: onnx.ModelProto) -> str:
    """A hint naming the graph's nodes outside the standard ONNX domain ('' when there are none)."""
    foreign = [
        f"'{n.name or n.op_type}' ({n.domain}.{n.op_type})"
        for n in model.graph.node
        if n.domain not in STANDARD_DOMAINS
    ]
    if not foreign:
        return ""
    return (
        "\nnodes outside the standard ONNX domain, which TensorRT's ONNX parser has no importer for "
        f"(it looks for a plugin of that name): {', '.join(foreign)}. TensorRT cannot build this model "
        "as it is: serve the ONNX file with ONNX Runtime (trtpool-model MODEL.onnx --shapes ...), or "
        "replace those nodes with standard operators"
    )


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


def _refuses(run: Runner, inputs: Sequence[TensorSpec], shapes: dict[str, tuple[int, ...]]) -> str | None:
    try:
        run(random_feed(inputs, shapes))
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types for shapes the graph refuses
        return _first_line(exc)
    return None


def _moved(opt: dict[str, tuple[int, ...]], tied: Sequence[tuple[str, int]], size: int) -> dict[str, tuple[int, ...]]:
    shapes = dict(opt)
    for tensor, axis in tied:
        shape = list(shapes[tensor])
        shape[axis] = size
        shapes[tensor] = tuple(shape)
    return shapes


def refused_axis(
    onnx_path: Path, model: onnx.ModelProto, inputs: Sequence[TensorSpec], profiles: Sequence[Profile]
) -> str:
    """A hint naming the first profile size ONNX Runtime refuses ('' when it runs them all).

    `model`: the graph as built (its dimension names tie axes that must move together)."""
    try:
        run = onnxruntime_runner(onnx_path)
    except BuildError:
        return ""
    ties = axes_named(model)
    for profile in profiles:
        where = f"profile {profile.index} ('{format_profile(profile.ranges)}')"
        opt = {name: r.opt for name, r in profile.ranges.items()}
        refused = _refuses(run, inputs, opt)
        if refused:
            return (
                f"\nONNX Runtime cannot run the model at the opt shapes of {where} either: {refused}. "
                "Pass --shapes the model accepts"
            )
        for which in ("min", "max"):
            for name, r in profile.ranges.items():
                for axis, size in enumerate(getattr(r, which)):
                    if size == r.opt[axis]:
                        continue
                    tied = next((axes for axes in ties.values() if (name, axis) in axes), [(name, axis)])
                    refused = _refuses(run, inputs, _moved(opt, tied, size))
                    if refused:
                        return (
                            f"\ninput '{name}' axis {axis}: the model runs with size {r.opt[axis]} there "
                            f"but ONNX Runtime refuses size {size} (the {which} of {where}): {refused}. "
                            f"Pass --shapes whose '{name}' axis {axis} stays within sizes the model "
                            "accepts (see its documentation, e.g. a fixed image height)"
                        )
    return ""


def renamed_hint(renamed: Sequence[Renamed]) -> str:
    if not renamed:
        return ""
    return (
        "\ndimension names changed in the built copy (if the model needs those axes equal, give them "
        "equal ranges in --shapes): " + "; ".join(r.describe() for r in renamed)
    )
