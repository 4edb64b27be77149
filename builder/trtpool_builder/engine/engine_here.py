"""Can this machine run an engine? Its sidecar against the TensorRT module and GPU found here."""

from __future__ import annotations

from pathlib import Path

from trtpool.errors import EngineError
from trtpool.model.sidecar import Sidecar, check_compatible, read_sidecar
from trtpool_builder.engine.gpu import gpu_status
from trtpool_builder.engine.trt_module import load_trt
from trtpool_builder.errors import BuildError


def built_for(sidecar: Sidecar) -> str:
    return (
        f"{sidecar.module} {sidecar.module_version}, compute capability "
        f"{', '.join(sidecar.target.compute_capabilities)}"
    )


def why_not_here(engine: Path) -> str | None:
    """None when the engine can run here, else why not (no module, no GPU, another GPU or version)."""
    sidecar = read_sidecar(engine)
    try:
        trt, module_name = load_trt(sidecar.module)
    except BuildError as exc:
        return str(exc)
    gpu, why = gpu_status()
    if gpu is None:
        return why
    try:
        check_compatible(sidecar, module_name, trt.__version__, gpu.name, gpu.compute_capability)
    except EngineError as exc:
        return str(exc)
    return None
