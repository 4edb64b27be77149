"""The pipeline examples served by a real tritonserver: encoded images and text in, labels
out, equal to the plain reference loop (the folder's own process.py around ONNX Runtime)
exactly, in every mode, over HTTP and gRPC, with concurrent clients; a corrupt file is
refused alone with INVALID_ARGUMENT."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.harness.clients import infer_concurrently
from tests.harness.pipelines import (
    BATCH_MAX_DECODED_BYTES,
    Reference,
    as_request,
    awkward_images,
    bad_images,
    build_pipeline_repository,
    images,
    texts,
)
from tests.harness.server import TritonServer, process_state
from tests.harness.streams import run_on_stream

CORRUPT = b"\xff\xd8\xff\xe0 this is not a JPEG after its first bytes"


@dataclass
class Pipelines:
    server: TritonServer
    references: dict[str, Reference]


@pytest.fixture(scope="module")
def pipelines(start_server, tmp_path_factory) -> Pipelines:
    repo = build_pipeline_repository(tmp_path_factory.mktemp("pipelines") / "repo")
    server = start_server(repo)     # ready: every model loaded (strict readiness)
    return Pipelines(server, {name: Reference(repo / name) for name in ("resnet50_jpeg", "bert_text",
                                                                         "resnet50_jpeg_batch")})


def served_concurrently(pipelines: Pipelines, protocol: str, model: str, name: str, payloads: list[bytes],
                        outputs: tuple[str, ...]) -> list:
    """Each payload as one request on its own client, 8 at a time: its outputs, or the exception it got."""
    url = pipelines.server.http_url if protocol == "http" else pipelines.server.grpc_url
    return infer_concurrently(url, model, [np.array([[p]], dtype=np.object_) for p in payloads], workers=8,
                              name=name, protocol=protocol, dtype="BYTES", outputs=outputs)


def assert_equal_answers(served: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    for output, value in expected.items():
        np.testing.assert_array_equal(served[output].astype(value.dtype), value, err_msg=output)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["resnet50_jpeg", "resnet50_jpeg_pipelined", "resnet50_jpeg_processes"])
def test_images_in_labels_out_equal_the_reference_loop(pipelines, protocol, model):
    files = images(12, seed=1)
    files.insert(5, CORRUPT)
    answers = served_concurrently(pipelines, protocol, model, "IMAGE", files, ("LABELS", "SCORES"))
    reference = pipelines.references["resnet50_jpeg"]
    for payload, answer in zip(files, answers):
        if payload is CORRUPT:
            assert isinstance(answer, InferenceServerException)
            assert answer.message().endswith("process.py preprocess() refused input 'IMAGE' element [0]: "
                                             "unreadable image header: OSError: Truncated File Read"), answer
            assert answer.message().count("'IMAGE'") == 1 and "ImageRefused" not in answer.message()
            assert answer.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        else:
            assert not isinstance(answer, Exception), answer
            assert answer["LABELS"].shape == (1, 5)
            assert_equal_answers(answer, reference(as_request("IMAGE", payload)))


@pytest.mark.parametrize("model", ["resnet50_jpeg_batch", "resnet50_jpeg_batch_sync"])
def test_batch_faces_refuse_each_bad_file_alone_and_answer_the_rest(pipelines, model):
    """process_faces batch (preprocess_batch and postprocess_batch on this CPU instance): good,
    awkward (progressive, grayscale, CMYK, EXIF-rotated, GIF, 7x5) and multi-file requests are
    answered as the per-request reference loop answers them; each bad file (corrupt, empty, not
    an image, truncated, above max_decoded_bytes) fails its own request with INVALID_ARGUMENT
    naming the element and the reason, in the batches the dynamic batcher forms from them all.
    Pipelined (responses sent from the post workers) and sync (execute() returns them)."""
    good = images(8, seed=9)
    oversized = images(1, seed=10, sizes=((1200, 1000),))[0]
    requests: list[tuple[np.ndarray, str | None]] = [(np.array([[f]], dtype=np.object_), None) for f in good]
    requests += [(np.array([[f]], dtype=np.object_), None) for f in awkward_images(seed=11).values()]
    requests.append((np.array([[good[0]], [good[3]], [good[5]]], dtype=np.object_), None))  # three files
    for payload, says in bad_images().values():
        requests.append((np.array([[payload]], dtype=np.object_), says))
        requests.append((np.array([[good[1]], [payload]], dtype=np.object_), says.replace("[0]", "[1]")))
    requests.append((np.array([[oversized]], dtype=np.object_),
                     f"element [0]: 1200x1000 pixels decode to 3,600,000 bytes, above the limit "
                     f"max_decoded_bytes={BATCH_MAX_DECODED_BYTES:,}"))
    reference = pipelines.references["resnet50_jpeg_batch"]
    for protocol in ("grpc", "http"):
        url = pipelines.server.grpc_url if protocol == "grpc" else pipelines.server.http_url
        answers = infer_concurrently(url, model, [r for r, _ in requests], workers=16, name="IMAGE",
                                     protocol=protocol, dtype="BYTES", outputs=("LABELS", "SCORES"))
        for (request, says), answer in zip(requests, answers):
            if says is None:
                assert not isinstance(answer, Exception), (answer.status(), answer.message(), len(request))
                assert answer["LABELS"].shape == (len(request), 5)
                assert_equal_answers(answer, reference({"IMAGE": request}))
            else:
                assert isinstance(answer, InferenceServerException), f"{says}: answered"
                assert answer.status() in ("400", "StatusCode.INVALID_ARGUMENT"), answer
                assert answer.message().startswith(f"process.py preprocess_batch() refused input 'IMAGE' {says}"), \
                    answer.message()
    for stage in ("pre_batch", "post_batch"):
        assert pipelines.server.wait_for_metric("trtpool_stage_us_total", model, 1, 30, stage=stage) > 0, stage


def _spawned_children(parent: int) -> list[int]:
    """Processes whose parent is `parent` and that multiprocessing's spawn started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or (state := process_state(int(entry.name))) is None or state[1] != parent:
            continue
        try:
            if b"spawn_main" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    return found


def test_preprocess_processes_run_beside_the_stub(pipelines):
    """preprocess_processes: 2 gives the model's stub two worker processes (the answers
    are checked above); the other models' stubs have none."""
    served_concurrently(pipelines, "grpc", "resnet50_jpeg_processes", "IMAGE", images(4, seed=6),
                        ("LABELS", "SCORES"))
    stubs = {model: pipelines.server.stub_pid(model)
             for model in ("resnet50_jpeg_processes", "resnet50_jpeg_pipelined")}
    assert all(stubs.values()), stubs
    assert len(_spawned_children(stubs["resnet50_jpeg_processes"])) == 2
    assert _spawned_children(stubs["resnet50_jpeg_pipelined"]) == []


def test_decoupled_images_over_a_stream_equal_the_reference_loop(pipelines):
    files = images(10, seed=2)
    requests = {str(i): as_request("IMAGE", payload) for i, payload in enumerate(files)}
    requests["corrupt"] = as_request("IMAGE", CORRUPT)
    answers = run_on_stream(pipelines.server.grpc_url, "resnet50_jpeg_decoupled", requests)
    assert len(answers.errors) == 1 and "process.py preprocess() refused input 'IMAGE' element [0]: " in \
        str(answers.errors[0])
    reference = pipelines.references["resnet50_jpeg"]
    assert sorted(answers.outputs) == sorted(str(i) for i in range(len(files)))
    for key, served in answers.outputs.items():
        assert_equal_answers(served, reference(requests[key]))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_text_in_label_out_equals_the_reference_loop(pipelines, protocol):
    payloads = texts(16, seed=3)
    payloads.insert(3, b"\xff\xfe not utf-8")
    answers = served_concurrently(pipelines, protocol, "bert_text", "TEXT", payloads, ("LABEL", "SCORE"))
    reference = pipelines.references["bert_text"]
    for payload, answer in zip(payloads, answers):
        if payload.startswith(b"\xff"):
            assert answer.message().endswith("process.py preprocess() refused input 'TEXT' element [0]: not UTF-8 "
                                             "text (byte 0xff at 0)"), answer.message()
            assert answer.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        else:
            assert not isinstance(answer, Exception), answer
            assert_equal_answers(answer, reference(as_request("TEXT", payload)))


def test_the_stages_are_timed_on_the_metrics_endpoint(pipelines):
    served_concurrently(pipelines, "grpc", "resnet50_jpeg", "IMAGE", [*images(3, seed=4), CORRUPT],
                        ("LABELS", "SCORES"))
    server = pipelines.server
    assert server.wait_for_metric("trtpool_stage_failures_total", "resnet50_jpeg", 1, 30, stage="pre") >= 1
    for stage in ("pre", "engine", "post"):
        assert server.wait_for_metric("trtpool_stage_us_total", "resnet50_jpeg", 1, 30, stage=stage) > 0, stage
    assert 'trtpool_stage_us_total{model="resnet50_jpeg",stage="queue"}' in server.metrics()


@pytest.mark.parametrize("model", ["resnet50_jpeg_batch", "resnet50_jpeg_batch_sync"])
def test_probes_reach_the_batch_faces_without_counting_as_refusals(pipelines, model):
    """The watchdog's probe (trtpool.triton.probes) is answered by a model that serves the batch faces,
    sync mode's returned responses included, and runs no user code: no refusal is counted."""
    from trtpool_ops.probe import probe_model

    server = pipelines.server
    before = server.metric_total("trtpool_stage_failures_total", model, stage="pre")
    for _ in range(3):
        result = probe_model(server.grpc_url, model)
        assert result.alive, result
    [answer] = served_concurrently(pipelines, "grpc", model, "IMAGE", [b"not an image"], ("LABELS", "SCORES"))
    assert isinstance(answer, InferenceServerException)   # a real refusal still counts
    assert server.wait_for_metric("trtpool_stage_failures_total", model, before + 1, 30, stage="pre") == before + 1
