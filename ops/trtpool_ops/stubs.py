"""Which models lost a Python backend stub process, seen from the process table.

Each model instance is one `triton_python_backend_stub` child of tritonserver,
started as `stub <repo>/<model>/<version>/model.py <shm> ... <instance> ...`.
Triton does not reap a stub that dies: it stays a zombie child until the model
is unloaded. A zombie stub is therefore a dead instance that Triton still
serves; the probe's one request may reach a live sibling instance instead.
"""

from __future__ import annotations

from pathlib import Path

import psutil

STUB_NAME = "triton_python_backend_stub"


def _model_of(command: list[str]) -> str | None:
    if len(command) > 1 and Path(command[0]).name == STUB_NAME:
        return Path(command[1]).parents[1].name
    return None


class StubTracker:
    """Remembers each live stub's model, so that a stub found dead later can be named."""

    def __init__(self, server_pid: int) -> None:
        self.server = psutil.Process(server_pid)
        self.models: dict[int, str] = {}

    def dead_models(self) -> set[str]:
        """Models with a stub that died since it was first seen alive."""
        dead, present = set(), set()
        for child in self.server.children():
            present.add(child.pid)
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    if child.pid in self.models:
                        dead.add(self.models[child.pid])
                    continue
                model = _model_of(child.cmdline())
            except psutil.Error:
                continue
            if model is not None:
                self.models.setdefault(child.pid, model)
        self.models = {pid: m for pid, m in self.models.items() if pid in present}
        return dead

    def forget(self, model: str) -> None:
        """After a reload: the model's old stubs are no longer its concern."""
        self.models = {pid: m for pid, m in self.models.items() if m != model}


def dead_stub_count(server_pid: int) -> int:
    """Stubs that died and were never reaped (zombies keep only a 15-character name)."""
    try:
        children = psutil.Process(server_pid).children()
    except psutil.Error:
        return 0
    count = 0
    for child in children:
        try:
            count += child.status() == psutil.STATUS_ZOMBIE and STUB_NAME.startswith(child.name())
        except psutil.Error:
            continue
    return count
