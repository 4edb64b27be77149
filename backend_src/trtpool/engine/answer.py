"""The one notion of an answer: a Responder answers one request, exactly once.

Batching, the process file's stages, the modes and the engine host all answer a request
through its Responder: ``send`` with the request's outputs, or ``fail`` with the error
that is that request's alone. A second answer is ignored, and neither call raises, so a
caller may answer on any thread and never needs to know who is behind the responder (a
Triton response sender, the list execute() returns, a postprocess step, a host reply).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from trtpool.gpu.device_tensors import to_host


class Responder(Protocol):
    """Answers one request exactly once (the final response); never raises."""

    def send(self, outputs: dict[str, np.ndarray]) -> None: ...
    def fail(self, error: Exception) -> None: ...
    def cancelled(self) -> bool: ...


class Kept:
    """A Responder that keeps its request's answer: the outputs copied into host arrays of its
    own (a context's buffers are the next batch's once send returns), or the error. For callers
    without Triton: trtpool-accuracy's runner, benchmarks and tests."""

    def __init__(self) -> None:
        self.outputs: dict[str, np.ndarray] | None = None
        self.error: Exception | None = None

    def send(self, outputs: dict[str, Any]) -> None:
        if self.outputs is None and self.error is None:
            self.outputs = {name: np.array(to_host(value)) for name, value in outputs.items()}

    def fail(self, error: Exception) -> None:
        if self.outputs is None and self.error is None:
            self.error = error

    def cancelled(self) -> bool:
        return False

    @property
    def answer(self) -> dict[str, np.ndarray] | Exception | None:
        """The outputs, the error, or None while unanswered."""
        return self.error if self.error is not None else self.outputs
