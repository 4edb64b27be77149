"""Model states from Triton's repository index, and a reload that restarts stubs."""

from __future__ import annotations

from dataclasses import dataclass

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException


@dataclass(frozen=True)
class ModelState:
    name: str
    state: str  # READY, UNAVAILABLE, LOADING, UNLOADING, or "" (never loaded)
    reason: str  # why it is not READY ("unloaded", or the load error)


def model_states(client: grpcclient.InferenceServerClient) -> list[ModelState]:
    index = client.get_model_repository_index(as_json=True).get("models", [])
    return [ModelState(m["name"], m.get("state", ""), m.get("reason", "")) for m in index]


def front_target(client: grpcclient.InferenceServerClient, model: str) -> str | None:
    """The model a trtpool front forwards to (its parameter forward_to), None for any other model."""
    try:
        config = client.get_model_config(model, as_json=True)["config"]
    except InferenceServerException:
        return None
    return config.get("parameters", {}).get("forward_to", {}).get("string_value") or None


def reload_model(client: grpcclient.InferenceServerClient, model: str, timeout: float = 300.0) -> None:
    """Unload, then load at once: new stub processes, serving when this returns.

    Not a plain load: for an unchanged READY model Triton 2.51 only updates the
    config and keeps the instances, dead stub included (core r24.10
    model_lifecycle.cc:486-505). And not waiting for the unload to finish: once
    a request has failed on a dead stub, it never finishes. The Python backend
    returns early from that request (python_be.cc:1342) without deleting its
    response factory (created at :311, deleted only at :1360), and each
    factory holds the model (core infer_response.h:113), so the old model
    object, its surviving stubs and their memory stay until the server exits.
    Triton loads the new model beside it (model_lifecycle.cc:510).
    """
    client.unload_model(model)
    client.load_model(model, client_timeout=timeout)
