"""Model folders for the example models, regenerated only when their inputs change.

Each folder keeps a stamp (`.trtpool-example.json`) of what produced it: the
example's options, the runtime and a hash of the generator's source. A second
run with the same stamp and files in place does nothing.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtpool_builder import examples
from trtpool_builder.engine.build import BuildOptions, build_engine
from trtpool_builder.engine.gpu import current_gpu
from trtpool_builder.examples import get_example, write_example
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder
from trtpool_builder.installed import is_importable

RUNTIMES = ("auto", "onnx", "tensorrt")
STAMP = ".trtpool-example.json"


@dataclass(frozen=True)
class ExampleFolder:
    folder: Path
    runtime: str  # onnx | tensorrt: what the version folder serves
    regenerated: bool


def generator_hash() -> str:
    """Changes whenever the example generators' code changes."""
    digest = hashlib.sha256()
    for source in sorted(Path(examples.__file__).parent.rglob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def resolve_runtime(runtime: str) -> str:
    """auto: a TensorRT engine only when `tensorrt` imports and a GPU is present, else ONNX."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime '{runtime}': expected one of {', '.join(RUNTIMES)}")
    if runtime == "auto":
        return "tensorrt" if is_importable("tensorrt") and current_gpu() is not None else "onnx"
    return runtime


def _model_file(folder: Path, runtime: str) -> Path:
    return folder / "1" / ("model.plan" if runtime == "tensorrt" else "model.onnx")


def make_example_folder(
    repo: Path, name: str, runtime: str = "auto", options: dict[str, Any] | None = None
) -> ExampleFolder:
    """`<repo>/<name>` serving example `name`; an engine is built from `<repo>/<name>/model.onnx`."""
    example = get_example(name)
    resolved = example.options(**(options or {}))
    served = resolve_runtime(runtime)
    folder = Path(repo) / name
    stamp = {"example": name, "options": resolved, "runtime": served, "generator": generator_hash()}
    stamp_path = folder / STAMP
    model_file = _model_file(folder, served)
    if (
        stamp_path.is_file()
        and json.loads(stamp_path.read_text()) == stamp
        and model_file.is_file()
        and (folder / "config.pbtxt").is_file()
    ):
        return ExampleFolder(folder, served, regenerated=False)

    stamp_path.unlink(missing_ok=True)
    profiles = example.serving_profiles(**resolved)
    serving = ServingOptions(preferred_batch_sizes=example.preferred_batch_sizes)
    with tempfile.TemporaryDirectory(prefix="trtpool-example-") as scratch:
        process = example.process.process_options(Path(scratch), resolved) if example.process else None
        if served == "tensorrt":
            source = write_example(name, folder / "model.onnx", **resolved)
            build_engine(source, model_file, BuildOptions(shapes=profiles))
            make_model_folder(repo, name, model_file, options=serving, process=process)
        else:
            write_example(name, model_file, **resolved)
            (folder / "model.onnx").unlink(missing_ok=True)
            make_model_folder(repo, name, model_file, profiles, serving, process=process)
    if example.process:
        example.process.write_sample(folder)
    stamp_path.write_text(json.dumps(stamp, indent=2) + "\n")
    return ExampleFolder(folder, served, regenerated=True)
