"""Mixed traffic against the reliability repository for a while, every answer checked.

One thread per client kind, each with its own connection, until the deadline:

    sync/http          HTTP /infer to tiny_sync, batch 1..8
    pipelined/grpc     unary gRPC to tiny_pipe, batch 1..8
    front/http         HTTP /infer to tiny_dec_unary (BLS to tiny_dec), batch 1..8
    decoupled/stream   bursts of 8 requests, each on a gRPC stream of its own, to tiny_dec, batch 1..64
    sequences/stream   bursts of 8, each on a stream of its own, to seq_dec, batch 1..4, sequence length 1..64

An answer is wrong when an output differs from the float64 reference by more
than 1e-5, relative and absolute (tiny_reference, sequence_reference).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.harness.clients import TINY_TOLERANCE, grpc_input, http_input
from tests.harness.sequence_model import FEATURES, sequence_reference
from tests.harness.server import TritonServer
from tests.harness.streams import StreamClient
from trtpool_builder.examples.tiny import tiny_reference

BURST = 8
PROBLEMS_KEPT = 10


@dataclass
class Tally:
    requests: int = 0
    errors: int = 0
    wrong: int = 0
    problems: list[str] = field(default_factory=list)  # the first few, for the report

    def check(self, what: str, got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
        self.requests += 1
        if not all(name in got and got[name].shape == want.shape and np.allclose(got[name], want, **TINY_TOLERANCE)
                   for name, want in expected.items()):
            self.wrong += 1
            self._note(f"{what}: wrong answer")

    def failed(self, what: str, error: str) -> None:
        self.requests += 1
        self.errors += 1
        self._note(f"{what}: {error}")

    def _note(self, problem: str) -> None:
        if len(self.problems) < PROBLEMS_KEPT:
            self.problems.append(problem)


def _tiny(rng: np.random.Generator, largest: int) -> np.ndarray:
    return rng.standard_normal((int(rng.integers(1, largest + 1)), 16)).astype(np.float32)


def _unary(server: TritonServer, protocol: str, model: str) -> Callable[[Tally, np.random.Generator, float], None]:
    def run(tally: Tally, rng: np.random.Generator, deadline: float) -> None:
        client, make = ((httpclient.InferenceServerClient(server.http_url), http_input) if protocol == "http"
                        else (grpcclient.InferenceServerClient(server.grpc_url), grpc_input))
        try:
            while time.monotonic() < deadline:
                x = _tiny(rng, 8)
                try:
                    got = client.infer(model, [make("INPUT0", x, "FP32")]).as_numpy("OUTPUT0")
                except InferenceServerException as exc:
                    tally.failed(model, str(exc))
                else:
                    tally.check(model, {"OUTPUT0": got}, {"OUTPUT0": tiny_reference(x)})
        finally:
            client.close()
    return run


Reference = Callable[[np.ndarray], dict[str, np.ndarray]]


def _streamed(server: TritonServer, model: str, input_name: str, make: Callable[[np.random.Generator], np.ndarray],
              reference: Reference) -> Callable[[Tally, np.random.Generator, float], None]:
    def run(tally: Tally, rng: np.random.Generator, deadline: float) -> None:
        sent = 0
        while time.monotonic() < deadline:
            burst = {str(sent + i): make(rng) for i in range(BURST)}
            sent += BURST
            with StreamClient(server.grpc_url) as stream:  # a stream per burst (docs/reliability.md)
                for request_id, x in burst.items():
                    stream.send(model, {input_name: x}, request_id)
                answers = stream.collect(BURST)
            for error in answers.errors:
                tally.failed(model, str(error))
            for request_id, outputs in answers.outputs.items():
                tally.check(model, outputs, reference(burst[request_id]))
    return run


def _tokens(rng: np.random.Generator) -> np.ndarray:
    shape = (int(rng.integers(1, 5)), int(rng.integers(1, 65)), FEATURES)
    return rng.standard_normal(shape).astype(np.float32)


def clients(server: TritonServer) -> dict[str, Callable[[Tally, np.random.Generator, float], None]]:
    return {
        "sync/http": _unary(server, "http", "tiny_sync"),
        "pipelined/grpc": _unary(server, "grpc", "tiny_pipe"),
        "front/http": _unary(server, "http", "tiny_dec_unary"),
        "decoupled/stream": _streamed(server, "tiny_dec", "INPUT0", lambda rng: _tiny(rng, 64),
                                      lambda x: {"OUTPUT0": tiny_reference(x)}),
        "sequences/stream": _streamed(server, "seq_dec", "tokens", _tokens, sequence_reference),
    }


def soak(server: TritonServer, duration_s: float, seed: int = 0) -> dict[str, Tally]:
    """Run every client kind at once for duration_s seconds; a tally per kind."""
    deadline = time.monotonic() + duration_s
    tallies: dict[str, Tally] = {}
    failures: list[BaseException] = []

    def guarded(kind: str, run: Callable[[Tally, np.random.Generator, float], None], rng: np.random.Generator) -> None:
        try:
            run(tallies[kind], rng, deadline)
        except BaseException as exc:  # a client that dies (a stream answer that never came) fails the soak
            failures.append(exc)

    threads = []
    for index, (kind, run) in enumerate(clients(server).items()):
        tallies[kind] = Tally()
        threads.append(threading.Thread(target=guarded, args=(kind, run, np.random.default_rng(seed + index)),
                                        name=f"soak-{kind}"))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return tallies
