"""Corpus models exported during set-up with a framework's own converter (not trtpool's generator)."""
from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np


def export_digits_mlp(dest: Path) -> None:
    """skl2onnx on a scikit-learn pipeline fitted on scikit-learn's own digits data (deterministic).

    Input int64 pixels; outputs the int64 label and the class probabilities
    (no ZipMap, so both are tensors); the scaler divides instead of using the
    ai.onnx.ml Scaler, but the label lookup stays an ai.onnx.ml node."""
    import onnx
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import Int64TensorType
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    pixels, labels = load_digits(return_X_y=True)
    pipeline = Pipeline([("scale", StandardScaler()), ("pca", PCA(24, random_state=0)),
                         ("mlp", MLPClassifier((32,), max_iter=300, random_state=0))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pipeline.fit(pixels.astype(np.int64), labels)
    model = to_onnx(pipeline, initial_types=[("pixels", Int64TensorType([None, 64]))],
                    options={"mlp__zipmap": False, "scale__div": "div_cast"},
                    target_opset={"": 17, "ai.onnx.ml": 3})
    onnx.save(model, str(dest))


# name -> (export function, the packages whose versions decide the file)
EXPORTS: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "digits_mlp": (export_digits_mlp, ("scikit-learn", "skl2onnx", "onnx")),
}
