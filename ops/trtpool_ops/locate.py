"""Which tritonserver trtpool-serve runs, and a one-line answer when there is none."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ENV = "TRTPOOL_TRITONSERVER"


def setup_tritonserver() -> Path:
    """The set-up's server (scripts/setup.sh): .triton/bin/tritonserver beside the .venv this runs from."""
    return Path(sys.prefix).parent / ".triton" / "bin" / "tritonserver"


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def given_executable(given: str | None, flag: str, env: str) -> str | None:
    """The executable the flag names, else the environment variable; None where neither is set."""
    for origin, value in ((flag, given), (f"${env}", os.environ.get(env))):
        if value:
            found = shutil.which(value)
            if found is None:
                raise ValueError(f"{origin} is {value!r}, which is not an executable file")
            return found
    return None


def find_tritonserver(given: str | None) -> str:
    """--tritonserver if given, else $TRTPOOL_TRITONSERVER, else the set-up's, else `tritonserver` on PATH.

    Raises ValueError naming every place looked at and what to set.
    """
    found = given_executable(given, "--tritonserver", ENV)
    if found:
        return found
    if _runnable(setup_tritonserver()):
        return str(setup_tritonserver())
    found = shutil.which("tritonserver")
    if found is None:
        raise ValueError(
            f"no tritonserver: ${ENV} is unset, the set-up's {setup_tritonserver()} does not exist "
            f"and PATH has none; run scripts/setup.sh, or set {ENV}=/path/to/tritonserver "
            "(or pass --tritonserver)"
        )
    return found
