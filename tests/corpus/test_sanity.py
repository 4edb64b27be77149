"""The corpus itself, in-process on ONNX Runtime: each file is what the manifest says it is, and
the manifest's input generator makes inputs the model answers sensibly at several shapes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.corpus.manifest import (
    CONTROL_FLOW, CORPUS, DUPLICATE_DIM_NAMES, FOREIGN_OPS, INT64_INPUT, REQUIRED, SCALAR_INPUT, SEVERAL_IO,
    UNNAMED_DIMS, UNRELATED_DIM_NAMES, CorpusModel,
)

ORT_DTYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}


def test_corpus_covers_what_the_issue_asks() -> None:
    covered = {c for model in CORPUS for c in model.covers}
    assert set(REQUIRED) <= covered, set(REQUIRED) - covered
    exporters = {model.exporter.split(" ")[0] for model in CORPUS}
    assert len(CORPUS) >= 6 and len(exporters) >= 3, exporters
    assert {"paddle2onnx", "tf2onnx", "torch.onnx", "skl2onnx"} <= exporters


def _inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    weights = {init.name for init in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in weights]


def _dims(value: onnx.ValueInfoProto) -> list:
    return [d.dim_param if d.HasField("dim_param") else (d.dim_value if d.HasField("dim_value") else None)
            for d in value.type.tensor_type.shape.dim]


def _declared(model: onnx.ModelProto) -> dict[str, bool]:
    """Which manifest properties the file's own declarations show."""
    inputs = _inputs(model)
    input_names = {d for v in inputs for d in _dims(v) if isinstance(d, str)}
    per_input = [[d for d in _dims(v) if isinstance(d, str)] for v in inputs]
    return {
        DUPLICATE_DIM_NAMES: any(len(names) > len(set(names)) for names in per_input),
        UNNAMED_DIMS: any(d is None or d == -1 for v in inputs for d in _dims(v)),
        INT64_INPUT: any(v.type.tensor_type.elem_type == onnx.TensorProto.INT64 for v in inputs),
        SCALAR_INPUT: any(not _dims(v) for v in inputs),
        SEVERAL_IO: len(inputs) > 1 and len(model.graph.output) > 1,
        UNRELATED_DIM_NAMES: any(isinstance(d, str) and d not in input_names
                                 for v in model.graph.output for d in _dims(v)),
        CONTROL_FLOW: any(n.op_type == "If" for n in model.graph.node),
        FOREIGN_OPS: any(n.domain == "ai.onnx.ml" for n in model.graph.node),
    }


@pytest.mark.parametrize("entry", CORPUS, ids=lambda m: m.name)
def test_file_declares_what_the_manifest_says(entry: CorpusModel, corpus_files: dict[str, Path]) -> None:
    declared = _declared(onnx.load(str(corpus_files[entry.name]), load_external_data=False))
    claimed = {c: True for c in entry.covers if c in declared}
    assert {c: declared[c] for c in claimed} == claimed


def _sane(entry: CorpusModel, outputs: dict[str, np.ndarray]) -> None:
    """The generator's inputs are inputs this model is meant for: its answers look like answers."""
    if entry.name == "ppocr_det":  # text-like strokes are found as text
        assert outputs["sigmoid_0.tmp_0"].max() > 0.5
    elif entry.name == "ppocr_rec":  # a character distribution per position, and a confident one
        probs = outputs["softmax_11.tmp_0"]
        np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-3)
        assert probs.max() > 0.5
    elif entry.name in ("ppocr_cls", "magika"):
        (probs,) = outputs.values()
        np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-3)
    elif entry.name.startswith("silero"):
        probs = outputs["speech_probs" if "speech_probs" in outputs else "output"]
        assert ((probs >= 0) & (probs <= 1)).all()
    elif entry.name == "digits_mlp":
        np.testing.assert_array_equal(outputs["label"], outputs["probabilities"].argmax(-1))


@pytest.mark.parametrize("entry", CORPUS, ids=lambda m: m.name)
def test_runs_on_onnxruntime_at_several_shapes(entry: CorpusModel, corpus_files: dict[str, Path]) -> None:
    session = ort.InferenceSession(str(corpus_files[entry.name]), providers=["CPUExecutionProvider"])
    declared = {i.name: ORT_DTYPES[i.type] for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    seen_shapes = set()
    for index, shapes in enumerate(entry.shapes):
        feed = entry.make_inputs(shapes, np.random.default_rng(index))
        assert {n: (a.dtype, a.shape) for n, a in feed.items()} == {
            n: (np.dtype(declared[n]), tuple(shapes[n])) for n in declared}
        outputs = dict(zip(names, session.run(names, feed)))
        assert {n: a.shape for n, a in outputs.items()} == entry.output_shapes(shapes)
        for name, array in outputs.items():
            assert np.isfinite(array).all(), f"{entry.name} output '{name}' at {shapes}"
        _sane(entry, outputs)
        seen_shapes.add(tuple(a.shape for a in outputs.values()))
    assert len(seen_shapes) == len(entry.shapes)  # every shape gave differently shaped answers
