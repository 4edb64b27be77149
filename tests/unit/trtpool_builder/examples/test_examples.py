from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from trtpool_builder.examples import EXAMPLES, get_example, tiny_reference, write_example


def run(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def op_counts(path: Path) -> Counter:
    return Counter(node.op_type for node in onnx.load(str(path)).graph.node)


def test_tiny_matches_float64_reference(tiny_onnx: Path) -> None:
    x = EXAMPLES["tiny"].sample_inputs(5, seed=3)["INPUT0"]
    out = run(tiny_onnx, {"INPUT0": x})["OUTPUT0"]
    assert out.shape == (5, 4) and out.dtype == np.float32
    np.testing.assert_allclose(out, tiny_reference(x), rtol=0, atol=1e-5)


def test_tiny_batch_dim_is_symbolic(tiny_onnx: Path) -> None:
    graph = onnx.load(str(tiny_onnx)).graph
    dims = graph.input[0].type.tensor_type.shape.dim
    assert (dims[0].dim_param, dims[1].dim_value) == ("batch", 16)
    assert [o.name for o in graph.output] == ["OUTPUT0"]


def test_same_options_give_identical_files(tmp_path: Path, tiny_onnx: Path) -> None:
    again = write_example("tiny", tmp_path / "again.onnx")
    assert again.read_bytes() == tiny_onnx.read_bytes()
    other = write_example("tiny", tmp_path / "other.onnx", seed=1)
    assert other.read_bytes() != tiny_onnx.read_bytes()


def test_resnet_topology_and_activations(small_resnet_onnx: Path, small_resnet: dict) -> None:
    ops = op_counts(small_resnet_onnx)
    # 1 stem + 16 bottlenecks x 3 + 4 projection shortcuts; BatchNorm is folded.
    assert ops["Conv"] == 53 and ops["Add"] == 16 and ops["Gemm"] == 1
    assert "BatchNormalization" not in ops
    feeds = EXAMPLES["resnet50"].sample_inputs(2, **small_resnet)
    assert feeds["input"].shape == (2, 3, 64, 64)
    logits = run(small_resnet_onnx, feeds)["logits"]
    assert logits.shape == (2, 1000) and np.isfinite(logits).all()
    assert 0.05 < logits.std() < 20
    assert not np.allclose(logits[0], logits[1])


def test_bert_outputs_and_mask(small_bert_onnx: Path, small_bert: dict) -> None:
    ops = op_counts(small_bert_onnx)
    assert ops["LayerNormalization"] == 1 + 2 * small_bert["num_layers"]
    assert ops["Erf"] == small_bert["num_layers"]
    feeds = EXAMPLES["bert_base"].sample_inputs(2, **small_bert)
    out = run(small_bert_onnx, feeds)
    hidden = small_bert["hidden"]
    assert out["last_hidden_state"].shape == (2, feeds["input_ids"].shape[1], hidden)
    assert out["pooler_output"].shape == (2, hidden)
    assert all(np.isfinite(v).all() for v in out.values())
    assert np.abs(out["pooler_output"]).max() <= 1.0  # tanh

    # A masked-out token must not change what the attended tokens see.
    feeds["attention_mask"][:] = 1
    feeds["attention_mask"][:, -1] = 0
    changed = {k: v.copy() for k, v in feeds.items()}
    changed["input_ids"][:, -1] = (changed["input_ids"][:, -1] + 1) % small_bert["vocab_size"]
    a, b = run(small_bert_onnx, feeds), run(small_bert_onnx, changed)
    np.testing.assert_allclose(a["last_hidden_state"][:, :-1], b["last_hidden_state"][:, :-1], atol=1e-5)
    assert not np.allclose(a["last_hidden_state"][:, -1], b["last_hidden_state"][:, -1])


def test_serving_defaults() -> None:
    assert EXAMPLES["tiny"].serving_profiles() == ("INPUT0=1x16:8x16:64x16",)
    assert EXAMPLES["tiny"].max_batch_size() == 64
    assert EXAMPLES["resnet50"].serving_profiles(image_size=112) == (
        "input=1x3x112x112:8x3x112x112:32x3x112x112",)
    assert EXAMPLES["bert_base"].serving_profiles() == (
        "input_ids=1x1:8x128:32x512,attention_mask=1x1:8x128:32x512",)
    assert EXAMPLES["bert_base"].max_batch_size() == 32


def test_unknown_example_and_option_are_named() -> None:
    with pytest.raises(ValueError, match="unknown example 'vgg'"):
        get_example("vgg")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['depth'\]"):
        EXAMPLES["bert_base"].options(depth=3)


def parameter_count(path: Path) -> int:
    return sum(int(np.prod(t.dims)) for t in onnx.load(str(path)).graph.initializer)


@pytest.mark.slow
def test_full_size_resnet50(tmp_path: Path) -> None:
    path = write_example("resnet50", tmp_path / "resnet50.onnx")
    assert 25.4e6 < parameter_count(path) < 25.7e6  # ResNet-50 with folded BatchNorm
    logits = run(path, EXAMPLES["resnet50"].sample_inputs(2))["logits"]
    assert np.isfinite(logits).all() and not np.allclose(logits[0], logits[1])


@pytest.mark.slow
def test_full_size_bert_base(tmp_path: Path) -> None:
    path = write_example("bert_base", tmp_path / "bert_base.onnx")
    assert 108e6 < parameter_count(path) < 111e6  # BERT-base: about 110 M parameters
    out = run(path, EXAMPLES["bert_base"].sample_inputs(2))
    assert out["last_hidden_state"].shape[2] == 768 and out["pooler_output"].shape == (2, 768)
    assert all(np.isfinite(v).all() for v in out.values())
