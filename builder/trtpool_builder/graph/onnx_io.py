"""An ONNX file's graph inputs and outputs as trtpool TensorSpecs (-1: dynamic)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from math import prod
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import helper
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from trtpool.errors import ConfigError
from trtpool.model.onnx import graph_io, tensor_spec
from trtpool.model.signature import TensorSpec


def load_graph(path: Path) -> onnx.ModelProto:
    """The model without external weight files (enough for the graph's I/O)."""
    try:
        return onnx.load(str(path), load_external_data=False)
    except OSError as exc:
        raise ConfigError(f"cannot read ONNX file '{path}': {exc}") from exc
    except DecodeError as exc:
        raise ConfigError(f"'{path}' is not an ONNX file (protobuf decoding failed: {exc})") from exc


@dataclass(frozen=True)
class OnnxFile:
    """An ONNX file parsed once (load_graph), handed from step to step: `model` for what reads
    the graph, `path` for what reads the file itself (ONNX Runtime, its external data)."""

    path: Path
    model: onnx.ModelProto

    @classmethod
    def read(cls, path: Path) -> OnnxFile:
        return cls(path, load_graph(path))


def io_specs(model: onnx.ModelProto) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """(inputs, outputs) as the backend reads them (trtpool.model.onnx: one reader); graph inputs
    that are initializers are weights, not inputs."""
    inputs, outputs = graph_io(model)
    return tuple(tensor_spec(*d) for d in inputs), tuple(tensor_spec(*d) for d in outputs)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _skeleton(model: onnx.ModelProto, max_elements: int = 4096) -> onnx.ModelProto:
    """The graph with large weights turned into typed graph inputs: cheap to copy and to
    shape-infer, since only small (shape-like) constants carry values inference needs."""
    graph = model.graph
    small = [t for t in graph.initializer if prod(t.dims) <= max_elements]
    typed = [
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in graph.initializer
        if prod(t.dims) > max_elements
    ]
    skeleton = helper.make_model(
        helper.make_graph(graph.node, graph.name, [*graph.input, *typed], graph.output, initializer=small),
        opset_imports=model.opset_import,
        functions=model.functions,
    )
    skeleton.ir_version = model.ir_version
    return skeleton


def _inferred(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """ONNX shape inference (with data propagation) of `model` with these input shapes fixed."""
    for value in model.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, shapes[value.name], strict=False):
                dim.Clear()
                dim.dim_value = size
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def infer_output_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Output shapes for these input shapes by ONNX shape inference (-1 where it cannot tell).

    Pass a skeleton (see `output_shape_inferrer`) for large models."""
    return {spec.name: spec.shape for spec in io_specs(_inferred(model, shapes))[1]}


def inferred_value_shapes(
    model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], names: list[str]
) -> dict[str, tuple[int, ...]]:
    """The shapes of the values `names` (any tensor in the graph) for these input shapes, where
    shape inference can tell their rank (-1 for a size it cannot tell)."""
    inferred = _inferred(_skeleton(model), shapes).graph
    found = {}
    for value in (*inferred.value_info, *inferred.input, *inferred.output):
        kind = value.type.tensor_type
        if value.name in names and kind.HasField("shape"):
            found[value.name] = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in kind.shape.dim)
    return found


def output_shape_inferrer(model: onnx.ModelProto):
    """A function from input shapes to output shapes, sharing one weightless copy of the graph."""
    skeleton = _skeleton(model)
    return lambda shapes: infer_output_shapes(skeleton, shapes)


# Protobuf refuses messages of 2 GiB and more: larger weights go to a side file.
EXTERNAL_DATA_ABOVE = 1 << 30


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in the graph: initializers and node attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            for subgraph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                yield from _tensors(subgraph)


def external_data_files(onnx_file: OnnxFile) -> list[Path]:
    """The files beside the ONNX file that hold its external tensor data, relative to its folder
    (they must travel with it; ONNX Runtime reads them from there and nowhere else)."""
    model_file, model = onnx_file.path, onnx_file.model
    locations = sorted({ExternalDataInfo(t).location for t in _tensors(model.graph) if uses_external_data(t)})
    files = []
    for location in locations:
        relative = Path(location)
        if relative.is_absolute() or ".." in relative.parts:
            raise ConfigError(
                f"'{model_file}' keeps tensor data in '{location}', outside its folder; "
                "ONNX Runtime reads external data only from the model's folder"
            )
        if not (model_file.parent / relative).is_file():
            raise ConfigError(
                f"'{model_file}' keeps tensor data in '{location}', which is not a file in '{model_file.parent}'"
            )
        files.append(relative)
    return files


def save_model(model: onnx.ModelProto, path: Path) -> Path:
    """Save `model` to `path`, its weights beside it in `<name>.data` when they are large."""
    weights = sum(len(t.raw_data) for t in model.graph.initializer)
    onnx.save_model(
        model, str(path), save_as_external_data=weights > EXTERNAL_DATA_ABOVE, location=Path(path).name + ".data"
    )
    return Path(path)
