"""Check one request's tensors against the model before it joins a batch.

Triton already checks names, data types and dims against config.pbtxt; this
is the engine's own word (profile ranges, fixed dimensions), and the only
check for paths that bypass Triton's (decoupled mode, BLS callers). Every
message names the tensor and the expected value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trtpool.errors import InvalidInput
from trtpool.model.dtypes import TRITON_DTYPES, dtype_of
from trtpool.model.signature import Signature

MAX_REMEMBERED_LAYOUTS = 4096  # past this many distinct request layouts, the memory starts again


def _dtype_name(dtype: np.dtype) -> str:
    return TRITON_DTYPES.get(dtype, str(dtype)).removeprefix("TYPE_")


def accept(signature: Signature, tensors: dict[str, Any]) -> tuple[dict[str, Any], dict[str, tuple[int, ...]]]:
    """The request's tensors as the model takes them, and their shapes; InvalidInput naming
    what is wrong. A scalar input of a model without a batch axis is declared [1] in
    config.pbtxt (model_config.config_dims), so clients send [1]: the model takes rank 0."""
    if not signature.batched and signature.scalar_inputs:
        tensors = {
            name: t.reshape(()) if name in signature.scalar_inputs and tuple(t.shape) == (1,) else t
            for name, t in tensors.items()
        }
    # The check depends on names, data types and shapes only: a layout accepted before is accepted
    # again without the walk (a third of an engine host's time per request went there).
    layout = tuple((name, t.dtype, tuple(t.shape)) for name, t in tensors.items())
    shapes = signature.accepted_layouts.get(layout)
    if shapes is None:
        shapes = check_request(signature, tensors)
        if len(signature.accepted_layouts) >= MAX_REMEMBERED_LAYOUTS:
            signature.accepted_layouts.clear()
        signature.accepted_layouts[layout] = shapes
    return tensors, shapes


def check_request(signature: Signature, tensors: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """Return the request's input shapes, or raise InvalidInput naming what is wrong."""
    expected = {spec.name for spec in signature.inputs}
    missing = sorted(expected - set(tensors))
    if missing:
        raise InvalidInput(f"missing input tensor(s) {missing}; the model expects {sorted(expected)}")
    unknown = sorted(set(tensors) - expected)
    if unknown:
        raise InvalidInput(f"unknown input tensor(s) {unknown}; the model expects {sorted(expected)}")

    shapes: dict[str, tuple[int, ...]] = {}
    batch_sizes = set()
    for spec in signature.inputs:
        array = tensors[spec.name]
        if dtype_of(array) != spec.dtype:
            raise InvalidInput(
                f"input '{spec.name}': data type {_dtype_name(dtype_of(array))} given, "
                f"expected {_dtype_name(spec.dtype)}"
            )
        if array.ndim != len(spec.shape):
            raise InvalidInput(
                f"input '{spec.name}': rank {array.ndim} (shape {list(array.shape)}) given, "
                f"expected rank {len(spec.shape)} (shape {list(spec.shape)}, -1 = any)"
            )
        for axis, (given, want) in enumerate(zip(array.shape, spec.shape, strict=True)):
            if want != -1 and given != want:
                raise InvalidInput(
                    f"input '{spec.name}': dimension {axis} is {given}, expected {want} "
                    f"(shape {list(spec.shape)}, -1 = any)"
                )
        if signature.batched:
            batch_sizes.add(array.shape[0])
        shapes[spec.name] = tuple(array.shape)

    if signature.batched:
        if len(batch_sizes) > 1:
            raise InvalidInput(f"inputs disagree on the batch size: {sorted(batch_sizes)}")
        batch = batch_sizes.pop()
        if not 1 <= batch <= signature.max_batch_size:
            raise InvalidInput(
                f"batch size {batch} is outside 1..{signature.max_batch_size} (the engine's largest profile)"
            )
    signature.choose_profile(shapes)  # raises InvalidInput naming the input and its allowed range
    return shapes
