"""The GPU this process would build for or run on (trtpool.gpu.cuda's view of it), or why there is none."""

from __future__ import annotations

from trtpool.gpu import cuda


def gpu_status(index: int = 0) -> tuple[cuda.DeviceProperties | None, str]:
    """(the GPU, "") or (None, why there is none: CUDA's own words)."""
    try:
        return cuda.device_properties(index), ""
    except cuda.CudaError as exc:
        return None, str(exc)


def current_gpu(index: int = 0) -> cuda.DeviceProperties | None:
    return gpu_status(index)[0]
