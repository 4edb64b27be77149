"""What the instance and the engine host say to each other, beyond the framing (wire.py).

    instance -> host                         host -> instance
    {"op": "hello", "pid"}                   {"op": "ready", "signature", "host_pid", "process_file"}
                                             or {"op": "refused", "error"}   (the model did not load)
    {"op": "run", "id", "requests": [        {"op": "answer", "id", "answers": [
        {"probe": bool, "inputs": [desc]}]}      {"outputs": [desc]} or {"error", "kind"}]}
      (+ the input slab's fd when new)          (+ the output slab's fd when new)
    {"op": "stats"}                          {"op": "stats", ...}  (trtpool.host.server.Host.stats)
    {"op": "bye"}                            (closes)
    any                                      {"op": "error", "error"}  (then closes: a bad message)

A descriptor is [name, Triton type, shape, offset, nbytes] in the sender's slab (slab.py).
An instance has at most one "run" in flight.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trtpool.errors import Cancelled, InvalidInput, Overloaded, TrtpoolError, Unavailable
from trtpool.model.dtypes import NUMPY_DTYPES, TRITON_DTYPES
from trtpool.model.signature import Profile, ShapeRange, Signature, TensorSpec

# Error classes by the name that travels; anything else travels as "internal" (its text kept).
ERROR_KINDS: dict[str, type[TrtpoolError]] = {
    "invalid": InvalidInput,
    "overloaded": Overloaded,
    "cancelled": Cancelled,
    "unavailable": Unavailable,
}


def error_to_wire(error: Exception) -> dict[str, str]:
    kind = next((name for name, cls in ERROR_KINDS.items() if isinstance(error, cls)), "internal")
    text = str(error) if isinstance(error, TrtpoolError) else f"{type(error).__name__}: {error}"
    return {"error": text, "kind": kind}


def error_from_wire(answer: dict[str, Any]) -> TrtpoolError:
    return ERROR_KINDS.get(answer.get("kind", ""), TrtpoolError)(str(answer.get("error", "")))


def _spec(spec: TensorSpec) -> list[Any]:
    return [spec.name, TRITON_DTYPES[spec.dtype], list(spec.shape)]


def signature_to_wire(signature: Signature) -> dict[str, Any]:
    return {
        "inputs": [_spec(s) for s in signature.inputs],
        "outputs": [_spec(s) for s in signature.outputs],
        "profiles": [
            {name: [list(r.min), list(r.opt), list(r.max)] for name, r in p.ranges.items()} for p in signature.profiles
        ],
        "batched": signature.batched,
        "owner": signature.owner,
    }


def signature_from_wire(wire: dict[str, Any]) -> Signature:
    def spec(entry: list[Any]) -> TensorSpec:
        name, data_type, shape = entry
        return TensorSpec(name, np.dtype(NUMPY_DTYPES[data_type]), tuple(shape))

    profiles = tuple(
        Profile(index, {name: ShapeRange(*(tuple(dims) for dims in ranges)) for name, ranges in profile.items()})
        for index, profile in enumerate(wire["profiles"])
    )
    return Signature(
        tuple(spec(e) for e in wire["inputs"]),
        tuple(spec(e) for e in wire["outputs"]),
        profiles,
        bool(wire["batched"]),
        wire.get("owner", "model"),
    )
