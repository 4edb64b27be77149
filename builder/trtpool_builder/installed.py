"""Whether an optional package imports in this environment. The builder's choices follow what
is installed (ModelOpt or ONNX Runtime to quantize, TensorRT or ONNX for an example), so every
folder below asks here rather than the module that picks TensorRT (engine/trt_module.py)."""

from __future__ import annotations

import importlib


def is_importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True
