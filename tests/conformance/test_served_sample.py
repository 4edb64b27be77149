"""A varied sample of the node-test corpus served for real: trtpool-model writes each folder, one
tritonserver serves them all, tritonclient asks over HTTP and gRPC, and each answer is compared
with the case's expected outputs (node_suite.mismatch: rtol 1e-3, atol 1e-4; exact for integers,
booleans and strings).

The sample covers every data type Triton carries, scalars (rank 0), zero-size tensors,
outputs sized by the data, a model without inputs, several inputs and outputs, and models
with every dimension dynamic. Outputs sized by the data are also asked with other data
than the case's (all-true masks, more boxes) and compared with ONNX Runtime on the file.
"""
from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conformance.node_suite import NodeCase, collect, dynamic_variant, mismatch, quiet_onnxruntime
from trtpool.model.dtypes import TRITON_DTYPES
from trtpool_builder.folder.load_check import as_triton_hands_it
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config

CLIENTS = {"http": httpclient, "grpc": grpcclient}

STOCK = (
    # one per data type
    "test_abs", "test_cast_DOUBLE_to_FLOAT", "test_cast_FLOAT_to_FLOAT16", "test_cast_FLOAT_to_BFLOAT16",
    "test_cast_BFLOAT16_to_FLOAT", "test_add_int8", "test_add_int16", "test_bitshift_left_int32",
    "test_add_uint8", "test_add_uint16", "test_add_uint32", "test_add_uint64", "test_and2d",
    "test_argmax_default_axis_example",
    # strings
    "test_equal_string", "test_regex_full_match_basic", "test_strnormalizer_export_monday_casesensintive_nochangecase",
    "test_ai_onnx_ml_label_encoder_string_int",
    # scalars in and out
    "test_bitcast_scalar_float32_to_int32", "test_det_2d", "test_blackmanwindow", "test_range_float_type_positive_delta",
    # zero-size tensors
    "test_castlike_DOUBLE_to_FLOAT", "test_slice_start_out_of_bounds", "test_reduce_sum_empty_set",
    # sizes computed from the data
    "test_nonzero_example", "test_compress_0", "test_unique_sorted_with_axis",
    "test_nonmaxsuppression_center_point_box_format", "test_split_variable_parts_1d_opset18",
    # no inputs; several inputs and outputs
    "test_constant", "test_gru_defaults", "test_gemm_all_attributes", "test_layer_normalization_2d_axis0",
    "test_lstm_defaults", "test_top_k",
)
DYNAMIC = (
    "test_abs", "test_matmul_2d", "test_gather_0", "test_nonzero_example", "test_softmax_axis_0",
    "test_cumsum_1d", "test_flatten_axis2", "test_conv_with_strides_padding", "test_resize_downsample_scales_linear",
    "test_add_uint64", "test_equal_string", "test_cast_FLOAT_to_BFLOAT16",
)
# Outputs sized by the data, asked with other data than the case's.
OTHER_DATA = {
    "test_nonzero_example": lambda c: {"condition": np.ones((2, 2), bool)},
    "test_compress_0": lambda c: {"input": c.inputs["input"], "condition": np.ones(3, bool)},
    "test_unique_sorted_with_axis": lambda c: {"X": np.arange(9, dtype=np.float32).reshape(3, 3)},
    # six boxes far apart, all kept: more than the case's three
    "test_nonmaxsuppression_center_point_box_format": lambda c: {
        **c.inputs, "max_output_boxes_per_class": np.array([6], np.int64),
        "boxes": np.array([[[10.0 * i, 0.0, 1.0, 1.0] for i in range(6)]], np.float32)},
}


def _sample_names() -> list[tuple[str, str]]:
    return [(name, "stock") for name in STOCK] + [(name, "dynamic") for name in DYNAMIC]


@pytest.fixture(scope="module")
def sample(start_server, tmp_path_factory):
    """(server, {model name: (case, config as Triton hands it, ONNX file)})."""
    quiet_onnxruntime()
    cases = {case.name: case for case in collect()}
    workdir = tmp_path_factory.mktemp("node_sample")
    repo = workdir / "repo"
    served = {}
    for name, variant in _sample_names():
        case = cases[name]
        model = case.model if variant == "stock" else dynamic_variant(case.model)
        onnx_file = workdir / f"{name}_{variant}.onnx"
        onnx_file.write_bytes(model.SerializeToString())
        model_name = f"{name.removeprefix('test_')}_{variant}"
        shapes = [",".join(f"{n}={'x'.join(map(str, a.shape))}" for n, a in case.inputs.items())]
        folder = make_model_folder(repo, model_name, onnx_file, shapes if case.inputs else [],
                                   ServingOptions(instance_kind="cpu", contexts="1"), log=lambda _: None)
        served[model_name] = (case, as_triton_hands_it(read_config(folder)), onnx_file)
    server = start_server(repo, "--exit-on-error=false", "--strict-readiness=false")
    deadline = time.monotonic() + 300
    with httpclient.InferenceServerClient(server.http_url) as client:
        while not all(client.is_model_ready(m) for m in served):
            states = {m["name"]: m for m in client.get_model_repository_index()}
            failed = {m: s.get("reason") for m, s in states.items() if s.get("state") == "UNAVAILABLE"}
            assert not failed, f"models failed to load: {failed}"
            assert time.monotonic() < deadline, f"models not ready: {server.log_tail()}"
            time.sleep(0.5)
    return server, served


def _infer(protocol: str, server, model: str, config: dict, inputs: dict[str, np.ndarray]) -> dict:
    """Ask the served model as a client does: each input in the config's dims (a scalar as [1];
    a batched model's per-row scalar, `dims: [1]` with `reshape: []`, as [rows, 1]) and each
    output as the model shaped it (the trailing 1 of such a per-row scalar taken off)."""
    module = CLIENTS[protocol]
    url = server.http_url if protocol == "http" else server.grpc_url
    declared = {entry["name"]: entry for entry in config.get("input", [])}
    tensors = []
    for name, array in inputs.items():
        if "reshape" in declared[name]:
            sent = array.reshape(*array.shape, 1)
        else:
            sent = array.reshape(1) if array.ndim == 0 else array
        if sent.dtype.kind in "OUS":
            sent = np.array([str(x).encode() if not isinstance(x, bytes) else x for x in sent.ravel()],
                            dtype=object).reshape(sent.shape)
        tensor = module.InferInput(name, list(sent.shape), TRITON_DTYPES[sent.dtype].removeprefix("TYPE_")
                                   .replace("STRING", "BYTES"))
        tensor.set_data_from_numpy(sent)
        tensors.append(tensor)
    with module.InferenceServerClient(url) as client:
        result = client.infer(model, tensors,
                              outputs=[module.InferRequestedOutput(e["name"]) for e in config["output"]])
    answers = {}
    for entry in config["output"]:
        answer = result.as_numpy(entry["name"])
        if "reshape" in entry and answer.shape[-1:] == (1,):
            answer = answer.reshape(answer.shape[:-1])
        answers[entry["name"]] = answer
    return answers


@pytest.mark.parametrize("protocol", sorted(CLIENTS))
@pytest.mark.parametrize("name,variant", _sample_names(), ids=lambda v: v)
def test_served_case_answers_as_expected(sample, name: str, variant: str, protocol: str) -> None:
    server, served = sample
    model = f"{name.removeprefix('test_')}_{variant}"
    case, config, _ = served[model]
    got = _infer(protocol, server, model, config, case.inputs)
    why = mismatch(case.outputs, got)
    assert why is None, f"{model} over {protocol}: {why}"


@pytest.mark.parametrize("protocol", sorted(CLIENTS))
@pytest.mark.parametrize("name", sorted(OTHER_DATA))
def test_outputs_sized_by_the_data_follow_any_data(sample, name: str, protocol: str) -> None:
    server, served = sample
    model = f"{name.removeprefix('test_')}_stock"
    case, config, onnx_file = served[model]
    inputs = OTHER_DATA[name](case)
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    expected = dict(zip(names, session.run(names, inputs)))
    assert any(expected[n].shape != case.outputs[n].shape for n in names), "the other data must change a size"
    for _ in range(2):  # the second request runs after the runtime has learnt the output's size is the data's
        why = mismatch(expected, _infer(protocol, server, model, config, inputs))
        assert why is None, f"{model} over {protocol}: {why}"
    why = mismatch(case.outputs, _infer(protocol, server, model, config, case.inputs))
    assert why is None, f"{model} over {protocol}, the case's own data after other data: {why}"


def test_the_sample_covers_every_triton_type_scalars_empty_tensors_and_no_inputs(sample) -> None:
    _, served = sample
    cases: list[NodeCase] = [case for case, _, _ in served.values()]
    arrays = [a for case in cases for a in (*case.inputs.values(), *case.outputs.values())]
    assert {a.dtype for a in arrays} >= set(TRITON_DTYPES)
    assert any(a.ndim == 0 for a in arrays) and any(0 in a.shape for a in arrays)
    assert any(not case.inputs for case in cases)
    assert len(served) >= 40
