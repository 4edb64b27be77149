"""The small interface every runtime fulfils.

A runtime is one loaded model on one device (the shared engine, session or
weights). It makes execution contexts; each context owns its own preallocated
buffers (and, on a GPU, its own stream) and holds at most one batch at a time:

    context.submit(parts)        # take the requests' tensors, start the batch
    outputs = context.complete()  # wait for it; one batch-shaped array per output

Sync, pipelined and decoupled serving differ only in who calls ``complete``
and when. Host or device inputs, TensorRT or ONNX Runtime or torch stay
behind this contract: the pool, batching and serving code only ever see it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtpool.model.signature import Signature
from trtpool.parameters import PoolConfig

# Per input, the requests' tensors in batch order: numpy arrays, or device
# tensors (torch, from Triton's DLPack) for inputs that arrived on the GPU.
Parts = Mapping[str, Sequence[Any]]


def batch_shapes(parts: Parts, batched: bool) -> dict[str, tuple[int, ...]]:
    """The shape of each input once its parts are joined along the batch axis."""
    shapes = {}
    for name, tensors in parts.items():
        first = tuple(tensors[0].shape)
        shapes[name] = (sum(t.shape[0] for t in tensors), *first[1:]) if batched else first
    return shapes


class ExecutionContext(ABC):
    """One worker over the shared model: its own buffers, its own stream."""

    index: int

    @abstractmethod
    def submit(self, parts: Parts) -> None:
        """Start one batch made of ``parts`` (joined along the batch axis; an
        unbatched model gets one tensor per input).

        Returns once the caller's tensors are no longer needed (copied into the
        context's own buffers); the batch itself may still be running. Raises
        InvalidInput for shapes the model refuses (outside its profiles, or
        rejected by the runtime itself): the client's error, the context stays
        usable. Any other exception means the context may be broken.
        """

    @abstractmethod
    def complete(self) -> dict[str, np.ndarray]:
        """Wait for the submitted batch; its outputs in batch order as host arrays,
        shaped as the runtime computed them for this batch.

        The arrays may be views of the context's buffers: valid until its next
        ``submit``. With the runtime's outputs on the device (``Runtime.keep_outputs_on_device``)
        they are device tensors the caller owns, complete when this returns.
        Raises like ``submit``.
        """

    def close(self) -> None:  # noqa: B027 - does nothing unless a context holds something to release
        """Release what the context holds (streams, device memory)."""


class Runtime(ABC):
    """One model loaded once on one device, shared by all of its contexts."""

    name: str
    signature: Signature  # output dims the model cannot tell before a run are -1
    outputs_on_device = False  # complete() returns device tensors (see keep_outputs_on_device)

    @abstractmethod
    def __init__(self, cfg: PoolConfig, path: Path) -> None:
        """Load the model file `path` once; `cfg` is the model's parsed parameters."""

    def keep_outputs_on_device(self) -> bool:
        """Have every context's complete() return its outputs as device tensors, not copied to
        the host (a postprocess that runs on the device); False where this runtime cannot."""
        return False

    @abstractmethod
    def create_context(self, index: int) -> ExecutionContext:
        """A new context with its buffers allocated now, not per request."""

    @abstractmethod
    def context_memory_bytes(self) -> int:
        """Memory one more context costs on the device (activations and buffers)."""

    @abstractmethod
    def free_memory_bytes(self) -> int:
        """Memory free on the model's device right now."""

    def close(self) -> None:  # noqa: B027 - does nothing unless a runtime holds something to release
        """Release the shared model."""
