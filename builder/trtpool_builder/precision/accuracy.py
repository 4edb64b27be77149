"""Compare a model's outputs with the fp32 ONNX model's on ONNX Runtime (CPU).

Per output: the largest absolute error, and the largest relative error
|candidate - reference| / |reference|, where |reference| is floored at 0.1 %
of the output's largest magnitude so that values near zero (after a ReLU,
say) do not turn rounding noise into huge ratios.

One figure per output decides whether a conversion is good enough
(`trtpool-build --max-error`): for a float output the relative RMS error
||candidate - reference|| / ||reference|| (0.01: the difference is 1 % of the
output's magnitude); for an integer or boolean output (labels, indices) the
share of elements that differ. A NaN or infinity where the reference has a
number counts as an infinite error. Unlike the largest error, it does not
refuse an fp16 engine for one near-tie among 6625 character probabilities
(PaddleOCR's recognizer: 0.3 at one element, every argmax the same), and it
still sees a broken conversion (a clamped constant, an overflow: about 1 or
infinite).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtpool.errors import TrtpoolError
from trtpool_builder.errors import BuildError
from trtpool_builder.precision.ort_cpu import cpu_session
from trtpool_builder.precision.samples import Samples, describe

Runner = Callable[[Samples], dict[str, np.ndarray]]
REL_FLOOR = 1e-3
# --max-error defaults: what a sound conversion stays within on sample inputs
# (the corpus in fp16: 0.002 to 0.06; int8: a few 0.01), with room for deep graphs.
DEFAULT_MAX_ERROR = {"fp16": 0.1, "bf16": 0.1, "int8": 0.25, "fp8": 0.25}


class InputsRefused(BuildError):
    """The fp32 reference cannot run a feed: the inputs, not the candidate, are at fault."""


@dataclass(frozen=True)
class OutputError:
    name: str
    max_abs: float
    max_rel: float
    reference_max: float  # largest |reference| value, for scale
    error: float  # the figure --max-error limits (see the module's docstring)


@dataclass(frozen=True)
class AccuracyReport:
    reference: str
    candidate: str
    samples: int
    errors: tuple[OutputError, ...]

    def format(self) -> str:
        lines = [f"accuracy of {self.candidate} vs {self.reference} ({self.samples} samples):"]
        for e in self.errors:
            lines.append(
                f"  {e.name}: error {e.error:.3g}, max abs error {e.max_abs:.3g}, max rel error "
                f"{e.max_rel:.3g} (largest |reference| {e.reference_max:.3g})"
            )
        return "\n".join(lines)

    @property
    def max_error(self) -> float:
        """The worst output's error figure."""
        return max((e.error for e in self.errors), default=0.0)

    def beyond(self, limit: float) -> tuple[OutputError, ...]:
        return tuple(e for e in self.errors if not e.error <= limit)


def onnxruntime_runner(path: Path) -> Runner:
    session = cpu_session(str(path), f"'{path}'")
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, feeds), strict=True))


def _figure(reference: np.ndarray, candidate: np.ndarray, diff: np.ndarray) -> float:
    if reference.dtype.kind in "iub":
        return float(np.mean(reference != candidate)) if reference.size else 0.0
    if not np.isfinite(diff).all():
        return float("inf")
    error = float(np.linalg.norm(diff))
    if error == 0.0:
        return 0.0
    size = float(np.linalg.norm(np.nan_to_num(reference.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)))
    return error / size if size > 0.0 else float("inf")


def output_error(name: str, reference: np.ndarray, candidate: np.ndarray) -> OutputError:
    if reference.shape != candidate.shape:
        raise BuildError(
            f"output '{name}': shape {list(candidate.shape)} differs from the reference's {list(reference.shape)}"
        )
    ref, cand = reference.astype(np.float64), candidate.astype(np.float64)
    same = (ref == cand) | (np.isnan(ref) & np.isnan(cand))
    finite = np.abs(ref[np.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 0.0
    floor = max(scale * REL_FLOOR, float(np.finfo(np.float64).tiny))
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(cand - ref))
        diff[np.isnan(diff)] = np.inf  # NaN beside a number, or opposite infinities
        rel = np.where(same, 0.0, diff / np.maximum(np.abs(ref), floor))
    rel[np.isnan(rel)] = np.inf
    max_abs = float(diff.max(initial=0.0))
    return OutputError(name, max_abs, float(rel.max(initial=0.0)), scale, _figure(reference, candidate, diff))


def _ran(runner: Runner, feed: Samples, name: str, refused: type[BuildError]) -> dict[str, np.ndarray]:
    """runner(feed), with a failure told as `refused` naming the runner and the feed."""
    try:
        return runner(feed)
    except TrtpoolError:
        raise
    except Exception as exc:  # ONNX Runtime raises its own exception types for inputs a graph refuses
        raise refused(f"{name} cannot run the inputs {describe(feed)}: {exc}") from exc


def compare(
    reference: Runner, candidate: Runner, feeds: Sequence[Samples], reference_name: str, candidate_name: str
) -> AccuracyReport:
    """Run both on every feed and keep the worst error per output; InputsRefused where the
    reference cannot run a feed."""
    worst: dict[str, OutputError] = {}
    for feed in feeds:
        expected = _ran(reference, feed, reference_name, InputsRefused)
        got = _ran(candidate, feed, candidate_name, BuildError)
        for name, ref in expected.items():
            if name not in got:
                raise BuildError(f"{candidate_name} has no output '{name}'")
            e = output_error(name, ref, got[name])
            old = worst.get(name)
            worst[name] = (
                e
                if old is None
                else OutputError(
                    name,
                    max(old.max_abs, e.max_abs),
                    max(old.max_rel, e.max_rel),
                    max(old.reference_max, e.reference_max),
                    max(old.error, e.error),
                )
            )
    count = sum(len(next(iter(f.values()))) for f in feeds)
    return AccuracyReport(reference_name, candidate_name, count, tuple(worst.values()))
