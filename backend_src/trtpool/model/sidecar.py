"""The JSON sidecar written next to every engine: ``<engine>.json``.

A serialized engine only runs on the TensorRT module, version and GPU it was
built for, and says nothing readable about itself. The sidecar records that,
plus the engine's I/O, profiles and how it was built, so that the backend
can refuse an incompatible engine with a message that says what to run to
rebuild it, and a model folder can be written without loading the engine.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from trtpool.errors import EngineError
from trtpool.model.shapes import parse_profile
from trtpool.model.signature import Profile, ShapeRange, Signature, TensorSpec, is_batched

FORMAT = "trtpool-engine-sidecar"
FORMAT_VERSION = 1
# Where TensorRT-RTX engines run when no target compute capability is set,
# and every GPU TensorRT-RTX 1.x can target at all (Turing only on request).
RTX_DEFAULT_TARGETS = ("8.0", "8.6", "8.9", "12.0", "12.1")
RTX_SUPPORTED = ("7.5", *RTX_DEFAULT_TARGETS)
BUILD_COMMAND = "trtpool-build"


@dataclass(frozen=True)
class TensorInfo:
    """One engine I/O tensor; `ranges` has one entry per profile (-1: unknown)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    ranges: tuple[ShapeRange, ...] = ()

    def spec(self) -> TensorSpec:
        return TensorSpec(self.name, np.dtype(self.dtype), self.shape)


@dataclass(frozen=True)
class Target:
    """What the engine runs on.

    TensorRT: `gpu_name` and the one compute capability of the build GPU.
    TensorRT-RTX: no GPU name (it builds without one) and the target list.
    """

    compute_capabilities: tuple[str, ...]
    gpu_name: str | None = None
    hardware_compatible: bool = False
    version_compatible: bool = False


@dataclass(frozen=True)
class Precision:
    mode: str  # fp32 | fp16 | bf16 | int8 | fp8
    strongly_typed: bool
    legacy_flags: tuple[str, ...] = ()  # TensorRT 10 builder flags used instead
    quantizer: str | None = None  # modelopt | onnxruntime, for int8/fp8
    kept_fp32: tuple[str, ...] = ()  # nodes an fp16 conversion left in fp32 (values beyond fp16's range)
    max_error: float | None = (
        None  # worst output error of the converted graph vs fp32 (trtpool_builder.precision.accuracy)
    )
    max_error_allowed: float | None = None  # the limit the build was held to


@dataclass(frozen=True)
class Sidecar:
    engine: str  # the engine file (its name in the JSON)
    module: str  # tensorrt | tensorrt_rtx
    module_version: str
    target: Target
    precision: Precision
    profiles: tuple[str, ...]  # trtpool.model.shapes text form, one per profile
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    onnx_path: str
    onnx_sha256: str
    build_options: dict[str, Any] = field(default_factory=dict)
    build_seconds: float = 0.0
    build_date: str = ""  # ISO 8601, UTC

    def signature(self) -> Signature:
        profiles = tuple(Profile(i, parse_profile(text)) for i, text in enumerate(self.profiles))
        inputs, outputs = tuple(t.spec() for t in self.inputs), tuple(t.spec() for t in self.outputs)
        return Signature(inputs, outputs, profiles, is_batched(inputs, outputs), owner="engine")


def sidecar_path(engine: Path) -> Path:
    return engine.with_name(engine.name + ".json")


def to_dict(sidecar: Sidecar) -> dict[str, Any]:
    body = asdict(sidecar)
    body["engine"] = Path(sidecar.engine).name
    return {"format": FORMAT, "format_version": FORMAT_VERSION, **body}


def from_dict(data: dict[str, Any], engine: Path) -> Sidecar:
    def tensors(items: list[dict[str, Any]]) -> tuple[TensorInfo, ...]:
        return tuple(
            TensorInfo(
                t["name"],
                t["dtype"],
                tuple(t["shape"]),
                tuple(ShapeRange(tuple(r["min"]), tuple(r["opt"]), tuple(r["max"])) for r in t.get("ranges", ())),
            )
            for t in items
        )

    target, precision = data["target"], data["precision"]
    return Sidecar(
        engine=str(engine),
        module=data["module"],
        module_version=data["module_version"],
        target=Target(
            tuple(target["compute_capabilities"]),
            target.get("gpu_name"),
            target.get("hardware_compatible", False),
            target.get("version_compatible", False),
        ),
        precision=Precision(
            precision["mode"],
            precision["strongly_typed"],
            tuple(precision.get("legacy_flags", ())),
            precision.get("quantizer"),
            tuple(precision.get("kept_fp32", ())),
            precision.get("max_error"),
            precision.get("max_error_allowed"),
        ),
        profiles=tuple(data["profiles"]),
        inputs=tensors(data["inputs"]),
        outputs=tensors(data["outputs"]),
        onnx_path=data["onnx_path"],
        onnx_sha256=data["onnx_sha256"],
        build_options=dict(data.get("build_options", {})),
        build_seconds=float(data.get("build_seconds", 0.0)),
        build_date=data.get("build_date", ""),
    )


def write_sidecar(engine: Path, sidecar: Sidecar) -> Path:
    """Write `<engine>.json` describing `engine` (also for a copy of the engine)."""
    path = sidecar_path(Path(engine))
    path.write_text(json.dumps(to_dict(replace(sidecar, engine=str(engine))), indent=2) + "\n")
    return path


def read_sidecar(engine: Path) -> Sidecar:
    """Read `<engine>.json`; errors name the file and say how to produce it."""
    engine = Path(engine)
    path = sidecar_path(engine)
    if not path.is_file():
        raise EngineError(
            f"engine '{engine}' has no sidecar '{path.name}' next to it; trtpool needs it to "
            f"check the engine against this machine. Rebuild the engine with '{BUILD_COMMAND}', "
            "which writes both files"
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"sidecar '{path}' is not readable JSON: {exc}") from exc
    if data.get("format") != FORMAT or data.get("format_version") != FORMAT_VERSION:
        raise EngineError(
            f"sidecar '{path}' has format {data.get('format')!r} version {data.get('format_version')!r}; "
            f"this trtpool reads {FORMAT!r} version {FORMAT_VERSION}"
        )
    try:
        return from_dict(data, engine)
    except (KeyError, TypeError, ValueError) as exc:
        raise EngineError(f"sidecar '{path}' is incomplete or malformed: {exc!r}") from exc


def format_command(options: dict[str, Any]) -> str:
    """`trtpool-build` with `options` as flags: key -> --key-name, lists repeat, booleans are switches."""
    args = [BUILD_COMMAND]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                args += [flag, str(item)]
        else:
            args += [flag, str(value)]
    return shlex.join(args)


def rebuild_command(sidecar: Sidecar, module_name: str, compute_capability: str | None) -> str:
    """The build command that makes this engine again, for the running module and GPU."""
    options = dict(sidecar.build_options, trt_module=module_name, output=sidecar.engine)
    if module_name == "tensorrt_rtx" and compute_capability:
        options["compute_capability"] = [compute_capability]
    else:
        options.pop("compute_capability", None)
    if module_name != "tensorrt":
        options.pop("hardware_compatible", None)
    return format_command(options)


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def _version_ok(target: Target, built: str, running: str) -> bool:
    if built == running:
        return True
    # Version-compatible engines carry their lean runtime and run on the same or any newer
    # TensorRT, across major versions ("engines built with TensorRT 10 work with TensorRT 11":
    # TensorRT 11.1 docs, inference-library/engine-compatibility.html); never on an older one.
    return target.version_compatible and _version_tuple(running) >= _version_tuple(built)


def _gpu_ok(sidecar: Sidecar, compute_capability: str) -> bool:
    targets = sidecar.target.compute_capabilities
    if sidecar.module == "tensorrt" and sidecar.target.hardware_compatible:
        return _version_tuple(compute_capability) >= (8, 0)  # Ampere and later
    return compute_capability in targets


def check_compatible(
    sidecar: Sidecar, module_name: str, module_version: str, gpu_name: str, compute_capability: str
) -> None:
    """Raise EngineError unless the engine can run on this module and GPU.

    The message names the engine, what it was built for, what is running, and
    the exact command that rebuilds it here.
    """
    problems = []
    if module_name != sidecar.module:
        problems.append(
            f"it was built with {sidecar.module} {sidecar.module_version} "
            f"but this backend runs {module_name} {module_version}"
        )
    elif not _version_ok(sidecar.target, sidecar.module_version, module_version):
        problems.append(
            f"it was built with {sidecar.module} {sidecar.module_version}"
            f"{' (version-compatible)' if sidecar.target.version_compatible else ''} "
            f"but this backend runs {module_name} {module_version}"
        )
    if not _gpu_ok(sidecar, compute_capability):
        built_for = ", ".join(sidecar.target.compute_capabilities)
        if sidecar.target.gpu_name:
            built_for = f"{sidecar.target.gpu_name} (compute capability {built_for})"
        else:
            built_for = f"compute capability {built_for}"
        problems.append(
            f"it was built for {built_for} but this GPU is {gpu_name} (compute capability {compute_capability})"
        )
    if problems:
        raise EngineError(
            f"engine '{sidecar.engine}' cannot run here: {'; '.join(problems)}. "
            + _rebuild_advice(sidecar, module_name, compute_capability)
        )


def _rebuild_advice(sidecar: Sidecar, module_name: str, compute_capability: str) -> str:
    if module_name == "tensorrt_rtx" and compute_capability not in RTX_SUPPORTED:
        return (
            f"TensorRT-RTX cannot run on compute capability {compute_capability} at all (it supports "
            f"{', '.join(RTX_SUPPORTED)}); serve a TensorRT engine instead, built on this machine with:\n  "
            + rebuild_command(sidecar, "tensorrt", None)
        )
    how = (
        "on this machine (TensorRT builds for the GPU it runs on)"
        if module_name == "tensorrt"
        else "on any machine (TensorRT-RTX builds without a GPU)"
    )
    return f"Rebuild it {how} with:\n  {rebuild_command(sidecar, module_name, compute_capability)}"
