from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness.docs import ROOT, command_argv, quotes
from trtpool_builder.cli import EXIT_CANNOT_RUN, accuracy_main, build_main, examples_main, model_main
from trtpool_builder.engine.gpu import current_gpu
from trtpool_builder.errors import BuildError
from trtpool_builder.examples import EXAMPLES
from trtpool_builder.folder.model_folder import read_config
from trtpool_builder.installed import is_importable
from trtpool_builder.precision.ort_cpu import cpu_session

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


def write_small_conv_net(path: Path, dims: tuple[str | int, ...] = ("N", 3, 224, 224)) -> None:
    """The docs' example input, 'input' [N, 3, 224, 224] (or `dims`), in front of one small convolution."""
    weights = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]), helper.make_node("Flatten", ["g"], ["output"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(dims))],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 4])],
                              [numpy_helper.from_array(weights, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


@needs_rtx
def test_the_builder_lines_the_docs_quote_run_as_written(tmp_path: Path) -> None:
    """docs/how-to/serve-an-onnx-model.md's build, folder and accuracy lines, run as written from the folder
    that holds model.onnx; the engine is the machine's (TensorRT-RTX without a GPU)."""
    write_small_conv_net(tmp_path / "model.onnx")
    page = ROOT / "docs" / "how-to" / "serve-an-onnx-model.md"
    lines = [q for q in quotes(page) if q.startswith((".venv/bin/trtpool-build", ".venv/bin/trtpool-model",
                                                     ".venv/bin/trtpool-accuracy"))]
    assert [line.split()[0] for line in lines] == [".venv/bin/trtpool-build", ".venv/bin/trtpool-model",
                                                   ".venv/bin/trtpool-model", ".venv/bin/trtpool-accuracy"]
    venv_bin = f"{Path(sys.executable).parent}/"
    build, model, model_cpu, accuracy = (
        subprocess.run(command_argv(line, {".venv/bin/": venv_bin}), cwd=tmp_path, capture_output=True, text=True,
                       timeout=300) for line in lines)
    for done in (build, model, model_cpu):
        assert done.returncode == 0, done.stdout + done.stderr
    assert "(fp16, 2 profile(s)" in build.stdout and "fp16 conversion error" in build.stdout
    assert (tmp_path / "model_repository" / "mymodel" / "1" / "model.plan").is_file()
    assert (tmp_path / "model_repository" / "mymodel_cpu" / "1" / "model.onnx").is_file()
    if current_gpu() is None:   # an engine runs only on a GPU: the accuracy line says so and exits 3
        assert accuracy.returncode == EXIT_CANNOT_RUN and "cannot run engine 'model.plan' here" in accuracy.stderr
    else:
        assert accuracy.returncode == 0, accuracy.stdout + accuracy.stderr


@pytest.mark.parametrize("main", [build_main, model_main, examples_main, accuracy_main],
                         ids=["build", "model", "examples", "accuracy"])
def test_each_command_has_help(main, capsys: pytest.CaptureFixture) -> None:
    """"Run each command with --help for all options" (docs/how-to/serve-an-onnx-model.md)."""
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0 and "usage:" in capsys.readouterr().out


def test_an_existing_model_folder_is_replaced_only_with_replace(tiny_onnx: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    repo = tmp_path / "repo"
    first = [str(tiny_onnx), "--repo", str(repo), "--name", "tiny", "--shapes", "INPUT0=1x16:4x16:8x16"]
    assert model_main(first) == 0
    written = (repo / "tiny" / "config.pbtxt").read_text()
    again = [*first[:-1], "INPUT0=1x16:2x16:4x16"]
    assert model_main(again) == 2
    assert capsys.readouterr().err.strip() == (f"trtpool-model: error: model folder '{repo / 'tiny'}' already exists "
                                               "(it may be serving): pass --replace to replace it, or choose another "
                                               "--name")
    assert (repo / "tiny" / "config.pbtxt").read_text() == written
    assert model_main([*again, "--replace"]) == 0
    assert read_config(repo / "tiny").max_batch_size == 4
    assert model_main([*first[:-1], "INPUT0=1x16:4x16:8x16", "--name", "tiny2", "--mode", "decoupled"]) == 0
    (repo / "tiny2_unary").mkdir()   # a front of that name is there already
    assert model_main([*first[:2], str(repo), "--name", "tiny2", "--shapes", "INPUT0=1x16:4x16:8x16", "--mode",
                       "decoupled", "--unary-front", "--replace"]) == 0


def test_the_pool_parameters_have_flags(tiny_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--min-contexts/--max-contexts (an elastic pool) and --preprocess-threads/--preprocess-processes
    become the config.pbtxt parameters docs/configuration.md lists; values the backend refuses are refused."""
    repo = tmp_path / "repo"
    base = [str(tiny_onnx), "--repo", str(repo), "--shapes", "INPUT0=1x16:4x16:8x16"]
    assert model_main([*base, "--name", "elastic", "--min-contexts", "1", "--max-contexts", "3"]) == 0
    parameters = read_config(repo / "elastic").parameters
    assert parameters["min_contexts"].string_value == "1" and parameters["max_contexts"].string_value == "3"
    assert "preprocess_threads" not in parameters
    assert model_main([*base, "--name", "bad", "--max-contexts", "0"]) == 2
    assert "max_contexts" in capsys.readouterr().err and not (repo / "bad").exists()
    assert model_main([*base, "--name", "pre", "--preprocess-processes", "2"]) == 2
    assert "give --process too" in capsys.readouterr().err
    process = tmp_path / "process.py"
    process.write_text("import numpy as np\n\ndef preprocess(inputs):\n"
                       "    return {'INPUT0': inputs['VALUES'].astype(np.float32)}\n")
    assert model_main([*base, "--name", "pre", "--process", str(process), "--input", "VALUES:FP64:16",
                       "--preprocess-threads", "2", "--preprocess-processes", "1"]) == 0
    parameters = read_config(repo / "pre").parameters
    assert parameters["preprocess_threads"].string_value == "2"
    assert parameters["preprocess_processes"].string_value == "1"


def test_a_model_whose_only_dynamic_axis_is_the_batch_gets_a_range_it_is_told(tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture) -> None:
    """'input' [N, 3, 224, 224]: trtpool-model chooses batches 1 to 32 (opt 8) and prints the profile, in the
    --shapes format; --max-batch-size caps it. A model with other dynamic axes is asked for --shapes with an
    example in that format."""
    write_small_conv_net(tmp_path / "conv.onnx")
    base = [str(tmp_path / "conv.onnx"), "--repo", str(tmp_path / "repo")]
    assert model_main([*base, "--name", "conv"]) == 0
    chosen = "input=1x3x224x224:8x3x224x224:32x3x224x224"
    assert (f"note: no --shapes given and only the batch axis is dynamic: the profile is {chosen} (give --shapes "
            "for other batch sizes)") in capsys.readouterr().out.splitlines()
    config = read_config(tmp_path / "repo" / "conv")
    assert config.parameters["profile"].string_value == chosen and config.max_batch_size == 32
    assert model_main([*base, "--name", "conv4", "--max-batch-size", "4"]) == 0
    assert "the profile is input=1x3x224x224:4x3x224x224:4x3x224x224 " in capsys.readouterr().out
    write_small_conv_net(tmp_path / "spatial.onnx", ("N", 3, "H", "W"))
    assert model_main([str(tmp_path / "spatial.onnx"), "--repo", str(tmp_path / "repo"), "--name", "spatial"]) == 2
    assert capsys.readouterr().err == (
        "trtpool-model: error: inputs ['input'] have dynamic dimensions ('input' [-1, 3, -1, -1] axes [0, 2, 3]), "
        "and trtpool chooses a range only for a batch axis alone (every input's first dimension, no other): give "
        "each input's shape range with --shapes NAME=MIN:OPT:MAX, each a full shape with its dimensions joined by "
        "'x', e.g. --shapes input=1x3x64x64:8x3x128x128:32x3x256x256 (sizes beyond the batch axis are examples: "
        "give the ones your model takes)\n")


def test_every_trtpool_model_option_has_help(capsys: pytest.CaptureFixture) -> None:
    """Each flag says what it does; --shapes says how a shape is written."""
    from trtpool_builder.cli import model_parser

    undocumented = [a.option_strings[0] for a in model_parser()._actions if a.option_strings and not a.help]
    assert undocumented == []
    with pytest.raises(SystemExit):
        model_main(["--help"])
    assert "dimensions joined by 'x'" in " ".join(capsys.readouterr().out.split())
