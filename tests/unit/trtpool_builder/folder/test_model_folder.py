from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from trtpool.errors import ConfigError, EngineError
from trtpool.model.sidecar import read_sidecar
from trtpool_builder.engine.build import BuildOptions, build_engine
from trtpool_builder.examples import EXAMPLES
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder
from trtpool_builder.installed import is_importable

TINY = EXAMPLES["tiny"].serving_profiles()
BERT = ("input_ids=1x1:8x32:32x128,attention_mask=1x1:8x32:32x128",
        "input_ids=1x1:2x16:4x16,attention_mask=1x1:2x16:4x16")
needs_rtx = pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")


def parse(folder: Path) -> mc.ModelConfig:
    return text_format.Parse((folder / "config.pbtxt").read_text(), mc.ModelConfig())


def params(config: mc.ModelConfig) -> dict[str, str]:
    return {k: v.string_value for k, v in config.parameters.items()}


def test_tiny_onnx_folder(tiny_onnx: Path, tmp_path: Path) -> None:
    folder = make_model_folder(tmp_path, "tiny", tiny_onnx, TINY)
    assert (folder / "1" / "model.onnx").read_bytes() == tiny_onnx.read_bytes()
    config = parse(folder)
    assert (config.name, config.backend, config.max_batch_size) == ("tiny", "trtpool", 64)
    (inp,), (out,) = config.input, config.output
    assert (inp.name, inp.data_type, list(inp.dims)) == ("INPUT0", mc.TYPE_FP32, [16])
    assert (out.name, out.data_type, list(out.dims)) == ("OUTPUT0", mc.TYPE_FP32, [4])
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 64]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert params(config) == {"runtime": "auto", "contexts": "auto", "memory_fraction": "0.5",
                              "mode": "sync", "profile": "INPUT0=1x16:8x16:64x16"}
    assert not config.instance_group and not config.model_transaction_policy.decoupled


def test_bert_folder_two_profiles_decoupled_gpu(small_bert_onnx: Path, small_bert: dict, tmp_path: Path) -> None:
    options = ServingOptions(mode="decoupled", instance_kind="gpu", contexts="4", memory_fraction="0.3",
                             max_queue_delay_microseconds=500)
    config = parse(make_model_folder(tmp_path, "bert", small_bert_onnx, BERT, options))
    assert config.max_batch_size == 32
    dims = {t.name: (t.data_type, list(t.dims)) for t in (*config.input, *config.output)}
    assert dims == {"input_ids": (mc.TYPE_INT64, [-1]), "attention_mask": (mc.TYPE_INT64, [-1]),
                    "last_hidden_state": (mc.TYPE_FP32, [-1, small_bert["hidden"]]),
                    "pooler_output": (mc.TYPE_FP32, [small_bert["hidden"]])}
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 8, 32]
    assert config.model_transaction_policy.decoupled
    (group,) = config.instance_group
    assert (group.kind, group.count) == (mc.ModelInstanceGroup.KIND_GPU, 1)
    assert params(config)["profile"] == ";".join(BERT)
    assert params(config)["contexts"] == "4" and params(config)["mode"] == "decoupled"


def test_cpu_instances_and_explicit_preferred_sizes(tiny_onnx: Path, tmp_path: Path) -> None:
    options = ServingOptions(instance_kind="cpu", preferred_batch_sizes=(4, 16))
    config = parse(make_model_folder(tmp_path, "tiny", tiny_onnx, TINY, options))
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 16]


@pytest.mark.parametrize("options, error", [
    (ServingOptions(memory_fraction="1.5"), "parameter 'memory_fraction'"),
    (ServingOptions(mode="async"), "parameter 'mode': 'async' is not accepted"),
    (ServingOptions(runtime="tensorflow"), "parameter 'runtime'"),
    (ServingOptions(instance_kind="tpu"), "instance kind 'tpu'"),
    (ServingOptions(preferred_batch_sizes=(8, 128)), r"preferred batch sizes \[128\] are outside 1\.\.64"),
])
def test_values_the_backend_would_refuse(tiny_onnx: Path, tmp_path: Path, options: ServingOptions, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        make_model_folder(tmp_path, "tiny", tiny_onnx, TINY, options)
    assert not (tmp_path / "tiny").exists()


def test_onnx_needs_profiles_for_dynamic_dims(small_bert_onnx: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"inputs \['input_ids', 'attention_mask'\] have dynamic dimensions"):
        make_model_folder(tmp_path, "bert", small_bert_onnx)


@needs_rtx
def test_engine_folder_carries_its_sidecar(tiny_onnx: Path, tmp_path: Path) -> None:
    engine = build_engine(tiny_onnx, tmp_path / "build" / "tiny.plan",
                          BuildOptions(trt_module="tensorrt_rtx", shapes=TINY)).engine
    stale = make_model_folder(tmp_path / "repo", "tiny", tiny_onnx, TINY)  # an earlier ONNX folder
    folder = make_model_folder(tmp_path / "repo", "tiny", engine)
    assert folder == stale
    assert sorted(p.name for p in (folder / "1").iterdir()) == ["model.plan", "model.plan.json"]
    assert json.loads((folder / "1" / "model.plan.json").read_text())["engine"] == "model.plan"
    assert read_sidecar(folder / "1" / "model.plan").profiles == TINY
    config = parse(folder)
    assert config.max_batch_size == 64 and params(config)["profile"] == TINY[0]
    with pytest.raises(ConfigError, match="is an engine: its optimization profiles were fixed"):
        make_model_folder(tmp_path / "repo", "tiny", engine, TINY)


def test_engine_without_sidecar(tmp_path: Path) -> None:
    (tmp_path / "lonely.plan").write_bytes(b"engine bytes")
    with pytest.raises(EngineError, match="has no sidecar 'lonely.plan.json'"):
        make_model_folder(tmp_path / "repo", "lonely", tmp_path / "lonely.plan")


def test_a_folder_that_would_not_load_is_not_written(tiny_onnx: Path, tmp_path: Path) -> None:
    """trtpool-model loads the folder with the server's own code (ModelInstance) before writing it."""
    with pytest.raises(ConfigError, match=r"would not load in trtpool .* so nothing was written; trtpool says: "
                                          r"parameter 'runtime': 'no_such_runtime' is not a built-in runtime"):
        make_model_folder(tmp_path, "tiny", tiny_onnx, TINY, ServingOptions(runtime="no_such_runtime"))
    assert not (tmp_path / "tiny").exists()


@needs_rtx
def test_engine_on_a_cpu_instance_is_refused_with_the_servers_message(tiny_onnx: Path, tmp_path: Path) -> None:
    engine = build_engine(tiny_onnx, tmp_path / "tiny.plan", BuildOptions(trt_module="tensorrt_rtx", shapes=TINY)).engine
    with pytest.raises(ConfigError, match="engines run on a GPU, but this model instance is on 'cpu'"):
        make_model_folder(tmp_path / "repo", "tiny", engine, options=ServingOptions(instance_kind="cpu"))
    assert not (tmp_path / "repo" / "tiny").exists()


@needs_rtx
def test_engine_for_another_machine_is_written_with_a_note(tiny_onnx: Path, tmp_path: Path) -> None:
    from trtpool_builder.engine.engine_here import why_not_here

    engine = build_engine(tiny_onnx, tmp_path / "tiny.plan",
                          BuildOptions(trt_module="tensorrt_rtx", shapes=TINY, compute_capability=("8.9",))).engine
    if why_not_here(engine) is None:
        pytest.skip("this machine can run the engine: it is loaded for real instead")
    notes: list[str] = []
    folder = make_model_folder(tmp_path / "repo", "tiny", engine, log=notes.append)
    assert (folder / "1" / "model.plan.json").is_file()
    (note,) = notes
    assert note.startswith("note: this machine cannot run the 'tensorrt_rtx' runtime (")
    assert "checked as far as it can be here" in note and "compute capability 8.9" in note


def test_a_scalar_per_batch_item_travels_as_dims_1_reshaped(tmp_path: Path) -> None:
    """Triton refuses empty dims ("model output 'label' must specify 'dims'"): a class label per batch
    item is declared dims [1] with reshape [], and trtpool (which sees the reshape) loads it."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("ArgMax", ["x"], ["label"], axis=1, keepdims=0)], "argmax",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "argmax.onnx")
    config = parse(make_model_folder(tmp_path / "repo", "argmax", tmp_path / "argmax.onnx", ["x=1x4:2x4:8x4"]))
    (label,) = config.output
    assert list(label.dims) == [1] and label.HasField("reshape") and list(label.reshape.shape) == []
    assert list(config.input[0].dims) == [4] and not config.input[0].HasField("reshape")


def _shapeless_output_onnx(path: Path) -> Path:
    """A graph whose output declares no shape: its folder serves a repaired copy (served_copy.py)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("repaired", [False, True], ids=["served as it is", "served as a repaired copy"])
def test_the_onnx_file_is_parsed_once(tiny_onnx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      repaired: bool) -> None:
    """trtpool-model parses the user's ONNX file once and hands that graph along (signature,
    repair, external data), whether the folder serves the file or a repaired copy of it."""
    import onnx

    model_file, shapes = (_shapeless_output_onnx(tmp_path / "relu.onnx"), ["x=1x4:2x4:8x4"]) if repaired \
        else (tiny_onnx, TINY)
    parsed: list[str] = []
    load = onnx.load

    def counting_load(f, *args, **kwargs):
        parsed.append(str(f))
        return load(f, *args, **kwargs)

    monkeypatch.setattr(onnx, "load", counting_load)
    monkeypatch.setattr(onnx, "load_model", counting_load)
    notes: list[str] = []
    folder = make_model_folder(tmp_path / "repo", "m", model_file, shapes, log=notes.append)
    assert parsed == [str(model_file)]
    assert any("declares no shape" in note for note in notes) == repaired
    (output,) = parse(folder).output
    assert list(output.dims) == [4]
