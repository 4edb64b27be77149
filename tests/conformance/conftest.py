"""Files exporters write, shared by the conformance tests."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest


@pytest.fixture(scope="session")
def zipmap_classifier(tmp_path_factory) -> Path:
    """skl2onnx's default export of a scikit-learn classifier: its probabilities as a ZipMap."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    features, labels = load_iris(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        classifier = LogisticRegression(max_iter=500).fit(features.astype(np.float32), labels)
    model = to_onnx(classifier, initial_types=[("features", FloatTensorType([None, 4]))],
                    target_opset={"": 17, "ai.onnx.ml": 3})
    assert any(node.op_type == "ZipMap" for node in model.graph.node)
    path = tmp_path_factory.mktemp("zipmap") / "iris.onnx"
    onnx.save(model, str(path))
    return path
