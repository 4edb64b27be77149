"""Shared, session-scoped example ONNX files (small variants) for the builder tests."""
from __future__ import annotations

from pathlib import Path

import pytest

from trtpool_builder.examples import write_example

# Small variants: the same topologies, sized for a 2-core CI machine.
SMALL_RESNET = {"image_size": 64}
SMALL_BERT = {"num_layers": 2, "hidden": 64, "num_heads": 4, "vocab_size": 1000, "max_positions": 128}


@pytest.fixture(scope="session")
def small_resnet() -> dict:
    return dict(SMALL_RESNET)


@pytest.fixture(scope="session")
def small_bert() -> dict:
    return dict(SMALL_BERT)


@pytest.fixture(scope="session")
def examples_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("examples")


@pytest.fixture(scope="session")
def tiny_onnx(examples_dir: Path) -> Path:
    return write_example("tiny", examples_dir / "tiny.onnx")


@pytest.fixture(scope="session")
def small_resnet_onnx(examples_dir: Path) -> Path:
    return write_example("resnet50", examples_dir / "resnet50_small.onnx", **SMALL_RESNET)


@pytest.fixture(scope="session")
def small_bert_onnx(examples_dir: Path) -> Path:
    return write_example("bert_base", examples_dir / "bert_small.onnx", **SMALL_BERT)
