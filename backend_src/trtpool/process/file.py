"""The user's process file: ``process.py`` in the model's version folder, beside the model file.

    def setup(model_config: dict, folder: Path) -> None: ...           # optional, once per instance
                                                                        # (and per preprocess_processes worker)
    def preprocess(inputs: dict) -> dict: ...                           # optional: one request
    def postprocess(outputs: dict, inputs: dict) -> dict: ...           # optional: one request
    def preprocess_batch(batch: list[dict], device: str) -> list: ...   # optional: the whole batch
    def postprocess_batch(outputs: list[dict], batch: list[dict]) -> list: ...  # optional: the whole batch
    OUTPUTS_ON_DEVICE = True                                            # optional: see below

``preprocess`` takes one request's inputs as the client sent them (numpy
arrays named as config.pbtxt declares them; TYPE_STRING arrives as an object
array of bytes) and returns the engine's inputs for that request.
``postprocess`` takes that request's slice of the engine's outputs plus its
original inputs and returns the response's outputs. A batched model keeps the
batch axis on both sides: a request of b rows gives and gets b rows.

The batch faces take every request of the batch Triton's dynamic batcher formed
in one call, and return one entry per request, in order: that request's tensors,
or an exception that refuses that request alone. ``preprocess_batch`` learns the
instance's device ("cpu" or "cuda:N") and may return device tensors there (torch
tensors, or any object with ``__cuda_array_interface__``), complete when it
returns: the runtime copies them into its context's device buffers on the device,
so decoded pixels never cross the host. Which faces serve is the parameter
``process_faces`` (trtpool.process.faces.choose_faces): by default the batch faces on a
GPU instance and the per-request faces on a CPU one, each where the file has it.

``OUTPUTS_ON_DEVICE = True`` (read after ``setup``, which may set it) says that
``postprocess_batch`` takes the engine's outputs as device tensors: where the
instance serves that face and its runtime can (the torch runtime on a GPU), the
outputs stay on the device, the file's own copy, so a softmax and top-k there
brings only the answer to the host; elsewhere they come as host arrays as
always, so the file handles both (the log says which at load).

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
from trtpool.model.config_pbtxt import SECTIONS

PROCESS_FILE = "process.py"
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
    def engine_faces(self) -> tuple[str, ...]:
        return _engine_faces(self.has_pre, self.has_post)


def _engine_faces(preprocess: bool, postprocess: bool) -> tuple[str, ...]:
    """The config sections that are the engine's own: those no process function stands in front of."""
    return tuple(section for section, replaced in zip(SECTIONS, (preprocess, postprocess)) if not replaced)


def engine_faces(version_dir: Path) -> tuple[str, ...]:
    """The version folder's engine faces, read without running its process.py (auto-complete
    runs before the model loads)."""
    path = Path(version_dir) / PROCESS_FILE
    return faces_of_file(path) if path.is_file() else SECTIONS


def faces_of_file(path: Path) -> tuple[str, ...]:
    """Which faces a process file binds at its top level (a def, an assignment or an
    import, as the loaded module's attributes will have them), as engine faces."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except SyntaxError as exc:
        raise ConfigError(f"{path}: not valid Python: {exc}") from exc
    bound = set(itertools.chain.from_iterable(_bound_names(node) for node in tree.body))
    return _engine_faces(bool({"preprocess", "preprocess_batch"} & bound),
                         bool({"postprocess", "postprocess_batch"} & bound))


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
    functions = {name: getattr(module, name, None) for name in ("setup", *FACES)}
    for name, function in functions.items():
        if function is not None and not callable(function):
            raise ConfigError(f"{path}: '{name}' is a {type(function).__name__}, expected a function")
    if all(functions[face] is None for face in FACES):
        raise ConfigError(f"{path}: defines none of preprocess(inputs), postprocess(outputs, inputs), "
                          "preprocess_batch(batch, device), postprocess_batch(outputs, batch); "
                          "define at least one, or remove the file")
    if functions["setup"] is not None:
        try:
            functions["setup"](model_config, Path(version_dir))
        except Exception as exc:
            raise ConfigError(f"{path}: setup(model_config, folder) raised {type(exc).__name__}: {exc}") from exc
    on_device = getattr(module, "OUTPUTS_ON_DEVICE", False)
    if not isinstance(on_device, bool):
        raise ConfigError(f"{path}: OUTPUTS_ON_DEVICE is {on_device!r}, expected True or False")
    return ProcessFile(path, *(functions[face] for face in FACES), outputs_on_device=on_device)
