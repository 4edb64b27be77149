"""The user's process file: ``process.py`` in the model's version folder, beside the model file.

    def setup(model_config: dict, folder: Path) -> None: ...           # optional, once per instance
                                                                        # (and per preprocess_processes worker)
    def preprocess(inputs: dict) -> dict: ...                           # optional
    def postprocess(outputs: dict, inputs: dict) -> dict: ...           # optional

``preprocess`` takes one request's inputs as the client sent them (numpy
arrays named as config.pbtxt declares them; TYPE_STRING arrives as an object
array of bytes) and returns the engine's inputs for that request.
``postprocess`` takes that request's slice of the engine's outputs plus its
original inputs and returns the response's outputs. A batched model keeps the
batch axis on both sides: a request of b rows gives and gets b rows.

The file is loaded from the model folder only, with the same trust as a
Python-backend model's model.py: whoever may write the repository may run code.
"""
from __future__ import annotations

import ast
import importlib.util
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtpool.errors import ConfigError
from trtpool.model_config import SECTIONS

PROCESS_FILE = "process.py"
_loaded = itertools.count()  # each instance gets its own module object

Tensors = dict[str, Any]


@dataclass(frozen=True)
class ProcessFile:
    path: Path
    preprocess: Callable[[Tensors], Tensors] | None
    postprocess: Callable[[Tensors, Tensors], Tensors] | None

    @property
    def engine_faces(self) -> tuple[str, ...]:
        return _engine_faces(self.preprocess is not None, self.postprocess is not None)


def _engine_faces(preprocess: bool, postprocess: bool) -> tuple[str, ...]:
    """The config sections that are the engine's own: those no process function stands in front of."""
    return tuple(section for section, replaced in zip(SECTIONS, (preprocess, postprocess)) if not replaced)


def engine_faces(version_dir: Path) -> tuple[str, ...]:
    """The version folder's engine faces, read without running its process.py (auto-complete
    runs before the model loads)."""
    path = Path(version_dir) / PROCESS_FILE
    return faces_of_file(path) if path.is_file() else SECTIONS


def faces_of_file(path: Path) -> tuple[str, ...]:
    """Which of preprocess and postprocess a process file binds at its top level (a def,
    an assignment or an import, as the loaded module's attributes will have them), as engine faces."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except SyntaxError as exc:
        raise ConfigError(f"{path}: not valid Python: {exc}") from exc
    bound = set(itertools.chain.from_iterable(_bound_names(node) for node in tree.body))
    return _engine_faces("preprocess" in bound, "postprocess" in bound)


def _bound_names(statement: ast.stmt) -> list[str]:
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [statement.name]
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return [alias.asname or alias.name.split(".")[0] for alias in statement.names]
    targets = (statement.targets if isinstance(statement, ast.Assign)
               else [statement.target] if isinstance(statement, ast.AnnAssign | ast.AugAssign) else [])
    return [node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name)]


def load_process_file(version_dir: Path, model_config: dict[str, Any]) -> ProcessFile | None:
    """The version folder's process.py, imported and set up; None when there is none."""
    path = Path(version_dir) / PROCESS_FILE
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(f"trtpool_process_{next(_loaded)}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigError(f"{path}: importing it raised {type(exc).__name__}: {exc}") from exc
    functions = {name: getattr(module, name, None) for name in ("setup", "preprocess", "postprocess")}
    for name, function in functions.items():
        if function is not None and not callable(function):
            raise ConfigError(f"{path}: '{name}' is a {type(function).__name__}, expected a function")
    if functions["preprocess"] is None and functions["postprocess"] is None:
        raise ConfigError(f"{path}: defines neither preprocess(inputs) nor postprocess(outputs, inputs); "
                          "define at least one, or remove the file")
    if functions["setup"] is not None:
        try:
            functions["setup"](model_config, Path(version_dir))
        except Exception as exc:
            raise ConfigError(f"{path}: setup(model_config, folder) raised {type(exc).__name__}: {exc}") from exc
    return ProcessFile(path, functions["preprocess"], functions["postprocess"])
