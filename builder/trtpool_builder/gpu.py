"""The GPU this process would build for or run on, through cuda-python (None without one)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str  # "9.0"


def gpu_status(index: int = 0) -> tuple[Gpu | None, str]:
    """(the GPU, "") or (None, why there is none)."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        return None, "cuda-python (cuda.bindings) is not installed"
    err, count = runtime.cudaGetDeviceCount()
    if err != runtime.cudaError_t.cudaSuccess:
        return None, f"no usable CUDA GPU ({err.name})"
    if count <= index:
        return None, f"no CUDA GPU with index {index} ({count} found)"
    err, props = runtime.cudaGetDeviceProperties(index)
    if err != runtime.cudaError_t.cudaSuccess:
        return None, f"cannot read the properties of GPU {index} ({err.name})"
    name = props.name.decode(errors="replace").rstrip("\x00") if isinstance(props.name, bytes) else str(props.name)
    return Gpu(name, f"{props.major}.{props.minor}"), ""


def current_gpu(index: int = 0) -> Gpu | None:
    return gpu_status(index)[0]
