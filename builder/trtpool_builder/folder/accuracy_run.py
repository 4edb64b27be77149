"""trtpool-accuracy's work: resolve the candidate, make inputs, compare with the fp32 ONNX.

A model folder or an engine runs through trtpool's own serving path
(ModelInstance: runtime, context pool, batch runner); an engine only after
its sidecar says it can run on this machine, otherwise EngineNotRunnable
says why, and nothing is compared.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from trtpool.errors import TrtpoolError
from trtpool.model.sidecar import read_sidecar
from trtpool_builder.engine.engine_here import built_for, why_not_here
from trtpool_builder.errors import BuildError
from trtpool_builder.folder.instance_runner import instance_runner
from trtpool_builder.folder.model_folder import ENGINE_SUFFIXES, model_config, read_config
from trtpool_builder.graph.onnx_io import io_specs, load_graph
from trtpool_builder.graph.profiles import resolve_profiles
from trtpool_builder.precision.accuracy import AccuracyReport, InputsRefused, Runner, compare, onnxruntime_runner
from trtpool_builder.precision.samples import Samples, load_samples, random_samples


class EngineNotRunnable(TrtpoolError):
    """The engine cannot execute on this machine; the message says why."""


def model_file_of(path: Path) -> Path:
    """A model folder's served file (newest numeric version), or `path` itself."""
    path = Path(path)
    if not path.is_dir():
        return path
    versions = sorted((int(p.name), p) for p in path.iterdir() if p.is_dir() and p.name.isdigit())
    for _, version_dir in reversed(versions):
        for name in ("model.plan", "model.engine", "model.onnx"):
            if (version_dir / name).is_file():
                return version_dir / name
    raise BuildError(f"'{path}' has no version folder with model.plan or model.onnx")


def _runnable_here(engine: Path) -> None:
    why = why_not_here(engine)
    if why is not None:
        raise EngineNotRunnable(
            f"cannot run engine '{engine}' here ({built_for(read_sidecar(engine))}): {why}. "
            "Compare the ONNX file it was built from instead, or run this on the target GPU"
        )


def _engine_config(engine: Path) -> dict[str, Any]:
    """The config trtpool-model would write for a bare engine file, one context."""
    message = model_config(engine.stem, read_sidecar(engine).signature())
    message.parameters["model_file"].string_value = engine.name
    message.parameters["contexts"].string_value = "1"
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _served(candidate: Path, model_file: Path) -> tuple[Runner, Callable[[], None], str]:
    """(run, close, label) over trtpool's ModelInstance for a model folder or an engine file."""
    is_engine = model_file.suffix in ENGINE_SUFFIXES
    if is_engine:
        _runnable_here(model_file)
    if candidate.is_dir():
        config = json_format.MessageToDict(read_config(candidate), preserving_proto_field_name=True)
    else:
        config = _engine_config(model_file)
    run, close = instance_runner(config, model_file.parent, "cuda:0" if is_engine else "cpu")
    return run, close, f"'{candidate}' served by trtpool"


def _feeds(
    reference: Path, inputs_path: Path | None, shapes: str | None, known_profiles: tuple[str, ...]
) -> list[Samples]:
    """Given samples, else random ones at the opt shapes of --shapes or the model's first profile."""
    specs, _ = io_specs(load_graph(reference))
    if inputs_path is not None:
        return load_samples(inputs_path, specs).feeds()
    profiles = resolve_profiles([shapes] if shapes else known_profiles[:1], specs)
    return [random_samples(specs, profiles[0])]


def _known_profiles(candidate: Path, model_file: Path) -> tuple[str, ...]:
    if model_file.suffix in ENGINE_SUFFIXES:
        return read_sidecar(model_file).profiles
    if candidate.is_dir():
        text = read_config(candidate).parameters["profile"].string_value
        return tuple(t for t in text.split(";") if t.strip())
    return ()


def run_accuracy(
    candidate: Path, reference: Path | None = None, inputs: Path | None = None, shapes: str | None = None
) -> AccuracyReport:
    """Compare `candidate` with the fp32 `reference` ONNX on ONNX Runtime.

    A model folder or an engine runs through trtpool (ModelInstance); a folder's
    reference defaults to its own model.onnx (what trtpool answers vs ONNX Runtime
    on the same file), an engine's to the ONNX file its sidecar names. A bare ONNX
    file (an fp16 or int8 conversion, say) runs on ONNX Runtime."""
    candidate = Path(candidate)
    model_file = model_file_of(candidate)
    if model_file.suffix in ENGINE_SUFFIXES:
        reference = reference or Path(read_sidecar(model_file).onnx_path)
    elif candidate.is_dir():
        reference = reference or model_file
    elif reference is None:
        raise BuildError(f"'{model_file}' is an ONNX file: give the fp32 model to compare with, --reference FP32.onnx")
    feeds = _feeds(reference, inputs, shapes, _known_profiles(candidate, model_file))
    if candidate.is_dir() or model_file.suffix in ENGINE_SUFFIXES:
        run, close, label = _served(candidate, model_file)
    else:
        run, close, label = onnxruntime_runner(model_file), (lambda: None), f"'{model_file}'"
    try:
        return compare(onnxruntime_runner(reference), run, feeds, f"fp32 '{reference}' on ONNX Runtime", label)
    except InputsRefused as exc:
        raise InputsRefused(f"{exc}\n{_inputs_hint(inputs, feeds[0])}") from None
    finally:
        close()


def _inputs_hint(inputs: Path | None, feed: Samples) -> str:
    """What to do when the model refuses the inputs: its own samples, or other ones."""
    if inputs is not None:
        return f"the samples in '{inputs}' are not valid for this model: check their values and shapes"
    return (
        "these are random inputs (floats ~ N(0, 1), integers and booleans 0 or 1) at the profile's opt "
        "shapes, and they are not valid for this model (a value such as a sample rate must be one it "
        "knows): give real ones with --inputs FILE.npz, one array per input (" + ", ".join(feed) + ")"
    )
