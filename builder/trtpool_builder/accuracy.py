"""Compare a model's outputs with the fp32 ONNX model's on ONNX Runtime (CPU).

Per output: the largest absolute error, and the largest relative error
|candidate - reference| / |reference|, where |reference| is floored at 0.1 %
of the output's largest magnitude so that values near zero (after a ReLU,
say) do not turn rounding noise into huge ratios.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtpool_builder.errors import BuildError
from trtpool_builder.samples import Samples

Runner = Callable[[Samples], dict[str, np.ndarray]]
REL_FLOOR = 1e-3


@dataclass(frozen=True)
class OutputError:
    name: str
    max_abs: float
    max_rel: float
    reference_max: float  # largest |reference| value, for scale


@dataclass(frozen=True)
class AccuracyReport:
    reference: str
    candidate: str
    samples: int
    errors: tuple[OutputError, ...]

    def format(self) -> str:
        lines = [f"accuracy of {self.candidate} vs {self.reference} ({self.samples} samples):"]
        for e in self.errors:
            lines.append(f"  {e.name}: max abs error {e.max_abs:.3g}, max rel error {e.max_rel:.3g} "
                         f"(largest |reference| {e.reference_max:.3g})")
        return "\n".join(lines)


def onnxruntime_runner(path: Path) -> Runner:
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types for unsupported graphs
        raise BuildError(f"ONNX Runtime cannot load '{path}': {exc}") from exc
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, feeds)))


def output_error(name: str, reference: np.ndarray, candidate: np.ndarray) -> OutputError:
    if reference.shape != candidate.shape:
        raise BuildError(f"output '{name}': shape {list(candidate.shape)} differs from the "
                         f"reference's {list(reference.shape)}")
    ref = reference.astype(np.float64)
    diff = np.abs(candidate.astype(np.float64) - ref)
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    floor = max(scale * REL_FLOOR, np.finfo(np.float64).tiny)
    rel = diff / np.maximum(np.abs(ref), floor)
    return OutputError(name, float(diff.max(initial=0.0)), float(rel.max(initial=0.0)), scale)


def compare(reference: Runner, candidate: Runner, feeds: Sequence[Samples],
            reference_name: str, candidate_name: str) -> AccuracyReport:
    """Run both on every feed and keep the worst error per output."""
    worst: dict[str, OutputError] = {}
    for feed in feeds:
        expected, got = reference(feed), candidate(feed)
        for name, ref in expected.items():
            if name not in got:
                raise BuildError(f"{candidate_name} has no output '{name}'")
            e = output_error(name, ref, got[name])
            old = worst.get(name)
            worst[name] = e if old is None else OutputError(
                name, max(old.max_abs, e.max_abs), max(old.max_rel, e.max_rel),
                max(old.reference_max, e.reference_max))
    count = sum(len(next(iter(f.values()))) for f in feeds)
    return AccuracyReport(reference_name, candidate_name, count, tuple(worst.values()))
