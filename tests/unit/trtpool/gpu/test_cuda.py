"""trtpool.gpu.cuda: against the real cuda-python here (no GPU: clear errors, no crash),
against the CUDA double (tests/doubles/cuda_double.py, which proves nothing
about CUDA) for its own logic, and on a real GPU where there is one."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from tests.doubles.cuda_double import FakeCudart, FakeDevice, cudaError_t
from trtpool.errors import ConfigError, TrtpoolError
from trtpool.gpu import cuda

HAS_GPU = cuda.device_count() > 0
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU and driver (cuda.device_count() == 0)")
without_gpu = pytest.mark.skipif(HAS_GPU, reason="checks behaviour on a machine without a GPU")


@pytest.fixture
def fake(monkeypatch) -> FakeCudart:
    double = FakeCudart((FakeDevice(), FakeDevice(name="NVIDIA H200 (double)", major=9, minor=0, total=140 << 30)))
    monkeypatch.setattr(cuda, "_cudart", double)
    return double


# ---- real cuda-python, no GPU ------------------------------------------------------

@without_gpu
def test_calls_without_a_driver_raise_a_clear_cuda_error():
    assert cuda.device_count() == 0
    for call, name in [(lambda: cuda.set_device(0), "cudaSetDevice"), (cuda.mem_get_info, "cudaMemGetInfo"),
                       (cuda.Stream, "cudaStreamCreateWithFlags"), (lambda: cuda.DeviceBuffer(64), "cudaMalloc"),
                       (lambda: cuda.pinned_allocator(np.float32, 4), "cudaHostAlloc")]:
        with pytest.raises(cuda.CudaError) as error:
            call()
        assert isinstance(error.value, TrtpoolError)
        assert error.value.call == name and str(error.value).startswith(f"{name} failed: ")
        assert error.value.code in cuda.NO_GPU and "nvidia-smi" in str(error.value)


# ---- the module's logic, over the CUDA double ------------------------------------------

def test_devices_and_memory_info(fake):
    assert cuda.device_count() == 2
    props = cuda.device_properties(1)
    assert (props.name, props.compute_capability, props.total_memory) == ("NVIDIA H200 (double)", "9.0", 140 << 30)
    cuda.set_device(1)
    assert cuda.mem_get_info() == (140 << 30, 140 << 30)
    with pytest.raises(cuda.CudaError, match="cudaSetDevice failed: cudaErrorInvalidDevice: invalid device ordinal"):
        cuda.set_device(7)


def test_device_count_is_zero_without_devices_or_driver(monkeypatch):
    monkeypatch.setattr(cuda, "_cudart", FakeCudart(devices=()))
    assert cuda.device_count() == 0
    broken = FakeCudart()
    broken.fail["cudaGetDeviceCount"] = cudaError_t.cudaErrorInsufficientDriver
    monkeypatch.setattr(cuda, "_cudart", broken)
    assert cuda.device_count() == 0
    broken.fail["cudaGetDeviceCount"] = cudaError_t.cudaErrorIllegalAddress  # anything else is an error
    with pytest.raises(cuda.CudaError):
        cuda.device_count()


@pytest.mark.parametrize("text, index", [("cuda:0", 0), ("cuda:3", 3), ("cuda", 0)])
def test_device_index(text, index):
    assert cuda.device_index(text) == index


@pytest.mark.parametrize("text", ["cpu", "cuda:x", "gpu:0"])
def test_device_index_refuses_other_devices(text):
    with pytest.raises(ConfigError, match="expected 'cuda:N'"):
        cuda.device_index(text)


def test_async_round_trip_through_device_memory(fake):
    stream = cuda.Stream()
    source = cuda.pinned_allocator(np.float32, 6)
    result = cuda.pinned_allocator(np.float32, 6)
    source[:] = np.arange(6, dtype=np.float32)
    result[:] = -1
    a, b = cuda.DeviceBuffer(24), cuda.DeviceBuffer(24)
    cuda.memcpy_htod_async(a.ptr, source, 24, stream)
    cuda.memcpy_dtod_async(b.ptr, a.ptr, 24, stream)
    cuda.memcpy_dtoh_async(result, b.ptr, 24, stream)
    assert np.all(result == -1)  # queued, not done
    done = cuda.Event()
    done.record(stream)
    done.synchronize()
    np.testing.assert_array_equal(result, source)
    for resource in (a, b, done, stream):
        resource.close()
        resource.close()  # a second close is a no-op
    assert fake.live()["device_memory"] == fake.live()["streams"] == fake.live()["events"] == 0


def test_copies_check_the_host_array(fake):
    stream, device = cuda.Stream(), cuda.DeviceBuffer(64)
    strided = np.zeros((4, 4), np.float32)[:, ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        cuda.memcpy_htod_async(device.ptr, strided, 8, stream)
    with pytest.raises(ValueError, match="exceeds the host array's 16 bytes"):
        cuda.memcpy_dtoh_async(np.zeros(4, np.float32), device.ptr, 32, stream)


def test_failed_calls_name_the_call_and_cuda_error(fake):
    fake.fail["cudaMalloc"] = cudaError_t.cudaErrorMemoryAllocation
    with pytest.raises(cuda.CudaError) as error:
        cuda.DeviceBuffer(1 << 20)
    assert str(error.value) == "cudaMalloc failed: cudaErrorMemoryAllocation: out of memory"
    assert (error.value.call, error.value.code) == ("cudaMalloc", "cudaErrorMemoryAllocation")


def test_a_host_pointer_is_not_a_device_pointer(fake):
    stream, host = cuda.Stream(), np.zeros(4, np.float32)
    with pytest.raises(cuda.CudaError, match="cudaMemcpyAsync failed: cudaErrorIllegalAddress"):
        cuda.memcpy_htod_async(host.ctypes.data, host, 16, stream)


def test_pinned_memory_lives_as_long_as_any_view(fake):
    array = cuda.pinned_allocator(np.int32, 10)
    assert array.dtype == np.int32 and array.shape == (10,) and array.flags.writeable
    assert array.ctypes.data in fake.host_memory
    view = array[2:5].reshape(3, 1)
    del array
    gc.collect()
    assert fake.live()["host_memory"] == 1
    view[:] = 7  # still valid memory
    del view
    gc.collect()
    assert fake.live()["host_memory"] == 0
    assert fake.calls["cudaFreeHost"] == 1


def test_pinned_allocator_feeds_host_buffers(fake):
    from trtpool.gpu.buffers import HostBuffers

    buffers = HostBuffers({"x": (np.float16, 8), "empty": (np.float32, 0)}, cuda.pinned_allocator)
    assert buffers.flat("x").dtype == np.float16 and buffers.flat("x").size == 8
    assert buffers.flat("empty").size == 0
    assert fake.live()["host_memory"] == 2


def test_garbage_collected_resources_are_freed(fake):
    cuda.Stream(), cuda.Event(), cuda.DeviceBuffer(128)
    gc.collect()
    assert not any(fake.live().values()), fake.live()


def test_resources_are_freed_by_the_api_that_allocated_them(fake, monkeypatch):
    buffer = cuda.DeviceBuffer(16)
    monkeypatch.setattr(cuda, "_cudart", FakeCudart())  # e.g. a test fixture ending
    buffer.close()
    assert fake.live()["device_memory"] == 0


def test_event_timing(fake):
    stream, start, end = cuda.Stream(), cuda.Event(timing=True), cuda.Event(timing=True)
    start.record(stream)
    end.record(stream)
    end.synchronize()
    assert end.elapsed_ms(start) >= 0.0
    with pytest.raises(cuda.CudaError, match="cudaEventElapsedTime"):
        cuda.Event().elapsed_ms(start)  # timing is off by default


# ---- a real GPU -----------------------------------------------------------------------

@pytest.mark.gpu
@needs_gpu
def test_real_gpu_properties_and_memory():
    cuda.set_device(0)
    props = cuda.device_properties(0)
    assert props.name and props.major >= 3 and props.total_memory > 0
    free, total = cuda.mem_get_info()
    assert 0 < free <= total


@pytest.mark.gpu
@needs_gpu
def test_real_gpu_async_round_trip_and_timing():
    cuda.set_device(0)
    stream = cuda.Stream()
    start, end = cuda.Event(timing=True), cuda.Event(timing=True)
    n = 1 << 20
    source, result = cuda.pinned_allocator(np.float32, n), cuda.pinned_allocator(np.float32, n)
    source[:] = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    a, b = cuda.DeviceBuffer(source.nbytes), cuda.DeviceBuffer(source.nbytes)
    start.record(stream)
    cuda.memcpy_htod_async(a.ptr, source, source.nbytes, stream)
    cuda.memcpy_dtod_async(b.ptr, a.ptr, source.nbytes, stream)
    cuda.memcpy_dtoh_async(result, b.ptr, source.nbytes, stream)
    end.record(stream)
    end.synchronize()
    np.testing.assert_array_equal(result, source)
    assert end.elapsed_ms(start) > 0.0
    from cuda.bindings import runtime as cudart

    err, attributes = cudart.cudaPointerGetAttributes(source.ctypes.data)
    assert err == cudart.cudaError_t.cudaSuccess
    assert attributes.type == cudart.cudaMemoryType.cudaMemoryTypeHost  # page-locked, not pageable
    for resource in (a, b, start, end, stream):
        resource.close()


@pytest.mark.gpu
@needs_gpu
def test_real_gpu_errors_are_cuda_errors():
    with pytest.raises(cuda.CudaError, match="cudaSetDevice failed: cudaErrorInvalidDevice"):
        cuda.set_device(cuda.device_count())
    cuda.set_device(0)
    with pytest.raises(cuda.CudaError, match="cudaMalloc failed: cudaErrorMemoryAllocation"):
        cuda.DeviceBuffer(1 << 60)
