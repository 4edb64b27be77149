"""An ONNX model's inputs and outputs, and its signature as trtpool serves it.

graph_io reads a graph's inputs and outputs (the one reader, for the torch runtime and the
builder); the runtimes that take an ONNX file hand them to read_signature as names, dtypes
and dims (ONNX Runtime reads them from its session).

An ONNX file carries no optimization profiles: they come from the config's
`profile` parameter, or batch 1..max_batch_size when every other dimension is
fixed. Output dimensions are taken only where the file fixes them: exporters
name dynamic dimensions arbitrarily (one name for axes of different sizes,
no name at all), so a name says nothing about a size. The runtime reports
each batch's output shapes after the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from trtpool.errors import ConfigError
from trtpool.model.dtypes import TRITON_DTYPES, is_tensor, not_a_tensor, onnx_dtype, type_text
from trtpool.model.shapes import format_profile
from trtpool.model.signature import Profile, ShapeRange, Signature, TensorSpec, check_range

if TYPE_CHECKING:
    import onnx

# A dimension as the file declares it: fixed (int), named (str), or unnamed (None or "").
Dim = int | str | None
DeclaredTensor = tuple[str, np.dtype, Sequence[Dim]]


def declared_tensor(value: onnx.ValueInfoProto) -> DeclaredTensor:
    """A graph input or output as the file declares it: fixed dimensions as ints, symbolic ones
    by name ('' when unnamed); ConfigError for a value Triton cannot carry."""
    if not is_tensor(value):
        raise ConfigError(not_a_tensor(value))
    tensor_type = value.type.tensor_type
    dtype = onnx_dtype(tensor_type.elem_type)
    if dtype not in TRITON_DTYPES:
        carried = ", ".join(name.removeprefix("TYPE_") for name in TRITON_DTYPES.values())
        raise ConfigError(
            f"tensor '{value.name}' has ONNX type {type_text(value.type)}, which has no Triton "
            f"data type (Triton carries {carried})"
        )
    # A dim_value of 0 is a size (an empty tensor), not an unknown one.
    dims = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in tensor_type.shape.dim)
    return value.name, dtype, dims


def graph_io(model: onnx.ModelProto) -> tuple[list[DeclaredTensor], list[DeclaredTensor]]:
    """The graph's inputs (initializers are weights, not inputs) and outputs."""
    initializers = {i.name for i in model.graph.initializer}
    return (
        [declared_tensor(v) for v in model.graph.input if v.name not in initializers],
        [declared_tensor(v) for v in model.graph.output],
    )


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
            raise ConfigError(
                f"input '{spec.name}' dimension 0 is fixed at {spec.shape[0]} in the model, so it "
                f"has no batch dimension; set max_batch_size: 0 (it is {max_batch})"
            )


def read_signature(
    inputs: Sequence[DeclaredTensor],
    outputs: Sequence[DeclaredTensor],
    profiles: Sequence[dict[str, ShapeRange]],
    max_batch_size: int,
) -> Signature:
    """The signature with the config's profiles (parameter 'profile'; none: the default one) and
    max_batch_size, checked against the model's inputs."""
    input_specs = tuple(tensor_spec(*declared) for declared in inputs)
    output_specs = tuple(tensor_spec(*declared) for declared in outputs)
    profiles = profiles or (default_profile(input_specs, max_batch_size),)
    for ranges in profiles:
        check_profile(ranges, input_specs, max_batch_size)
    for spec in output_specs:
        if max_batch_size and (not spec.shape or spec.shape[0] != -1):
            raise ConfigError(
                f"output '{spec.name}' has shape {list(spec.shape)} in the model: no batch dimension "
                f"first, so the model cannot be served batched; set max_batch_size: 0 "
                f"(it is {max_batch_size})"
            )
    return Signature(
        inputs=input_specs,
        outputs=output_specs,
        profiles=tuple(Profile(i, {s.name: r[s.name] for s in input_specs}) for i, r in enumerate(profiles)),
        batched=max_batch_size > 0,
    )


def is_static(spec: TensorSpec, batched: bool) -> bool:
    """Whether a tensor's shape is known for every batch before a run: fixed, but for the batch size."""
    return -1 not in (spec.shape[1:] if batched else spec.shape)
