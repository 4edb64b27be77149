"""An ONNX model's signature as trtpool serves it, shared by the runtimes that
take an ONNX file (ONNX Runtime reads the I/O from its session, the torch
runtime from the ONNX graph; both hand them here as names, dtypes and dims).

An ONNX file carries no optimization profiles: they come from the config's
`profile` parameter, or batch 1..max_batch_size when every other dimension is
fixed. Each output dimension must be fixed or copied from an input's named
dimension, so that output buffers can be sized before any request.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trtpool.config import PoolConfig
from trtpool.errors import ConfigError
from trtpool.signature import Profile, ShapeRange, Signature, TensorSpec

# A dimension as the file declares it: fixed (int), named (str), or unnamed (None or "").
Dim = int | str | None
# An output dimension: fixed, or (input name, axis) to copy it from.
DimSource = int | tuple[str, int]
DeclaredTensor = tuple[str, np.dtype, Sequence[Dim]]


def tensor_spec(name: str, dtype: np.dtype, dims: Sequence[Dim]) -> TensorSpec:
    return TensorSpec(name, np.dtype(dtype), tuple(d if isinstance(d, int) else -1 for d in dims))


def default_profile(inputs: Sequence[TensorSpec], max_batch: int) -> dict[str, ShapeRange]:
    """Batch 1..max_batch_size; every other dimension must then be fixed."""
    ranges = {}
    for spec in inputs:
        rest = spec.shape[1:] if max_batch else spec.shape
        if -1 in rest:
            axis = rest.index(-1) + (1 if max_batch else 0)
            raise ConfigError(
                f"input '{spec.name}' has a dynamic dimension {axis}; set parameter 'profile' "
                f"(e.g. {spec.name}=1x1:8x128:32x512) so that buffers can be sized"
            )
        low = ((1,) if max_batch else ()) + rest
        high = ((max_batch,) if max_batch else ()) + rest
        ranges[spec.name] = ShapeRange(low, high, high)
    return ranges


def output_dim_sources(inputs: Sequence[DeclaredTensor],
                       outputs: Sequence[DeclaredTensor]) -> dict[str, tuple[DimSource, ...]]:
    """Each output dimension as a constant or as an input's named dimension."""
    symbols: dict[str, tuple[str, int]] = {}
    for name, _, dims in inputs:
        for axis, dim in enumerate(dims):
            if isinstance(dim, str) and dim:
                symbols.setdefault(dim, (name, axis))
    resolved = {}
    for name, _, dims in outputs:
        sources: list[DimSource] = []
        for axis, dim in enumerate(dims):
            if isinstance(dim, int):
                sources.append(dim)
            elif dim in symbols:
                sources.append(symbols[dim])
            else:
                raise ConfigError(
                    f"output '{name}' dimension {axis} ('{dim}') is not fixed and matches no "
                    "input dimension, so its buffer cannot be preallocated; export the model with "
                    "named dynamic axes shared between inputs and outputs"
                )
        resolved[name] = tuple(sources)
    return resolved


def output_shape(sources: tuple[DimSource, ...], input_shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else input_shapes[d[0]][d[1]] for d in sources)


def read_signature(inputs: Sequence[DeclaredTensor], outputs: Sequence[DeclaredTensor],
                   cfg: PoolConfig) -> tuple[Signature, dict[str, tuple[DimSource, ...]]]:
    """The signature with the config's profiles, and where each output dimension comes from."""
    input_specs = tuple(tensor_spec(*declared) for declared in inputs)
    output_specs = tuple(tensor_spec(*declared) for declared in outputs)
    profiles = cfg.profiles or (default_profile(input_specs, cfg.max_batch_size),)
    names = {s.name for s in input_specs}
    for ranges in profiles:
        if set(ranges) != names:
            raise ConfigError(
                f"parameter 'profile' names inputs {sorted(ranges)}; the model's inputs are {sorted(names)}"
            )
    signature = Signature(
        inputs=input_specs,
        outputs=output_specs,
        profiles=tuple(Profile(i, r) for i, r in enumerate(profiles)),
        batched=cfg.max_batch_size > 0,
    )
    return signature, output_dim_sources(inputs, outputs)
