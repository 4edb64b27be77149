"""An engine host process whose TensorRT and CUDA are the test doubles, for tests/unit/trtpool/host: the
host's own code (trtpool.host.server.main) with tests/doubles' tensorrt module and CUDA runtime
in place of the real ones, which cannot run here. It proves nothing about TensorRT; it shows that
a TensorRT model takes the same host path as any other.

    python -m tests.doubles.host_with_doubles TENSORRT_VERSION   (the spec on stdin, as the host's)
"""
import sys

from tests.doubles.cuda_double import FakeCudart, FakeDevice
from tests.doubles.engines import GPU_NAME
from tests.doubles.tensorrt_double import make_module
from trtpool.gpu import cuda
from trtpool.host import server

if __name__ == "__main__":
    runtime = FakeCudart((FakeDevice(name=GPU_NAME),))
    cuda._cudart = runtime
    sys.modules["tensorrt"] = make_module(runtime, "tensorrt", sys.argv[1])
    server.main()
