"""Real engine builds with TensorRT-RTX (its builder runs without a GPU)."""
from __future__ import annotations

import shlex
from datetime import datetime
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from trtpool.errors import ConfigError
from trtpool.model.sidecar import RTX_DEFAULT_TARGETS, format_command, read_sidecar
from trtpool_builder.engine.build import BuildOptions, build_engine
from trtpool_builder.cli import build_parser
from trtpool_builder.errors import BuildError
from trtpool_builder.examples import EXAMPLES
from trtpool_builder.graph.onnx_io import file_sha256
from trtpool_builder.installed import is_importable

pytestmark = pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")

RTX = "tensorrt_rtx"
TINY_SHAPES = ("INPUT0=1x16:8x16:64x16",)
BERT_PROFILES = ("input_ids=1x1:8x32:32x128,attention_mask=1x1:8x32:32x128",
                 "input_ids=1x1:1x16:4x16,attention_mask=1x1:1x16:4x16")


def rtx(**options) -> BuildOptions:
    return BuildOptions(trt_module=RTX, **options)


@pytest.fixture(scope="module")
def bert_engine(small_bert_onnx: Path, tmp_path_factory: pytest.TempPathFactory):
    output = tmp_path_factory.mktemp("bert") / "bert.plan"
    return build_engine(small_bert_onnx, output, rtx(shapes=BERT_PROFILES, opt_level=2, workspace=512))


def test_tiny_engine_and_sidecar(tiny_onnx: Path, tmp_path: Path) -> None:
    result = build_engine(tiny_onnx, tmp_path / "tiny.plan", rtx(shapes=TINY_SHAPES))
    assert result.engine.stat().st_size > 1000
    sidecar = read_sidecar(result.engine)
    assert sidecar.module == RTX and sidecar.module_version.startswith("1.")
    assert sidecar.target.compute_capabilities == RTX_DEFAULT_TARGETS and sidecar.target.gpu_name is None
    assert sidecar.precision.mode == "fp32" and sidecar.precision.strongly_typed
    assert sidecar.profiles == TINY_SHAPES
    (inp,), (out,) = sidecar.inputs, sidecar.outputs
    assert (inp.name, inp.dtype, inp.shape) == ("INPUT0", "float32", (-1, 16))
    assert (inp.ranges[0].min, inp.ranges[0].opt, inp.ranges[0].max) == ((1, 16), (8, 16), (64, 16))
    assert (out.name, out.shape) == ("OUTPUT0", (-1, 4))
    assert (out.ranges[0].min, out.ranges[0].max) == ((1, 4), (64, 4))  # by ONNX shape inference
    assert sidecar.onnx_sha256 == file_sha256(tiny_onnx)
    assert sidecar.build_seconds > 0
    assert datetime.fromisoformat(sidecar.build_date).tzinfo is not None
    assert not list(tmp_path.glob("*.partial"))


def test_bert_two_profiles_two_dynamic_inputs(bert_engine, small_bert: dict) -> None:
    sidecar = read_sidecar(bert_engine.engine)
    assert sidecar.profiles == BERT_PROFILES
    ids = {t.name: t for t in sidecar.inputs}["input_ids"]
    assert ids.dtype == "int64" and ids.shape == (-1, -1)
    assert [(r.min, r.max) for r in ids.ranges] == [((1, 1), (32, 128)), ((1, 1), (4, 16))]
    hidden = {t.name: t for t in sidecar.outputs}["last_hidden_state"]
    assert hidden.shape == (-1, -1, small_bert["hidden"])
    assert [r.max for r in hidden.ranges] == [(32, 128, 64), (4, 16, 64)]
    assert sidecar.build_options["opt_level"] == 2 and sidecar.build_options["workspace"] == 512
    signature = sidecar.signature()
    assert signature.batched and signature.max_batch_size == 32 and len(signature.profiles) == 2


def test_recorded_options_rebuild_the_same_engine(bert_engine, small_bert_onnx: Path) -> None:
    """The sidecar's command parses back into the options that built the engine."""
    sidecar = bert_engine.sidecar
    args = build_parser().parse_args(shlex.split(format_command(sidecar.build_options))[1:])
    assert Path(args.onnx) == small_bert_onnx.resolve() and Path(args.output) == bert_engine.engine
    assert tuple(args.shapes) == BERT_PROFILES and args.trt_module == RTX
    assert (args.opt_level, args.workspace, args.precision) == (2, 512, "fp32")


def test_timing_cache_is_reported_as_ignored_by_rtx(tiny_onnx: Path, tmp_path: Path) -> None:
    cache = tmp_path / "timing.cache"
    times = []
    for run in range(2):
        result = build_engine(tiny_onnx, tmp_path / f"tiny{run}.plan", rtx(shapes=TINY_SHAPES, timing_cache=cache))
        times.append(result.seconds)
        assert any("timing cache operations are no-ops in TensorRT-RTX" in n for n in result.notes)
    print(f"tiny builds with --timing-cache: first {times[0]:.3f} s, second {times[1]:.3f} s")
    assert not cache.exists()  # nothing pretends to be a cache
    assert read_sidecar(tmp_path / "tiny1.plan").build_options["timing_cache"] == str(cache)


def test_compute_capability_targets(tiny_onnx: Path, tmp_path: Path) -> None:
    result = build_engine(tiny_onnx, tmp_path / "t.plan", rtx(shapes=TINY_SHAPES, compute_capability=("8.9", "12.0")))
    assert result.sidecar.target.compute_capabilities == ("8.9", "12.0")
    with pytest.raises(BuildError, match=r"--compute-capability 9\.0: tensorrt_rtx targets .*8\.9"):
        build_engine(tiny_onnx, tmp_path / "h.plan", rtx(shapes=TINY_SHAPES, compute_capability=("9.0",)))
    assert not (tmp_path / "h.plan").exists()


def test_fp16_engine_with_accuracy_report(small_bert_onnx: Path, tmp_path: Path) -> None:
    result = build_engine(small_bert_onnx, tmp_path / "fp16.plan", rtx(shapes=BERT_PROFILES[:1], precision="fp16"))
    assert result.sidecar.precision.mode == "fp16"
    # Inputs and outputs keep their types; the graph inside is float16.
    assert {t.name: t.dtype for t in result.sidecar.outputs}["last_hidden_state"] == "float32"
    errors = {e.name: e for e in result.accuracy.errors}
    assert set(errors) == {"last_hidden_state", "pooler_output"}
    assert 0 < errors["last_hidden_state"].max_abs < 0.05
    assert any("engine itself was not executed" in n for n in result.notes)


def test_int8_with_calibration(tiny_onnx: Path, tmp_path: Path) -> None:
    calib = tmp_path / "calib.npz"
    np.savez(calib, **EXAMPLES["tiny"].sample_inputs(16, seed=5))
    result = build_engine(tiny_onnx, tmp_path / "int8.plan", rtx(shapes=TINY_SHAPES, precision="int8", calib=calib))
    assert result.sidecar.precision.quantizer in ("modelopt", "onnxruntime")
    assert result.accuracy.samples == 16
    assert 0 < result.accuracy.errors[0].max_abs < 0.5
    assert result.sidecar.build_options["calib"] == str(calib)


def test_bf16_graph_is_built_as_given(tmp_path: Path) -> None:
    weight = helper.make_tensor("w", TensorProto.BFLOAT16, [4, 2], vals=np.ones(8, np.float32).tolist())
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16, name="to_bf16"),
         helper.make_node("MatMul", ["xb", "w"], ["yb"], name="mm"),
         helper.make_node("Cast", ["yb"], ["y"], to=TensorProto.FLOAT, name="to_fp32")],
        "bf16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 2])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "bf16.onnx")
    result = build_engine(tmp_path / "bf16.onnx", tmp_path / "bf16.plan", rtx(shapes=("x=1x4:2x4:8x4",), precision="bf16"))
    assert result.sidecar.precision.mode == "bf16" and result.accuracy is None


@pytest.mark.parametrize("options, message", [
    (dict(hardware_compatible=True), "--hardware-compatible is a TensorRT option"),
    (dict(version_compatible=True), "only run on the TensorRT-RTX release that built them"),
    (dict(legacy_precision_flags=True, precision="fp16"),
     r"--legacy-precision-flags needs the 'tensorrt' module version 10\.x; this build uses tensorrt_rtx"),
    (dict(precision="bf16"), "no ONNX converter writes bfloat16"),
    (dict(precision="int8"), "--precision int8 needs calibration samples: --calib"),
    (dict(opt_level=7), r"--opt-level 7: expected 0\.\.5"),
    (dict(workspace=0), "--workspace 0: expected a size in MiB"),
    (dict(shapes=("INPUT0=1x16:8x16:64x16", "INPUT1=1x4")), r"profile 1 .*no input\(s\) \['INPUT1'\]"),
    (dict(shapes=("INPUT0=1x16x1:8x16x1:64x16x1",)), "input 'INPUT0' has rank 2"),
    (dict(shapes=("INPUT0=8x16:1x16:64x16",)), "need MIN <= OPT <= MAX"),
    (dict(shapes=("INPUT0=1x8:8x8:64x8",)), "dimension 1 is fixed at 16"),
    (dict(shapes=()), r"inputs \['INPUT0'\] have dynamic dimensions"),
])
def test_unsupported_options_fail_before_building(tiny_onnx: Path, tmp_path: Path, options: dict, message: str) -> None:
    options = {"shapes": TINY_SHAPES, **options}
    with pytest.raises(ConfigError, match=message):
        build_engine(tiny_onnx, tmp_path / "x.plan", rtx(**options))
    assert not (tmp_path / "x.plan").exists()


def test_fp8_without_modelopt_is_refused(tiny_onnx: Path, tmp_path: Path) -> None:
    if is_importable("modelopt.onnx.quantization"):
        pytest.skip("ModelOpt is installed here: fp8 is possible")
    with pytest.raises(ConfigError, match="--precision fp8 needs NVIDIA ModelOpt"):
        build_engine(tiny_onnx, tmp_path / "x.plan", rtx(shapes=TINY_SHAPES, precision="fp8", calib=tiny_onnx))


def test_missing_tensorrt_module_gives_install_hint(tiny_onnx: Path, tmp_path: Path) -> None:
    if is_importable("tensorrt"):
        pytest.skip("tensorrt is installed here")
    with pytest.raises(BuildError, match=r"'tensorrt' \(No module named 'tensorrt'\); install it with pip install"):
        build_engine(tiny_onnx, tmp_path / "x.plan", BuildOptions(trt_module="tensorrt", shapes=TINY_SHAPES))


def test_not_an_onnx_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage\xff" * 10)
    with pytest.raises(ConfigError, match="is not an ONNX file"):
        build_engine(bad, tmp_path / "x.plan", rtx())


def test_parse_error_names_node_and_operator(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="first_relu"),
         helper.make_node("FancyOp", ["r"], ["y"], name="my_fancy_node", domain="example.ops")],
        "unsupported", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.ops", 1)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "fancy.onnx")
    with pytest.raises(BuildError, match=r"cannot parse '.*fancy\.onnx':\n  node 1 'my_fancy_node' \(FancyOp\): "):
        build_engine(tmp_path / "fancy.onnx", tmp_path / "x.plan", rtx(shapes=("x=1x4:2x4:4x4",)))
    assert not (tmp_path / "x.plan").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "bert_base"])
def test_full_size_examples_build(name: str, tmp_path: Path) -> None:
    from trtpool_builder.examples import write_example

    source = write_example(name, tmp_path / f"{name}.onnx")
    result = build_engine(source, tmp_path / f"{name}.plan", rtx(shapes=EXAMPLES[name].serving_profiles()))
    print(f"{name}: built in {result.seconds:.1f} s, {result.engine.stat().st_size / 1e6:.0f} MB")
    assert result.sidecar.signature().max_batch_size == 32


@pytest.mark.parametrize("opset", [11, 13])
def test_a_squeeze_without_axes_is_given_them_and_builds(opset: int, tmp_path: Path) -> None:
    """Older torch.onnx writes Squeeze() without axes; TensorRT-RTX refuses such a node unless
    told which axes (checked: the same file without the repair fails to build)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Squeeze", ["r"], ["y"], name="squeeze")],
        "squeeze", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    onnx_path = tmp_path / "squeeze.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(onnx_path))
    notes: list[str] = []
    result = build_engine(onnx_path, tmp_path / "squeeze.plan", rtx(shapes=("x=1x1x4:4x1x4:8x1x4",)),
                          log=notes.append)
    assert result.engine.is_file()
    assert any("Squeeze node 'squeeze'" in n and "axes [1]" in n for n in notes), notes
    assert [(o.name, o.shape) for o in result.sidecar.outputs] == [("y", (-1, 4))]
