"""The ONNX file's signature as the torch runtime serves it, and the dtypes it serves.

Profiles come from the config as for ONNX Runtime (trtpool.model.onnx); ``sequence_buckets``
may pad an input axis only where every output axis it changes is named after it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import torch

from trtpool.errors import ConfigError
from trtpool.model.dtypes import type_text
from trtpool.model.onnx import graph_io
from trtpool.model.onnx import read_signature as file_signature
from trtpool.model.signature import ShapeRange, Signature

# The numpy dtypes the torch runtime serves; each is the torch dtype of the same name.
SERVED = tuple(
    np.dtype(t) for t in (np.float32, np.float16, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_)
)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    return getattr(torch, np.dtype(dtype).name)


def read_signature(model: onnx.ModelProto, profiles: Sequence[dict[str, ShapeRange]], max_batch_size: int) -> Signature:
    """The model's signature, with profiles as the ONNX Runtime runtime makes them."""
    inputs, outputs = graph_io(model)
    values = {v.name: v for v in (*model.graph.input, *model.graph.output)}
    for name, dtype, _ in (*inputs, *outputs):
        if dtype not in SERVED:
            raise ConfigError(f"tensor '{name}' has type {type_text(values[name].type)}, which trtpool does not serve")
    return file_signature(inputs, outputs, profiles, max_batch_size)


def padded_axis_sources(model: onnx.ModelProto, signature: Signature) -> dict[str, dict[int, tuple[str, int]]]:
    """For sequence buckets: per output, each dynamic non-batch axis as the input axis
    it follows, by dimension name. Padding an input axis is right only when every
    output axis it changes can be cut back, so an output axis that no input axis
    names refuses the option."""
    inputs, outputs = graph_io(model)
    named: dict[str, tuple[str, int]] = {}
    for name, _, dims in inputs:
        for axis, dim in enumerate(dims):
            if isinstance(dim, str) and dim:
                named.setdefault(dim, (name, axis))
    first = 1 if signature.batched else 0
    sources: dict[str, dict[int, tuple[str, int]]] = {}
    for name, _, dims in outputs:
        sources[name] = {}
        for axis, dim in enumerate(dims[first:], start=first):
            if isinstance(dim, int) and dim > 0:
                continue
            if dim not in named:
                raise ConfigError(
                    f"parameter 'sequence_buckets': output '{name}' dimension {axis} ('{dim}') "
                    "is named after no input dimension, so a padded input cannot be cut back "
                    "out of it; remove the parameter (a CUDA graph per distinct shape)"
                )
            sources[name][axis] = named[dim]
    return sources
