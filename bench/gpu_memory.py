"""GPU memory, and the GPU's name, as nvidia-smi reports them, for the benchmarks (None or empty without
nvidia-smi)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _query(*arguments: str) -> list[list[str]] | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", *arguments, "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [line.split(", ") for line in out.strip().splitlines() if line.strip()]


def name() -> str | None:
    """The first GPU's name (e.g. NVIDIA H200)."""
    rows = _query("--query-gpu=name")
    return rows[0][0] if rows else None


def used_mib() -> int | None:
    """The GPU's used memory (MiB)."""
    rows = _query("--query-gpu=memory.used")
    return int(rows[0][0]) if rows else None


def by_process() -> dict[int, tuple[str, int]]:
    """pid -> (process name, MiB) for each compute process nvidia-smi lists (a container
    may hide them)."""
    rows = _query("--query-compute-apps=pid,process_name,used_memory") or []
    return {int(pid): (Path(name).name, int(mib)) for pid, name, mib in rows}
