"""trtpool-tune's reading of the GPU memory a point's server uses, from Triton's metrics text."""
from __future__ import annotations

from tests.unit.trtpool_ops.tune.test_objective import figures
from trtpool_ops.tune import gpu_memory


def test_gpu_memory_is_summed_over_the_gpus_and_absent_without_one():
    metrics = ('# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes\n'
               'nv_gpu_memory_used_bytes{gpu_uuid="GPU-a"} 1048576\n'
               'nv_gpu_memory_used_bytes{gpu_uuid="GPU-b"} 2097152\n'
               'nv_gpu_memory_total_bytes{gpu_uuid="GPU-a"} 9e10\n')
    assert gpu_memory.used_bytes(metrics) == 3 << 20
    assert gpu_memory.used_bytes('nv_inference_count{model="m",version="1"} 4\n') is None
    record = figures("sync", 1, 10, 1.0, 3).as_dict()
    assert record["gpu_memory_mib"] == 3.0 and figures("sync", 1, 10, 1.0).as_dict()["gpu_memory_mib"] is None
