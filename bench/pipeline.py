"""JPEG in, top-5 labels out, several ways, on ONE server in one run:

    inprocess    trtpool's resnet50_jpeg: process.py's stages in the model instance
    ensemble     a Triton ensemble: a Python-backend model running the same preprocess
                 -> trtpool's plain resnet50 -> a Python-backend model running the same
                 postprocess (instance counts of the Python models tuned: best recorded)
    client_side  clients that preprocess themselves (same functions), send the float
                 tensor to trtpool's plain resnet50 and postprocess its logits

Batch-1 clients (tritonclient gRPC threads, since the client-side variant runs
preprocessing in the client) send real JPEG files of mixed sizes made with
Pillow, at each concurrency; the three are measured in turn, the order reversed
every round, and compared round by round. perf_analyzer then measures the
in-process model and the ensemble once more at each concurrency, sending the
same files from --input-data (a BYTES tensor's "b64" is the serialized tensor:
each element's 4-byte little-endian length, then its bytes). Every answer's top-1 label is checked
against the reference loop's (fp32 ONNX Runtime) for its file: the untrained
example's top-5 scores lie close together, and fp16 on the GPU may reorder the
lower places.

With ``--gpu-variants`` (the torch runtime on a GPU: bench/gpu/h200.sh stage
`pipeline-final`) the run is perf_analyzer's alone, from --input-data of JPEG files
of mixed sizes, at each concurrency, over five models on the one server:

    gpu_inprocess_* (a) resnet50_jpeg on the GPU: preprocess_batch decodes the dynamic
                    batch with nvJPEG on the device (trtpool.vision.device_crops), postprocess_batch
                    takes the softmax and top-5 there; in several arrangements (pipelined,
                    sync with 1-6 instances, nvImageCodec's decoder), the best reported as
                    gpu_inprocess_infer_per_s
    cpu_inprocess   (b) the same folder with process_faces request: Pillow in
                    --pre-processes worker processes
    cpu_ensemble    (c) the ensemble above (Python-backend Pillow preprocessing)
    gpu_ensemble    (d) an ensemble whose Python-backend preprocessing model (KIND_GPU)
                    runs the same GPU decode and hands its GPU tensor on by DLPack
    null_jpeg       (e) a Python-backend model that takes the JPEG and answers at once;
                    null_jpeg_x6 the same with 6 instances (6 stubs, as (a)'s best): the
                    best of the two is the ceiling the ratios use (null_jpeg_best_*)

plus nvidia-smi's GPU utilization sampled while (a) runs.

    .venv/bin/python bench/pipeline.py --image-size 64 --out bench/results/pipeline.json
    python3 bench/pipeline.py --runtime torch --image-size 224 --client-processes 4 \
        --out $OUT/pipeline.json      # bench/gpu/h200.sh stage `pipeline`
    python3 bench/pipeline.py --runtime torch --gpu-variants --concurrency 1 16 64 256 \
        --out $OUT/pipeline.json      # bench/gpu/h200.sh stages `pipeline-gpu`, `pipeline-final`
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gpu_memory import by_process  # noqa: E402
from bench.paired import compared  # noqa: E402
from bench.record import default_out, provenance, write_json  # noqa: E402
from bench.stub_profile import stub_profile  # noqa: E402
from tests.harness.perf import PerfAnalyzerFailed, perf_analyzer  # noqa: E402
from tests.harness.pipelines import (  # noqa: E402
    Reference,
    add_mode,
    as_request,
    images,
    process_of,
    set_process_settings,
)
from tests.harness.python_model import python_model, tensor  # noqa: E402
from tests.harness.repository import set_parameters  # noqa: E402
from tests.harness.server import TritonServer  # noqa: E402
from trtpool_builder.examples import get_example  # noqa: E402
from trtpool_builder.examples.repo import make_example_folder  # noqa: E402
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config, write_config  # noqa: E402

# The stage models' common start: import the folder's process.py and set it up.
PROCESS_MODEL_HEAD = """
import importlib.util
import json
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        folder = Path(args["model_repository"]) / args["model_version"]
        spec = importlib.util.spec_from_file_location("process", folder / "process.py")
        self.process = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.process)
        self.process.setup(config, folder)
"""
# A Python-backend model running one process.py function per request (the ensemble's stages).
STAGE_MODEL = (
    PROCESS_MODEL_HEAD
    + """        self.stage = config["parameters"]["stage"]["string_value"]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            image = {"IMAGE": pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()}
            try:
                if self.stage == "pre":
                    out = self.process.preprocess(image)
                else:
                    logits = {"logits": pb_utils.get_input_tensor_by_name(request, "logits").as_numpy()}
                    out = self.process.postprocess(logits, image)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(n, out[n]) for n in self.outputs]))
            except Exception as exc:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)))
        return responses
"""
)


# (d): the GPU decode a Triton user builds today: a Python-backend model on the GPU running the
# same preprocess_batch, its device tensor handed to the next step by DLPack.
GPU_STAGE_MODEL = (
    PROCESS_MODEL_HEAD
    + """        on_gpu = args["model_instance_kind"] == "GPU"
        self.device = f"cuda:{args['model_instance_device_id']}" if on_gpu else "cpu"
        if on_gpu:
            import torch
            import torch.utils.dlpack
            # the crops' memory is the stage's, reused next call: the response gets its own copy
            self.to_dlpack = lambda pixels: torch.utils.dlpack.to_dlpack(
                torch.as_tensor(pixels, device=self.device).clone())

    def execute(self, requests):
        batch = [{"IMAGE": pb_utils.get_input_tensor_by_name(r, "IMAGE").as_numpy()} for r in requests]
        responses = []
        for entry in self.process.preprocess_batch(batch, self.device):
            if isinstance(entry, Exception):
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(str(entry), pb_utils.TritonError.INVALID_ARG)))
            else:
                pixels = entry["input"]
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("input", pixels) if type(pixels).__module__ == "numpy"
                    else pb_utils.Tensor.from_dlpack("input", self.to_dlpack(pixels))]))
        return responses
"""
)
# (e): the server's ceiling for this payload: takes the JPEG, answers the declared outputs at once.
NULL_JPEG_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.labels = np.array([[b"none"] * 5], dtype=np.object_)
        self.scores = np.zeros((1, 5), np.float32)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("LABELS", self.labels),
                                            pb_utils.Tensor("SCORES", self.scores)]) for _ in requests]
"""
# (a) in sync mode with N instances (N stubs, each its own engine and GIL): gpu_inprocess_sync_xN
SYNC_INSTANCES = (2, 3, 4, 6, 8)
# (a) batching up to 64 files (nvJPEG decodes a batch of 64 at 60 us an image on the H200, of 32 at 75:
# bench/results/h200/crop_timing.json): name -> mode, instances, contexts
WIDE = {
    "sync_x6_b64": ("sync", 6, "1"),
    "sync_x8_b64": ("sync", 8, "1"),
    "sync_x10_b64": ("sync", 10, "1"),
    "pipelined_x2_b64": ("pipelined", 2, "2"),
    "pipelined_x3_b64": ("pipelined", 3, "2"),
}
GPU_VARIANTS = {
    "gpu_inprocess_pipelined": "resnet50_jpeg",
    "gpu_inprocess_sync": "resnet50_jpeg_sync",
    **{f"gpu_inprocess_sync_x{n}": f"resnet50_jpeg_sync_x{n}" for n in SYNC_INSTANCES},
    **{f"gpu_inprocess_{name}": f"resnet50_jpeg_{name}" for name in WIDE},
    "gpu_inprocess_nvimgcodec": "resnet50_jpeg_nvimgcodec",
    "cpu_inprocess": "resnet50_jpeg_cpu",
    "cpu_ensemble": "ensemble_cpu",
    "gpu_ensemble": "ensemble_gpu",
    "null_jpeg": "null_jpeg",
    "null_jpeg_x6": "null_jpeg_x6",
}
# (a)'s arrangements: the headline is the best of them
GPU_INPROCESS = tuple(v for v in GPU_VARIANTS if v.startswith("gpu_inprocess"))
# (e)'s arrangements: the ceiling is the best of them
NULL_JPEG = tuple(v for v in GPU_VARIANTS if v.startswith("null_jpeg"))
# the models an ensemble variant calls besides itself
ENSEMBLE_STEPS = {
    "ensemble_cpu": ("pre_cpu", "resnet50_plain", "post"),
    "ensemble_gpu": ("pre_gpu", "resnet50_plain", "post"),
}


def stage_model(
    repo: Path, name: str, source: Path, stage: str, count: int, inputs: list[str], outputs: list[str]
) -> None:
    folder = python_model(
        repo,
        name,
        STAGE_MODEL,
        inputs,
        outputs,
        max_batch_size=32,
        extra=f"""\
dynamic_batching {{ max_queue_delay_microseconds: 100 }}
instance_group {{ kind: KIND_CPU count: {count} }}
parameters {{ key: "stage" value {{ string_value: "{stage}" }} }}""",
    )
    for file in ("process.py", "labels.txt", "process.json"):
        shutil.copyfile(source / file, folder / file)


def ensemble(repo: Path, name: str, pre: str, engine: str, post: str) -> None:
    def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
        maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
        maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
        return f'step {{ model_name: "{model}" model_version: -1 {" ".join(maps)} }}'

    (repo / name).mkdir()
    (repo / name / "1").mkdir()
    (repo / name / "config.pbtxt").write_text(f'''name: "{name}"
platform: "ensemble"
max_batch_size: 32
input [ {tensor("IMAGE", "BYTES", [1])} ]
output [ {tensor("LABELS", "BYTES", [5])}, {tensor("SCORES", "FP32", [5])} ]
ensemble_scheduling {{
  {step(pre, {"IMAGE": "IMAGE"}, {"input": "pixels"})}
  {step(engine, {"input": "pixels"}, {"logits": "logits"})}
  {step(post, {"logits": "logits", "IMAGE": "IMAGE"}, {"LABELS": "LABELS", "SCORES": "SCORES"})}
}}
''')


def variant(folder: Path, mode: str, name: str | None = None, **parameters: str) -> Path:
    """add_mode with the benchmark's queue delay (add_mode's is the tests' 20 ms, which made the
    2026-12-04 03:19 UTC H200 run's copies wait 20 ms for every batch below a preferred size)."""
    target = add_mode(folder, mode, name, **parameters)
    config = read_config(target)
    config.dynamic_batching.max_queue_delay_microseconds = 100
    write_config(target, config)
    return target


def serving(folder: Path, args: argparse.Namespace) -> None:
    """trtpool's serving choices, the same for the in-process model and the ensemble's engine."""
    variant(folder, args.mode, contexts=str(args.contexts))
    config = read_config(folder)
    if args.runtime == "torch":
        del config.instance_group[:]
        config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_GPU, count=1)
    write_config(folder, config)
    if args.runtime == "torch":
        set_parameters(folder, runtime="torch", model_file="model.onnx", precision=args.precision)


def instances(folder: Path, count: int) -> None:
    """The model folder's instance count (on the CPU for a dry run without a GPU)."""
    config = read_config(folder)
    if not config.instance_group:  # the dry run on the CPU
        config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU)
    config.instance_group[0].count = count
    write_config(folder, config)


def build_gpu_variants(repo: Path, jpeg: Path, args: argparse.Namespace) -> None:
    """(b) to (e) beside (a), the GPU folder `jpeg` (resnet50_jpeg) and the ensembles' engine
    (on a machine without a GPU, for a dry run: the same models on the CPU)."""
    variant(
        jpeg,
        args.mode,
        "resnet50_jpeg_cpu",
        contexts=str(args.contexts),
        process_faces="request",
        preprocess_processes=str(args.pre_processes),
    )
    set_parameters(jpeg, preprocess_processes="0")  # (a) decodes on the GPU, in the stub's threads
    # (a) in sync mode: execute() runs the batch whole and returns the responses; once more with
    # two instances (two stubs, each its own engine and GIL)
    variant(jpeg, "sync", "resnet50_jpeg_sync", contexts="1")
    for count in SYNC_INSTANCES:
        instances(variant(jpeg, "sync", f"resnet50_jpeg_sync_x{count}", contexts="1"), count)
    side = args.image_size
    for name, (mode, count, contexts) in WIDE.items():
        wide = variant(
            jpeg,
            mode,
            f"resnet50_jpeg_{name}",
            contexts=contexts,
            profile=f"input=1x3x{side}x{side}:32x3x{side}x{side}:64x3x{side}x{side}",
        )
        instances(wide, count)
        config = read_config(wide)
        config.max_batch_size = 64
        config.dynamic_batching.preferred_batch_size[:] = [32, 64]
        write_config(wide, config)
    set_process_settings(variant(jpeg, "sync", "resnet50_jpeg_nvimgcodec", contexts="1"), decoder="nvimgcodec")
    set_parameters(repo / "resnet50_plain", FORCE_CPU_ONLY_INPUT_TENSORS="no")  # (d)'s GPU tensor stays there
    stage_model(
        repo,
        "pre_cpu",
        jpeg / "1",
        "pre",
        max(args.pre_instances),
        [tensor("IMAGE", "BYTES", [1])],
        [tensor("input", "FP32", [3, args.image_size, args.image_size])],
    )
    ensemble(repo, "ensemble_cpu", "pre_cpu", "resnet50_plain", "post")
    folder = python_model(
        repo,
        "pre_gpu",
        GPU_STAGE_MODEL,
        [tensor("IMAGE", "BYTES", [1])],
        [tensor("input", "FP32", [3, args.image_size, args.image_size])],
        max_batch_size=32,
        extra=f"""\
dynamic_batching {{ max_queue_delay_microseconds: 100 }}
instance_group {{ kind: {"KIND_GPU" if args.runtime == "torch" else "KIND_CPU"} count: {args.gpu_pre_instances} }}""",
    )
    for file in ("process.py", "labels.txt", "process.json"):
        shutil.copyfile(jpeg / "1" / file, folder / file)
    ensemble(repo, "ensemble_gpu", "pre_gpu", "resnet50_plain", "post")
    for name, group in (("null_jpeg", ""), ("null_jpeg_x6", "\ninstance_group { kind: KIND_CPU count: 6 }")):
        python_model(
            repo,
            name,
            NULL_JPEG_MODEL,
            [tensor("IMAGE", "BYTES", [1])],
            [tensor("LABELS", "BYTES", [5]), tensor("SCORES", "FP32", [5])],
            max_batch_size=32,
            extra="dynamic_batching { max_queue_delay_microseconds: 100 }" + group,
        )
    # only the measured variants' models load (each loaded instance holds GPU memory and start-up time)
    needed = {m for v in args.variants for m in (GPU_VARIANTS[v], *ENSEMBLE_STEPS.get(GPU_VARIANTS[v], ()))}
    for folder in repo.iterdir():
        if folder.name not in needed:
            shutil.rmtree(folder)


def build(repo: Path, args: argparse.Namespace) -> Path:
    size = args.image_size
    jpeg = make_example_folder(repo, "resnet50_jpeg", "onnx", {"image_size": size}).folder
    set_parameters(
        jpeg,
        preprocess_threads=str(args.pre_threads),
        postprocess_threads=str(args.post_threads),
        preprocess_processes=str(args.pre_processes),
    )
    serving(jpeg, args)
    plain = make_model_folder(
        repo,
        "resnet50_plain",
        jpeg / "1" / "model.onnx",
        get_example("resnet50").serving_profiles(image_size=size),
        ServingOptions(),
    )
    serving(plain, args)
    stage_model(
        repo,
        "post",
        jpeg / "1",
        "post",
        args.post_instances,
        [tensor("logits", "FP32", [1000]), tensor("IMAGE", "BYTES", [1])],
        [tensor("LABELS", "BYTES", [5]), tensor("SCORES", "FP32", [5])],
    )
    if args.gpu_variants:
        build_gpu_variants(repo, jpeg, args)
        return jpeg
    for count in args.pre_instances:
        stage_model(
            repo,
            f"pre_{count}",
            jpeg / "1",
            "pre",
            count,
            [tensor("IMAGE", "BYTES", [1])],
            [tensor("input", "FP32", [3, size, size])],
        )
        ensemble(repo, f"ensemble_{count}", f"pre_{count}", "resnet50_plain", "post")
    return jpeg


# --- the clients ------------------------------------------------------------------------


def _client_process(
    url: str,
    model: str,
    folder: str,
    files: list[bytes],
    expected: list[bytes],
    threads: int,
    warmup_s: float,
    seconds: float,
    offset: int,
    queue,
) -> None:
    """`threads` batch-1 clients in one process; puts (latencies_s, wrong, errors) on `queue`."""
    import tritonclient.grpc as grpcclient

    client_side = model == "resnet50_plain"
    process = process_of(Path(folder)) if client_side else None
    start = time.monotonic()
    latencies: list[float] = []
    counts = {"wrong": 0, "errors": 0}
    lock = threading.Lock()

    def one_client(index: int) -> None:
        client = grpcclient.InferenceServerClient(url)
        turn = offset + index
        while (now := time.monotonic()) < start + warmup_s + seconds:
            payload = files[turn % len(files)]
            begun = time.perf_counter()
            try:
                if client_side:
                    inputs = as_request("IMAGE", payload)
                    pixels = process.preprocess(inputs)["input"]
                    sent = grpcclient.InferInput("input", list(pixels.shape), "FP32")
                    sent.set_data_from_numpy(pixels)
                    logits = client.infer(model, [sent]).as_numpy("logits")
                    labels = process.postprocess({"logits": logits}, inputs)["LABELS"]
                else:
                    sent = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
                    sent.set_data_from_numpy(np.array([[payload]], dtype=np.object_))
                    labels = client.infer(model, [sent]).as_numpy("LABELS")
                ok = labels[0][0] == expected[turn % len(files)]
            except Exception:  # noqa: BLE001 - any failed call counts as an error of the run
                with lock:
                    counts["errors"] += 1
                turn += 1
                continue
            took = time.perf_counter() - begun
            with lock:
                if now >= start + warmup_s:
                    latencies.append(took)
                if not ok:
                    counts["wrong"] += 1
            turn += 1
        client.close()

    workers = [threading.Thread(target=one_client, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    queue.put((latencies, counts["wrong"], counts["errors"]))


def measure(
    url: str,
    model: str,
    folder: Path,
    files: list[bytes],
    expected: list[bytes],
    concurrency: int,
    processes: int,
    seconds: float,
) -> dict:
    processes = min(processes, concurrency)
    queue = multiprocessing.get_context("spawn").Queue()
    workers = []
    for p in range(processes):
        threads = concurrency // processes + (p < concurrency % processes)
        workers.append(
            multiprocessing.get_context("spawn").Process(
                target=_client_process,
                args=(url, model, str(folder), files, expected, threads, 2.0, seconds, p * 7, queue),
            )
        )
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=seconds + 120) for _ in workers]
    for worker in workers:
        worker.join()
    latencies = sorted(t for r in results for t in r[0])
    wrong, errors = sum(r[1] for r in results), sum(r[2] for r in results)
    return {
        "infer_per_s": len(latencies) / seconds,
        "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else None,
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)] if latencies else None,
        "requests": len(latencies),
        "wrong_answers": wrong,
        "errors": errors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image-size", type=int, default=224, help="the engine's input (the crop)")
    parser.add_argument("--runtime", default="onnxruntime", choices=("onnxruntime", "torch"))
    parser.add_argument("--precision", default="fp16", help="torch runtime only")
    parser.add_argument("--mode", default="pipelined")
    parser.add_argument("--contexts", type=int, default=2)
    parser.add_argument("--pre-threads", default="auto")
    parser.add_argument("--post-threads", default="auto")
    parser.add_argument(
        "--pre-processes",
        type=int,
        default=0,
        help="the in-process model's preprocess_processes (0: preprocess on its threads)",
    )
    parser.add_argument(
        "--pre-instances",
        type=int,
        nargs="+",
        default=[1, 2, 4],
        help="the ensemble's preprocessing model's instance counts tried; the best is reported",
    )
    parser.add_argument("--post-instances", type=int, default=1)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--client-processes", type=int, default=1)
    parser.add_argument("--files", type=int, default=48)
    parser.add_argument(
        "--gpu-variants", action="store_true", help="(a)-(e) above, by perf_analyzer alone (the torch runtime on a GPU)"
    )
    parser.add_argument("--gpu-pre-instances", type=int, default=2, help="(d)'s GPU preprocessing instances")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=list(GPU_VARIANTS),
        default=list(GPU_VARIANTS),
        help="with --gpu-variants: those measured (all are served)",
    )
    parser.add_argument("--interval-ms", type=int, default=4000, help="perf_analyzer's measurement interval")
    parser.add_argument(
        "--profile",
        choices=list(GPU_VARIANTS),
        help="with --gpu-variants: py-spy samples this variant's stub (one of them) under load",
    )
    parser.add_argument("--profile-out", type=Path, default=default_out("stub_profile.txt"))
    parser.add_argument("--profile-concurrency", type=int, default=64)
    parser.add_argument("--native", action="store_true", help="the profile's C/C++ frames too")
    parser.add_argument("--gil", action="store_true", help="the profile: only samples holding the GIL")
    parser.add_argument("--out", type=Path, default=default_out("pipeline.json"))
    args = parser.parse_args()

    if args.gpu_variants:
        return gpu_variants(args)
    files = images(args.files, seed=7)
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        folder = build(repo, args)
        reference = Reference(folder)
        expected = [reference(as_request("IMAGE", f))["LABELS"][0][0] for f in files]
        server = TritonServer(repo, Path(scratch) / "server.log").start()
        try:

            def run(model: str, concurrency: int) -> dict:
                row = measure(
                    server.grpc_url, model, folder, files, expected, concurrency, args.client_processes, args.seconds
                )
                print(
                    f"{model:16s} c={concurrency:3d} {row['infer_per_s']:8.1f} infer/s p50 {ms(row['p50_ms'])} ms "
                    f"p99 {ms(row['p99_ms'])} ms wrong {row['wrong_answers']} errors {row['errors']}",
                    flush=True,
                )
                return row

            # The ensemble's fairest instance count: the best at the highest concurrency.
            top = max(args.concurrency)
            tuning = {count: run(f"ensemble_{count}", top) for count in args.pre_instances}
            best = max(tuning, key=lambda c: tuning[c]["infer_per_s"])
            variants = {"inprocess": "resnet50_jpeg", "ensemble": f"ensemble_{best}", "client_side": "resnet50_plain"}
            by_concurrency = {}
            for concurrency in args.concurrency:
                rows: dict[str, list[dict]] = {v: [] for v in variants}
                for round_index in range(args.rounds):
                    order = list(variants) if round_index % 2 == 0 else list(variants)[::-1]
                    for variant in order:
                        rows[variant].append(run(variants[variant], concurrency))
                by_concurrency[str(concurrency)] = summary(rows)
            input_data = write_input_data(Path(scratch) / "files.json", files)
            by_perf_analyzer = {
                str(c): {
                    variant: perf_row(server.grpc_url, variants[variant], c, input_data)
                    for variant in ("inprocess", "ensemble")
                }
                for c in args.concurrency
            }
            # Where the in-process model's time went, over the whole run (warm-ups and tuning included).
            stages = {
                stage: server.metric_total("trtpool_stage_us_total", "resnet50_jpeg", stage=stage)
                for stage in ("pre", "queue", "engine", "post")
            }
        finally:
            server.stop()

    headline = by_concurrency[str(max(args.concurrency))]
    record = {
        **provenance(),
        "what": "batch-1 gRPC clients sending JPEG/PNG files of mixed sizes; "
        "top-1 labels checked against the reference loop",
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "ensemble_instances": {
            "pre": best,
            "post": args.post_instances,
            "tuning_infer_per_s": {str(c): r["infer_per_s"] for c, r in tuning.items()},
        },
        "inprocess_infer_per_s": headline["inprocess"]["infer_per_s"],
        "ensemble_infer_per_s": headline["ensemble"]["infer_per_s"],
        "client_side_infer_per_s": headline["client_side"]["infer_per_s"],
        **{f"{v}_{q}": headline[v][q] for v in variants for q in ("p50_ms", "p99_ms")},
        "headline_concurrency": max(args.concurrency),
        "inprocess_stage_us_total": stages,
        # Seconds the in-process model was measured under load (its warm-ups not counted).
        "inprocess_busy_s": len(args.concurrency) * args.rounds * args.seconds,
        "by_concurrency": by_concurrency,
        "perf_analyzer": by_perf_analyzer,
    }
    write_json(args.out, record)
    print(f"wrote {args.out}")
    return 0


def write_input_data(path: Path, files: list[bytes]) -> Path:
    """perf_analyzer's --input-data: each file as one IMAGE element (a BYTES tensor's "b64" is the
    serialized tensor: each element's 4-byte little-endian length, then its bytes)."""
    path.write_text(
        json.dumps(
            {
                "data": [
                    {"IMAGE": {"b64": base64.b64encode(struct.pack("<I", len(f)) + f).decode(), "shape": [1]}}
                    for f in files
                ]
            }
        )
    )
    return path


class GpuUtilization:
    """nvidia-smi's utilization.gpu sampled every 200 ms while the block runs: its mean, in percent."""

    def __enter__(self) -> GpuUtilization:
        self.samples: list[float] = []
        self._process = None
        if shutil.which("nvidia-smi"):
            self._process = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "200"],
                stdout=subprocess.PIPE,
                text=True,
            )
            threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for line in self._process.stdout:
            if line.strip().isdigit():
                self.samples.append(float(line))

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)

    @property
    def mean(self) -> float | None:
        return round(statistics.mean(self.samples), 1) if self.samples else None


def gpu_variants(args: argparse.Namespace) -> int:
    """(a)-(e) on one server, by perf_analyzer from JPEG files of mixed sizes; the best
    concurrency of each, and the GPU's busy share while (a) ran."""
    files = images(args.files, seed=7, png_every=0)
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        build(repo, args)
        input_data = write_input_data(Path(scratch) / "files.json", files)
        server = TritonServer(repo, Path(scratch) / "server.log", ("--cuda-memory-pool-byte-size=0:2147483648",)).start(
            timeout=900
        )
        memory = gpu_memory_by_model(server, sorted(folder.name for folder in repo.iterdir()))  # steps too
        table: dict[str, dict[str, dict]] = {v: {} for v in args.variants}
        busy: dict[str, dict[str, float | None]] = {}
        interrupted = None
        try:
            try:
                for turn, concurrency in enumerate(args.concurrency):
                    order = list(args.variants) if turn % 2 == 0 else list(args.variants)[::-1]
                    for variant in order:
                        with GpuUtilization() as utilization:
                            row = perf_row(
                                server.grpc_url, GPU_VARIANTS[variant], concurrency, input_data, args.interval_ms
                            )
                        row["gpu_utilization_percent"] = utilization.mean
                        table[variant][str(concurrency)] = row
                        if variant in GPU_INPROCESS:
                            busy.setdefault(variant, {})[str(concurrency)] = utilization.mean
            except KeyboardInterrupt:  # a time limit's SIGINT (timeout -s INT): the record keeps what was measured
                interrupted = f"interrupted at {concurrency} clients, {variant}"
                print(interrupted, flush=True)
            stages = {
                GPU_VARIANTS[v]: {
                    stage: server.metric_total("trtpool_stage_us_total", GPU_VARIANTS[v], stage=stage)
                    for stage in ("pre_batch", "queue", "engine", "post_batch")
                }
                for v in GPU_INPROCESS
                if v in args.variants
            }
            profile = None
            if args.profile:  # after the table: the sampling slows the stub it samples
                with stub_profile(
                    server, GPU_VARIANTS[args.profile], args.profile_out, native=args.native, gil=args.gil, seconds=12
                ) as profile:
                    profile["measurement"] = perf_row(
                        server.grpc_url, GPU_VARIANTS[args.profile], args.profile_concurrency, input_data, 3000
                    )
        finally:
            server.stop()
    best = {v: max(rows.values(), key=lambda r: r.get("infer_per_s", 0.0)) for v, rows in table.items() if rows}
    headline = max((v for v in GPU_INPROCESS if v in best), key=lambda v: best[v].get("infer_per_s", 0.0))
    ceiling = max((v for v in NULL_JPEG if v in best), key=lambda v: best[v].get("infer_per_s", 0.0), default=None)
    record = {
        **provenance(),
        "what": (
            "batch-1 gRPC clients (perf_analyzer) sending JPEG files of mixed sizes "
            f"({len(files)} files, {sum(map(len, files)) // len(files):,} bytes on average); "
            "the best concurrency of each variant"
        ),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        **{f"{v}_infer_per_s": best[v].get("infer_per_s") for v in best},
        **{f"{v}_{q}": best[v].get(q) for v in best for q in ("p50_ms", "p99_ms", "concurrency")},
        "gpu_inprocess_best": headline,
        # the keys for (a): its best arrangement
        **{f"gpu_inprocess_{q}": best[headline].get(q) for q in ("infer_per_s", "p50_ms", "p99_ms", "concurrency")},
        "gpu_inprocess_best_infer_per_s": best[headline].get("infer_per_s"),
        "gpu_inprocess_best_p99_ms": best[headline].get("p99_ms"),
        "null_jpeg_best": ceiling,
        **{
            f"null_jpeg_best_{q}": best[ceiling].get(q) if ceiling else None
            for q in ("infer_per_s", "p50_ms", "p99_ms", "concurrency")
        },
        "gpu_inprocess_gpu_busy_percent": busy,
        "gpu_inprocess_stage_us_total": stages,
        "gpu_memory_mib_by_model": memory,
        "by_concurrency": table,
        "profile": profile,
        "interrupted": interrupted,
    }
    a, e = record["gpu_inprocess_best_infer_per_s"] or 0, record["null_jpeg_best_infer_per_s"] or 0
    c, d = record.get("cpu_ensemble_infer_per_s") or 0, record.get("gpu_ensemble_infer_per_s") or 0
    record["ratios"] = {
        "a_over_e": round(a / e, 3) if e else None,
        "a_over_c": round(a / c, 2) if c else None,
        "a_over_d": round(a / d, 2) if d else None,
    }
    write_json(args.out, record)
    print(json.dumps(record["ratios"]), f"wrote {args.out}")
    return 0


def gpu_memory_by_model(server: TritonServer, models: list[str]) -> dict[str, int | None]:
    """GPU memory (MiB, nvidia-smi) of each model's stubs after the load: every instance's CUDA
    context, weights, buffers and graphs. None where nvidia-smi lists no process (no GPU, a container)."""
    held = by_process()
    memory = {}
    for model in models:
        memory[model] = sum(held[pid][1] for pid in server.stub_pids(model) if pid in held) if held else None
    return memory


def perf_row(url: str, model: str, concurrency: int, input_data: Path, interval_ms: int = 5000) -> dict:
    try:
        [row] = perf_analyzer(
            model,
            url,
            concurrency=str(concurrency),
            interval_ms=interval_ms,
            max_trials=5,
            extra=("--input-data", str(input_data), "--stability-percentage", "30"),
        )
    except PerfAnalyzerFailed as exc:
        return {"error": str(exc)[-500:]}
    found = {
        "infer_per_s": row["Inferences/Second"],
        "p50_ms": row["p50 latency"] / 1000,
        "p99_ms": row["p99 latency"] / 1000,
        "concurrency": concurrency,
    }
    print(
        f"perf_analyzer {model:16s} c={concurrency:3d} {found['infer_per_s']:8.1f} infer/s "
        f"p99 {found['p99_ms']:7.1f} ms",
        flush=True,
    )
    return found


def ms(value: float | None) -> str:
    """A latency for the progress lines: None when no request of the run succeeded."""
    return f"{value:7.1f}" if value is not None else "   none"


def median(values: list[float | None]) -> float | None:
    """The median of the rounds that measured something (a round with no successful request has None)."""
    measured = [v for v in values if v is not None]
    return statistics.median(measured) if measured else None


def summary(rows: dict[str, list[dict]]) -> dict:
    """Per variant the median over rounds; in-process over each other variant, round by round."""
    out = {
        variant: {key: median([r[key] for r in runs]) for key in ("infer_per_s", "p50_ms", "p99_ms")} | {"rounds": runs}
        for variant, runs in rows.items()
    }
    for other in ("ensemble", "client_side"):
        out[f"inprocess_over_{other}"] = compared(rows["inprocess"], rows[other], "infer_per_s")
    return out


if __name__ == "__main__":
    sys.exit(main())
