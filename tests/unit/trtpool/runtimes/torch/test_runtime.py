"""The torch runtime: signature and ONNX conversion on the CPU; CUDA
graphs, padding, concurrent contexts and device placement on a GPU (marked gpu).

GPU results are checked against ONNX Runtime (CPU, fp32) on the same ONNX file,
as max |torch - reference| <= tol * max(1, max |reference|):
  fp32  tol 1e-3 (IEEE fp32 on both sides; only summation order differs)
  fp16  tol 2e-2 (half precision: 11 significant bits, through up to 53 layers)
"""
from __future__ import annotations

import functools
import importlib.util
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trtpool import parameters  # noqa: E402
from trtpool.engine.answer import Kept  # noqa: E402
from trtpool.engine.batching import BatchRunner  # noqa: E402
from trtpool.engine.pool import ContextPool  # noqa: E402
from trtpool.errors import ConfigError, EngineError  # noqa: E402
from trtpool.gpu.host_upload import HostUploader  # noqa: E402
from trtpool.runtimes.torch.convert import convert  # noqa: E402
from trtpool.runtimes.torch.runtime import TorchRuntime  # noqa: E402
from trtpool.runtimes.torch.signature import padded_axis_sources, read_signature  # noqa: E402
from trtpool_builder.examples import get_example, write_example  # noqa: E402

TOLERANCE = {"fp32": 1e-3, "fp16": 2e-2}
# Small enough for ONNX Runtime to be a quick reference, same topologies.
OPTIONS = {
    "tiny": {},
    "resnet50": {"image_size": 64},
    "bert_base": {"num_layers": 2, "hidden": 128, "num_heads": 4, "vocab_size": 1000, "max_positions": 128},
}

needs_onnx2torch = pytest.mark.skipif(importlib.util.find_spec("onnx2torch") is None,
                                      reason="onnx2torch is not installed (pip install --no-deps onnx2torch==1.5.15)")


def gpu(test):
    """Marks a test gpu, and skips it where torch sees no GPU or onnx2torch is missing."""
    for mark in (pytest.mark.gpu, needs_onnx2torch,
                 pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU visible to torch")):
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("examples")
    return {name: write_example(name, root / name / "1" / "model.onnx", **opts) for name, opts in OPTIONS.items()}


SEQUENCE_BUCKETS = "32,64,128"  # BERT masks its padding, and names its output axes after its inputs'


def _profiles(cfg: parameters.PoolConfig) -> tuple:
    return cfg.profiles, cfg.max_batch_size


def make_cfg(name: str, path: Path, device: str = "cpu", **params: str) -> parameters.PoolConfig:
    example = get_example(name)
    params.setdefault("profile", example.serving_profiles(**OPTIONS[name])[0])
    if name == "bert_base":
        params.setdefault("sequence_buckets", SEQUENCE_BUCKETS)
    config = {"name": name, "max_batch_size": example.max_batch_size(**OPTIONS[name]),
              "parameters": {k: {"string_value": v} for k, v in params.items()}}
    return parameters.load(config, path.parent, device)


def sample(name: str, batch: int, seed: int, seq_len: int | None = None) -> dict[str, np.ndarray]:
    inputs = get_example(name).sample_inputs(batch, seed=seed, **OPTIONS[name])
    if seq_len is not None:  # BERT: tokens of another length, the tail masked off
        rng = np.random.default_rng(seed)
        ids = rng.integers(0, OPTIONS[name]["vocab_size"], size=(batch, seq_len), dtype=np.int64)
        mask = np.ones((batch, seq_len), np.int64)
        mask[:, seq_len * 3 // 4 + 1:] = 0
        inputs = {"input_ids": ids, "attention_mask": mask}
    return inputs


@functools.cache
def session(path: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def reference(path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """ONNX Runtime's fp32 outputs on the CPU, by name."""
    outputs = [o.name for o in session(path).get_outputs()]
    return dict(zip(outputs, session(path).run(None, inputs)))


def assert_close(actual: np.ndarray, expected: np.ndarray, tol: float) -> None:
    assert actual.shape == expected.shape
    error = float(np.abs(actual.astype(np.float64) - expected).max())
    assert error <= tol * max(1.0, float(np.abs(expected).max())), f"max error {error:.3g}"


# --- CPU ------------------------------------------------------------------------

def test_signature_and_padded_axes_come_from_the_onnx_file(examples):
    import onnx

    model = onnx.load(str(examples["bert_base"]))
    signature = read_signature(model, *_profiles(make_cfg("bert_base", examples["bert_base"])))
    assert [(s.name, s.shape) for s in signature.inputs] == [("input_ids", (-1, -1)), ("attention_mask", (-1, -1))]
    assert [(s.name, s.shape) for s in signature.outputs] == [("last_hidden_state", (-1, -1, 128)),
                                                              ("pooler_output", (-1, 128))]
    assert signature.max_shape("input_ids") == (32, 128)
    # The padded sequence axis of each output is cut back by the input axis of the same name.
    assert padded_axis_sources(model, signature) == {"last_hidden_state": {1: ("input_ids", 1)}, "pooler_output": {}}


def test_sequence_buckets_need_outputs_named_after_inputs(examples):
    import onnx

    model = onnx.load(str(examples["bert_base"]))
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_param = "unk__3"  # as tf2onnx names axes
    signature = read_signature(model, *_profiles(make_cfg("bert_base", examples["bert_base"])))
    with pytest.raises(ConfigError, match="output 'last_hidden_state' dimension 1 .'unk__3'. is named after no input"):
        padded_axis_sources(model, signature)


def test_a_dynamic_sequence_needs_a_profile(examples):
    import onnx

    config = {"name": "bert", "max_batch_size": 8}
    cfg = parameters.load(config, examples["bert_base"].parent, "cpu")
    with pytest.raises(ConfigError, match="parameter 'profile'"):
        read_signature(onnx.load(str(examples["bert_base"])), *_profiles(cfg))


@pytest.mark.parametrize("elem_type, text", [(16, "tensor(bfloat16)"), (8, "tensor(string)")])
def test_a_type_triton_carries_but_torch_does_not_is_refused_by_its_onnx_name(examples, elem_type, text):
    import onnx

    model = onnx.load(str(examples["tiny"]))
    output = model.graph.output[0]
    output.type.tensor_type.elem_type = elem_type  # onnx.TensorProto.BFLOAT16, STRING
    with pytest.raises(ConfigError, match=rf"^tensor '{output.name}' has type {re.escape(text)}, which trtpool "
                                          "does not serve$"):
        read_signature(model, *_profiles(make_cfg("tiny", examples["tiny"])))


def test_refuses_a_cpu_instance_a_non_onnx_file_and_an_unknown_precision(examples):
    path = examples["tiny"]
    with pytest.raises(ConfigError, match="KIND_GPU"):
        TorchRuntime(make_cfg("tiny", path, "cpu"), path)
    with pytest.raises(ConfigError, match="model_file"):
        TorchRuntime(make_cfg("tiny", path, "cuda:0"), path.with_suffix(".pt"))
    with pytest.raises(ConfigError, match="fp32, fp16"):
        TorchRuntime(make_cfg("tiny", path, "cuda:0", precision="int8"), path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_without_a_gpu_the_error_says_so(examples):
    with pytest.raises(EngineError, match="torch sees 0 GPU"):
        TorchRuntime(make_cfg("tiny", examples["tiny"], "cuda:0"), examples["tiny"])


@needs_onnx2torch
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_converted_module_matches_onnxruntime_on_the_cpu(examples, name, precision):
    import onnx

    inputs = sample(name, 3, seed=1)
    module = convert(onnx.load(str(examples[name])), "cpu", precision)
    half = precision == "fp16"
    args = [torch.from_numpy(a).half() if half and a.dtype == np.float32 else torch.from_numpy(a)
            for a in inputs.values()]
    with torch.inference_mode():
        results = module(*args)
    results = [results] if isinstance(results, torch.Tensor) else results
    for result, expected in zip(results, reference(examples[name], inputs).values()):
        assert result.dtype == (torch.float16 if half else torch.float32)
        assert_close(result.float().numpy(), expected, TOLERANCE[precision])


def spatial_kernels(module: torch.nn.Module) -> list[torch.Tensor]:
    """The weights of the 2-D convolutions wider than 1x1 (a 1x1 kernel is contiguous in both layouts)."""
    return [m.weight for m in module.modules() if isinstance(m, torch.nn.Conv2d) and m.weight.shape[2:] != (1, 1)]


@needs_onnx2torch
@pytest.mark.parametrize("name, precision, nhwc", [("resnet50", "fp16", True), ("resnet50", "fp32", False),
                                                   ("bert_base", "fp16", False)])
def test_fp16_convolutions_take_channels_last_weights(examples, name, precision, nhwc):
    import onnx

    from trtpool.runtimes.torch.convert import prefers_channels_last

    module = convert(onnx.load(str(examples[name])), "cpu", precision)
    assert prefers_channels_last(module, precision) == nhwc
    kernels = spatial_kernels(module)
    assert all(w.is_contiguous(memory_format=torch.channels_last) == nhwc for w in kernels)
    assert all(w.is_contiguous() != nhwc for w in kernels)
    assert bool(kernels) == (name == "resnet50")


@needs_onnx2torch
def test_channels_last_weights_compute_what_nchw_weights_do(examples):
    """The layout is the only difference: fp32 on the CPU, each layout on the same inputs (NCHW)."""
    import onnx

    model = onnx.load(str(examples["resnet50"]))
    inputs = torch.from_numpy(sample("resnet50", 3, seed=5)["input"])
    nhwc, nchw = convert(model, "cpu", channels_last=True), convert(model, "cpu", channels_last=False)
    assert spatial_kernels(nhwc)[0].is_contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        np.testing.assert_allclose(nhwc(inputs).numpy(), nchw(inputs).numpy(), rtol=1e-4, atol=1e-4)


@needs_onnx2torch
@pytest.mark.parametrize("name", list(OPTIONS))
def test_converted_module_reads_no_device_tensor_on_the_host(examples, name):
    """On the meta device a tensor has no data: any host read of one (what a
    CUDA-graph capture forbids, e.g. onnx2torch's Reshape testing shape == 0)
    raises. Integer constants stay on the host, as they do on a GPU."""
    import onnx

    module = convert(onnx.load(str(examples[name])), "meta")
    inputs = [torch.from_numpy(a).to("meta") for a in sample(name, 2, seed=0).values()]
    with torch.inference_mode():
        results = module(*inputs)
    results = [results] if isinstance(results, torch.Tensor) else results
    assert all(r.device.type == "meta" for r in results)


@needs_onnx2torch
def test_zero_padding_a_masked_sequence_leaves_the_real_rows_unchanged(examples):
    """What bucketing relies on: BERT's rows 0..2, tokens 0..19, padded to a
    (4, 32) bucket with zeros (attention_mask 0), come out as without padding."""
    import onnx

    module = convert(onnx.load(str(examples["bert_base"])), "cpu")
    inputs = sample("bert_base", 3, seed=2, seq_len=20)
    padded = {k: np.zeros((4, 32), np.int64) for k in inputs}
    for k, v in inputs.items():
        padded[k][:3, :20] = v
    with torch.inference_mode():
        plain = module(*map(torch.from_numpy, inputs.values()))
        bucket = module(*map(torch.from_numpy, padded.values()))
    np.testing.assert_allclose(bucket[0][:3, :20].numpy(), plain[0].numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bucket[1][:3].numpy(), plain[1].numpy(), rtol=1e-4, atol=1e-5)


def nonzero_model(path: Path) -> Path:
    """x [n, 4] -> the (row, column) of each non-zero element: an output sized by the data."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["where"], perm=[1, 0])],
        "nonzero", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("where", TensorProto.INT64, [None, 2])])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@needs_onnx2torch
def test_nonzero_converts_as_onnx_defines_it(tmp_path):
    """(rank, count), as ONNX Runtime computes it: onnx2torch's own converter transposes it."""
    import onnx

    path = nonzero_model(tmp_path / "nonzero.onnx")
    module = convert(onnx.load(str(path)), "cpu")
    x = np.array([[0, 2, 0, 1], [3, 0, 0, 0], [0, 0, 0, 0]], np.float32)
    with torch.inference_mode():
        result = module(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(result, reference(path, {"x": x})["where"])


# --- GPU ------------------------------------------------------------------------

def gpu_runtime(examples, name: str, precision: str = "fp32", device: str = "cuda:0") -> TorchRuntime:
    return TorchRuntime(make_cfg(name, examples[name], device, precision=precision), examples[name])


def run_requests(runner: BatchRunner, requests: list[dict[str, np.ndarray]]) -> list:
    kept = [Kept() for _ in requests]
    runner.run(requests, kept)
    return [k.answer for k in kept]


@gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_gpu_batches_match_onnxruntime(examples, name, precision):
    runtime = gpu_runtime(examples, name, precision)
    pool = ContextPool(runtime, 2)
    runner = BatchRunner(pool)
    seq = {"bert_base": [None, 40, 100]}.get(name, [None, None, None])
    # fp16 ResNet runs its convolutions in channels_last, captured in the graphs checked below
    assert all(w.is_contiguous(memory_format=torch.channels_last) == (precision == "fp16")
               for w in spatial_kernels(runtime.module))
    try:
        # 1 + 3 + 8 rows make one batch of 12, run in bucket 16; BERT adds sequence buckets.
        for length in seq:
            requests = [sample(name, n, seed=n, seq_len=length) for n in (1, 3, 8)]
            for request, result in zip(requests, run_requests(runner, requests)):
                assert isinstance(result, dict), result
                for output, expected in reference(examples[name], request).items():
                    assert_close(result[output], expected, TOLERANCE[precision])
    finally:
        runner.close()
        pool.close()


def run_on(context, inputs: dict) -> dict[str, np.ndarray]:
    """One batch through submit and complete; inputs are numpy arrays or CUDA tensors, one part each."""
    context.submit({name: [array] for name, array in inputs.items()})
    return {k: v.copy() for k, v in context.complete().items()}


@gpu
@pytest.mark.parametrize("name", ["tiny", "bert_base"])
def test_gpu_padded_batch_gives_the_rows_of_the_batch_alone(examples, name):
    """Batch 3 runs in bucket 4 (BERT's 16 tokens in bucket 32): its rows are those
    of the same rows in a full batch of 4, and of each row run alone (bucket 1)."""
    runtime = gpu_runtime(examples, name)
    context = runtime.create_context(0)
    try:
        four = sample(name, 4, seed=5)
        padded = run_on(context, {k: v[:3] for k, v in four.items()})
        full = run_on(context, four)
        alone = [run_on(context, {k: v[i:i + 1] for k, v in four.items()}) for i in range(3)]
        for output, rows in padded.items():
            np.testing.assert_allclose(rows, full[output][:3], rtol=1e-6, atol=1e-6)  # same graph
            np.testing.assert_allclose(rows, np.concatenate([a[output] for a in alone]), rtol=1e-4, atol=1e-5)
        inner = (32,) if name == "bert_base" else four[next(iter(four))].shape[1:]
        assert {key[0] for key in context.captured} >= {(4, *inner), (1, *inner)}
        assert not any(key[0][0] == 3 for key in context.captured)
    finally:
        context.close()
        runtime.close()


@gpu
def test_gpu_contexts_run_concurrently_and_agree(examples):
    runtime = gpu_runtime(examples, "bert_base")
    pool = ContextPool(runtime, 4)
    runner = BatchRunner(pool)
    failures: list[str] = []

    def client(worker: int) -> None:
        rng = np.random.default_rng(worker)
        for step in range(6):
            length = int(rng.integers(3, 129))
            requests = [sample("bert_base", int(rng.integers(1, 6)), seed=100 * worker + step, seq_len=length)
                        for _ in range(int(rng.integers(1, 4)))]
            for request, result in zip(requests, run_requests(runner, requests)):
                if not isinstance(result, dict):
                    failures.append(repr(result))
                    continue
                for output, expected in reference(examples["bert_base"], request).items():
                    try:
                        assert_close(result[output], expected, TOLERANCE["fp32"])
                    except AssertionError as exc:
                        failures.append(f"worker {worker} step {step} {output}: {exc}")

    try:
        with ThreadPoolExecutor(8) as clients:
            list(clients.map(client, range(8)))
        assert not failures, failures[:5]
        assert sum(1 for s in pool.stats.contexts.values() if s.runs) > 1
        assert all(s.failures == 0 for s in pool.stats.contexts.values())
    finally:
        runner.close()
        pool.close()


@gpu
def test_gpu_buffers_graphs_and_weights_live_on_the_configured_device(examples):
    index = torch.cuda.device_count() - 1
    device = torch.device("cuda", index)
    others_before = [torch.cuda.memory_allocated(i) for i in range(index)]
    runtime = gpu_runtime(examples, "bert_base", device=f"cuda:{index}")
    context = runtime.create_context(0)
    try:
        run_on(context, sample("bert_base", 2, seed=3, seq_len=20))
        assert all(p.device == device for p in runtime.module.parameters())
        assert all(b.device == device for b in runtime.module.buffers() if b.is_floating_point())
        tensors = [*context._static.values(), *context._landing.values()]
        for bucket in context._buckets.values():
            tensors += [*bucket.inputs.values(), *(bucket.outputs or {}).values()]
        assert tensors and all(t.device == device for t in tensors)
        assert context._torch_stream.device == device
        assert [torch.cuda.memory_allocated(i) for i in range(index)] == others_before
    finally:
        context.close()
        runtime.close()


@gpu
def test_gpu_contexts_share_the_weights_and_cost_what_is_measured(examples):
    """At batch 1 a context's activations are far below ResNet-50's 100 MB of
    weights: a context that copied them would cost more than they do."""
    path = examples["resnet50"]
    runtime = TorchRuntime(make_cfg("resnet50", path, "cuda:0", profile="input=1x3x64x64"), path)
    try:
        weights = sum(p.numel() * p.element_size() for p in runtime.module.parameters())
        measured = runtime.context_memory_bytes()
        assert 0 < measured < weights
        before = torch.cuda.memory_reserved(runtime.device)
        contexts = [runtime.create_context(i) for i in range(3)]
        for context in contexts:  # the profile's one shape: each context's graph and pool made now
            run_on(context, sample("resnet50", 1, seed=2))
        per_context = (torch.cuda.memory_reserved(runtime.device) - before) / 3
        assert 0.5 * measured <= per_context <= 1.5 * measured + (8 << 20)
        for context in contexts:
            context.close()
    finally:
        runtime.close()


@gpu
def test_gpu_context_activations_follow_the_shapes_it_runs(examples):
    """A context holds no graph until it runs, then the buckets it has run: one that
    serves batch 1 holds less than the profile's largest batch needs (what
    context_memory_bytes measures), and grows when a larger batch comes."""
    path = examples["resnet50"]
    runtime = TorchRuntime(make_cfg("resnet50", path, "cuda:0", profile="input=1x3x64x64:8x3x64x64:32x3x64x64"),
                           path)
    try:
        largest = runtime.context_memory_bytes()
        before = torch.cuda.memory_reserved(runtime.device)
        context = runtime.create_context(0)
        assert context.captured == []
        one = sample("resnet50", 1, seed=4)
        for name, output in run_on(context, one).items():
            assert_close(output, reference(path, one)[name], TOLERANCE["fp32"])
        assert [key[0][0] for key in context.captured] == [1]
        at_batch_1 = torch.cuda.memory_reserved(runtime.device) - before
        assert 0 < at_batch_1 < 0.8 * largest, (at_batch_1, largest)  # H200: 63 of 103 MB
        full = sample("resnet50", 32, seed=4)
        for name, output in run_on(context, full).items():
            assert_close(output, reference(path, full)[name], TOLERANCE["fp32"])
        assert [key[0][0] for key in context.captured] == [1, 32]
        assert torch.cuda.memory_reserved(runtime.device) - before > at_batch_1
        context.close()
    finally:
        runtime.close()


@gpu
def test_gpu_closed_contexts_return_their_memory_to_the_driver(examples):
    """An elastic pool's shrink: closing contexts hands their buffers, graphs and graph
    pool back to the driver (reserved memory falls), and cycles of making and closing
    contexts do not accumulate memory (their streams, with torch's cuBLAS workspace
    for each, are reused). A context made later captures the buckets already run when
    it is made (as an elastic pool grows), not on its first batch."""
    path = examples["resnet50"]
    runtime = TorchRuntime(make_cfg("resnet50", path, "cuda:0", profile="input=1x3x64x64:8x3x64x64:8x3x64x64"),
                           path)
    inputs = sample("resnet50", 3, seed=9)
    expected = reference(path, inputs)
    try:
        keep = runtime.create_context(0)
        for name, output in run_on(keep, inputs).items():  # batch 3: its bucket captured on first use
            assert_close(output, expected[name], TOLERANCE["fp32"])
        after_close = []
        for _ in range(3):
            extra = [runtime.create_context(i) for i in (1, 2)]
            for context in extra:
                assert set(context.captured) == set(keep.captured) and len(keep.captured) == 1
                for name, output in run_on(context, inputs).items():
                    assert_close(output, expected[name], TOLERANCE["fp32"])
            held = torch.cuda.memory_reserved(runtime.device)
            for context in extra:
                context.close()
            after_close.append(torch.cuda.memory_reserved(runtime.device))
            assert after_close[-1] < held
        assert after_close[2] <= after_close[0], after_close
        for name, output in run_on(keep, inputs).items():
            assert_close(output, expected[name], TOLERANCE["fp32"])
        keep.close()
    finally:
        runtime.close()


@gpu
def test_gpu_device_parts_go_straight_into_place_and_match_host_parts(examples):
    """Requests already on the GPU (Triton's CUDA tensors) are copied into the bucket
    in place, part by part, and give the host path's answer; the caller's tensors
    may change once submit has returned."""
    runtime = gpu_runtime(examples, "bert_base")
    context = runtime.create_context(0)
    try:
        first, second = sample("bert_base", 2, seed=9, seq_len=50), sample("bert_base", 1, seed=10, seq_len=50)
        parts = {k: [torch.from_numpy(first[k]).to(runtime.device), torch.from_numpy(second[k]).to(runtime.device)]
                 for k in first}
        context.submit(parts)
        for tensors in parts.values():
            for tensor in tensors:
                tensor.fill_(0)  # the backend reusing its buffers after execute() returned
        device_results = {k: v.copy() for k, v in context.complete().items()}
        joined = {k: np.concatenate([first[k], second[k]]) for k in first}
        for output, expected in run_on(context, joined).items():
            np.testing.assert_array_equal(device_results[output], expected)
        for output, expected in reference(examples["bert_base"], joined).items():
            assert_close(device_results[output], expected, TOLERANCE["fp32"])
    finally:
        context.close()
        runtime.close()


@gpu
def test_gpu_outputs_kept_on_the_device_are_the_callers_and_match_the_host_path(examples):
    """keep_outputs_on_device: complete() returns CUDA tensors on the runtime's device, equal to
    what the host path returns, complete, and the caller's own (the next batch leaves them as
    they were, though it replays the same graph into the same buffers)."""
    runtime = gpu_runtime(examples, "resnet50")
    context = runtime.create_context(0)
    try:
        first, second = sample("resnet50", 3, seed=21), sample("resnet50", 3, seed=22)
        host_first = {k: v.copy() for k, v in run_on(context, first).items()}
        assert runtime.keep_outputs_on_device() and runtime.outputs_on_device

        def on_device(inputs: dict) -> dict:
            context.submit({name: [array] for name, array in inputs.items()})
            return context.complete()
        kept = on_device(first)
        for name, tensor in kept.items():
            assert isinstance(tensor, torch.Tensor) and tensor.device == runtime.device and tensor.is_contiguous()
            np.testing.assert_array_equal(tensor.cpu().numpy(), host_first[name])
        snapshot = {name: tensor.clone() for name, tensor in kept.items()}
        again = on_device(second)
        for name, tensor in kept.items():
            assert torch.equal(tensor, snapshot[name])
            assert not torch.equal(again[name], tensor)
    finally:
        context.close()
        runtime.close()


@gpu
@pytest.mark.parametrize("name, seq_len", [("resnet50", None), ("bert_base", 50)])
def test_gpu_host_parts_gathered_in_slices_by_threads_match_one_piece(examples, name, seq_len):
    """Host requests gathered into pinned staging a few rows per slice by three threads
    (each slice's copy queued as it lands; BERT's padded sequence through the landing
    buffer) give the answer of the batch gathered in one piece, and the requests'
    arrays may change once submit has returned."""
    runtime = gpu_runtime(examples, name)
    context = runtime.create_context(0)
    try:
        requests = [sample(name, n, seed=20 + n, seq_len=seq_len) for n in (1, 2, 1, 3, 1)]
        joined = {k: np.concatenate([r[k] for r in requests]) for k in requests[0]}
        runtime.uploader.close()
        runtime.uploader = HostUploader(threads=1, slice_bytes=1 << 40)
        whole = run_on(context, joined)
        runtime.uploader = HostUploader(threads=3, slice_bytes=1)  # a slice per row
        context.submit({k: [r[k] for r in requests] for k in requests[0]})
        for request in requests:
            for array in request.values():
                array.fill(0)  # the backend reusing the request's memory after execute() returned
        sliced = {k: v.copy() for k, v in context.complete().items()}
        for output, expected in whole.items():
            np.testing.assert_allclose(sliced[output], expected, rtol=1e-6, atol=1e-6)  # same graph
        for output, expected in reference(examples[name], joined).items():
            assert_close(sliced[output], expected, TOLERANCE["fp32"])
    finally:
        context.close()
        runtime.close()


@gpu
def test_gpu_model_that_cannot_be_captured_runs_eagerly(examples, tmp_path):
    """An output sized by the data (NonZero) cannot live in a CUDA graph: the model
    still serves, eagerly, with the shape of each batch's own result."""
    path = nonzero_model(tmp_path / "1" / "model.onnx")
    config = {"name": "nonzero", "max_batch_size": 0,
              "parameters": {"profile": {"string_value": "x=1x4:4x4:8x4"}}}
    runtime = TorchRuntime(parameters.load(config, path.parent, "cuda:0"), path)
    context = runtime.create_context(0)
    try:
        for x in (np.eye(4, dtype=np.float32)[:3], np.zeros((2, 4), np.float32), np.ones((5, 4), np.float32)):
            np.testing.assert_array_equal(run_on(context, {"x": x})["where"], np.argwhere(x))
        assert runtime.eager_reason is not None
    finally:
        context.close()
        runtime.close()


@gpu
def test_gpu_request_tensors_are_copied_before_execute_returns():
    """Decoupled mode reads request tensors after execute(); the Python backend
    reuses their GPU buffers by then, so keep_after_execute copies them."""
    from trtpool.gpu.device_tensors import keep_after_execute

    host = np.arange(6, dtype=np.int64).reshape(1, 6)
    on_gpu = torch.arange(6, dtype=torch.int64, device="cuda:0").reshape(1, 6)
    [kept] = keep_after_execute([{"ids": on_gpu, "mask": host}])
    assert kept["mask"] is host  # host tensors stay valid while the request lives
    assert kept["ids"].data_ptr() != on_gpu.data_ptr()
    on_gpu.fill_(-1)  # the backend reusing the buffer
    np.testing.assert_array_equal(kept["ids"].cpu().numpy(), host)
