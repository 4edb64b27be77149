"""The CUDA double (tests/doubles/cuda_double.py) held to the installed cuda-python
(cuda.bindings.runtime): call names, parameter names, enum and flag values."""
from __future__ import annotations

import inspect

import pytest

from tests.doubles.cuda_double import FakeCudart


def test_the_cuda_double_has_only_what_cuda_python_has():
    runtime = pytest.importorskip("cuda.bindings.runtime")
    found = []
    for name, member in vars(FakeCudart).items():
        if not name.startswith("cuda"):
            continue
        if isinstance(member, type):
            for value in member:
                if int(getattr(getattr(runtime, name), value.name, -1)) != int(value):
                    found.append(f"{name}.{value.name} = {int(value)}: differs in cuda-python")
        elif isinstance(member, int):
            if getattr(runtime, name, None) != member:
                found.append(f"{name} = {member}: cuda-python has {getattr(runtime, name, None)}")
        else:
            ours = list(inspect.signature(member).parameters)[1:]
            theirs = list(inspect.signature(getattr(runtime, name)).parameters) if hasattr(runtime, name) else None
            if ours != theirs:
                found.append(f"{name}{ours}: cuda-python has {theirs}")
    assert found == []
