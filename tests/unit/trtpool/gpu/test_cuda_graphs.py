"""trtpool.gpu.cuda's stream capture and graphs: over the CUDA double (tests/doubles/cuda_double.py,
which proves nothing about CUDA), and on a real GPU where there is one."""
from __future__ import annotations

import numpy as np
import pytest

from tests.doubles.cuda_double import GRAPH_BYTES_PER_NODE, FakeCudart
from trtpool.gpu import cuda

HAS_GPU = cuda.device_count() > 0


@pytest.fixture
def fake(monkeypatch) -> FakeCudart:
    double = FakeCudart()
    monkeypatch.setattr(cuda, "_cudart", double)
    return double


def staged(values: list[float]) -> np.ndarray:
    array = cuda.pinned_allocator(np.float32, len(values))
    array[:] = values
    return array


def test_a_captured_graph_replays_with_the_addresses_it_captured(fake):
    stream, device = cuda.Stream(), cuda.DeviceBuffer(16)
    source, result = staged([1, 2, 3, 4]), staged([0, 0, 0, 0])

    def work() -> None:
        cuda.memcpy_htod_async(device.ptr, source, 16, stream)
        cuda.memset_async(device.ptr, 0, 4, stream)  # zero the first element
        cuda.memcpy_dtoh_async(result, device.ptr, 16, stream)

    free = cuda.mem_get_info()[0]
    graph = cuda.capture(stream, work)
    assert free - cuda.mem_get_info()[0] == 3 * GRAPH_BYTES_PER_NODE  # the double's cost of a graph
    stream.synchronize()
    np.testing.assert_array_equal(result, [0, 0, 0, 0])  # captured, not run
    source[:] = [5, 6, 7, 8]
    graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(result, [0, 6, 7, 8])  # what the source holds at replay
    graph.close()
    assert not fake.graphs and not fake.graph_execs  # the graph after instantiation, then the executable


def test_an_invalidated_capture_is_a_cuda_error_and_leaves_the_stream_usable(fake):
    stream = cuda.Stream()
    with pytest.raises(cuda.CudaError) as error:
        cuda.capture(stream, stream.synchronize)
    # The synchronize itself fails inside the capture; the capture is discarded and its error cleared.
    assert error.value.call == "cudaStreamSynchronize" and error.value.code == "cudaErrorStreamCaptureUnsupported"
    assert fake.cudaGetLastError() == (fake.cudaError_t.cudaSuccess,)
    assert fake.streams[stream.handle].capture is None and not fake.graphs
    stream.synchronize()  # no longer capturing


def test_a_capture_invalidated_without_an_error_in_the_work_fails_at_its_end(fake):
    stream = cuda.Stream()
    pageable = np.zeros(4, np.float32)
    buffer = cuda.DeviceBuffer(16)

    def work() -> None:  # the double refuses the copy, and the work ignores the code it got
        fake.cudaMemcpyAsync(pageable.ctypes.data, buffer.ptr, 16, fake.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                             stream.handle)

    with pytest.raises(cuda.CudaError, match="cudaStreamEndCapture failed: cudaErrorStreamCaptureInvalidated"):
        cuda.capture(stream, work)
    assert fake.cudaGetLastError() == (fake.cudaError_t.cudaSuccess,)


def test_work_that_raises_ends_the_capture(fake):
    stream = cuda.Stream()

    def work() -> None:
        cuda.memset_async(cuda.DeviceBuffer(4).ptr, 0, 4, stream)  # the allocation is refused while capturing

    with pytest.raises(cuda.CudaError, match="cudaMalloc failed: cudaErrorStreamCaptureUnsupported"):
        cuda.capture(stream, work)
    assert fake.streams[stream.handle].capture is None and not fake.graphs and not fake.graph_execs


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU and driver (cuda.device_count() == 0)")
def test_real_gpu_capture_and_replay():
    cuda.set_device(0)
    stream, device = cuda.Stream(), cuda.DeviceBuffer(16)
    source, result = staged([1, 2, 3, 4]), staged([0, 0, 0, 0])

    def work() -> None:
        cuda.memcpy_htod_async(device.ptr, source, 16, stream)
        cuda.memset_async(device.ptr, 0, 4, stream)
        cuda.memcpy_dtoh_async(result, device.ptr, 16, stream)

    graph = cuda.capture(stream, work)
    source[:] = [5, 6, 7, 8]
    graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(result, [0, 6, 7, 8])
    with pytest.raises(cuda.CudaError):
        cuda.capture(stream, stream.synchronize)
    graph.launch(stream)  # the stream still works after the failed capture
    stream.synchronize()
    for resource in (graph, device, stream):
        resource.close()
