"""An ONNX model's signature as trtpool serves it, shared by the runtimes that
take an ONNX file (ONNX Runtime reads the I/O from its session, the torch
runtime from the ONNX graph; both hand them here as names, dtypes and dims).

An ONNX file carries no optimization profiles: they come from the config's
`profile` parameter, or batch 1..max_batch_size when every other dimension is
fixed. Output dimensions are taken only where the file fixes them: exporters
name dynamic dimensions arbitrarily (one name for axes of different sizes,
no name at all), so a name says nothing about a size. The runtime reports
each batch's output shapes after the run.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trtpool.errors import ConfigError
from trtpool.model.shapes import format_profile
from trtpool.model.signature import Profile, ShapeRange, Signature, TensorSpec, check_range
from trtpool.parameters import PoolConfig

# A dimension as the file declares it: fixed (int), named (str), or unnamed (None or "").
Dim = int | str | None
DeclaredTensor = tuple[str, np.dtype, Sequence[Dim]]


def tensor_spec(name: str, dtype: np.dtype, dims: Sequence[Dim]) -> TensorSpec:
    return TensorSpec(name, np.dtype(dtype), tuple(d if isinstance(d, int) and d >= 0 else -1 for d in dims))


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


def check_profile(ranges: dict[str, ShapeRange], inputs: Sequence[TensorSpec], max_batch: int) -> None:
    """Refuse a `profile` parameter that contradicts the model: input names, ranks,
    fixed dimensions, and the batch dimension against max_batch_size."""
    where = f"parameter 'profile' ('{format_profile(ranges)}')"
    names = [spec.name for spec in inputs]
    if set(ranges) != set(names):
        raise ConfigError(f"{where} names inputs {sorted(ranges)}; the model's inputs are {sorted(names)}")
    for spec in inputs:
        check_range(spec, ranges[spec.name], where)
        if max_batch and spec.shape[0] != -1:
            raise ConfigError(f"input '{spec.name}' dimension 0 is fixed at {spec.shape[0]} in the model, so it "
                              f"has no batch dimension; set max_batch_size: 0 (it is {max_batch})")


def read_signature(inputs: Sequence[DeclaredTensor], outputs: Sequence[DeclaredTensor],
                   cfg: PoolConfig) -> Signature:
    """The signature with the config's profiles, checked against the model's inputs."""
    input_specs = tuple(tensor_spec(*declared) for declared in inputs)
    output_specs = tuple(tensor_spec(*declared) for declared in outputs)
    profiles = cfg.profiles or (default_profile(input_specs, cfg.max_batch_size),)
    for ranges in profiles:
        check_profile(ranges, input_specs, cfg.max_batch_size)
    for spec in output_specs:
        if cfg.max_batch_size and (not spec.shape or spec.shape[0] != -1):
            raise ConfigError(f"output '{spec.name}' has shape {list(spec.shape)} in the model: no batch dimension "
                              f"first, so the model cannot be served batched; set max_batch_size: 0 "
                              f"(it is {cfg.max_batch_size})")
    return Signature(
        inputs=input_specs,
        outputs=output_specs,
        profiles=tuple(Profile(i, {s.name: r[s.name] for s in input_specs}) for i, r in enumerate(profiles)),
        batched=cfg.max_batch_size > 0,
    )


def is_static(spec: TensorSpec, batched: bool) -> bool:
    """Whether a tensor's shape is known for every batch before a run: fixed, but for the batch size."""
    return -1 not in (spec.shape[1:] if batched else spec.shape)
