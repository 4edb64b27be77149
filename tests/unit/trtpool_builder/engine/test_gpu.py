"""The builder's GPU probe: trtpool.gpu.cuda's device, or CUDA's words for why there is none."""
from __future__ import annotations

import pytest

from tests.doubles.cuda_double import FakeCudart, FakeDevice
from trtpool.gpu import cuda
from trtpool_builder.engine.gpu import current_gpu, gpu_status


def test_the_gpu_comes_from_trtpool_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda, "_cudart", FakeCudart((FakeDevice(name="NVIDIA H200", major=9, minor=0),)))
    gpu, why = gpu_status()
    assert (gpu.name, gpu.compute_capability, why) == ("NVIDIA H200", "9.0", "")
    assert current_gpu() == gpu


def test_no_gpu_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda, "_cudart", FakeCudart(()))
    gpu, why = gpu_status()
    assert gpu is None and why.startswith("cudaGetDeviceProperties failed: ")
    assert current_gpu() is None
