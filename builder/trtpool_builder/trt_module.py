"""Which TensorRT Python module builds: `tensorrt` when importable, else `tensorrt_rtx`."""
from __future__ import annotations

import importlib
from types import ModuleType

from trtpool_builder.errors import BuildError

MODULES = ("tensorrt", "tensorrt_rtx")
INSTALL_HINTS = {
    "tensorrt": "pip install --extra-index-url https://pypi.nvidia.com 'trtpool[tensorrt]' "
                "(or use NVIDIA's tritonserver:<yy.mm>-py3 image)",
    "tensorrt_rtx": "pip install 'trtpool[rtx]'",
}


def is_importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def load_trt(name: str | None = None) -> tuple[ModuleType, str]:
    """(module, its name); `name` None picks tensorrt first, then tensorrt_rtx."""
    if name is not None and name not in MODULES:
        raise BuildError(f"--trt-module '{name}': expected one of {', '.join(MODULES)}")
    errors = []
    for candidate in (name,) if name else MODULES:
        try:
            return importlib.import_module(candidate), candidate
        except ImportError as exc:
            errors.append(f"'{candidate}' ({exc}); install it with {INSTALL_HINTS[candidate]}")
    raise BuildError("no TensorRT module can be imported: " + "; ".join(errors))
