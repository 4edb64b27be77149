"""One measured point: a candidate configuration and what perf_analyzer saw."""

from __future__ import annotations

from dataclasses import dataclass

from trtpool_ops.tune.space import Candidate


@dataclass(frozen=True)
class Measurement:
    candidate: Candidate
    infer_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    seconds: float = 0.0  # wall time of the point: server start, load, measurement, stop
    error: str = ""  # why the point has no figures (did not load, perf_analyzer failed)
    note: str = ""  # how it was measured where that differs from the others
    gpu_memory_bytes: int | None = None  # Triton's nv_gpu_memory_used_bytes at the end (None: no GPU read)
    windows: tuple[float, ...] = ()  # infer/s of each window the figures average

    @property
    def spread(self) -> float | None:
        """How far apart its windows were, as a fraction of its throughput (None: no windows read)."""
        if not self.windows or not self.infer_per_s:
            return None
        return (max(self.windows) - min(self.windows)) / self.infer_per_s

    def overlaps(self, other: Measurement) -> bool:
        """Whether the two points' windows overlap in throughput: neither is surely the faster."""
        return bool(self.windows and other.windows) and (
            min(self.windows) <= max(other.windows) and min(other.windows) <= max(self.windows)
        )

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def gpu_memory_mib(self) -> float | None:
        return None if self.gpu_memory_bytes is None else round(self.gpu_memory_bytes / 2**20, 1)

    def as_dict(self) -> dict:
        figures = (
            {
                "infer_per_s": round(self.infer_per_s, 2),
                "p50_ms": round(self.p50_ms, 3),
                "p99_ms": round(self.p99_ms, 3),
                "gpu_memory_mib": self.gpu_memory_mib,
                "windows_infer_per_s": [round(w, 2) for w in self.windows],
                "spread": None if self.spread is None else round(self.spread, 4),
            }
            if self.ok
            else {"error": self.error}
        )
        return {
            "config": self.candidate.as_dict(),
            "label": self.candidate.label,
            **figures,
            "seconds": round(self.seconds, 1),
            **({"note": self.note} if self.note else {}),
        }
