"""The small interface every runtime fulfils.

A runtime is one loaded model on one device (the shared engine, session or
weights). It makes execution contexts; each context owns its own preallocated
input and output buffers (and, on a GPU, its own stream) and runs one batch
at a time. The pool, batching and serving code only ever sees this interface.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from trtpool.buffers import HostBuffers
from trtpool.signature import Signature


class ExecutionContext(ABC):
    """One worker over the shared model: its own buffers, its own stream.

    The caller writes a batch into ``inputs.view(name, shape)`` and calls
    ``run``; the returned arrays are views of this context's preallocated
    output buffers, valid until the next ``run``.
    """

    index: int
    inputs: HostBuffers
    outputs: HostBuffers

    @abstractmethod
    def run(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
        """Run the batch staged in ``inputs`` with these input shapes."""

    def close(self) -> None:
        """Release what the context holds (streams, device memory)."""


class Runtime(ABC):
    """One model loaded once on one device, shared by all of its contexts."""

    name: str
    signature: Signature

    @abstractmethod
    def create_context(self, index: int) -> ExecutionContext:
        """A new context with all of its buffers allocated now, not per request."""

    @abstractmethod
    def context_memory_bytes(self) -> int:
        """Memory one more context costs on the device (activations and buffers)."""

    @abstractmethod
    def free_memory_bytes(self) -> int:
        """Memory free on the model's device right now."""

    def close(self) -> None:
        """Release the shared model."""
