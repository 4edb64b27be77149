"""trtpool served by a real tritonserver with GPU instances (the torch runtime):
outputs against ONNX Runtime fp32 on the CPU, over HTTP, gRPC and CUDA shared
memory (inputs reach the backend on the GPU by DLPack), in every mode.

Tolerance: max |served - reference| <= 1e-3 * max(1, max |reference|) in fp32
(IEEE fp32 on both sides, only the summation order differs).
"""
from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU visible to torch"),
]

import onnxruntime as ort  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
import tritonclient.utils.cuda_shared_memory as cudashm  # noqa: E402

from bench.gpu_memory import by_process  # noqa: E402
from tests.harness.clients import grpc_input, http_input  # noqa: E402
from tests.harness.host_faults import kill_host_under_load  # noqa: E402
from trtpool.parameters import AUTO_HOST_INSTANCES  # noqa: E402
from trtpool_builder.examples import get_example, write_example  # noqa: E402
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config, write_config  # noqa: E402

IMAGE = 64  # the ResNet-50 topology at a small input: a quick CPU reference


def close_enough(served: np.ndarray, reference: np.ndarray, tol: float = 1e-3) -> None:
    error = float(np.max(np.abs(served - reference)))
    assert error <= tol * max(1.0, float(np.max(np.abs(reference)))), f"max abs error {error}"


@pytest.fixture(scope="module")
def gpu_served(start_server, tmp_path_factory):
    base = tmp_path_factory.mktemp("gpu")
    onnx = write_example("resnet50", base / "resnet50.onnx", image_size=IMAGE)
    profiles = get_example("resnet50").serving_profiles(image_size=IMAGE)
    repo = base / "repo"
    for name, mode in (("resnet_sync", "sync"), ("resnet_pipelined", "pipelined"), ("resnet_decoupled", "decoupled")):
        folder = make_model_folder(repo, name, onnx, profiles,
                                   ServingOptions(runtime="torch", contexts="2", mode=mode, instance_kind="gpu"))
        config = read_config(folder)
        config.parameters["model_file"].string_value = "model.onnx"
        config.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value = "no"
        config.instance_group[0].gpus.append(0)  # one instance per listed GPU (multi-GPU form, on one)
        write_config(folder, config)
    # Three thin instances forwarding to one engine host; Triton copies CUDA-shm inputs to host
    # memory for them (FORCE_CPU_ONLY_INPUT_TENSORS yes), so they need no CUDA of their own.
    # Two more that take CUDA-shm inputs on the GPU (no) and copy them into device memory their
    # engine host exported to them (CUDA IPC).
    for name, cpu_only_inputs, count in (("resnet_host", "yes", 3), ("resnet_host_ipc", "no", 2)):
        folder = make_model_folder(repo, name, onnx, profiles,
                                   ServingOptions(runtime="torch", contexts="2", mode="sync", instance_kind="gpu"))
        config = read_config(folder)
        config.parameters["model_file"].string_value = "model.onnx"
        config.parameters["engine_host"].string_value = "on"
        config.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value = cpu_only_inputs
        config.instance_group[0].count = count
        write_config(folder, config)
    # Four sync instances on the GPU with engine_host left at auto: auto hands them to an engine host.
    folder = make_model_folder(repo, "resnet_auto", onnx, profiles,
                               ServingOptions(runtime="torch", mode="sync", instance_kind="gpu"))
    config = read_config(folder)
    config.parameters["model_file"].string_value = "model.onnx"
    config.instance_group[0].count = AUTO_HOST_INSTANCES
    write_config(folder, config)
    server = start_server(repo)
    reference = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    return server, reference


@pytest.mark.parametrize("model", ["resnet_sync", "resnet_pipelined", "resnet_host"])
def test_http_and_grpc_match_onnxruntime(gpu_served, model):
    server, reference = gpu_served
    x = np.random.default_rng(0).standard_normal((3, 3, IMAGE, IMAGE)).astype(np.float32)
    [expected] = reference.run(None, {"input": x})
    http = httpclient.InferenceServerClient(server.http_url)
    close_enough(http.infer(model, [http_input("input", x, "FP32")]).as_numpy("logits"), expected)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    close_enough(grpc.infer(model, [grpc_input("input", x, "FP32")]).as_numpy("logits"), expected)
    if model == "resnet_host":  # its input slabs were page-locked: the rows went by DMA from the slab
        log = server.log_text()
        assert "stays pageable" not in log and "is page-locked in place" in log


@pytest.mark.parametrize("model", ["resnet_sync", "resnet_pipelined", "resnet_host", "resnet_host_ipc"])
def test_cuda_shared_memory_inputs_and_outputs(gpu_served, model):
    """Inputs in CUDA shared memory stay on the GPU up to the context (DLPack), copied
    there into the context's own buffers."""
    server, reference = gpu_served
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = np.random.default_rng(1).standard_normal((4, 3, IMAGE, IMAGE)).astype(np.float32)
    [expected] = reference.run(None, {"input": x})
    in_bytes, out_bytes = x.nbytes, expected.nbytes
    in_region = cudashm.create_shared_memory_region("trtpool_in", in_bytes, 0)
    out_region = cudashm.create_shared_memory_region("trtpool_out", out_bytes, 0)
    try:
        cudashm.set_shared_memory_region(in_region, [x])
        client.register_cuda_shared_memory("trtpool_in", cudashm.get_raw_handle(in_region), 0, in_bytes)
        client.register_cuda_shared_memory("trtpool_out", cudashm.get_raw_handle(out_region), 0, out_bytes)
        tensor = grpcclient.InferInput("input", list(x.shape), "FP32")
        tensor.set_shared_memory("trtpool_in", in_bytes)
        output = grpcclient.InferRequestedOutput("logits")
        output.set_shared_memory("trtpool_out", out_bytes)
        client.infer(model, [tensor], outputs=[output])
        served = cudashm.get_contents_as_numpy(out_region, np.float32, list(expected.shape))
        close_enough(served, expected)
    finally:
        client.unregister_cuda_shared_memory()
        cudashm.destroy_shared_memory_region(in_region)
        cudashm.destroy_shared_memory_region(out_region)


def stream(server, model: str, requests: dict[str, list]) -> dict[str, np.ndarray]:
    """Send each request id's inputs on one gRPC stream; the logits by request id."""
    answers = []
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.append((result, error)))
    for request_id, inputs in requests.items():
        client.async_stream_infer(model, inputs, request_id=request_id)
    deadline = time.monotonic() + 120
    while len(answers) < len(requests) and time.monotonic() < deadline:
        time.sleep(0.05)
    client.stop_stream()
    assert len(answers) == len(requests)
    for result, error in answers:
        assert error is None, error
    return {result.get_response().id: result.as_numpy("logits") for result, _ in answers}


def test_decoupled_stream_on_the_gpu(gpu_served):
    server, reference = gpu_served
    rng = np.random.default_rng(2)
    inputs = {str(i): rng.standard_normal((1, 3, IMAGE, IMAGE)).astype(np.float32) for i in range(16)}
    served = stream(server, "resnet_decoupled", {i: [grpc_input("input", x, "FP32")] for i, x in inputs.items()})
    for request_id, x in inputs.items():
        [expected] = reference.run(None, {"input": x})
        close_enough(served[request_id], expected)


def test_decoupled_stream_with_cuda_shared_memory_inputs(gpu_served):
    """GPU inputs of a decoupled model are read after execute() returns: trtpool
    copies them first (the Python backend reuses their buffers from then on)."""
    server, reference = gpu_served
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((1, 3, IMAGE, IMAGE)).astype(np.float32) for _ in range(16)]
    size = inputs[0].nbytes
    region = cudashm.create_shared_memory_region("trtpool_dec_in", size * len(inputs), 0)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        cudashm.set_shared_memory_region(region, inputs)  # one after the other
        client.register_cuda_shared_memory("trtpool_dec_in", cudashm.get_raw_handle(region), 0, size * len(inputs))
        requests = {}
        for i in range(len(inputs)):
            tensor = grpcclient.InferInput("input", list(inputs[i].shape), "FP32")
            tensor.set_shared_memory("trtpool_dec_in", size, offset=i * size)
            requests[str(i)] = [tensor]
        served = stream(server, "resnet_decoupled", requests)
    finally:
        client.unregister_cuda_shared_memory()
        cudashm.destroy_shared_memory_region(region)
    for i, x in enumerate(inputs):
        [expected] = reference.run(None, {"input": x})
        close_enough(served[str(i)], expected)


@pytest.mark.parametrize("model", ["resnet_pipelined", "resnet_host_ipc"])
def test_concurrent_cuda_shared_memory_load(gpu_served, model):
    """Many batch-1 clients at once over CUDA shared memory: each answer is its own
    request's (pipelined: inputs are copied into a context before execute() returns, while
    the previous batch is still on the GPU; the engine host: each instance's device slab is
    reused only after its answer, while the host merges the instances' batches)."""
    from concurrent.futures import ThreadPoolExecutor

    server, reference = gpu_served
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal((1, 3, IMAGE, IMAGE)).astype(np.float32) for _ in range(96)]
    size, out_size = inputs[0].nbytes, 1000 * 4
    region = cudashm.create_shared_memory_region("trtpool_pipe_in", size * len(inputs), 0)
    out_region = cudashm.create_shared_memory_region("trtpool_pipe_out", out_size * len(inputs), 0)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        cudashm.set_shared_memory_region(region, inputs)
        client.register_cuda_shared_memory("trtpool_pipe_in", cudashm.get_raw_handle(region), 0, size * len(inputs))
        client.register_cuda_shared_memory("trtpool_pipe_out", cudashm.get_raw_handle(out_region), 0,
                                           out_size * len(inputs))

        def one(i: int) -> None:
            tensor = grpcclient.InferInput("input", [1, 3, IMAGE, IMAGE], "FP32")
            tensor.set_shared_memory("trtpool_pipe_in", size, offset=i * size)
            output = grpcclient.InferRequestedOutput("logits")
            output.set_shared_memory("trtpool_pipe_out", out_size, offset=i * out_size)
            grpcclient.InferenceServerClient(server.grpc_url).infer(model, [tensor], outputs=[output])

        with ThreadPoolExecutor(32) as clients:
            list(clients.map(one, range(len(inputs))))
        served = cudashm.get_contents_as_numpy(out_region, np.float32, [len(inputs), 1000])
    finally:
        client.unregister_cuda_shared_memory()
        cudashm.destroy_shared_memory_region(region)
        cudashm.destroy_shared_memory_region(out_region)
    for i, x in enumerate(inputs):
        [expected] = reference.run(None, {"input": x})
        close_enough(served[i:i + 1], expected)
    if model == "resnet_host_ipc":  # the inputs went device to device, not through host memory
        log = server.log_text()
        assert "writes its GPU inputs into" in log and "CUDA IPC" in log
        assert "GPU inputs go to the engine host through host memory" not in log


def test_auto_hands_four_gpu_instances_to_one_engine_host_and_leaves_one_instance_alone(gpu_served):
    server, reference = gpu_served
    assert "engine_host" not in read_config(server.repository / "resnet_auto").parameters  # auto, the default
    assert len(server.host_pids("resnet_auto")) == 1 and not server.host_pids("resnet_sync")
    x = np.random.default_rng(4).standard_normal((2, 3, IMAGE, IMAGE)).astype(np.float32)
    [expected] = reference.run(None, {"input": x})
    client = grpcclient.InferenceServerClient(server.grpc_url)
    close_enough(client.infer("resnet_auto", [grpc_input("input", x, "FP32")]).as_numpy("logits"), expected)


def test_engine_host_instances_hold_no_gpu_memory_and_the_host_holds_the_model(gpu_served):
    """nvidia-smi's compute processes: the host of resnet_host is one, its three stubs none."""
    server, _ = gpu_served
    stubs = server.stub_pids("resnet_host")
    hosts = server.host_pids("resnet_host")
    held = by_process()
    print({pid: held.get(pid) for pid in stubs + hosts})
    assert len(stubs) == 3 and len(hosts) == 1
    assert hosts[0] in held and held[hosts[0]][1] > 0
    assert not [pid for pid in stubs if pid in held], "a thin instance holds GPU memory"


def test_a_killed_gpu_engine_host_answers_what_it_held_then_serves_again(gpu_served):
    """The fault run on the GPU: 6 clients keep sending resnet_host batches; its engine host is
    SIGKILLed. Every request is answered, right or UNAVAILABLE naming the host within 5 s of the
    kill; right answers come back within 10 s from a new host, which holds the model's GPU memory
    while the killed one holds none."""
    server, reference = gpu_served
    x = np.random.default_rng(3).standard_normal((2, 3, IMAGE, IMAGE)).astype(np.float32)
    [expected] = reference.run(None, {"input": x})
    record = kill_host_under_load(
        server, "resnet_host",
        lambda client: client.infer("resnet_host", [grpc_input("input", x, "FP32")],
                                    client_timeout=60).as_numpy("logits"))
    for answer in record.right_answers():
        close_enough(answer, expected)
    print(f"{len(record.log)} requests, {len(record.failed())} UNAVAILABLE, worst answer "
          f"{max(done - max(sent, record.killed) for sent, done, _ in record.failed()):.3f} s after the kill")
    held = by_process()
    (new_host,) = server.host_pids("resnet_host")
    assert new_host in held and held[new_host][1] > 0
    assert record.host not in held, "the killed host still holds GPU memory"
