"""The shared-memory regions of the tritonserver trtpool-serve runs, removed once it is gone.

The Python backend makes one region per stub in /dev/shm and only a clean
exit unlinks them (python_backend r24.10 shm_manager.cc): a server that ran
out its exit timeout, or was killed, leaves them, and /dev/shm is memory (in
Kubernetes a medium: Memory emptyDir that outlives container restarts). So
trtpool-serve gives its server's regions a prefix of their own and removes
what is left under it when the server's process group is gone.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

SHM = Path("/dev/shm")
PREFIX_OPTION = "shm-region-prefix-name"


def own_prefix(passthrough: Sequence[str], tool: str = "serve") -> str | None:
    """A fresh region prefix for this run of trtpool-<tool>, or None where the flags already set one."""
    if any(PREFIX_OPTION in argument for argument in passthrough):
        return None
    return f"triton_trtpool_{tool}_{uuid.uuid4().hex[:12]}_shm_region_"


def prefix_flag(prefix: str) -> str:
    """The tritonserver flag; the python backend's setting covers Python-based backends (trtpool)."""
    return f"--backend-config=python,{PREFIX_OPTION}={prefix}"


def remove_regions(prefix: str) -> list[Path]:
    """Unlink the regions under `prefix` (call once no process of the server is left)."""
    removed = sorted(SHM.glob(prefix + "*"))
    for path in removed:
        path.unlink(missing_ok=True)
    return removed
