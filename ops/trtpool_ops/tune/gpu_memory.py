"""The GPU memory a point's server uses, as Triton reports it on /metrics.

Triton publishes `nv_gpu_memory_used_bytes` per GPU (one series each, labelled by
its UUID) where it can read the GPUs (DCGM); on a machine without a GPU the series
is absent and the figure is None. It is the device's used memory, so on a GPU that
serves nothing else it is this server's: its CUDA contexts, the model's weights and
every trtpool context's buffers and graphs.
"""

from __future__ import annotations

import urllib.error
import urllib.request

METRIC = "nv_gpu_memory_used_bytes"


def used_bytes(metrics: str) -> int | None:
    """The metric summed over every GPU in Prometheus text `metrics`; None where it is absent."""
    values = [
        float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith((METRIC + "{", METRIC + " "))
    ]
    return round(sum(values)) if values else None


def read(metrics_url: str, timeout: float = 5.0) -> int | None:
    """used_bytes of the server's /metrics at `metrics_url` (host:port); None where it cannot be read."""
    try:
        with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=timeout) as reply:
            return used_bytes(reply.read().decode(errors="replace"))
    except (OSError, urllib.error.URLError, ValueError):
        return None
