"""A complete Triton model folder for the trtpool backend from an ONNX file or an engine.

    <repo>/<name>/config.pbtxt
    <repo>/<name>/1/model.onnx                      (ONNX Runtime), or
    <repo>/<name>/1/model.plan + model.plan.json    (TensorRT engine and its sidecar)
    <repo>/<name>/1/process.py + its files          (optional: pre/post-processing, process_folder.py)

config.pbtxt is written from Triton's own protobuf classes, and the folder is
first assembled in a temporary place (a link to the model file, its sidecar,
the config) and loaded there with the server's own code (load_check); only a
folder that loads is written into the repository, so what is written is what
loads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import onnx
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from trtpool import parameters as backend_config
from trtpool.errors import ConfigError, TrtpoolError
from trtpool.model.config_pbtxt import SECTIONS, check_agreement, tensor_entry
from trtpool.model.shapes import format_profile
from trtpool.model.sidecar import read_sidecar, write_sidecar
from trtpool.model.signature import Profile, Signature, TensorSpec
from trtpool_builder.errors import naming_the_users_file
from trtpool_builder.folder.load_check import Loaded, as_triton_hands_it, check_loads
from trtpool_builder.folder.process_folder import ProcessOptions, apply_face, place_files
from trtpool_builder.graph.batch_axis import decide_batched
from trtpool_builder.graph.onnx_io import OnnxFile, external_data_files, io_specs, save_model
from trtpool_builder.graph.profiles import batch_only_profile, opt_batch, resolve_profiles
from trtpool_builder.graph.served_copy import repair_for_serving

ENGINE_SUFFIXES = (".plan", ".engine")
MODEL_FILES = ("model.onnx", "model.plan", "model.plan.json", "model.engine", "model.engine.json")
INSTANCE_KINDS = {"auto": None, "gpu": mc.ModelInstanceGroup.KIND_GPU, "cpu": mc.ModelInstanceGroup.KIND_CPU}


def _backend_default(key: str) -> str:
    """A parameter's default text in the backend's table, for one that has a default."""
    default = backend_config.PARAMETERS[key].default
    assert default is not None, key
    return default


@dataclass(frozen=True)
class ServingOptions:
    """How the model is served; the string fields become config.pbtxt parameters."""

    # The backend's defaults (its PARAMETERS table), written out so that the folder says them.
    runtime: str = _backend_default("runtime")  # auto: picked by the file in the version folder
    contexts: str = _backend_default("contexts")
    memory_fraction: str = _backend_default("memory_fraction")
    mode: str = _backend_default("mode")  # sync | decoupled
    instance_kind: str = "auto"  # auto: no instance_group (one per GPU, or CPU without one)
    max_queue_delay_microseconds: int = 100
    preferred_batch_sizes: tuple[int, ...] = ()  # (): each profile's opt batch and the max batch
    max_batch_size: int | None = None  # None: batched when the model's first axis is a batch axis (batch_axis.py)
    # Further config.pbtxt parameters (docs/configuration.md), written only when given:
    # min_contexts, max_contexts (an elastic pool), preprocess_threads, preprocess_processes.
    parameters: tuple[tuple[str, str], ...] = ()


def _tensor(message: mc.ModelInput | mc.ModelOutput, spec: TensorSpec, batched: bool) -> None:
    """The config's entry as the backend's auto-complete writes it (model_config.tensor_entry)."""
    json_format.ParseDict(tensor_entry(spec, batched), message)


def preferred_batch_sizes(signature: Signature, options: ServingOptions) -> list[int]:
    largest = max_batch_size(signature, options)
    sizes = options.preferred_batch_sizes or (*(min(opt_batch(p), largest) for p in signature.profiles), largest)
    too_large = [s for s in sizes if not 1 <= s <= largest]
    if too_large:
        raise ConfigError(
            f"preferred batch sizes {too_large} are outside 1..{largest}, the largest batch the profiles allow"
        )
    return sorted(set(sizes))


def max_batch_size(signature: Signature, options: ServingOptions) -> int:
    """The signature's (the largest batch its profiles take), or the user's where it is smaller."""
    largest = signature.max_batch_size
    if signature.batched and options.max_batch_size:
        if options.max_batch_size > largest:
            raise ConfigError(
                f"--max-batch-size {options.max_batch_size}: the profiles take batches up to "
                f"{largest}; give shapes whose first dimension reaches it"
            )
        return options.max_batch_size
    return largest


def model_config(name: str, signature: Signature, options: ServingOptions = ServingOptions()) -> mc.ModelConfig:
    """The ModelConfig message; raises ConfigError for values the backend would refuse."""
    config = mc.ModelConfig(name=name, backend="trtpool", max_batch_size=max_batch_size(signature, options))
    for spec in signature.inputs:
        _tensor(config.input.add(), spec, signature.batched)
    for spec in signature.outputs:
        _tensor(config.output.add(), spec, signature.batched)
    if signature.batched:
        config.dynamic_batching.preferred_batch_size.extend(preferred_batch_sizes(signature, options))
        config.dynamic_batching.max_queue_delay_microseconds = options.max_queue_delay_microseconds
    if options.instance_kind not in INSTANCE_KINDS:
        raise ConfigError(f"instance kind '{options.instance_kind}': expected one of {sorted(INSTANCE_KINDS)}")
    kind = INSTANCE_KINDS[options.instance_kind]
    if kind is not None:
        config.instance_group.add(kind=kind, count=1)
    if options.mode == "decoupled":
        config.model_transaction_policy.decoupled = True
    parameters = {
        "runtime": options.runtime,
        "contexts": options.contexts,
        "memory_fraction": options.memory_fraction,
        "mode": options.mode,
        "profile": ";".join(format_profile(p.ranges) for p in signature.profiles),
        **dict(options.parameters),
    }
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    # The backend's own reader: a value it would refuse fails here, not at load time.
    backend_config.load(json_format.MessageToDict(config, preserving_proto_field_name=True), Path("."), "cpu")
    return config


def write_config(folder: Path, config: mc.ModelConfig) -> Path:
    path = folder / "config.pbtxt"
    path.write_text(text_format.MessageToString(config))
    return path


def read_config(folder: Path) -> mc.ModelConfig:
    return text_format.Parse((folder / "config.pbtxt").read_text(), mc.ModelConfig())


@dataclass(frozen=True)
class _Served:
    """What the folder serves: the file (the user's, or a repaired copy), its signature, its name
    in the version folder, the external data files that travel with it, and notes for the user."""

    path: Path
    signature: Signature
    file_name: str
    data_files: tuple[Path, ...]
    notes: tuple[str, ...]


def _served_engine(model_file: Path, shapes: Sequence[str]) -> _Served:
    """An engine is served as it is, with the signature its sidecar records."""
    if shapes:
        raise ConfigError(
            f"'{model_file}' is an engine: its optimization profiles were fixed when "
            "it was built (see its sidecar); do not pass shapes"
        )
    signature = read_sidecar(model_file).signature()
    scalars = [t.name for t in (*signature.inputs, *signature.outputs) if not t.shape]
    if scalars:
        raise ConfigError(
            f"engine '{model_file}' has scalar tensors {scalars}, which Triton serves in no "
            "model without a batch axis; rebuild it with trtpool-build, which builds "
            "them as shape [1]"
        )
    return _Served(model_file, signature, "model.plan", (), ())


def _onnx_signature(
    served: OnnxFile, shapes: Sequence[str], requested_batch: int | None, notes: list[str]
) -> Signature:
    """The served ONNX graph's signature; notes on the batch axis go to `notes`."""
    inputs, outputs = io_specs(served.model)
    chosen = None if shapes else batch_only_profile(inputs, requested_batch)
    if chosen:
        shapes = [chosen]
        notes.append(
            f"no --shapes given and only the batch axis is dynamic: the profile is {chosen} "
            "(give --shapes for other batch sizes)"
        )
    profiles: tuple[Profile, ...] = resolve_profiles(shapes, inputs)
    decision = decide_batched(served.path, inputs, outputs, profiles, requested_batch)
    if not decision.batched and requested_batch is None and any(s.shape[:1] == (-1,) for s in inputs):
        notes.append(f"served without a batch axis (max_batch_size 0, one request per run): {decision.why}")
    return Signature(inputs, outputs, profiles, decision.batched)


def _served_onnx(model_file: Path, shapes: Sequence[str], requested_batch: int | None, workdir: Path) -> _Served:
    """An ONNX file, parsed here once and that graph passed along: served as it is, or where
    Triton cannot carry it as it is, as a repaired copy in `workdir` (served_copy.py)."""
    served = OnnxFile.read(model_file)
    notes = repair_for_serving(served.model, model_file, shapes)
    if notes:
        onnx.load_external_data_for_model(served.model, str(model_file.parent))
        # Saving points the graph's large tensors at the copy's data file, as reading the copy would.
        served = OnnxFile(save_model(served.model, workdir / model_file.name), served.model)
    signature = _onnx_signature(served, shapes, requested_batch, notes)
    return _Served(served.path, signature, "model.onnx", tuple(external_data_files(served)), tuple(notes))


def _served(model_file: Path, shapes: Sequence[str], requested_batch: int | None, workdir: Path) -> _Served:
    if model_file.suffix in ENGINE_SUFFIXES:
        return _served_engine(model_file, shapes)
    if model_file.suffix != ".onnx":
        raise ConfigError(f"'{model_file}': expected an ONNX file (.onnx) or an engine ({', '.join(ENGINE_SUFFIXES)})")
    return _served_onnx(model_file, shapes, requested_batch, workdir)


def _with_data(source: Path, dest: Path, data_files: Sequence[Path]) -> Iterator[tuple[Path, Path]]:
    """(from, to) for the model file and each of its external data files, to be put beside it
    (their parent folders made)."""
    for source_file, dest_file in ((source, dest), *((source.parent / f, dest.parent / f) for f in data_files)):
        dest_file.parent.mkdir(parents=True, exist_ok=True)
        yield source_file, dest_file


def _place(source: Path, dest: Path, data_files: Sequence[Path]) -> None:
    """Copy `source` to `dest`, and its external data files beside it, unless they already
    are those files; remove other model files."""
    for name in MODEL_FILES:
        other = dest.parent / name
        if other.exists() and other.name not in (dest.name, dest.name + ".json"):
            other.unlink()
    for source_file, dest_file in _with_data(source, dest, data_files):
        if not (dest_file.exists() and dest_file.samefile(source_file)):
            shutil.copyfile(source_file, dest_file)


def _link(source: Path, dest: Path, data_files: Sequence[Path]) -> None:
    """`dest` a link to `source`, and its external data files linked beside it."""
    for source_file, dest_file in _with_data(source, dest, data_files):
        os.symlink(source_file.resolve(), dest_file)


def _check_staged(
    config: mc.ModelConfig,
    model_file: Path,
    data_files: Sequence[Path],
    file_name: str,
    version: int,
    user_file: Path,
    process: ProcessOptions | None,
    faces: tuple[str, ...],
) -> Loaded:
    """Load the folder-to-be from a temporary place; the server's error if it would not load,
    naming `user_file` (what the user gave) rather than the staged link to `model_file`.
    `faces`: the engine's sections (process.faces(), or all without a process file).

    The engine's outputs are left out of the staged config (the server takes undeclared
    outputs from the model) so that they can be written as the runtime reports them."""
    staged = mc.ModelConfig()
    staged.CopyFrom(config)
    if "output" in faces:
        del staged.output[:]
    with tempfile.TemporaryDirectory(prefix="trtpool-model-") as staging:
        version_dir = Path(staging) / str(version)
        version_dir.mkdir()
        _link(model_file, version_dir / file_name, data_files)
        if file_name == "model.plan":
            write_sidecar(version_dir / file_name, read_sidecar(model_file))
        if process is not None:
            place_files(process, version_dir)
        write_config(Path(staging), staged)
        try:
            return check_loads(staged, version_dir, faces)
        except Exception as exc:  # the server refuses a model on any exception, not only trtpool's own
            said = str(exc) if isinstance(exc, TrtpoolError) else f"{type(exc).__name__}: {exc}"
            said = said.replace(str(version_dir / file_name), f"{version}/{file_name} (a link to '{user_file}')")
            raise ConfigError(
                f"'{user_file}' would not load in trtpool as written (config.pbtxt, "
                f"{version}/{file_name}), so nothing was written; trtpool says: {said}"
            ) from exc


def make_model_folder(
    repo: Path,
    name: str,
    model_file: Path,
    shapes: Sequence[str] = (),
    options: ServingOptions = ServingOptions(),
    version: int = 1,
    log: Callable[[str], None] = print,
    process: ProcessOptions | None = None,
) -> Path:
    """Write `<repo>/<name>` for `model_file` (.onnx, or an engine with its sidecar); return the folder.

    `shapes` (trtpool.model.shapes text, one per profile) is needed for an ONNX file
    with dynamic dimensions; an engine's profiles come from its sidecar. The
    folder is written only if trtpool loads it (load_check); notes go to `log`.
    `process` adds a process file and the outside face config.pbtxt declares for it.
    """
    model_file = Path(model_file)
    if not model_file.is_file():
        raise ConfigError(f"model file '{model_file}' does not exist")
    with (
        tempfile.TemporaryDirectory(prefix="trtpool-model-") as workdir,
        naming_the_users_file(model_file, {Path(workdir) / model_file.name: "the served copy of {file}"}),
    ):
        served = _served(model_file, shapes, options.max_batch_size, Path(workdir))
        signature = served.signature
        staged = model_config(name, signature, options)
        faces = SECTIONS if process is None else process.faces()
        loaded = _check_staged(
            _with_face(staged, process, faces),
            served.path,
            served.data_files,
            served.file_name,
            version,
            model_file,
            process,
            faces,
        )
        if loaded.signature is not None:
            signature = replace(signature, outputs=loaded.signature.outputs)
        config = _with_face(model_config(name, signature, options), process, faces)
        check_agreement(as_triton_hands_it(config), loaded.signature or signature, faces)
        for note in (*served.notes, *loaded.notes):
            log(f"note: {note}")
        folder = Path(repo) / name
        version_dir = folder / str(version)
        version_dir.mkdir(parents=True, exist_ok=True)
        dest = version_dir / served.file_name
        _place(served.path, dest, served.data_files)
        if served.file_name == "model.plan":
            write_sidecar(dest, read_sidecar(served.path))
        if process is not None:
            place_files(process, version_dir)
        write_config(folder, config)
    return folder


def _with_face(config: mc.ModelConfig, process: ProcessOptions | None, faces: tuple[str, ...]) -> mc.ModelConfig:
    if process is not None:
        apply_face(config, process, faces)
    return config
