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

from tests.corpus.manifest import CORPUS, CorpusModel
from trtpool_builder.accuracy_run import run_accuracy
from trtpool_builder.instance_runner import instance_runner
from trtpool_builder.model_folder import ServingOptions, make_model_folder, read_config

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
