"""Triton's requests as trtpool takes them: their tensors, probes set apart, copies that outlive execute().

Host inputs come as numpy arrays (BF16 through DLPack: trtpool.triton.bfloat16); inputs
Triton left on the GPU as torch tensors. A request's tensors are valid while execute()
runs; stages and queues that read them later take kept() copies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trtpool.gpu.device_tensors import from_dlpack, keep_after_execute
from trtpool.triton import bfloat16
from trtpool.triton.pb_api import InferenceRequest, PbUtils, Tensor
from trtpool.triton.probes import is_probe
from trtpool.triton.responders import SenderResponder


def request_tensors(request: InferenceRequest) -> dict[str, Any]:
    """numpy arrays, or torch tensors for inputs Triton left on the GPU."""
    return {t.name(): _host_array(t) if t.is_cpu() else from_dlpack(t) for t in request.inputs()}


def without_probes(pb_utils: PbUtils, requests: list[InferenceRequest]) -> list[InferenceRequest]:
    """For a model with a process file: answer each probe with no outputs, untouched by user code
    (trtpool.triton.probes says why), and return the other requests."""
    others = []
    for request in requests:
        if is_probe(request):
            SenderResponder(pb_utils, request).send({})
        else:
            others.append(request)
    return others


def _host_array(tensor: Tensor) -> np.ndarray:
    try:
        return tensor.as_numpy()
    except Exception as refused:  # noqa: BLE001 - the stub refuses BF16 alone ("Use to_dlpack() and from_dlpack() instead")
        try:
            return bfloat16.from_triton(tensor)
        except ValueError:  # not BF16 after all: the stub's own reason stands
            raise refused from None


def kept(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Requests' tensors in memory trtpool owns, for stages that read them after execute()
    returns: GPU tensors copied (device_tensors.keep_after_execute), host arrays that view
    the request's shared memory copied too (TYPE_STRING arrives as a new object array)."""
    return [
        {name: np.array(t) if isinstance(t, np.ndarray) and t.dtype != np.object_ else t for name, t in tensors.items()}
        for tensors in keep_after_execute(requests)
    ]
