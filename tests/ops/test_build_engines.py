"""deploy/base/build-engines.sh, the init container's job, run for real.

TensorRT-RTX builds engines ahead of time without a GPU, so the script's whole
path runs here: ONNX model folders in, an engine repository per GPU type and
TensorRT version out, rebuilt only when the source changes. (The engines
themselves cannot execute here.)
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.harness.repository import add_example
from trtpool.model.shapes import format_profile
from trtpool.model.sidecar import read_sidecar
from trtpool_builder.folder.model_folder import read_config

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "base" / "build-engines.sh"


def run_script(source: Path, cache: Path, served: Path) -> str:
    env = {**os.environ, "SOURCE": str(source), "CACHE": str(cache), "SERVED": str(served),
           "TRTPOOL_GPU_TYPE": "Test GPU", "TRTPOOL_BUILD_ARGS": "--precision fp32",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_engines_are_built_once_per_gpu_type_and_served_from_the_cache(tmp_path):
    source, cache, served = tmp_path / "source", tmp_path / "cache", tmp_path / "work" / "models"
    served.parent.mkdir()
    add_example(source, tmp_path / "onnx", "tiny", contexts="2")

    first = run_script(source, cache, served)
    [target] = (cache / "Test-GPU").glob("tensorrt_rtx-*")
    assert served.resolve() == target.resolve()
    folder = target / "tiny"
    assert sorted(p.name for p in (folder / "1").iterdir()) == ["model.plan", "model.plan.json"]
    assert (folder / "config.pbtxt").read_text() == (source / "tiny" / "config.pbtxt").read_text()
    config_profile = read_config(folder).parameters["profile"].string_value
    built = read_sidecar(folder / "1" / "model.plan").signature().profiles
    assert ";".join(format_profile(p.ranges) for p in built) == config_profile
    assert "tiny: built" in first
    assert [p.name for p in target.iterdir()] == ["tiny"], "scratch folders must stay outside the repository"

    plan_time = (folder / "1" / "model.plan").stat().st_mtime_ns
    assert "tiny: up to date" in run_script(source, cache, served)
    assert (folder / "1" / "model.plan").stat().st_mtime_ns == plan_time

    config = source / "tiny" / "config.pbtxt"
    config.write_text(config.read_text().replace('string_value: "2"', 'string_value: "3"', 1))
    assert "tiny: built" in run_script(source, cache, served)
    assert read_config(folder).parameters["contexts"].string_value == "3"
