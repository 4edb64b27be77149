"""Choose and load a runtime for a model folder.

`runtime: auto` picks by the file in the version folder: an engine
(model.plan / *.engine) goes to TensorRT, model.onnx to ONNX Runtime. The
torch runtime (GPU, converts model.onnx) is chosen explicitly.

A config cannot widen what the backend runs or reads. A config may come from
a client rather than the repository (Triton's model-control API takes a
config with a load request), so other runtimes come from a registry the
operator controls, the entry point group ``trtpool.runtimes`` of the packages
installed in the serving environment (a config names a registered runtime,
never a module), and a `model_file` must lie inside the model's version
folder once every symlink is followed. The default file names are the
repository's own layout, which may link elsewhere (as Triton repositories
may, and as trtpool-model's staging does).
"""

from __future__ import annotations

from dataclasses import replace
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from trtpool.errors import ConfigError, EngineError
from trtpool.model.sidecar import read_sidecar
from trtpool.model.signature import Signature
from trtpool.parameters import RUNTIME_ENTRY_POINTS, RUNTIMES, PoolConfig
from trtpool.runtimes.base import Runtime

DEFAULT_FILES = {
    "tensorrt": "model.plan",
    "tensorrt_rtx": "model.plan",
    "onnxruntime": "model.onnx",
    "torch": "model.onnx",
}
RUNTIME_BY_SUFFIX = {".plan": "tensorrt", ".engine": "tensorrt", ".onnx": "onnxruntime"}


def registered_runtimes() -> dict[str, EntryPoint]:
    """The runtimes installed packages register: name -> entry point (module:Class)."""
    return {point.name: point for point in entry_points(group=RUNTIME_ENTRY_POINTS)}


def confined(version_dir: Path, file_name: str) -> Path:
    """version_dir / file_name for parameter 'model_file', refused unless it stays
    inside version_dir with every symlink followed (no absolute path, no '..'
    out, no link out)."""
    if Path(file_name).is_absolute():
        raise ConfigError(
            f"parameter 'model_file': '{file_name}' is an absolute path; name a file inside "
            f"the model's version folder '{version_dir}', such as model.onnx"
        )
    path = version_dir / file_name
    try:
        folder, target = version_dir.resolve(), path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop: RuntimeError before Python 3.13, OSError after
        raise ConfigError(
            f"parameter 'model_file': '{file_name}' cannot be resolved ({exc}); name a file "
            f"inside the model's version folder '{version_dir}'"
        ) from None
    if not target.is_relative_to(folder):
        raise ConfigError(
            f"parameter 'model_file': '{file_name}' resolves to '{target}', outside the model's "
            f"version folder '{folder}'; the model file must lie inside it"
        )
    return path


def resolve(cfg: PoolConfig) -> tuple[str, Path]:
    """The runtime name and model file this config asks for."""
    if cfg.model_file:
        path = confined(cfg.version_dir, cfg.model_file)
        if cfg.runtime != "auto":
            return cfg.runtime, path
        suffix = path.suffix
        if suffix not in RUNTIME_BY_SUFFIX:
            raise ConfigError(
                f"parameter 'model_file': cannot pick a runtime for '{cfg.model_file}'; "
                f"expected a file ending in {', '.join(RUNTIME_BY_SUFFIX)} or an explicit 'runtime'"
            )
        return RUNTIME_BY_SUFFIX[suffix], path
    if cfg.runtime != "auto":
        return cfg.runtime, cfg.version_dir / DEFAULT_FILES.get(cfg.runtime, "model.onnx")
    for name in ("model.plan", "model.engine", "model.onnx"):
        if (cfg.version_dir / name).is_file():
            return RUNTIME_BY_SUFFIX[Path(name).suffix], cfg.version_dir / name
    raise EngineError(
        f"no model file in '{cfg.version_dir}': expected model.plan (TensorRT) or "
        f"model.onnx (ONNX Runtime, or the torch runtime), or set parameter 'model_file'; {_holds(cfg.version_dir)}"
    )


def _holds(version_dir: Path) -> str:
    """What a version folder without a model file holds instead: the files a user may have misnamed."""
    if not version_dir.is_dir():
        return "the folder does not exist"
    found = sorted(entry.name for entry in version_dir.iterdir() if not entry.name.startswith("."))
    if not found:
        return "the folder is empty"
    listed = ", ".join(f"'{name}'" for name in found[:8]) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
    models = [name for name in found if Path(name).suffix in RUNTIME_BY_SUFFIX]
    hint = f" (rename '{models[0]}' to model{Path(models[0]).suffix}, or name it in 'model_file')" if models else ""
    return f"it holds {listed}{hint}"


def registered_runtime(name: str) -> type[Runtime]:
    """The Runtime class registered under `name` in the entry point group."""
    registered = registered_runtimes()
    if name not in registered:
        raise ConfigError(
            f"parameter 'runtime': '{name}' is not a built-in runtime ({', '.join(RUNTIMES)}) and no installed "
            f"package registers it in the entry point group '{RUNTIME_ENTRY_POINTS}' "
            f"(registered: {', '.join(sorted(registered)) or 'none'})"
        )
    point = registered[name]
    try:
        runtime_class = point.load()
    except Exception as exc:
        raise ConfigError(
            f"parameter 'runtime': '{name}' is registered as '{point.value}', which cannot be "
            f"loaded: {type(exc).__name__}: {exc}"
        ) from exc
    if not (isinstance(runtime_class, type) and issubclass(runtime_class, Runtime)):
        raise ConfigError(
            f"parameter 'runtime': '{name}' is registered as '{point.value}', which is not a trtpool Runtime class"
        )
    return runtime_class


def offline_signature(cfg: PoolConfig) -> Signature:
    """The signature of the model `cfg` names, read without its device (auto-complete has none):
    a TensorRT engine's from its sidecar; an ONNX file's as ONNX Runtime reads it on the CPU,
    also for the torch runtime, which converts that file."""
    name, path = resolve(cfg)
    if name in ("tensorrt", "tensorrt_rtx"):
        return read_sidecar(path).signature()
    if name == "torch":
        cfg = replace(cfg, runtime="onnxruntime")
    runtime = load_runtime(cfg)
    try:
        return runtime.signature
    finally:
        runtime.close()


def load_runtime(cfg: PoolConfig) -> Runtime:
    name, path = resolve(cfg)
    if not path.is_file():
        raise EngineError(f"model file '{path}' does not exist (runtime '{name}')")
    if name == "onnxruntime":
        from trtpool.runtimes.onnxruntime import OnnxRuntime

        return OnnxRuntime(cfg, path)
    if name in ("tensorrt", "tensorrt_rtx"):
        from trtpool.runtimes.tensorrt import TensorRTRuntime

        return TensorRTRuntime(cfg, path, module_name=None if name == "tensorrt" and cfg.runtime == "auto" else name)
    if name == "torch":
        from trtpool.runtimes.torch.runtime import TorchRuntime

        return TorchRuntime(cfg, path)
    return registered_runtime(name)(cfg, path)
