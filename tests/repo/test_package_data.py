"""A regular install (the Docker image's, not the editable one of scripts/setup.sh) carries every
file the backend reads beside its modules: each non-Python file under backend_src/trtpool is
named by pyproject.toml's package-data."""
from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "backend_src" / "trtpool"


def test_every_data_file_of_the_backend_is_package_data():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    files = [p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")]
    assert files, "the backend has no data files: the test looks in the wrong place"
    missing = []
    for file in files:
        package = ".".join(file.parent.relative_to(PACKAGE.parent).parts)
        if not any(fnmatch.fnmatch(file.name, pattern) for pattern in declared.get(package, [])):
            missing.append(str(file.relative_to(ROOT)))
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"
