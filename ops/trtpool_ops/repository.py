"""Model states from Triton's repository index, and a reload that restarts stubs."""
from __future__ import annotations

import time
from dataclasses import dataclass

import tritonclient.grpc as grpcclient


@dataclass(frozen=True)
class ModelState:
    name: str
    state: str      # READY, UNAVAILABLE, LOADING, UNLOADING, or "" (never loaded)
    reason: str     # why it is not READY ("unloaded", or the load error)


def model_states(client: grpcclient.InferenceServerClient) -> list[ModelState]:
    index = client.get_model_repository_index(as_json=True).get("models", [])
    return [ModelState(m["name"], m.get("state", ""), m.get("reason", "")) for m in index]


def wait_unloaded(client: grpcclient.InferenceServerClient, model: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(s.state != "UNLOADING" for s in model_states(client) if s.name == model):
            return
        time.sleep(0.2)
    raise TimeoutError(f"model '{model}' still unloading after {timeout:g} s")


def reload_model(client: grpcclient.InferenceServerClient, model: str, timeout: float = 300.0) -> None:
    """Unload, then load: new stub processes.

    A plain load of an unchanged READY model is only a config update in Triton
    2.51 (core r24.10 src/model_repository_manager/model_lifecycle.cc, AsyncLoad):
    the existing instances, dead stub included, are kept.
    """
    client.unload_model(model)
    wait_unloaded(client, model, timeout)
    client.load_model(model, client_timeout=timeout)
