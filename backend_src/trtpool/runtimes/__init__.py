"""Choose and load a runtime for a model folder.

`runtime: auto` picks by the file in the version folder: an engine
(model.plan / *.engine) goes to TensorRT, model.onnx to ONNX Runtime. The
torch runtime (GPU, converts model.onnx) is chosen explicitly. A
`module:Class` value loads a runtime class from the serving Python's path.
"""
from __future__ import annotations

import importlib
from pathlib import Path

from trtpool.config import PoolConfig
from trtpool.errors import ConfigError, EngineError
from trtpool.runtimes.base import Runtime

DEFAULT_FILES = {
    "tensorrt": "model.plan",
    "tensorrt_rtx": "model.plan",
    "onnxruntime": "model.onnx",
    "torch": "model.onnx",
}
RUNTIME_BY_SUFFIX = {".plan": "tensorrt", ".engine": "tensorrt", ".onnx": "onnxruntime"}


def resolve(cfg: PoolConfig) -> tuple[str, Path]:
    """The runtime name and model file this config asks for."""
    if cfg.runtime != "auto":
        return cfg.runtime, cfg.version_dir / (cfg.model_file or DEFAULT_FILES.get(cfg.runtime, "model.onnx"))
    if cfg.model_file:
        suffix = Path(cfg.model_file).suffix
        if suffix not in RUNTIME_BY_SUFFIX:
            raise ConfigError(
                f"parameter 'model_file': cannot pick a runtime for '{cfg.model_file}'; "
                f"expected a file ending in {', '.join(RUNTIME_BY_SUFFIX)} or an explicit 'runtime'"
            )
        return RUNTIME_BY_SUFFIX[suffix], cfg.version_dir / cfg.model_file
    for name in ("model.plan", "model.engine", "model.onnx"):
        if (cfg.version_dir / name).is_file():
            return RUNTIME_BY_SUFFIX[Path(name).suffix], cfg.version_dir / name
    raise EngineError(
        f"no model file in '{cfg.version_dir}': expected model.plan (TensorRT) or "
        "model.onnx (ONNX Runtime, or the torch runtime), or set parameter 'model_file'"
    )


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
        from trtpool.runtimes.torch import TorchRuntime
        return TorchRuntime(cfg, path, precision=cfg.precision, sequence_buckets=cfg.sequence_buckets)
    module_name, _, class_name = name.partition(":")
    try:
        runtime_class = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"parameter 'runtime': cannot load '{name}': {exc}") from exc
    return runtime_class(cfg, path)
