"""Triton 2.51's abort on gRPC streams opened with the `triton_grpc_error: true` header (issue 37,
item 16; docs/reliability.md), shown with a plain Python-backend model only. When a model answers
one request of such a stream with an error while other responses of the same stream are being
written, Triton ends the stream (its Finish) without waiting for those writes, and tritonserver
dies within a second: SIGSEGV, `ASSERTION FAILED: !byte_buffer->Valid()` or `prior > 0`, and,
when the client also cancels its streams, `API misuse of type GRPC_CALL_ERROR_TOO_MANY_OPERATIONS`
then `ASSERTION FAILED: false` (signal 6), the fault run's abort. Without the header the same
streams, cancelled or not, served for minutes. One request in flight at a time is no way out:
streams of one request each, opened one after another by a few clients, also kill tritonserver
when some of their requests are refused, only less often (bench/grpc_error_header.py, recorded in
docs/reliability.md; too rare to show in a test of bounded time). The workaround, which trtpool's
clients keep: no header (read an error's code from a decoupled trtpool model's `[status <CODE>]`
tag)."""
from __future__ import annotations

import queue
import subprocess
import time
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

from tests.harness.refusing_model import MODEL, refusing_request, write_refusing_model
from tests.harness.server import DEATH_LINES, TritonServer
from tests.harness.streams import StreamClient

PER_STREAM = 16
ABORT_WITHIN_S = 30.0        # it died within 0.4 s of the first streams, in 5 of 5 runs on a 2-core machine
WORKAROUND_STREAMS = 100


@pytest.fixture
def server(tmp_path: Path):
    repo = tmp_path / "repo"
    write_refusing_model(repo)
    server = TritonServer(repo, tmp_path / "server.log").start()
    yield server
    server.stop()


def _stream_with_an_error(url: str, status_codes: bool) -> None:
    """PER_STREAM requests in flight on one stream, one of them refused by the model."""
    stream = StreamClient(url, status_codes=status_codes)
    try:
        for index in range(PER_STREAM):
            stream.send(MODEL, refusing_request(index, refused=index == PER_STREAM // 2), str(index))
        stream.collect(PER_STREAM, timeout=5)
    finally:
        stream.close()


def test_an_error_among_responses_in_flight_on_a_header_stream_aborts_tritonserver(server):
    deadline = time.monotonic() + ABORT_WITHIN_S
    while server.process.poll() is None and time.monotonic() < deadline:
        try:
            _stream_with_an_error(server.grpc_url, status_codes=True)
        except (InferenceServerException, queue.Empty):
            time.sleep(0.2)  # the server is going down (or the header's error ended the stream): go on
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:
        pass  # it survived: the assertion below says so
    assert server.process.returncode in (-6, -11), "tritonserver survived errors on triton_grpc_error streams: " \
        "fixed upstream? Then update docs/reliability.md's table and tests/harness/streams.py"
    assert any(line in server.log_text() for line in DEATH_LINES)


def test_the_same_streams_without_the_header_are_served(server):
    for _ in range(WORKAROUND_STREAMS):
        with StreamClient(server.grpc_url) as stream:
            for index in range(PER_STREAM):
                stream.send(MODEL, refusing_request(index, refused=index == PER_STREAM // 2), str(index))
            answers = stream.collect(PER_STREAM, timeout=30)
        assert [str(e) for e in answers.errors] == ["refused"]
        assert sorted(answers.outputs) == sorted(str(i) for i in range(PER_STREAM) if i != PER_STREAM // 2)
        assert all(out["Y"][0, 0] == float(rid) for rid, out in answers.outputs.items())
    assert server.process.poll() is None and server.ready()
