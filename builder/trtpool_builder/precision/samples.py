"""Input samples for calibration and accuracy checks: loaded from .npy/.npz, or random.

A calibration source is a .npz file whose arrays are named after the model's
inputs, a .npy file (single-input models only), or a folder of such files
(concatenated along their first axis). Per input, an array is read by its rank:

- one more axis than the input: axis 0 counts samples, each a whole input
  (a model without a batch axis, or a state such as an RNN's h0 [layers, 1, hidden]);
- the input's rank, and the input's first dimension is dynamic: its rows are
  samples (a batched input), fed in batches of 8 rows;
- the input's rank, and its first dimension fixed: one value, the same in every
  sample (a state given once).

A scalar (rank-0) input takes all three: a 0-d array (one value), shape [N]
(a value per sample) or [N, 1] (a value per sample, each the [1] clients send).

Inputs given per sample must agree on the count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtpool.errors import ConfigError
from trtpool.model.signature import Profile, TensorSpec

Samples = dict[str, np.ndarray]
ROWS, STACKED, ONCE = "rows", "stacked", "once"
ROWS_PER_FEED = 8


@dataclass(frozen=True)
class SampleSet:
    """Loaded samples: per input its array (files concatenated) and how to read it (ROWS,
    STACKED or ONCE)."""

    arrays: Samples
    forms: dict[str, str]
    count: int

    @property
    def rows_only(self) -> bool:
        return all(form == ROWS for form in self.forms.values())

    def feeds(self, limit: int | None = None) -> list[Samples]:
        """The model's feeds: batches of up to ROWS_PER_FEED rows when every input is given as
        rows, else one feed per sample; at most `limit` samples."""
        count = min(self.count, limit or self.count)
        if self.rows_only:
            return list(batches({name: array[:count] for name, array in self.arrays.items()}, ROWS_PER_FEED))
        return [{name: self._sample(name, index) for name in self.arrays} for index in range(count)]

    def _sample(self, name: str, index: int) -> np.ndarray:
        array, form = self.arrays[name], self.forms[name]
        # array[index, ...] stays an array where a sample is a scalar (ONNX Runtime takes no numpy.int64).
        return array[index, ...] if form == STACKED else array[index : index + 1] if form == ROWS else array


def _read(path: Path, inputs: Sequence[TensorSpec]) -> Samples:
    if path.suffix == ".npy":
        if len(inputs) != 1:
            raise ConfigError(
                f"'{path}': a .npy file holds one array but the model has inputs "
                f"{[s.name for s in inputs]}; use a .npz file with one array per input"
            )
        return {inputs[0].name: np.load(path)}
    if path.suffix == ".npz":
        with np.load(path) as archive:
            return {key: archive[key] for key in archive.files}
    raise ConfigError(f"'{path}': expected a .npy or .npz file")


def _as_scalars(array: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """A scalar input given as clients send it, [1] per sample ([N, 1]), read as N scalars."""
    if not spec.shape and array.ndim == 2 and array.shape[1] == 1:
        return array.reshape(-1)
    return array


def _form(name: str, array: np.ndarray, spec: TensorSpec, where: Path) -> str:
    """How the array gives the input's samples (see the module's docstring)."""
    rank = len(spec.shape)
    batched = bool(rank) and spec.shape[0] == -1
    if array.ndim == rank + 1:
        return STACKED
    if array.ndim == rank:
        return ROWS if batched else ONCE
    forms = [
        f"rank {rank + 1} (samples first, each a whole input)",
        f"rank {rank} ({'rows of a batch' if batched else 'one value for every sample'})",
        *(["[N, 1] (a value per sample, as clients send the scalar)"] if not rank else []),
    ]
    raise ConfigError(
        f"'{where}': array '{name}' has shape {list(array.shape)}; the model's input has rank "
        f"{rank} ({list(spec.shape)}): give " + ", ".join(forms[:-1]) + f" or {forms[-1]}"
    )


def _check(name: str, array: np.ndarray, spec: TensorSpec, form: str, where: Path) -> np.ndarray:
    one_input = array.shape[1:] if form == STACKED else array.shape
    for axis, (have, want) in enumerate(zip(one_input, spec.shape, strict=True)):
        if (axis or form != ROWS) and want != -1 and have != want:
            raise ConfigError(
                f"'{where}': array '{name}' gives dimension {axis} of the input as {have}, "
                f"the model needs {want} (input shape {list(spec.shape)})"
            )
    if array.dtype.kind != spec.dtype.kind and not (array.dtype.kind in "iu" and spec.dtype.kind in "iu"):
        raise ConfigError(f"'{where}': array '{name}' is {array.dtype}, the model's input is {spec.dtype}")
    return array.astype(spec.dtype, copy=False)


def load_samples(path: Path, inputs: Sequence[TensorSpec]) -> SampleSet:
    """All samples in `path`, checked against the inputs and cast to their dtypes."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"calibration/input data '{path}' does not exist")
    files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz")) if path.is_dir() else [path]
    if not files:
        raise ConfigError(f"'{path}' holds no .npy or .npz files")
    by_name = {spec.name: spec for spec in inputs}
    parts: dict[str, list[np.ndarray]] = {name: [] for name in by_name}
    forms: dict[str, str] = {}
    for file in files:
        data = _read(file, inputs)
        unknown, missing = sorted(set(data) - set(by_name)), sorted(set(by_name) - set(data))
        if unknown or missing:
            raise ConfigError(
                f"'{file}': arrays must be named after the model's inputs {sorted(by_name)}; "
                f"missing {missing}, unknown {unknown}"
            )
        for name, array in data.items():
            array = _as_scalars(array, by_name[name])
            form = _form(name, array, by_name[name], file)
            if forms.setdefault(name, form) != form or (form == ONCE and parts[name]):
                raise ConfigError(
                    f"'{file}': array '{name}' is given as {form} here and as {forms[name]} "
                    "before (or once in several files); give it one way"
                )
            parts[name].append(_check(name, array, by_name[name], form, file))
    counts = {name: sum(len(a) for a in arrays) for name, arrays in parts.items() if forms[name] != ONCE}
    if len(set(counts.values())) > 1:
        raise ConfigError(
            f"'{path}': inputs have different sample counts {counts} (an input given once, "
            "the same for every sample, has the input's rank and a fixed first dimension)"
        )
    # A value given once is one array (a 0-d one cannot be concatenated).
    return SampleSet(
        {name: arrays[0] if forms[name] == ONCE else np.concatenate(arrays, axis=0) for name, arrays in parts.items()},
        forms,
        next(iter(counts.values()), 1),
    )


def describe(feed: Samples) -> str:
    """Each input's shape and dtype, and the values of a small integer one (a sample rate, a flag)."""

    def one(name: str, array: np.ndarray) -> str:
        values = f" = {array.tolist()}" if array.dtype.kind in "iub" and array.size <= 4 else ""
        return f"'{name}' {list(array.shape)} {array.dtype}{values}"

    return ", ".join(one(name, array) for name, array in feed.items())


def batches(samples: Samples, size: int) -> Iterator[Samples]:
    count = len(next(iter(samples.values())))
    for start in range(0, count, size):
        yield {name: array[start : start + size] for name, array in samples.items()}


def random_feed(inputs: Sequence[TensorSpec], shapes: dict[str, tuple[int, ...]], seed: int = 0) -> Samples:
    """One batch at these shapes: floats ~ N(0, 1); integers and booleans in {0, 1}
    (valid token ids and attention masks alike)."""
    rng = np.random.default_rng(seed)
    samples = {}
    for spec in inputs:
        shape = shapes[spec.name]
        if spec.dtype.kind == "f":
            samples[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        else:
            samples[spec.name] = rng.integers(0, 2, size=shape).astype(spec.dtype)
    return samples


def random_samples(inputs: Sequence[TensorSpec], profile: Profile, seed: int = 0) -> Samples:
    """One random batch (random_feed) at the profile's opt shapes."""
    return random_feed(inputs, {spec.name: profile.ranges[spec.name].opt for spec in inputs}, seed)


def sample_feeds(
    samples: SampleSet | None, inputs: Sequence[TensorSpec], profiles: Sequence[Profile], limit: int = 32
) -> list[Samples]:
    """Feeds to check a conversion on: the first `limit` given samples, else one random batch at
    each profile's opt shapes."""
    if samples:
        return samples.feeds(limit)
    return [random_samples(inputs, profile, seed=profile.index) for profile in profiles]
