"""Which TensorRT Python module builds: trtpool's own choice (trt_api.import_tensorrt), failing
as a BuildError that says how to install each module for building."""

from __future__ import annotations

from types import ModuleType

from trtpool.gpu import trt_api
from trtpool_builder.errors import BuildError

INSTALL_HINTS = {
    "tensorrt": "pip install --extra-index-url https://pypi.nvidia.com 'trtpool[tensorrt]' "
    "(or use NVIDIA's tritonserver:<yy.mm>-py3 image)",
    "tensorrt_rtx": "pip install 'trtpool[rtx]'",
}


def load_trt(name: str | None = None) -> tuple[ModuleType, str]:
    """(module, its name); `name` None picks tensorrt first, then tensorrt_rtx."""
    if name is not None and name not in trt_api.MODULES:
        raise BuildError(f"--trt-module '{name}': expected one of {', '.join(trt_api.MODULES)}")
    try:
        trt = trt_api.import_tensorrt(name)
    except trt_api.TensorRTMissing as missing:
        raise BuildError(
            "no TensorRT module can be imported: "
            + "; ".join(
                f"'{module}' ({exc}); install it with {INSTALL_HINTS[module]}"
                for module, exc in missing.failures.items()
            )
        ) from missing
    return trt, trt.__name__
