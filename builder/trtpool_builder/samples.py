"""Input samples for calibration and accuracy checks: loaded from .npy/.npz, or random.

A calibration source is a .npz file whose arrays are named after the model's
inputs, a .npy file (single-input models only), or a folder of such files.
The first axis of every array counts samples; files are concatenated along it.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from trtpool.errors import ConfigError
from trtpool.signature import Profile, TensorSpec

Samples = dict[str, np.ndarray]


def _read(path: Path, inputs: Sequence[TensorSpec]) -> Samples:
    if path.suffix == ".npy":
        if len(inputs) != 1:
            raise ConfigError(f"'{path}': a .npy file holds one array but the model has inputs "
                              f"{[s.name for s in inputs]}; use a .npz file with one array per input")
        return {inputs[0].name: np.load(path)}
    if path.suffix == ".npz":
        with np.load(path) as archive:
            return {key: archive[key] for key in archive.files}
    raise ConfigError(f"'{path}': expected a .npy or .npz file")


def _check(name: str, array: np.ndarray, spec: TensorSpec, where: Path) -> np.ndarray:
    if array.ndim != len(spec.shape):
        raise ConfigError(f"'{where}': array '{name}' has shape {list(array.shape)}, the model's input "
                          f"has rank {len(spec.shape)} ({list(spec.shape)})")
    for axis, (have, want) in enumerate(zip(array.shape, spec.shape)):
        if axis and want != -1 and have != want:
            raise ConfigError(f"'{where}': array '{name}' dimension {axis} is {have}, the model needs {want}")
    if array.dtype.kind != spec.dtype.kind and not (array.dtype.kind in "iu" and spec.dtype.kind in "iu"):
        raise ConfigError(f"'{where}': array '{name}' is {array.dtype}, the model's input is {spec.dtype}")
    return array.astype(spec.dtype, copy=False)


def load_samples(path: Path, inputs: Sequence[TensorSpec]) -> Samples:
    """All samples in `path`, checked against the inputs and cast to their dtypes."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"calibration/input data '{path}' does not exist")
    files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz")) if path.is_dir() else [path]
    if not files:
        raise ConfigError(f"'{path}' holds no .npy or .npz files")
    by_name = {spec.name: spec for spec in inputs}
    parts: dict[str, list[np.ndarray]] = {name: [] for name in by_name}
    for file in files:
        data = _read(file, inputs)
        unknown, missing = sorted(set(data) - set(by_name)), sorted(set(by_name) - set(data))
        if unknown or missing:
            raise ConfigError(f"'{file}': arrays must be named after the model's inputs {sorted(by_name)}; "
                              f"missing {missing}, unknown {unknown}")
        for name, array in data.items():
            parts[name].append(_check(name, array, by_name[name], file))
    counts = {name: sum(len(a) for a in arrays) for name, arrays in parts.items()}
    if len(set(counts.values())) != 1:
        raise ConfigError(f"'{path}': inputs have different sample counts {counts}")
    return {name: np.concatenate(arrays, axis=0) for name, arrays in parts.items()}


def batches(samples: Samples, size: int) -> Iterator[Samples]:
    count = len(next(iter(samples.values())))
    for start in range(0, count, size):
        yield {name: array[start:start + size] for name, array in samples.items()}


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


def sample_feeds(samples: Samples | None, inputs: Sequence[TensorSpec], profiles: Sequence[Profile],
                 limit: int = 32) -> list[Samples]:
    """Feeds to check a conversion on: the first `limit` given samples in batches of 8, else one
    random batch at each profile's opt shapes."""
    if samples:
        return list(batches({name: array[:limit] for name, array in samples.items()}, 8))
    return [random_samples(inputs, profile, seed=profile.index) for profile in profiles]
