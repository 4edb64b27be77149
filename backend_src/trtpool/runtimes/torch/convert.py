"""The ONNX file as an eval-mode torch module (onnx2torch 1.5.15), patched so that it can be
captured in a CUDA graph: shapes stay host tensors, as TensorRT keeps them (HostShape and
integer initializers on the CPU), and ONNX's NonZero layout is restored. torchvision, which
onnx2torch imports for two converters only, may be missing (_import_onnx2torch).
"""

from __future__ import annotations

import sys
import types
from typing import Any

import onnx
import torch

from trtpool.errors import EngineError


class _Missing(types.ModuleType):
    """Stands in for a module that cannot be imported; fails only when used."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise EngineError(f"this model needs {self.__name__}, which cannot be imported here")


def _import_onnx2torch() -> types.ModuleType:
    """onnx2torch imports torchvision at import time, for its NMS and RoiAlign
    converters only. torchvision may be absent (a serving image with CUDA torch
    alone) or built for another torch, which fails to import: a placeholder then
    takes its place and fails only if one of those two converters is used."""
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - ImportError, or RuntimeError from a mismatched build
        sys.modules["torchvision"] = sys.modules["torchvision.ops"] = _Missing("torchvision")
    try:
        import onnx2torch
    except ImportError as exc:
        raise EngineError(
            f"the torch runtime converts ONNX files with onnx2torch, which cannot be "
            f"imported ({exc}); pip install --no-deps onnx2torch==1.5.15"
        ) from exc
    return onnx2torch


class HostShape(torch.nn.Module):
    """ONNX Shape as a CPU int64 tensor: shapes are host metadata, and consumers
    (Slice, Reshape) then read them without a device synchronization."""

    def __init__(self, start: int, end: int | None) -> None:
        super().__init__()
        self.start, self.end = start, end

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tensor(x.shape[self.start : self.end], dtype=torch.int64)


class NonZero(torch.nn.Module):
    """ONNX NonZero: the indices of the non-zero elements as (rank, count), row-major.
    onnx2torch 1.5.15 returns torch.nonzero's (count, rank) instead."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x).T


def prefers_channels_last(module: torch.nn.Module, precision: str) -> bool:
    """Whether the module runs faster with its 4-D weights laid out NHWC (channels_last):
    fp16 2-D convolutions, which cuDNN runs on tensor cores in that layout (ResNet-50 on the
    H200: bench/results/h200/torch_layout.json). Inputs stay NCHW,
    as the ONNX file declares them; the first convolution converts its input."""
    return precision == "fp16" and any(isinstance(m, torch.nn.Conv2d) for m in module.modules())


def convert(
    model: onnx.ModelProto, device: torch.device | str, precision: str = "fp32", channels_last: bool | None = None
) -> torch.nn.Module:
    """The ONNX model as an eval-mode torch module on `device` whose forward reads
    no device tensor on the host (so it can be captured in a CUDA graph).
    `channels_last`: lay 4-D weights out NHWC; None: where prefers_channels_last says so."""
    onnx2torch = _import_onnx2torch()
    from onnx2torch.node_converters.cast import OnnxCast
    from onnx2torch.node_converters.nonzero import OnnxNonZero
    from onnx2torch.node_converters.shape import OnnxShape

    try:
        module = onnx2torch.convert(model).eval()
    except Exception as exc:  # NotImplementedError for unsupported ops, and others
        raise EngineError(f"onnx2torch cannot convert the ONNX model: {type(exc).__name__}: {exc}") from exc
    for name, sub in list(module.named_modules()):
        if isinstance(sub, OnnxShape):
            module.set_submodule(name, HostShape(sub._start, sub._end))
        elif isinstance(sub, OnnxNonZero):
            module.set_submodule(name, NonZero())
        elif precision == "fp16" and isinstance(sub, OnnxCast) and sub.torch_dtype == torch.float32:
            sub.torch_dtype = torch.float16  # a Cast to float would mix float32 into a half graph
    # Integer initializers are shapes, axes and indices: keep them on the host.
    host_constants = {name: b for name, b in module.named_buffers() if not b.is_floating_point()}
    module.to(device)
    if precision == "fp16":
        module.half()
    if prefers_channels_last(module, precision) if channels_last is None else channels_last:
        module.to(memory_format=torch.channels_last)
    for name, tensor in host_constants.items():
        owner, _, leaf = name.rpartition(".")
        module.get_submodule(owner).register_buffer(leaf, tensor)
    return module
