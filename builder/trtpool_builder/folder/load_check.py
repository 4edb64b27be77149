"""Before trtpool-model writes a folder: does it load in trtpool? Asked of the server's own code.

The config is handed over as Triton hands it to the backend (the ModelConfig
message as a dict with proto field names), auto-completed as the backend's
auto_complete_config does, and loaded with `trtpool.instance.ModelInstance`,
so a folder the server would refuse is refused here with the server's message. A folder that needs a GPU (an engine,
the torch runtime) on a machine that cannot run it (no GPU, another GPU, no
TensorRT: building for another GPU is normal) is checked as far as this
machine can: the config against the engine's sidecar, and the sidecar against
the targets it was built for; a note says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from trtpool import parameters
from trtpool.instance import ModelInstance, describe
from trtpool.model.config_pbtxt import auto_complete, check_agreement
from trtpool.model.sidecar import check_compatible, read_sidecar
from trtpool.model.signature import Signature
from trtpool.process.file import engine_sections
from trtpool.runtimes import resolve
from trtpool_builder.engine.engine_here import built_for, why_not_here
from trtpool_builder.engine.gpu import gpu_status

ENGINE_RUNTIMES = ("tensorrt", "tensorrt_rtx")
GPU_RUNTIMES = (*ENGINE_RUNTIMES, "torch")


@dataclass(frozen=True)
class Loaded:
    notes: list[str]
    signature: Signature | None  # as the runtime reports it; None when it could not run here


def as_triton_hands_it(config: mc.ModelConfig) -> dict[str, Any]:
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def _device(config: mc.ModelConfig, runtime: str) -> str:
    """Where the instance will run: its instance_group kind; with none, a GPU for a GPU runtime
    (Triton gives instances GPUs where it serves them) or when this machine has one."""
    kinds = {group.kind for group in config.instance_group}
    if kinds == {mc.ModelInstanceGroup.KIND_CPU}:
        return "cpu"
    if kinds or runtime in GPU_RUNTIMES or gpu_status()[0] is not None:
        return "cuda:0"
    return "cpu"


def _engine_checks(handed: dict[str, Any], engine: Path, faces: tuple[str, ...]) -> None:
    """What the server checks of an engine folder, short of running it, on its own targets."""
    sidecar = read_sidecar(engine)
    check_agreement(handed, sidecar.signature(), faces)
    for target in sidecar.target.compute_capabilities:
        check_compatible(
            sidecar, sidecar.module, sidecar.module_version, sidecar.target.gpu_name or "the target GPU", target
        )


def check_loads(config: mc.ModelConfig, version_dir: Path, faces: tuple[str, ...] | None = None) -> Loaded:
    """Load `version_dir` with `config` as the server would (auto-complete first, as model.py's
    auto_complete_config does); raise what it would raise. `faces`: engine_sections(version_dir),
    where the caller has it already."""
    handed = as_triton_hands_it(config)
    faces = engine_sections(version_dir) if faces is None else faces
    handed.update(auto_complete(handed, describe(handed, version_dir), faces))
    runtime, path = resolve(parameters.load(handed, version_dir, "cpu"))
    device = _device(config, runtime)
    if runtime in GPU_RUNTIMES and device != "cpu":
        why = why_not_here(path) if runtime in ENGINE_RUNTIMES else gpu_status()[1] or None
        if why is not None:
            if runtime in ENGINE_RUNTIMES:
                _engine_checks(handed, path, faces)
                sidecar = read_sidecar(path)
                runtime = sidecar.module  # model.plan resolves to 'tensorrt'; the engine says which
                where = f"It loads where {built_for(sidecar)} runs"
            else:
                where = "It loads on a machine with a CUDA GPU"
            return Loaded(
                [
                    f"this machine cannot run the '{runtime}' runtime ({why}); the folder was checked "
                    f"as far as it can be here (config, tensors and profiles against the sidecar). {where}"
                ],
                None,
            )
    instance = ModelInstance(handed, version_dir, device)
    try:
        return Loaded([], instance.runtime.signature)
    finally:
        instance.close()
