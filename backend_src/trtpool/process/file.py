"""The user's process file: ``process.py`` in the model's version folder, beside the model file.

    def setup(model_config: dict, folder: Path) -> None: ...            # optional, once per instance
    def preprocess(inputs: dict) -> dict: ...                            # one request
    def postprocess(outputs: dict, inputs: dict) -> dict: ...            # one request
    def preprocess_batch(batch: list[dict], device: str) -> list: ...    # the whole batch
    def postprocess_batch(outputs: list[dict], batch: list[dict]) -> list: ...
    OUTPUTS_ON_DEVICE = True                                             # optional

Loaded from the model folder only, with the trust of a Python-backend model's model.py.
What each function takes and returns, and the faces: docs/design/process-file.md.
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
from trtpool.model.config_pbtxt import SECTIONS
from trtpool.parameters import PROCESS_FILE

_loaded = itertools.count()  # each instance gets its own module object

Tensors = dict[str, Any]


FACES = ("preprocess", "postprocess", "preprocess_batch", "postprocess_batch")
Refusable = Tensors | BaseException  # a batch face's entry for one request


@dataclass(frozen=True)
class ProcessFile:
    path: Path
    preprocess: Callable[[Tensors], Tensors] | None
    postprocess: Callable[[Tensors, Tensors], Tensors] | None
    preprocess_batch: Callable[[list[Tensors], str], list[Refusable]] | None = None
    postprocess_batch: Callable[[list[Tensors], list[Tensors]], list[Refusable]] | None = None
    outputs_on_device: bool = False  # postprocess_batch takes device tensors (OUTPUTS_ON_DEVICE)

    @property
    def has_pre(self) -> bool:
        return self.preprocess is not None or self.preprocess_batch is not None

    @property
    def has_post(self) -> bool:
        return self.postprocess is not None or self.postprocess_batch is not None

    @property
    def engine_sections(self) -> tuple[str, ...]:
        return _engine_sections(self.has_pre, self.has_post)


def _engine_sections(preprocess: bool, postprocess: bool) -> tuple[str, ...]:
    """The config sections that are the engine's own: those no process function stands in front of."""
    return tuple(section for section, replaced in zip(SECTIONS, (preprocess, postprocess), strict=True) if not replaced)


def engine_sections(version_dir: Path) -> tuple[str, ...]:
    """The version folder's engine sections, read without running its process.py (auto-complete
    runs before the model loads)."""
    path = Path(version_dir) / PROCESS_FILE
    return sections_of_file(path) if path.is_file() else SECTIONS


def sections_of_file(path: Path) -> tuple[str, ...]:
    """The engine sections of a process file, from the faces it binds at its top level (a def,
    an assignment or an import, as the loaded module's attributes will have them)."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except SyntaxError as exc:
        raise ConfigError(f"{path}: not valid Python: {exc}") from exc
    bound = set(itertools.chain.from_iterable(_bound_names(node) for node in tree.body))
    return _engine_sections(
        bool({"preprocess", "preprocess_batch"} & bound), bool({"postprocess", "postprocess_batch"} & bound)
    )


def _bound_names(statement: ast.stmt) -> list[str]:
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [statement.name]
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return [alias.asname or alias.name.split(".")[0] for alias in statement.names]
    targets = (
        statement.targets
        if isinstance(statement, ast.Assign)
        else [statement.target]
        if isinstance(statement, ast.AnnAssign | ast.AugAssign)
        else []
    )
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
    functions = {name: getattr(module, name, None) for name in ("setup", *FACES)}
    for name, function in functions.items():
        if function is not None and not callable(function):
            raise ConfigError(f"{path}: '{name}' is a {type(function).__name__}, expected a function")
    if all(functions[face] is None for face in FACES):
        raise ConfigError(
            f"{path}: defines none of preprocess(inputs), postprocess(outputs, inputs), "
            "preprocess_batch(batch, device), postprocess_batch(outputs, batch); "
            "define at least one, or remove the file"
        )
    if functions["setup"] is not None:
        try:
            functions["setup"](model_config, Path(version_dir))
        except Exception as exc:
            raise ConfigError(f"{path}: setup(model_config, folder) raised {type(exc).__name__}: {exc}") from exc
    on_device = getattr(module, "OUTPUTS_ON_DEVICE", False)
    if not isinstance(on_device, bool):
        raise ConfigError(f"{path}: OUTPUTS_ON_DEVICE is {on_device!r}, expected True or False")
    return ProcessFile(path, **{face: functions[face] for face in FACES}, outputs_on_device=on_device)
