"""The committed example configs are exactly what the generator writes."""
from __future__ import annotations

from pathlib import Path

import pytest

from trtpool_builder.examples.repo import make_example_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["tiny", "resnet50", "bert_base"])
def test_committed_config_matches_the_generator(tmp_path, name):
    generated = make_example_folder(tmp_path, name, runtime="onnx").folder / "config.pbtxt"
    committed = ROOT / "model_repository" / name / "config.pbtxt"
    assert committed.read_text() == generated.read_text(), (
        f"{committed} is stale: regenerate with trtpool-examples --repo model_repository")
