"""What the GPU runtimes' contexts share: a CUDA stream, the two events of a batch, the drain.

A batch's work is queued on the context's stream. ``inputs_taken`` is recorded once its
inputs are copied: where some came as GPU tensors, submit() waits for it before returning,
as the caller may reuse them then. ``done`` is recorded after the batch's last copy, and
complete() waits on it: the one wait per batch. Closing drains the stream first, so that
nothing still reads or writes the buffers that go with it.
"""

from __future__ import annotations

import logging

import numpy as np

from trtpool.gpu import cuda
from trtpool.runtimes.base import ExecutionContext

log = logging.getLogger("trtpool")


class StreamContext(ExecutionContext):
    """An ExecutionContext whose batches run on its own CUDA stream."""

    def _open_stream(self, stream: cuda.Stream) -> None:
        self._stream = stream
        self._done = cuda.Event()
        self._inputs_taken = cuda.Event()
        self._results: dict[str, np.ndarray] | None = None

    def _inputs_placed(self, on_device: bool) -> None:
        """The batch's input copies are queued; mark where those from GPU tensors end."""
        if on_device:
            self._inputs_taken.record(self._stream)

    def _queued(self, results: dict[str, np.ndarray], on_device: bool) -> None:
        """The batch is queued to its last copy into `results`: mark its end, and wait until
        the caller's GPU tensors are no longer read."""
        self._results = results
        self._done.record(self._stream)
        if on_device:
            self._inputs_taken.synchronize()

    def complete(self) -> dict[str, np.ndarray]:
        self._done.synchronize()  # the one wait per batch
        results, self._results = self._results, None
        assert results is not None  # submit() queued a batch
        return results

    def _drain(self) -> None:
        """Wait for the stream's work (the current device must be the context's)."""
        try:
            self._stream.synchronize()  # nothing may still read or write the buffers
        except cuda.CudaError as exc:
            log.warning("context %d: stream did not drain on close: %s", self.index, exc)

    def _close_events(self) -> None:
        self._done.close()
        self._inputs_taken.close()
