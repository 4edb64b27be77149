"""What exporters write that the node tests do not: a ZipMap classifier output (skl2onnx's default),
an output declared rank 0 that is [N] for N rows, and a batch axis that is not one. Each goes
through trtpool-model's folder and the server's load path and is compared with ONNX Runtime
on the user's own file."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import set_external_data

from tests.conformance.node_suite import mismatch
from tests.conformance.row_scalars import PROFILE, row_scalar_model
from trtpool.engine.answer import Kept
from trtpool.errors import ConfigError
from trtpool.instance import ModelInstance
from trtpool_builder.engine.build import BuildOptions, build_engine
from trtpool_builder.folder.load_check import as_triton_hands_it
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config
from trtpool_builder.installed import is_importable


def _serve_in_process(folder: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One request through the folder as the server loads it."""
    instance = ModelInstance(as_triton_hands_it(read_config(folder)), folder / "1", "cpu")
    kept = Kept()
    try:
        instance.runner.run([inputs], [kept], detach=True)
    finally:
        instance.close()
    assert kept.error is None, kept.error
    return kept.outputs


def _graph_model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "quirk", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_zipmap_output_is_served_as_its_probabilities_in_label_order(zipmap_classifier, tmp_path):
    notes: list[str] = []
    folder = make_model_folder(tmp_path, "iris", zipmap_classifier, ["features=1x4:8x4:32x4"],
                               ServingOptions(contexts="1", instance_kind="cpu"), log=notes.append)
    assert any("ZipMap" in note and "output_probability" in note for note in notes), notes
    features = np.random.default_rng(0).uniform(0, 7, (5, 4)).astype(np.float32)
    label, maps = ort.InferenceSession(str(zipmap_classifier)).run(None, {"features": features})
    classes = sorted(maps[0])
    expected = {"output_label": label,
                "output_probability": np.array([[row[c] for c in classes] for row in maps], np.float32)}
    assert mismatch(expected, _serve_in_process(folder, {"features": features})) is None
    assert read_config(folder).max_batch_size == 8 * 4  # batched: rows stack and split back unchanged


def test_an_output_declared_rank_0_is_answered_as_computed(tmp_path):
    """A row sum declared as a scalar (an exporter's wrong guess) is [N] for N rows."""
    model = _graph_model([helper.make_node("ReduceSum", ["x", "axes"], ["total"], keepdims=0)],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                         [helper.make_tensor_value_info("total", TensorProto.FLOAT, [])],
                         [helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
    path = tmp_path / "rowsum.onnx"
    onnx.save(model, str(path))
    folder = make_model_folder(tmp_path / "repo", "rowsum", path, ["x=1x4:3x4:8x4"],
                               ServingOptions(contexts="1", instance_kind="cpu"), log=lambda _: None)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert mismatch({"total": x.sum(axis=1)}, _serve_in_process(folder, {"x": x})) is None


def test_a_first_axis_whose_rows_mix_is_not_made_a_batch_axis(tmp_path):
    """Softmax over axis 0: every dimension is dynamic, but stacking two requests would change
    both answers, so the folder is written without a batch axis (with a note saying why)."""
    model = _graph_model([helper.make_node("Softmax", ["x"], ["y"], axis=0)],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b"])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    path = tmp_path / "softmax0.onnx"
    onnx.save(model, str(path))
    notes: list[str] = []
    folder = make_model_folder(tmp_path / "repo", "softmax0", path, ["x=1x3:4x3:8x3"],
                               ServingOptions(contexts="1", instance_kind="cpu"), log=notes.append)
    assert read_config(folder).max_batch_size == 0
    assert any("not independent" in note for note in notes), notes
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    expected = np.exp(x) / np.exp(x).sum(axis=0)
    assert mismatch({"y": expected}, _serve_in_process(folder, {"x": x})) is None


def test_max_batch_size_chooses_for_the_user(tmp_path):
    model = _graph_model([helper.make_node("Relu", ["x"], ["y"])],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    path = tmp_path / "relu.onnx"
    onnx.save(model, str(path))
    unbatched = make_model_folder(tmp_path / "repo", "relu0", path, ["x=1x3:4x3:8x3"],
                                  ServingOptions(max_batch_size=0), log=lambda _: None)
    batched = make_model_folder(tmp_path / "repo", "relu4", path, ["x=1x3:4x3:8x3"],
                                ServingOptions(max_batch_size=4), log=lambda _: None)
    assert (read_config(unbatched).max_batch_size, read_config(batched).max_batch_size) == (0, 4)


def test_a_refusal_names_the_users_file_not_a_working_copy(tmp_path):
    """An operator ONNX Runtime lacks makes the staged folder fail to load; the message names
    the user's file, not the link in the temporary folder that was loaded."""
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NoSuchOp", ["r"], ["y"], domain="acme")],
        "unknown", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("acme", 1)])
    path = tmp_path / "users_model.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ConfigError) as refused:
        make_model_folder(tmp_path / "repo", "unknown", path, log=lambda _: None)
    message = str(refused.value)
    assert str(path) in message and "NoSuchOp" in message
    assert "trtpool-model-" not in message, message


def _sequence_input() -> onnx.ModelProto:
    return _graph_model([helper.make_node("SequenceAt", ["s", "i"], ["y"])],
                        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None),
                         helper.make_tensor_value_info("i", TensorProto.INT64, [])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])


def _optional_output() -> onnx.ModelProto:
    optional = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    model = _graph_model([helper.make_node("Optional", ["x"], ["o"])],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                         [helper.make_value_info("o", optional)])
    model.opset_import[0].version = 18
    return model


def _float8_input() -> onnx.ModelProto:
    model = _graph_model([helper.make_node("Identity", ["x"], ["y"])],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [2])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [2])])
    model.opset_import[0].version = 21
    return model


# Graph values Triton has no type for, and the refusal each must get (it used to be a KeyError
# traceback for the first two).
UNCARRIABLE = {
    "sequence input": (_sequence_input, "tensor 's' has ONNX type seq(tensor(float)), which is not a tensor: "
                                        "Triton carries tensors only"),
    "optional output": (_optional_output, "tensor 'o' has ONNX type optional(tensor(float)), which is not a "
                                          "tensor: Triton carries tensors only"),
    "float8 input": (_float8_input, "tensor 'x' has ONNX type tensor(float8e4m3fn), which has no Triton data type"),
}


@pytest.mark.parametrize("case", sorted(UNCARRIABLE))
def test_values_triton_cannot_carry_are_refused_by_name(case, tmp_path):
    make, expected = UNCARRIABLE[case]
    path = tmp_path / "odd.onnx"
    onnx.save(make(), str(path))
    ort.InferenceSession(str(path))  # a valid model: ONNX Runtime loads it
    with pytest.raises(ConfigError, match=re.escape(expected)):
        make_model_folder(tmp_path / "repo", "odd", path, log=lambda _: None)


@pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")
@pytest.mark.parametrize("case", sorted(UNCARRIABLE))
def test_the_builder_refuses_them_by_name_too(case, tmp_path):
    make, expected = UNCARRIABLE[case]
    path = tmp_path / "odd.onnx"
    onnx.save(make(), str(path))
    with pytest.raises(ConfigError, match=re.escape(expected)):
        build_engine(path, tmp_path / "odd.plan", BuildOptions(trt_module="tensorrt_rtx"))
    assert not (tmp_path / "odd.plan").exists()


@pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")
def test_the_builder_drops_a_zipmap_too_and_names_what_tensorrt_cannot_import(zipmap_classifier, tmp_path):
    """trtpool-build repairs the ZipMap as trtpool-model does, so its refusal names the real
    obstacle, the ai.onnx.ml classifier TensorRT has no importer for, and where to serve it."""
    from trtpool_builder.errors import BuildError

    with pytest.raises(BuildError) as refused:
        build_engine(zipmap_classifier, tmp_path / "iris.plan", BuildOptions(
            trt_module="tensorrt_rtx", shapes=("features=1x4:8x4:32x4",)), log=lambda _: None)
    message = str(refused.value)
    assert "ai.onnx.ml.LinearClassifier" in message and "trtpool-model" in message, message
    assert "not a tensor" not in message and not (tmp_path / "iris.plan").exists()


def test_a_model_with_external_data_travels_with_its_data(tmp_path):
    """torch.onnx and the ONNX tools keep large weights in files beside the model (here two, one
    in a subfolder): the folder gets them beside model.onnx, and it answers as the original."""
    rng = np.random.default_rng(3)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), name) for name in "ab"]
    model = _graph_model([helper.make_node("MatMul", ["x", "a"], ["h"]), helper.make_node("MatMul", ["h", "b"], ["y"])],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], weights)
    for tensor, location in zip(model.graph.initializer, ("a.bin", "weights/b.bin")):
        set_external_data(tensor, location)
        (tmp_path / "export" / location).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "export" / location).write_bytes(tensor.raw_data)
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
    path = tmp_path / "export" / "mlp.onnx"
    onnx.save(model, str(path))
    folder = make_model_folder(tmp_path / "repo", "mlp", path, ["x=1x8:4x8:8x8"], log=lambda _: None)
    assert (folder / "1" / "a.bin").is_file() and (folder / "1" / "weights" / "b.bin").is_file()
    x = rng.standard_normal((3, 8)).astype(np.float32)
    [expected] = ort.InferenceSession(str(path)).run(None, {"x": x})
    assert mismatch({"y": expected}, _serve_in_process(folder, {"x": x})) is None


def test_external_data_outside_the_models_folder_is_refused_by_name(tmp_path):
    weights = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    model = _graph_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [weights])
    tensor = model.graph.initializer[0]
    set_external_data(tensor, "../w.bin")
    (tmp_path / "w.bin").write_bytes(tensor.raw_data)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    (tmp_path / "export").mkdir()
    path = tmp_path / "export" / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ConfigError, match=re.escape("keeps tensor data in '../w.bin', outside its folder")):
        make_model_folder(tmp_path / "repo", "m", path, log=lambda _: None)


def _shapeless(tmp_path: Path) -> Path:
    """Relu whose input and output declare a type but no shape (their rank unknown), as some
    exporters and hand-edited graphs write them; ONNX Runtime reports such an input like a scalar."""
    model = _graph_model([helper.make_node("Relu", ["x"], ["y"])],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "shapeless.onnx"
    onnx.save(model, str(path))
    return path


def test_an_input_without_a_shape_needs_its_range_and_is_not_taken_for_a_scalar(tmp_path):
    path = _shapeless(tmp_path)
    with pytest.raises(ConfigError, match=re.escape("input 'x' declares no shape, so its rank is unknown")):
        make_model_folder(tmp_path / "repo", "shapeless", path, log=lambda _: None)
    notes: list[str] = []
    folder = make_model_folder(tmp_path / "repo", "shapeless", path, ["x=1x3:4x3:8x3"], log=notes.append)
    config = read_config(folder)
    assert list(config.input[0].dims) == [-1] and list(config.output[0].dims) == [-1]
    assert config.max_batch_size == 8 and len(notes) == 2, notes
    x = np.random.default_rng(4).standard_normal((3, 3)).astype(np.float32)
    assert mismatch({"y": np.maximum(x, 0)}, _serve_in_process(folder, {"x": x})) is None


@pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")
def test_the_builder_takes_an_input_without_a_shape_from_its_range(tmp_path):
    result = build_engine(_shapeless(tmp_path), tmp_path / "shapeless.plan",
                          BuildOptions(trt_module="tensorrt_rtx", shapes=("x=1x3:4x3:8x3",)), log=lambda _: None)
    [x] = result.sidecar.inputs
    assert (x.name, len(x.shape)) == ("x", 2), x


@pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")
@pytest.mark.parametrize("name, precision", [*((name, "fp32") for name in sorted(PROFILE)),
                                             ("squeeze_axisless", "fp16")])
def test_the_builder_builds_an_output_declared_rank_0_with_its_rows(name, precision, tmp_path):
    """Built as the graph computes it: a profile of up to 8 rows builds (it used to be reshaped
    to [1]: 'reshape would change volume 8 to 1'; after a Squeeze without axes shape inference
    cannot tell, so ONNX Runtime run at 2 and 3 rows decides), and the sidecar gives the output
    one element per row at each profile shape."""
    path = tmp_path / f"{name}.onnx"
    onnx.save(row_scalar_model(name), str(path))
    result = build_engine(path, tmp_path / f"{name}.plan", BuildOptions(
        trt_module="tensorrt_rtx", shapes=(PROFILE[name],), precision=precision), log=lambda _: None)
    [y] = result.sidecar.outputs
    assert (y.name, y.shape) == ("y", (-1,)), y
    [rows] = y.ranges
    assert (rows.min, rows.opt, rows.max) == ((1,), (4,), (8,)), rows
    assert any("declared as a scalar" in note for note in result.notes), result.notes


@pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")
def test_a_true_scalar_that_shape_inference_cannot_follow_is_still_built_as_one(tmp_path):
    """The sum over the rows of x [n, m], squeezed without axes: inference cannot tell its rank
    (m might be 1), and ONNX Runtime at 2 and 3 rows answers a scalar both times, so it is no
    row output: built as [1], as true scalars are."""
    model = _graph_model([helper.make_node("ReduceSum", ["x", "axes"], ["total"], keepdims=1),
                          helper.make_node("Squeeze", ["total"], ["y"])],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "m"])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
                         [helper.make_tensor("axes", TensorProto.INT64, [1], [0])])
    path = tmp_path / "total.onnx"
    onnx.save(model, str(path))
    result = build_engine(path, tmp_path / "total.plan", BuildOptions(
        trt_module="tensorrt_rtx", shapes=("x=1x1:4x1:8x1",)), log=lambda _: None)
    [y] = result.sidecar.outputs
    assert y.shape == (1,), y
    assert not any("declared as a scalar" in note for note in result.notes), result.notes


def _ml_only_classifier(tmp_path: Path) -> Path:
    """A classifier whose graph uses only ai.onnx.ml, so it imports no other domain, as
    onnxmltools writes tree and linear classifiers: LinearClassifier, then ZipMap."""
    coefficients = np.random.default_rng(5).standard_normal(12).astype(np.float32).tolist()
    nodes = [helper.make_node("LinearClassifier", ["features"], ["label", "scores"], domain="ai.onnx.ml",
                              classlabels_ints=[0, 1, 2], coefficients=coefficients, intercepts=[0.1, 0.2, 0.3],
                              post_transform="SOFTMAX", multi_class=1),
             helper.make_node("ZipMap", ["scores"], ["probabilities"], domain="ai.onnx.ml",
                              classlabels_int64s=[0, 1, 2])]
    maps = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None)))
    graph = helper.make_graph(nodes, "ml_only", [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, 4])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
                               helper.make_value_info("probabilities", maps)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 7
    path = tmp_path / "ml_only.onnx"
    onnx.save(model, str(path))
    return path


def test_a_zipmap_in_a_graph_of_ai_onnx_ml_alone_is_served_as_its_probabilities(tmp_path):
    """The Identity that replaces the ZipMap needs the standard domain, which such a graph does
    not import: the served copy imports it, and answers as ONNX Runtime on the user's file."""
    path = _ml_only_classifier(tmp_path)
    folder = make_model_folder(tmp_path / "repo", "ml_only", path, ["features=1x4:4x4:8x4"],
                               ServingOptions(contexts="1", instance_kind="cpu"), log=lambda _: None)
    features = np.random.default_rng(6).uniform(0, 7, (3, 4)).astype(np.float32)
    label, maps = ort.InferenceSession(str(path)).run(None, {"features": features})
    expected = {"label": label, "probabilities": np.array([[row[c] for c in (0, 1, 2)] for row in maps], np.float32)}
    assert mismatch(expected, _serve_in_process(folder, {"features": features})) is None


@pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_every_precision_names_what_tensorrt_cannot_import(precision, tmp_path):
    """fp16 and int8 convert the graph first, with ONNX shape inference, which failed on the
    repaired ZipMap ('No opset import for domain optype Identity'): every precision must name
    the ai.onnx.ml node TensorRT has no importer for, and where to serve the model, as fp32 does."""
    from trtpool_builder.errors import BuildError

    path = _ml_only_classifier(tmp_path)
    calib = tmp_path / "calib.npz"
    np.savez(calib, features=np.random.default_rng(7).uniform(0, 7, (16, 4)).astype(np.float32))
    with pytest.raises(BuildError) as refused:
        build_engine(path, tmp_path / "ml.plan", BuildOptions(
            trt_module="tensorrt_rtx", precision=precision, shapes=("features=1x4:8x4:32x4",),
            calib=calib if precision == "int8" else None), log=lambda _: None)
    message = str(refused.value)
    assert "ai.onnx.ml.LinearClassifier" in message and "trtpool-model" in message, message
    assert "No opset import" not in message and not (tmp_path / "ml.plan").exists()
