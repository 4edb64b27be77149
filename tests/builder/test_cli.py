from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trtpool_builder.cli import EXIT_CANNOT_RUN, accuracy_main, build_main, examples_main, model_main
from trtpool_builder.model_folder import read_config
from trtpool_builder.errors import BuildError
from trtpool_builder.examples import EXAMPLES
from trtpool_builder.ort_cpu import cpu_session
from trtpool_builder.gpu import current_gpu
from trtpool_builder.trt_module import is_importable

needs_rtx = pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")


@needs_rtx
def test_build_then_model_then_accuracy(tiny_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    engine = tmp_path / "tiny.plan"
    assert build_main(["--onnx", str(tiny_onnx), "--output", str(engine), "--shapes", "INPUT0=1x16:4x16:32x16",
                       "--trt-module", "tensorrt_rtx", "--compute-capability", "8.6"]) == 0
    assert "built" in capsys.readouterr().out and engine.with_name("tiny.plan.json").is_file()
    assert model_main([str(engine), "--repo", str(tmp_path / "repo"), "--name", "tiny", "--mode", "decoupled"]) == 0
    assert (tmp_path / "repo" / "tiny" / "1" / "model.plan").is_file()
    if current_gpu() is None:
        assert accuracy_main([str(tmp_path / "repo" / "tiny")]) == EXIT_CANNOT_RUN
        err = capsys.readouterr().err
        assert "cannot run engine" in err and "compute capability 8.6" in err


@needs_rtx
def test_build_output_carries_no_onnx_runtime_warnings(tiny_onnx: Path, tmp_path: Path) -> None:
    """An fp16 build of tiny made ONNX Runtime print four CleanUnusedInitializersAndNodeArgs warnings
    (hundreds for a real model) on the terminal; its errors still surface."""
    done = subprocess.run([str(Path(sys.executable).parent / "trtpool-build"), "--onnx", str(tiny_onnx),
                           "--output", str(tmp_path / "tiny.plan"), "--shapes", "INPUT0=1x16:4x16:32x16",
                           "--precision", "fp16", "--trt-module", "tensorrt_rtx"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "built" in done.stdout and "fp16 conversion error" in done.stdout
    assert "onnxruntime" not in done.stderr and "CleanUnusedInitializers" not in done.stdout + done.stderr, done.stderr
    with pytest.raises(BuildError, match="ONNX Runtime cannot load the test's bytes: "):
        cpu_session(b"not an onnx graph", "the test's bytes")


def test_errors_are_one_line_with_status_2(tiny_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    status = build_main(["--onnx", str(tiny_onnx), "--output", str(tmp_path / "x.plan"),
                         "--shapes", "NOPE=1x16", "--trt-module", "tensorrt_rtx"])
    assert status == 2
    assert capsys.readouterr().err.startswith("trtpool-build: error: profile 0 ('NOPE=1x16'): the model has no input(s) ['NOPE']")


def test_accuracy_of_a_converted_onnx(tiny_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16
    import onnx

    fp16 = tmp_path / "tiny.fp16.onnx"
    onnx.save(convert_float_to_float16(onnx.load(str(tiny_onnx)), keep_io_types=True), str(fp16))
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, **EXAMPLES["tiny"].sample_inputs(12))
    assert accuracy_main([str(fp16), "--reference", str(tiny_onnx), "--inputs", str(inputs)]) == 0
    out = capsys.readouterr().out
    assert "(12 samples)" in out and "OUTPUT0: error " in out and "max abs error" in out
    assert accuracy_main([str(fp16)]) == 2
    assert "give the fp32 model to compare with" in capsys.readouterr().err


def test_examples_are_idempotent(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["--repo", str(tmp_path), "--names", "tiny", "resnet50", "--runtime", "onnx", "--image-size", "64"]
    assert examples_main(argv) == 0
    assert capsys.readouterr().out.count("generated (onnx)") == 2
    model = tmp_path / "resnet50" / "1" / "model.onnx"
    before = model.stat().st_mtime_ns
    assert examples_main(argv) == 0
    assert capsys.readouterr().out.count("up to date (onnx)") == 2
    assert model.stat().st_mtime_ns == before
    stamp = json.loads((tmp_path / "resnet50" / ".trtpool-example.json").read_text())
    assert stamp["options"]["image_size"] == 64
    # A changed option regenerates only that example.
    assert examples_main(argv[:-1] + ["112"]) == 0
    out = capsys.readouterr().out
    assert "tiny: up to date" in out and "resnet50: generated" in out
    assert "3x112x112" in (tmp_path / "resnet50" / "config.pbtxt").read_text()


@needs_rtx
def test_examples_with_engines(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert examples_main(["--repo", str(tmp_path), "--names", "tiny", "--runtime", "tensorrt"]) == 0
    folder = tmp_path / "tiny"
    assert sorted(p.name for p in (folder / "1").iterdir()) == ["model.plan", "model.plan.json"]
    assert (folder / "model.onnx").is_file()  # the source, outside the version folder
    assert "generated (tensorrt)" in capsys.readouterr().out
    # Switching to ONNX replaces the engine, so the backend's auto runtime cannot pick a stale one.
    assert examples_main(["--repo", str(tmp_path), "--names", "tiny", "--runtime", "onnx"]) == 0
    assert sorted(p.name for p in (folder / "1").iterdir()) == ["model.onnx"]
    assert not (folder / "model.onnx").exists()


def test_auto_runtime_serves_onnx_without_tensorrt_and_gpu(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    if is_importable("tensorrt") and current_gpu() is not None:
        pytest.skip("TensorRT and a GPU are present: auto builds engines here")
    assert examples_main(["--repo", str(tmp_path), "--names", "tiny"]) == 0
    assert "generated (onnx)" in capsys.readouterr().out


def test_decoupled_model_with_its_unary_front(tiny_onnx: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    assert model_main([str(tiny_onnx), "--repo", str(repo), "--name", "tiny", "--mode", "decoupled",
                       "--shapes", "INPUT0=1x16:8x16:64x16", "--unary-front"]) == 0
    front = read_config(repo / "tiny_unary")
    assert front.parameters["forward_to"].string_value == "tiny"
    assert not front.model_transaction_policy.decoupled
    assert [i.name for i in front.input] == ["INPUT0"] and front.max_batch_size == 64
    assert read_config(repo / "tiny").model_transaction_policy.decoupled


def test_accuracy_of_a_model_folder_goes_through_trtpool(tiny_onnx: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    """A folder runs in trtpool's ModelInstance (one request per sample) against its own model.onnx on a
    bare session; a folder served by the flaky test runtime shows that its runtime is what answers."""
    from tests.doubles.flaky_runtime import SENTINEL
    from tests.harness.repository import FLAKY_RUNTIME

    repo = tmp_path / "repo"
    for name, runtime in (("tiny", "auto"), ("tiny_flaky", FLAKY_RUNTIME)):
        assert model_main([str(tiny_onnx), "--repo", str(repo), "--name", name, "--runtime", runtime,
                           "--shapes", "INPUT0=1x16:4x16:8x16"]) == 0
    capsys.readouterr()
    assert accuracy_main([str(repo / "tiny"), "--shapes", "INPUT0=1x16:6x16:8x16"]) == 0
    out = capsys.readouterr().out
    assert "served by trtpool" in out and "(6 samples)" in out and "OUTPUT0: error 0," in out
    inputs = tmp_path / "sentinel.npz"
    np.savez(inputs, INPUT0=np.full((3, 16), SENTINEL, np.float32))
    assert accuracy_main([str(repo / "tiny_flaky"), "--inputs", str(inputs)]) == 2
    assert "injected failure in context" in capsys.readouterr().err
