"""trtpool-model on each corpus ONNX file, then trtpool's own serving path (ModelInstance, as the
server loads it) against ONNX Runtime in-process at several shapes.

They rely on the runtime's real-model support (issue 12: output dims taken
from the model only where fixed, shapes reported after each run); without it
trtpool-model refuses most corpus models, rightly, with the server's message.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import json_format

from tests.corpus.manifest import BY_NAME, CORPUS, CorpusModel
from trtpool_builder.cli import model_main
from trtpool_builder.folder.accuracy_run import run_accuracy
from trtpool_builder.folder.instance_runner import instance_runner
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config

pytestmark = pytest.mark.corpus_runtime


@pytest.mark.parametrize("entry", CORPUS, ids=lambda m: m.name)
def test_folder_loads_in_trtpool_and_answers_like_onnxruntime(entry: CorpusModel, tmp_path: Path,
                                                              corpus_files: dict[str, Path]) -> None:
    source = corpus_files[entry.name]
    folder = make_model_folder(tmp_path, entry.name, source, entry.profile_texts(),
                               ServingOptions(instance_kind="cpu"))
    config = json_format.MessageToDict(read_config(folder), preserving_proto_field_name=True)
    run, close = instance_runner(config, folder / "1", "cpu")
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    try:
        for index, shapes in enumerate(entry.shapes):
            feed = entry.make_inputs(shapes, np.random.default_rng(index))
            expected = dict(zip(names, session.run(names, feed)))
            # A scalar input is taken as [1] by the folder's copy (Triton serves no scalars there).
            got = run({name: array.reshape(1) if array.ndim == 0 else array for name, array in feed.items()})
            assert {n: a.shape for n, a in got.items()} == entry.output_shapes(shapes)
            for name in names:
                np.testing.assert_allclose(got[name], expected[name], rtol=entry.rtol, atol=entry.atol,
                                           err_msg=f"{entry.name} output '{name}' at {shapes}")
    finally:
        close()
    report = run_accuracy(folder)  # trtpool-accuracy's path: random inputs at the first profile's opt shapes
    assert report.max_error <= 1e-4, report.format()


@pytest.mark.parametrize(("name", "without"), [
    ("silero_vad_streaming", "'sr' [], 'state' [2, -1, 128], 'stateN' [2, -1, 128]"),
    ("silero_vad_sequence", "'h' [1, 1, 128], 'c' [1, 1, 128], 'hn' [1, -1, 128], 'cn' [1, -1, 128]"),
    ("ppocr_cls", None),
])
def test_trtpool_model_says_why_it_serves_a_model_unbatched(name: str, without: str | None, tmp_path: Path,
                                                           corpus_files: dict[str, Path],
                                                           capsys: pytest.CaptureFixture) -> None:
    """docs/builder.md: a model served one request at a time gets a `note:` saying why, here the
    tensors whose first dimension is no batch axis (the stateful models' state, their scalar);
    a batched model gets none."""
    shapes = [arg for text in BY_NAME[name].profile_texts() for arg in ("--shapes", text)]
    assert model_main([str(corpus_files[name]), "--repo", str(tmp_path), "--name", name, *shapes]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "without a batch axis" in line]
    config = read_config(tmp_path / name)
    if without is None:
        assert notes == [] and config.max_batch_size > 0
        return
    assert config.max_batch_size == 0
    assert notes == ["note: served without a batch axis (max_batch_size 0, one request per run): every input and "
                     f"output needs a dynamic first dimension (the batch), which {without} do not have"]
