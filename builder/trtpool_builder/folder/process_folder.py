"""A model folder's process file (trtpool.process.file): the user's Python file, the files it
reads, and the outside face config.pbtxt declares for the functions it defines.

    <repo>/<name>/1/process.py     the user's file, whatever its name was
    <repo>/<name>/1/<extra files>  e.g. labels.txt, vocab.txt
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from trtpool.errors import ConfigError
from trtpool.process.file import PROCESS_FILE, sections_of_file


@dataclass(frozen=True)
class FaceTensor:
    """One tensor of the outside face: NAME:TYPE:DIMS, e.g. IMAGE:STRING:1 or SCORES:FP32:5."""

    name: str
    data_type: str  # TYPE_STRING, TYPE_FP32, ...
    dims: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> FaceTensor:
        parts = text.split(":")
        if len(parts) != 3 or not parts[0]:
            raise ConfigError(f"tensor '{text}': expected NAME:TYPE:DIMS, e.g. IMAGE:STRING:1 or SCORES:FP32:5")
        name, data_type, dims = parts
        data_type = data_type if data_type.startswith("TYPE_") else f"TYPE_{data_type.upper()}"
        if data_type not in mc.DataType.keys():  # noqa: SIM118 - a protobuf enum has no `in`
            raise ConfigError(
                f"tensor '{text}': data type '{parts[1]}' is not one of Triton's "
                f"({', '.join(k.removeprefix('TYPE_') for k in mc.DataType.keys()[1:])})"
            )
        try:
            shape = tuple(int(d) for d in dims.split("x"))
        except ValueError:
            raise ConfigError(f"tensor '{text}': dims '{dims}' are not like 5 or 3x224x224 (-1 = any)") from None
        return cls(name, data_type, shape)


@dataclass(frozen=True)
class ProcessOptions:
    file: Path  # the user's Python file
    inputs: tuple[FaceTensor, ...] = ()  # the outside face: what clients send (when it has preprocess)
    outputs: tuple[FaceTensor, ...] = ()  # what clients get back (when it has postprocess)
    extra_files: tuple[Path, ...] = ()  # files it reads, placed beside it

    @classmethod
    def parse(
        cls, file: Path, inputs: Iterable[str] = (), outputs: Iterable[str] = (), extra_files: Iterable[Path] = ()
    ) -> ProcessOptions:
        """From text: the outside face's tensors as NAME:TYPE:DIMS (FaceTensor.parse)."""
        return cls(
            file,
            tuple(FaceTensor.parse(t) for t in inputs),
            tuple(FaceTensor.parse(t) for t in outputs),
            tuple(extra_files),
        )

    def faces(self) -> tuple[str, ...]:
        """The sections that stay the engine's (checked as trtpool checks them at load)."""
        if not Path(self.file).is_file():
            raise ConfigError(f"process file '{self.file}' does not exist")
        return sections_of_file(Path(self.file))


def apply_face(config: mc.ModelConfig, process: ProcessOptions, faces: tuple[str, ...]) -> None:
    """Replace the config's sections that process.py stands in front of (those not in `faces`,
    process.faces()) with the outside face."""
    for section, tensors, flag in (("input", process.inputs, "--input"), ("output", process.outputs, "--output")):
        if section in faces:
            if tensors:
                raise ConfigError(
                    f"{process.file} defines no {'preprocess' if section == 'input' else 'postprocess'}"
                    f": its {section}s are the engine's; leave out {flag}"
                )
            continue
        if not tensors:
            raise ConfigError(
                f"{process.file} defines {'preprocess' if section == 'input' else 'postprocess'}: "
                f"give the {section}s clients see ({flag} NAME:TYPE:DIMS, once each)"
            )
        entries = getattr(config, section)
        del entries[:]
        for tensor in tensors:
            entries.add(name=tensor.name, data_type=mc.DataType.Value(tensor.data_type), dims=tensor.dims)


def place_files(process: ProcessOptions, version_dir: Path) -> None:
    """Copy the process file (as process.py) and its extra files into `version_dir`."""
    shutil.copyfile(process.file, version_dir / PROCESS_FILE)
    for extra in process.extra_files:
        if extra.name == PROCESS_FILE:
            raise ConfigError(f"extra file '{extra}' would replace the process file {PROCESS_FILE}")
        shutil.copyfile(extra, version_dir / extra.name)
