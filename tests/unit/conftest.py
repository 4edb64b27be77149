"""The pb_utils double for unit tests of trtpool's Triton-facing code."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.doubles import pb_utils_double


@pytest.fixture
def pb_utils(monkeypatch) -> Iterator[ModuleType]:
    """tests/doubles/pb_utils_double.py, also where model.py imports triton_python_backend_utils,
    with its log and metric families empty."""
    pb_utils_double._reset()
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb_utils_double)
    yield pb_utils_double
    pb_utils_double._reset()
