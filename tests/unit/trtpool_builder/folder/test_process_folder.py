"""trtpool-model with a process file: the folder it writes, and what it refuses."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

from tests.harness.docs import command_argv, quoted_command
from tests.unit.trtpool.process.test_stages import PROCESS
from trtpool.instance import ModelInstance
from trtpool_builder.cli import model_main
from trtpool_builder.examples.tiny import tiny_reference
from trtpool_builder.folder.model_folder import read_config

PROCESS_FILE = "docs/how-to/write-a-process-file.md"
FACE = ["--input", "VALUES:FP64:16", "--output", "TOTAL:FP32:1", "--output", "DOUBLED:FP32:4"]


@pytest.fixture
def process_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_process.py"
    path.write_text(PROCESS)
    return path


def test_the_folder_carries_the_file_its_files_and_the_outside_face(tiny_onnx, process_file, tmp_path):
    extra = tmp_path / "labels.txt"
    extra.write_text("a\nb\n")
    repo = tmp_path / "repo"
    assert model_main([str(tiny_onnx), "--repo", str(repo), "--name", "staged", "--shapes", "INPUT0=1x16:4x16:8x16",
                       "--process", str(process_file), "--with", str(extra), *FACE]) == 0
    version_dir = repo / "staged" / "1"
    assert (version_dir / "process.py").read_text() == PROCESS and (version_dir / "labels.txt").is_file()
    config = json_format.MessageToDict(read_config(repo / "staged"), preserving_proto_field_name=True)
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("VALUES", "TYPE_FP64", ["16"])]
    assert [t["name"] for t in config["output"]] == ["TOTAL", "DOUBLED"]
    instance = ModelInstance(config, version_dir, "cpu")  # loads as the server would
    try:
        x = np.random.default_rng(0).standard_normal((1, 16))
        engine = instance.stage.pre.preprocess({"VALUES": x})
        # The engine's face stays the model's own.
        assert [s.name for s in instance.runtime.signature.inputs] == ["INPUT0"]
        assert engine["INPUT0"].dtype == np.float32
        answer = instance.stage.post.postprocess({"OUTPUT0": tiny_reference(engine["INPUT0"]).astype(np.float32)},
                                            {"VALUES": x})
        np.testing.assert_allclose(answer["DOUBLED"], 2 * tiny_reference(x.astype(np.float32)), rtol=1e-5, atol=1e-5)
    finally:
        instance.close()


@pytest.mark.parametrize("args, message", [
    (["--input", "VALUES:FP64:16"], "defines postprocess: give the outputs clients see (--output NAME:TYPE:DIMS"),
    (["--input", "VALUES:FLOAT:16", "--output", "TOTAL:FP32:1"], "data type 'FLOAT' is not one of Triton's"),
    (["--input", "VALUES:FP64", "--output", "TOTAL:FP32:1"], "tensor 'VALUES:FP64': expected NAME:TYPE:DIMS"),
])
def test_a_face_that_does_not_fit_the_file_is_refused(tiny_onnx, process_file, tmp_path, capsys, args, message):
    status = model_main([str(tiny_onnx), "--repo", str(tmp_path / "repo"), "--name", "staged",
                         "--shapes", "INPUT0=1x16:4x16:8x16", "--process", str(process_file), *args])
    assert status == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "repo" / "staged").exists()


def test_a_face_without_a_process_file_is_refused(tiny_onnx, tmp_path, capsys):
    assert model_main([str(tiny_onnx), "--repo", str(tmp_path), "--name", "x", *FACE]) == 2
    assert "--input, --output, --with and --preprocess-* describe a process file: give --process too" in \
        capsys.readouterr().err


def test_a_folder_whose_process_file_does_not_load_is_not_written(tiny_onnx, tmp_path, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("def setup(config, folder):\n    raise RuntimeError('no labels')\n"
                      "def preprocess(inputs):\n    return inputs\n")
    assert model_main([str(tiny_onnx), "--repo", str(tmp_path / "repo"), "--name", "x", "--shapes",
                       "INPUT0=1x16:4x16:8x16", "--process", str(broken), "--input", "VALUES:FP64:16"]) == 2
    assert "setup(model_config, folder) raised RuntimeError: no labels" in capsys.readouterr().err
    assert not (tmp_path / "repo" / "x").exists()


def test_the_pipeline_commands_the_process_file_page_quotes_run_as_written(tmp_path):
    """docs/how-to/write-a-process-file.md's `trtpool-examples --names resnet50_jpeg bert_text` at full size (bert_text's
    vocabulary never ended on b7b529b), then its `trtpool-model ... --process` line on the files that
    wrote: the example's ONNX file, its process file as my_process.py, labels.txt and process.json."""
    bin_dir = Path(sys.executable).parent
    examples = quoted_command("trtpool-examples --names", PROCESS_FILE)
    done = subprocess.run([str(bin_dir / "trtpool-examples"), *command_argv(examples)[1:], "--repo", "repo"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["repo/resnet50_jpeg:", "generated", "(onnx)", "repo/bert_text:", "generated",
                                   "(onnx)"] or "(tensorrt)" in done.stdout, done.stdout
    version = tmp_path / "repo" / "resnet50_jpeg" / "1"
    for source, name in (("model.onnx", "model.onnx"), ("process.py", "my_process.py"), ("labels.txt", "labels.txt"),
                         ("process.json", "process.json")):
        (tmp_path / name).write_bytes((version / source).read_bytes())
    model = quoted_command("trtpool-model model.onnx --repo R --name N --shapes", PROCESS_FILE)
    done = subprocess.run([str(bin_dir / "trtpool-model"), *command_argv(model)[1:]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    written = tmp_path / "R" / "N"
    assert {p.name for p in (written / "1").iterdir()} >= {"model.onnx", "process.py", "labels.txt", "process.json"}
    config = json_format.MessageToDict(read_config(written), preserving_proto_field_name=True)
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("IMAGE", "TYPE_STRING", ["1"])]
    assert config["max_batch_size"] == 32
