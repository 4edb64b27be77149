from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from trtpool.errors import EngineError
from trtpool.model.sidecar import (
    Precision, Sidecar, Target, TensorInfo, check_compatible, format_command, read_sidecar, sidecar_path,
    write_sidecar,
)
from trtpool.model.signature import ShapeRange

OPTIONS = {
    "onnx": "/models/tiny.onnx",
    "output": "/models/tiny.plan",
    "trt_module": "tensorrt_rtx",
    "shapes": ["INPUT0=1x16:8x16:64x16"],
    "precision": "fp16",
    "compute_capability": ["8.9"],
    "version_compatible": False,
    "timing_cache": None,
}


def make_sidecar(module: str = "tensorrt_rtx", **target: object) -> Sidecar:
    ranges = (ShapeRange((1, 16), (8, 16), (64, 16)),)
    return Sidecar(
        engine="tiny.plan",
        module=module,
        module_version="1.7.1.116",
        target=Target(**{"compute_capabilities": ("8.9",), **target}),
        precision=Precision("fp16", strongly_typed=True),
        profiles=("INPUT0=1x16:8x16:64x16",),
        inputs=(TensorInfo("INPUT0", "float32", (-1, 16), ranges),),
        outputs=(TensorInfo("OUTPUT0", "float32", (-1, 4),
                            (ShapeRange((1, 4), (8, 4), (64, 4)),)),),
        onnx_path="/models/tiny.onnx",
        onnx_sha256="ab" * 32,
        build_options=dict(OPTIONS, trt_module=module),
        build_seconds=0.25,
        build_date="2026-12-02T14:00:00+00:00",
    )


def test_round_trip(tmp_path: Path) -> None:
    engine = tmp_path / "model.plan"
    path = write_sidecar(engine, make_sidecar())
    assert path == sidecar_path(engine) == tmp_path / "model.plan.json"
    data = json.loads(path.read_text())
    assert data["format"] == "trtpool-engine-sidecar" and data["engine"] == "model.plan"
    back = read_sidecar(engine)
    assert back == replace(make_sidecar(), engine=str(engine))


def test_signature_from_sidecar() -> None:
    sig = make_sidecar().signature()
    assert sig.batched and sig.max_batch_size == 64
    assert sig.inputs[0].dtype == np.dtype(np.float32) and sig.inputs[0].shape == (-1, 16)
    assert sig.outputs[0].triton_dtype == "TYPE_FP32"
    assert sig.profiles[0].ranges["INPUT0"].opt == (8, 16)


def test_missing_and_corrupt_sidecar_named(tmp_path: Path) -> None:
    engine = tmp_path / "model.plan"
    with pytest.raises(EngineError, match=r"'model\.plan\.json'.*trtpool-build"):
        read_sidecar(engine)
    sidecar_path(engine).write_text("{not json")
    with pytest.raises(EngineError, match="not readable JSON"):
        read_sidecar(engine)
    sidecar_path(engine).write_text(json.dumps({"format": "other"}))
    with pytest.raises(EngineError, match="format 'other'"):
        read_sidecar(engine)
    sidecar_path(engine).write_text(json.dumps({"format": "trtpool-engine-sidecar", "format_version": 1}))
    with pytest.raises(EngineError, match="incomplete or malformed"):
        read_sidecar(engine)


def test_compatible_engine_passes() -> None:
    check_compatible(make_sidecar(), "tensorrt_rtx", "1.7.1.116", "NVIDIA RTX 4090", "8.9")


def test_wrong_gpu_names_everything_and_gives_rebuild_command() -> None:
    with pytest.raises(EngineError) as info:
        check_compatible(make_sidecar(), "tensorrt_rtx", "1.7.1.116", "NVIDIA RTX 3090", "8.6")
    message = str(info.value)
    assert "engine 'tiny.plan'" in message
    assert "built for compute capability 8.9" in message
    assert "NVIDIA RTX 3090 (compute capability 8.6)" in message
    command = shlex.split(message.split("\n  ", 1)[1])
    assert command[:1] == ["trtpool-build"]
    assert command[command.index("--compute-capability") + 1] == "8.6"
    assert command[command.index("--trt-module") + 1] == "tensorrt_rtx"
    assert command[command.index("--output") + 1] == "tiny.plan"
    assert "--version-compatible" not in command and "--timing-cache" not in command


def test_gpu_outside_tensorrt_rtx_points_to_tensorrt() -> None:
    with pytest.raises(EngineError) as info:
        check_compatible(make_sidecar(), "tensorrt_rtx", "1.7.1.116", "NVIDIA H200", "9.0")
    message = str(info.value)
    assert "TensorRT-RTX cannot run on compute capability 9.0 at all" in message
    command = shlex.split(message.split("\n  ", 1)[1])
    assert command[command.index("--trt-module") + 1] == "tensorrt"
    assert "--compute-capability" not in command


def test_wrong_module_and_version() -> None:
    with pytest.raises(EngineError, match=r"built with tensorrt_rtx 1\.7\.1\.116 but this backend runs tensorrt 10\.13"):
        check_compatible(make_sidecar(), "tensorrt", "10.13.0", "NVIDIA H200", "8.9")
    sidecar = make_sidecar("tensorrt", gpu_name="NVIDIA L4", compute_capabilities=("8.9",))
    sidecar = replace(sidecar, module_version="10.12.0")
    with pytest.raises(EngineError, match=r"10\.12\.0 but this backend runs tensorrt 10\.13\.0") as info:
        check_compatible(sidecar, "tensorrt", "10.13.0", "NVIDIA L4", "8.9")
    assert "--compute-capability" not in str(info.value)  # TensorRT builds for the GPU it runs on


def test_version_compatible_allows_newer_releases_only() -> None:
    sidecar = replace(make_sidecar("tensorrt", gpu_name="NVIDIA L4", version_compatible=True),
                      module_version="10.12.0")
    for running in ("10.13.0", "11.0.0"):  # TensorRT 10 version-compatible engines run on TensorRT 11
        check_compatible(sidecar, "tensorrt", running, "NVIDIA L4", "8.9")
    with pytest.raises(EngineError, match="version-compatible"):
        check_compatible(sidecar, "tensorrt", "10.11.0", "NVIDIA L4", "8.9")


def test_hardware_compatible_tensorrt_engine_runs_on_ampere_and_later() -> None:
    sidecar = make_sidecar("tensorrt", gpu_name="NVIDIA A100", compute_capabilities=("8.0",),
                           hardware_compatible=True)
    check_compatible(sidecar, "tensorrt", "1.7.1.116", "NVIDIA H200", "9.0")
    with pytest.raises(EngineError, match="NVIDIA A100 \\(compute capability 8.0\\).*Tesla T4"):
        check_compatible(sidecar, "tensorrt", "1.7.1.116", "Tesla T4", "7.5")


def test_format_command_quotes_and_repeats() -> None:
    command = format_command({"onnx": "my model.onnx", "shapes": ["a=1x2", "a=4x2"], "verbose": True,
                              "hardware_compatible": False, "workspace": 1024, "calib": None})
    assert shlex.split(command) == ["trtpool-build", "--onnx", "my model.onnx", "--shapes", "a=1x2",
                                    "--shapes", "a=4x2", "--verbose", "--workspace", "1024"]
