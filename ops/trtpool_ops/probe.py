"""Real liveness: one tiny inference per model.

Triton 2.51 keeps a model READY after its Python backend stub process dies
(the model's readiness is its load state, nothing else), and every request to
the dead instance fails after about a second with "Stub process '<instance>'
is not healthy." So a live model is one that answers a request; the health
endpoints cannot tell.

The request is zeros at the smallest shape the model takes: each input at the first
profile's minimum where the config's ``profile`` parameter gives one (a model whose
profile starts at 576 samples is sent 576), else batch 1 and every variable dimension 1
(an engine's profiles are in its sidecar, not the config). An error that
the model itself sends back (a shape it refuses, say) still proves that its
stub answered; only the Python backend's own dead-stub errors and silence
count as dead.

Each probe carries the request parameter trtpool_probe=true: a model with a process file answers it
without running the file's code (trtpool.triton.probes), so probes are no stage failures.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from trtpool.errors import ConfigError
from trtpool.model.shapes import parse_profile
from trtpool.triton.probes import PROBE_MARK

# What python_backend r24.10 answers for an instance whose stub is gone
# (src/stub_launcher.cc ReceiveMessageFromStub, src/python_be.cc SendMessageToStub).
DEAD_STUB_MESSAGES = ("is not healthy", "Failed to obtain the health mutex")


Inputs = list[grpcclient.InferInput]


@dataclass(frozen=True)
class ProbeResult:
    model: str
    alive: bool
    detail: str
    stub_died: bool = False  # the answer was Triton's for an instance whose stub is gone


def smallest_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Each input's minimum shape in the first profile of the config's `profile` parameter
    ({} without one, or with one the backend would refuse at load: the model is not serving)."""
    text = config.get("parameters", {}).get("profile", {}).get("string_value", "").split(";")[0].strip()
    try:
        return {name: r.min for name, r in parse_profile(text).items()} if text else {}
    except ConfigError:
        return {}


def probe_inputs(config: dict[str, Any]) -> Inputs:
    """Zeros for every required input at the profile's minimum shape (smallest_shapes) where it
    fits the declared rank; otherwise batch 1 where the model batches and each -1 dimension 1."""
    batch = [1] if int(config.get("max_batch_size", 0)) > 0 else []
    smallest = smallest_shapes(config)
    inputs = []
    for spec in config.get("input", []):
        if spec.get("optional"):
            continue
        datatype = spec["data_type"].removeprefix("TYPE_")
        shape = batch + [max(1, int(d)) for d in spec.get("dims", [])]
        if len(smallest.get(spec["name"], ())) == len(shape):
            shape = list(smallest[spec["name"]])
        dtype = triton_to_np_dtype(datatype)
        array = np.full(shape, b"", dtype=np.object_) if datatype in ("BYTES", "STRING") else np.zeros(shape, dtype)
        tensor = grpcclient.InferInput(spec["name"], shape, "BYTES" if datatype == "STRING" else datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def verdict(model: str, error: InferenceServerException | None) -> ProbeResult:
    if error is None:
        return ProbeResult(model, True, "answered")
    message = str(error)
    if any(text in message for text in DEAD_STUB_MESSAGES):
        return ProbeResult(model, False, message, stub_died=True)
    if "Deadline Exceeded" in message:
        return ProbeResult(model, False, message)
    return ProbeResult(model, True, f"answered with an error: {message}")


def _unary(url: str, model: str, inputs: Inputs, timeout: float) -> InferenceServerException | None:
    with grpcclient.InferenceServerClient(url) as client:
        try:
            client.infer(model, inputs, client_timeout=timeout, parameters=PROBE_MARK)
        except InferenceServerException as exc:
            return exc
    return None


def _final(result: grpcclient.InferResult) -> bool:
    parameter = result.get_response().parameters.get("triton_final_response")
    return parameter is None or parameter.bool_param


def _streamed(url: str, model: str, inputs: Inputs, timeout: float) -> InferenceServerException | None:
    """Decoupled models take gRPC streams only: the first response or error decides.

    The stream ends only after the request's final response, and it is cancelled
    only when that never comes (a dead stub): Triton 2.51 can keep a model whose
    stream was cancelled around its final response UNLOADING for good, and the
    server then never stops (an exit timeout, a shared-memory region left).
    """
    answers: queue.Queue = queue.Queue()
    deadline = time.monotonic() + timeout
    received: list[InferenceServerException | None] = []  # each answer's error, None for outputs
    finished = False
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            client.async_stream_infer(model, inputs, enable_empty_final_response=True, parameters=PROBE_MARK)
            while not finished:
                result, error = answers.get(timeout=max(0.0, deadline - time.monotonic()))
                received.append(error)
                finished = error is not None or _final(result)
        except queue.Empty:
            pass
        finally:
            client.stop_stream(cancel_requests=not finished)
    if not received:
        return InferenceServerException(f"no answer within {timeout:g} s (Deadline Exceeded)")
    return received[0]


def probe_model(url: str, model: str, timeout: float = 10.0) -> ProbeResult:
    """Send `model` one tiny request over gRPC at `url` and judge the answer."""
    try:
        with grpcclient.InferenceServerClient(url) as client:
            config = client.get_model_config(model, as_json=True, client_timeout=timeout)["config"]
    except InferenceServerException as exc:
        return ProbeResult(model, False, f"no model configuration: {exc}")
    inputs = probe_inputs(config)
    decoupled = config.get("model_transaction_policy", {}).get("decoupled", False)
    send = _streamed if decoupled else _unary
    return verdict(model, send(url, model, inputs, timeout))
