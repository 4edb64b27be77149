"""trtpool-accuracy on silero VAD's streaming model, whose int64 scalar input `sr` must be 8000 or
16000 (issue 37): each sample layout docs/builder.md allows for a scalar runs, for a model folder
(trtpool's serving path) and an ONNX file alike, and random inputs the model refuses end in a
message that says to give --inputs, not in ONNX Runtime's traceback."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.corpus.fetch import fetch
from tests.corpus.inputs import vad_streaming
from tests.corpus.manifest import SILERO_IF
from trtpool_builder.cli import accuracy_main, model_main

pytestmark = pytest.mark.corpus_runtime

SAMPLES = 4
# The shapes: frames of 576 samples (512 and the 64 of context), the state [2, B, 128].
SHAPES = "input=1x576:1x576:8x576,state=2x1x128:2x1x128:2x8x128"
SR_LAYOUTS = {"0-d, once": lambda sr: sr[0], "[N]": lambda sr: sr, "[N, 1]": lambda sr: sr.reshape(-1, 1)}


def vad_folder(model: Path, repo: Path) -> Path:
    """A model folder of a silero VAD file at the issue's shapes, as trtpool-model writes it."""
    assert model_main([str(model), "--repo", str(repo), "--name", "vad", "--shapes", SHAPES,
                       "--instance-kind", "cpu"]) == 0
    return repo / "vad"


def _samples(path: Path, layout: str) -> Path:
    """SAMPLES speech frames and states, each a whole input (a sample axis first), sr in `layout`."""
    rng = np.random.default_rng(0)
    feeds = [vad_streaming({"input": (1, 576), "state": (2, 1, 128), "sr": ()}, rng) for _ in range(SAMPLES)]
    stacked = {name: np.stack([feed[name] for feed in feeds]) for name in ("input", "state", "sr")}
    np.savez(path, input=stacked["input"], state=stacked["state"], sr=SR_LAYOUTS[layout](stacked["sr"]))
    return path


@pytest.mark.parametrize("layout", SR_LAYOUTS)
@pytest.mark.parametrize("candidate", ["folder", "onnx file"])
def test_each_sample_layout_of_a_scalar_input_runs(layout, candidate, tmp_path, corpus_files, capsys):
    folder = vad_folder(corpus_files["silero_vad_streaming"], tmp_path / "repo")
    model = folder / "1" / "model.onnx"
    target = [str(folder)] if candidate == "folder" else [str(model), "--reference", str(model)]
    code = accuracy_main([*target, "--inputs", str(_samples(tmp_path / "s.npz", layout))])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"({SAMPLES} samples)" in out and "output: error 0," in out and "stateN: error 0," in out, out


def test_random_inputs_the_model_refuses_are_said_to_need_inputs(tmp_path, capsys):
    folder = vad_folder(fetch((SILERO_IF,))[SILERO_IF.name], tmp_path / "repo")
    code = accuracy_main([str(folder)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "cannot run the inputs 'input' [1, 576] float32, 'state' [2, 1, 128] float32, 'sr' [] int64 = " in err
    assert "these are random inputs" in err and "give real ones with --inputs FILE.npz, one array per input " \
        "(input, state, sr)" in err, err
    assert "Traceback" not in err
    # The same model on valid samples answers: the refusal was the inputs'.
    assert accuracy_main([str(folder), "--inputs", str(_samples(tmp_path / "s.npz", "[N]"))]) == 0


def test_a_scalar_in_a_rank_it_cannot_take_is_refused_with_the_forms_it_can(tmp_path, corpus_files, capsys):
    folder = vad_folder(corpus_files["silero_vad_streaming"], tmp_path / "repo")
    path = tmp_path / "s.npz"
    np.savez(path, input=np.zeros((SAMPLES, 1, 576), np.float32), state=np.zeros((SAMPLES, 2, 1, 128), np.float32),
             sr=np.full((SAMPLES, 2), 16000, np.int64))
    assert accuracy_main([str(folder), "--inputs", str(path)]) == 2
    err = capsys.readouterr().err
    assert ("array 'sr' has shape [4, 2]; the model's input has rank 0 ([]): give rank 1 (samples first, each a "
            "whole input), rank 0 (one value for every sample) or [N, 1] (a value per sample, as clients send "
            "the scalar)") in err, err
