"""Every trtpool import that the shipped process files and the docs' Python make still works,
and the names process files written before trtpool.vision existed import (trtpool.images,
trtpool.device_crops) are the same modules as their new homes."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "builder" / "trtpool_builder" / "examples" / "process").glob("*.py")),
           *sorted((ROOT / "model_repository").rglob("*.py"))]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# What process files written against the layout before trtpool.vision import (the examples did).
EARLIER = [("trtpool.images", "CropSpec"), ("trtpool.images", "ImageRefused"), ("trtpool.images", "cpu_crop"),
           ("trtpool.images", "DEFAULT_MAX_DECODED_BYTES"), ("trtpool.device_crops", "DeviceCrops"),
           ("trtpool.device_crops", "decoder_unavailable")]


def _imports(tree: ast.AST) -> list[tuple[str, str]]:
    """(module, name) for every `from trtpool... import name` anywhere in the tree, functions included."""
    return [(node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "trtpool"
            for alias in node.names]


def _quoted() -> list[tuple[str, str, str]]:
    found = [(source.relative_to(ROOT).as_posix(), module, name)
             for source in SOURCES for module, name in _imports(ast.parse(source.read_text()))]
    for page in PAGES:
        for block in PYTHON_BLOCK.findall(page.read_text()):
            found += [(page.relative_to(ROOT).as_posix(), module, name) for module, name in _imports(ast.parse(block))]
    return found


QUOTED = _quoted()


def test_the_examples_import_from_trtpool():
    """The scan finds what it looks for: the JPEG example's imports are among them."""
    assert ("builder/trtpool_builder/examples/process/resnet50_jpeg.py", "trtpool.vision.device_crops",
            "DeviceCrops") in QUOTED


@pytest.mark.parametrize(("where", "module", "name"), QUOTED, ids=[f"{w}:{m}.{n}" for w, m, n in QUOTED])
def test_each_quoted_import_works(where, module, name):
    assert hasattr(importlib.import_module(module), name), f"{where}: from {module} import {name}"


@pytest.mark.parametrize(("module", "name"), EARLIER, ids=[f"{m}.{n}" for m, n in EARLIER])
def test_the_earlier_names_are_the_new_modules(module, name):
    earlier = importlib.import_module(module)
    assert earlier is importlib.import_module(module.replace("trtpool.", "trtpool.vision.", 1))
    assert hasattr(earlier, name)
