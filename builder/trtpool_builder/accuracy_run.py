"""trtpool-accuracy's work: resolve the candidate, make inputs, compare with the fp32 ONNX.

An engine runs through the backend's own runtime (the code that serves it),
only after the sidecar says it can run on this machine; otherwise
EngineNotRunnable says why, and nothing is compared.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from google.protobuf import json_format

from trtpool import config as backend_config
from trtpool.errors import EngineError, TrtpoolError
from trtpool.sidecar import check_compatible, read_sidecar
from trtpool_builder.accuracy import AccuracyReport, Runner, compare, onnxruntime_runner
from trtpool_builder.errors import BuildError
from trtpool_builder.gpu import gpu_status
from trtpool_builder.model_folder import ENGINE_SUFFIXES, model_config, read_config
from trtpool_builder.onnx_io import io_specs, load_graph
from trtpool_builder.profiles import resolve_profiles
from trtpool_builder.samples import Samples, batches, load_samples, random_samples
from trtpool_builder.trt_module import load_trt


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
    sidecar = read_sidecar(engine)
    built_for = (f"{sidecar.module} {sidecar.module_version}, compute capability "
                 f"{', '.join(sidecar.target.compute_capabilities)}")
    try:
        trt, module_name = load_trt(sidecar.module)
    except BuildError as exc:
        raise EngineNotRunnable(f"cannot run engine '{engine}' here ({built_for}): {exc}") from exc
    gpu, why = gpu_status()
    if gpu is None:
        raise EngineNotRunnable(f"cannot run engine '{engine}' here ({built_for}): {why}. Compare the ONNX "
                                "file it was built from instead, or run this on the target GPU")
    try:
        check_compatible(sidecar, module_name, trt.__version__, gpu.name, gpu.compute_capability)
    except EngineError as exc:
        raise EngineNotRunnable(str(exc)) from exc


def engine_runner(engine: Path) -> Runner:
    """Run the engine with the backend's runtime and one execution context."""
    _runnable_here(engine)
    from trtpool.runtimes import load_runtime

    sidecar = read_sidecar(engine)
    message = model_config(engine.stem, sidecar.signature())
    message.parameters["runtime"].string_value = sidecar.module
    message.parameters["model_file"].string_value = engine.name
    message.parameters["contexts"].string_value = "1"
    cfg = backend_config.load(json_format.MessageToDict(message, preserving_proto_field_name=True),
                              engine.parent, "cuda:0")
    context = load_runtime(cfg).create_context(0)

    def run(feeds: Samples) -> dict[str, np.ndarray]:
        for name, array in feeds.items():
            context.inputs.view(name, array.shape)[...] = array
        return {name: out.copy() for name, out in context.run({n: a.shape for n, a in feeds.items()}).items()}

    return run


def _feeds(reference: Path, inputs_path: Path | None, shapes: str | None,
           known_profiles: tuple[str, ...]) -> list[Samples]:
    """Given samples, else random ones at the opt shapes of --shapes or the model's first profile."""
    specs, _ = io_specs(load_graph(reference))
    if inputs_path is not None:
        return list(batches(load_samples(inputs_path, specs), 8))
    profiles = resolve_profiles([shapes] if shapes else known_profiles[:1], specs)
    return [random_samples(specs, profiles[0])]


def run_accuracy(candidate: Path, reference: Path | None = None, inputs: Path | None = None,
                 shapes: str | None = None) -> AccuracyReport:
    """Compare `candidate` (engine, model folder or ONNX file) with the fp32 `reference` ONNX."""
    model_file = model_file_of(candidate)
    known_profiles: tuple[str, ...] = ()
    if Path(candidate).is_dir() and (Path(candidate) / "config.pbtxt").is_file():
        text = read_config(Path(candidate)).parameters["profile"].string_value
        known_profiles = tuple(t for t in text.split(";") if t.strip())
    if model_file.suffix in ENGINE_SUFFIXES:
        sidecar = read_sidecar(model_file)
        reference = reference or Path(sidecar.onnx_path)
        known_profiles = sidecar.profiles
        runner = engine_runner(model_file)
    else:
        if reference is None:
            raise BuildError(f"'{model_file}' is an ONNX file: give the fp32 model to compare with, "
                             "--reference FP32.onnx")
        runner = onnxruntime_runner(model_file)
    feeds = _feeds(reference, inputs, shapes, known_profiles)
    return compare(onnxruntime_runner(reference), runner, feeds,
                   f"fp32 '{reference}' on ONNX Runtime", f"'{model_file}'")
