"""What third-party graphs bring to the builder, on small graphs made to show it (TensorRT-RTX builds
for real): dimension names TensorRT cannot use, values beyond float16's range, conversions that
lose accuracy, operators TensorRT has no importer for, profiles the model refuses."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtpool.model.shapes import parse_profile
from trtpool.model.sidecar import read_sidecar
from trtpool.model.signature import Profile
from trtpool_builder.engine.build import BuildOptions, build_engine
from trtpool_builder.graph.dim_names import rename_dims
from trtpool_builder.errors import BuildError
from trtpool_builder.graph.onnx_io import file_sha256
from trtpool_builder.installed import is_importable

pytestmark = pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")


def save(path: Path, nodes: list, inputs: list, outputs: list, initializers: list = (),
         opsets: tuple = (("", 17),)) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def fvalue(name: str, dims: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def rtx(**options) -> BuildOptions:
    return BuildOptions(trt_module="tensorrt_rtx", **options)


# --- dimension names ---------------------------------------------------------------------------

def test_one_name_on_axes_of_different_sizes_is_renamed_in_a_copy(tmp_path: Path) -> None:
    """paddle2onnx names both image axes '?': TensorRT takes that as 'equal' and refuses the profile."""
    source = save(tmp_path / "dup.onnx", [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                  [fvalue("x", ["?", 3, "?", "?"])], [fvalue("y", ["?", 3, "?", "?"])])
    before = file_sha256(source)
    result = build_engine(source, tmp_path / "dup.plan", rtx(shapes=("x=1x3x48x32:2x3x48x320:4x3x48x960",)))
    assert file_sha256(source) == before  # the user's file is left as it was
    renamed = [n for n in result.notes if "renamed" in n]
    assert len(renamed) == 3, result.notes
    assert any("input 'x' axis 2 (named '?') renamed 'x_dim2': one name on axes of different sizes" in n
               and "'x' axis 3 32..960" in n for n in renamed)
    assert read_sidecar(result.engine).inputs[0].shape == (-1, 3, -1, -1)


def test_the_same_graph_unrenamed_is_refused_by_tensorrt(tmp_path: Path) -> None:
    """The rename is what makes the previous build pass: TensorRT-RTX itself refuses the names."""
    import tensorrt_rtx as trt

    from trtpool_builder.engine.trt_build import TrtSettings, build_serialized

    source = save(tmp_path / "dup.onnx", [helper.make_node("Relu", ["x"], ["y"])],
                  [fvalue("x", ["?", "?"])], [fvalue("y", ["?", "?"])])
    profile = Profile(0, parse_profile("x=1x2:2x3:4x5"))
    with pytest.raises(BuildError, match="Dimensions with name \\? must be equal"):
        build_serialized(trt, source, TrtSettings((profile,), 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)),
                         False, [], "dup")
    assert len(rename_dims(onnx.load(source), [profile])) == 2


def test_names_the_profiles_agree_with_are_kept_and_unnamed_axes_get_one() -> None:
    ids = fvalue("ids", ["batch", "sequence"])
    mask = fvalue("mask", ["batch", "sequence"])
    extra = fvalue("extra", [None, 4])
    extra.type.tensor_type.shape.dim[0].dim_value = -1  # how old paddle2onnx writes "dynamic"
    model = helper.make_model(helper.make_graph([], "g", [ids, mask, extra], []))
    ranges = "ids=1x1:8x64:32x128,mask=1x1:8x64:32x128,extra=1x4:8x4:32x4"
    renamed = rename_dims(model, [Profile(0, parse_profile(ranges))])
    assert [(r.tensor, r.axis, r.old, r.new) for r in renamed] == [("extra", 0, None, "extra_dim0")]
    dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input]
    assert dims == [["batch", "sequence"], ["batch", "sequence"], ["extra_dim0", 4]]


# --- fp16: values beyond 65504 ------------------------------------------------------------------

def _constant_model(path: Path, as_node: bool) -> Path:
    """y = (x * 1e6) / 1e6: the constant is beyond fp16's range (PaddleOCR's detector keeps a BatchNorm
    variance of 9.8e7). Converted naively it becomes 65504, x * 65504 overflows and y is infinite."""
    big = numpy_helper.from_array(np.array(1e6, np.float32), "big")
    nodes = [helper.make_node("Mul", ["x", "big"], ["scaled"], name="scale_up"),
             helper.make_node("Div", ["scaled", "big"], ["y"], name="scale_down")]
    if as_node:
        nodes.insert(0, helper.make_node("Constant", [], ["big"], value=big, name="big_constant"))
    return save(path, nodes, [fvalue("x", ["n", 8])], [fvalue("y", ["n", 8])], [] if as_node else [big])


def _activation_model(path: Path) -> Path:
    """y = sqrt((300 x)^2) / 300 = |x|: every constant fits fp16 but (300 x)^2 reaches 1e6."""
    k = numpy_helper.from_array(np.array(300.0, np.float32), "k")
    nodes = [helper.make_node("Mul", ["x", "k"], ["t"], name="times_k"),
             helper.make_node("Mul", ["t", "t"], ["square"], name="square"),
             helper.make_node("Sqrt", ["square"], ["root"], name="root"),
             helper.make_node("Div", ["root", "k"], ["y"], name="over_k")]
    return save(path, nodes, [fvalue("x", ["n", 8])], [fvalue("y", ["n", 8])], [k])


@pytest.mark.parametrize("make, kept", [
    (lambda p: _constant_model(p, as_node=False), ["scale_up", "scale_down"]),
    (lambda p: _constant_model(p, as_node=True), ["big_constant", "scale_up", "scale_down"]),
    (_activation_model, ["square", "root"]),
], ids=["initializer", "constant-node", "activation"])
def test_fp16_keeps_values_beyond_its_range_in_fp32(tmp_path: Path, make, kept: list[str]) -> None:
    source = make(tmp_path / "model.onnx")
    result = build_engine(source, tmp_path / "model.plan", rtx(shapes=("x=1x8:4x8:16x8",), precision="fp16"))
    precision = read_sidecar(result.engine).precision
    assert list(precision.kept_fp32) == kept
    # Within fp16 rounding of the fp32 model; without the kept nodes the output would be infinite.
    assert result.accuracy.max_error < 2e-3
    assert precision.max_error == result.accuracy.max_error and precision.max_error_allowed == 0.1
    assert any(n.startswith(f"kept in fp32: '{kept[0]}'") for n in result.notes)


def _cancelling_model(path: Path) -> Path:
    """y = (x + 4000) - 4000: in fp16, 4000 + x keeps x only to 2, so y is off by up to 1."""
    shift = numpy_helper.from_array(np.array(4000.0, np.float32), "shift")
    nodes = [helper.make_node("Add", ["x", "shift"], ["shifted"], name="add_shift"),
             helper.make_node("Sub", ["shifted", "shift"], ["y"], name="remove_shift")]
    return save(path, nodes, [fvalue("x", ["n", 64])], [fvalue("y", ["n", 64])], [shift])


def test_fp16_conversion_beyond_max_error_is_refused_by_node(tmp_path: Path) -> None:
    source = _cancelling_model(tmp_path / "cancel.onnx")
    options = dict(shapes=("x=1x64:8x64:16x64",), precision="fp16")
    with pytest.raises(BuildError) as refused:
        build_engine(source, tmp_path / "cancel.plan", rtx(**options))
    message = str(refused.value)
    assert "is not accurate enough on random inputs at each profile's opt shapes" in message
    assert "output 'y' error" in message and "--max-error is 0.1." in message
    assert "node 'remove_shift' (Sub) is the first whose output 'y' differs beyond it" in message
    assert not (tmp_path / "cancel.plan").exists()
    # The user may accept it: the figure and the limit are recorded.
    result = build_engine(source, tmp_path / "cancel.plan", rtx(max_error=1.0, **options))
    precision = read_sidecar(result.engine).precision
    assert 0.1 < precision.max_error <= 1.0 and precision.max_error_allowed == 1.0
    assert read_sidecar(result.engine).build_options["max_error"] == 1.0


def test_max_error_must_be_positive(tmp_path: Path) -> None:
    from trtpool.errors import ConfigError

    source = _cancelling_model(tmp_path / "cancel.onnx")
    with pytest.raises(ConfigError, match="--max-error 0.0: expected a number > 0"):
        build_engine(source, tmp_path / "x.plan", rtx(shapes=("x=1x64",), precision="fp16", max_error=0.0))


def test_fp16_checks_on_the_given_samples(tmp_path: Path) -> None:
    """--calib gives fp16 the inputs to look for large activations on and to compare with."""
    source = _activation_model(tmp_path / "act.onnx")
    calib = tmp_path / "samples.npz"
    np.savez(calib, x=np.full((4, 8), 0.01, np.float32))  # (300 * 0.01)^2 = 9: nothing to keep
    result = build_engine(source, tmp_path / "act.plan", rtx(shapes=("x=1x8:4x8:16x8",), precision="fp16",
                                                              calib=calib))
    assert result.sidecar.precision.kept_fp32 == () and result.accuracy.samples == 4


# --- what TensorRT refuses, in the model's terms -------------------------------------------------

def test_operator_outside_the_standard_domain_is_named(tmp_path: Path) -> None:
    """scikit-learn converters emit ai.onnx.ml operators; TensorRT's parser has no importer for them."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Normalizer", ["r"], ["y"], name="l2_normalize", domain="ai.onnx.ml", norm="L2")]
    source = save(tmp_path / "ml.onnx", nodes, [fvalue("x", ["n", 4])], [fvalue("y", ["n", 4])],
                  opsets=(("", 17), ("ai.onnx.ml", 3)))
    with pytest.raises(BuildError, match=r"(?s)cannot parse .*nodes outside the standard ONNX domain.*"
                                         r"'l2_normalize' \(ai\.onnx\.ml\.Normalizer\).*serve the ONNX file "
                                         r"with ONNX Runtime"):
        build_engine(source, tmp_path / "ml.plan", rtx(shapes=("x=1x4:2x4:8x4",)))


@pytest.mark.parametrize("names", [["n", "k"], ["n", "n"]], ids=["own-names", "one-name"])
def test_profile_size_the_model_refuses_names_input_and_axis(tmp_path: Path, names: list[str]) -> None:
    """A graph that reshapes its second axis to 4 x 4 only works at size 16 there. With one name on both
    axes (sizes the profile makes differ), the refusal also lists the renamed axis."""
    shape = numpy_helper.from_array(np.array([0, 4, 4], np.int64), "target")
    source = save(tmp_path / "fixed.onnx", [helper.make_node("Reshape", ["x", "target"], ["y"], name="to_grid")],
                  [fvalue("x", names)], [fvalue("y", ["n", 4, 4])], [shape])
    with pytest.raises(BuildError) as refused:
        build_engine(source, tmp_path / "fixed.plan", rtx(shapes=("x=1x8:2x16:4x16",)))
    assert ("input 'x' axis 1: the model runs with size 16 there but ONNX Runtime refuses size 8 "
            "(the min of profile 0 ('x=1x8:2x16:4x16'))") in str(refused.value)
    assert "Pass --shapes whose 'x' axis 1 stays within sizes the model accepts" in str(refused.value)
    assert ("dimension names changed in the built copy" in str(refused.value)) == (names[0] == names[1])


# --- scalars -------------------------------------------------------------------------------------

def test_scalar_input_is_built_and_served_as_one_element(tmp_path: Path) -> None:
    """silero VAD's sample rate is an int64 scalar; Triton serves no scalars in an unbatched model,
    so the built and served copies take it as [1] and reshape it inside the graph."""
    import onnxruntime as ort

    from trtpool_builder.folder.model_folder import make_model_folder, read_config

    nodes = [helper.make_node("Cast", ["rate"], ["rate_f"], to=TensorProto.FLOAT, name="cast_rate"),
             helper.make_node("Mul", ["x", "rate_f"], ["y"], name="scale")]
    source = save(tmp_path / "scalar.onnx", nodes,
                  [fvalue("x", ["t", 4]), helper.make_tensor_value_info("rate", TensorProto.INT64, [])],
                  [fvalue("y", ["t", 4])])
    before = file_sha256(source)
    result = build_engine(source, tmp_path / "scalar.plan", rtx(shapes=("x=1x4:8x4:16x4",), precision="fp16"))
    assert {t.name: t.shape for t in result.sidecar.inputs}["rate"] == (1,)
    assert any("scalar tensor(s) ['rate'] are taken as shape [1]" in n for n in result.notes)
    assert result.accuracy.max_error < 1e-3
    folder = make_model_folder(tmp_path / "repo", "scalar", source, ["x=1x4:8x4:16x4"], log=lambda _: None)
    assert file_sha256(source) == before
    rate = {t.name: list(t.dims) for t in read_config(folder).input}["rate"]
    assert rate == [1]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    served = ort.InferenceSession(str(folder / "1" / "model.onnx")).run(None, {"x": x, "rate": np.array([3])})
    original = ort.InferenceSession(str(source)).run(None, {"x": x, "rate": np.array(3)})
    np.testing.assert_array_equal(served[0], original[0])
