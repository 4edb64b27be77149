"""The builder's folders are floors: each module imports only from the floors below its own
(errors.py and installed.py at the bottom, cli.py at the top), so `ls` shows the layers."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "builder" / "trtpool_builder"
FLOORS = {"errors": 0, "installed": 0, "graph": 1, "precision": 2, "engine": 3, "folder": 4, "examples": 5, "cli": 6}


def _box(dotted: str) -> str:
    """The floor's name of a trtpool_builder module: its folder, or the module at the top."""
    return dotted.split(".")[1]


def _arrows() -> set[tuple[str, str, str]]:
    """(importing module, its box, the imported box) for every import of another box, function-level ones too."""
    arrows = set()
    for file in PACKAGE.rglob("*.py"):
        module = ".".join(("trtpool_builder", *file.relative_to(PACKAGE).with_suffix("").parts))
        if module.endswith(".__init__") and module.count(".") == 1:
            continue
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trtpool_builder"):
                targets = [node.module] if "." in node.module else [f"trtpool_builder.{a.name}" for a in node.names]
                arrows |= {(module, _box(module), _box(t)) for t in targets if _box(t) != _box(module)}
    return arrows


def test_every_module_is_in_a_floor():
    assert {_box(src) for src, _, _ in _arrows()} <= set(FLOORS)
    assert {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
            if p.suffix == ".py" and p.stem != "__init__" or p.is_dir() and p.name != "__pycache__"} == set(FLOORS)


def test_imports_point_down_only():
    arrows = _arrows()
    assert arrows, "no imports between the folders were found: the test reads nothing"
    upward = sorted((src, dst) for src, box, dst in arrows if FLOORS[dst] >= FLOORS[box])
    assert upward == []
