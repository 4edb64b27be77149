"""Responders that postprocess before they answer the request's own responder.

The runner answers a batch's requests one by one; these stand in front of each request's
responder and hand its outputs to the Postprocessor: alone, or held until every member of
the batch is in, for postprocess_batch. Failing and cancellation go straight through.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from trtpool.engine.answer import Responder
from trtpool.process.file import Tensors

if TYPE_CHECKING:
    from trtpool.process.postprocess import Member, Postprocessor


class _Wrapping:
    """A responder in front of a request's own: failing and cancellation go straight to it."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder

    def fail(self, error: Exception) -> None:
        self.responder.fail(error)

    def cancelled(self) -> bool:
        return self.responder.cancelled()


class Postprocessing(_Wrapping):
    """A responder that postprocesses on the post workers before it answers."""

    def __init__(self, post: Postprocessor, responder: Responder, inputs: Tensors) -> None:
        super().__init__(responder)
        self.post = post
        self.inputs = inputs

    def send(self, outputs: Tensors) -> None:
        # Every mode hands a staged batch's outputs over detached: valid on another thread.
        self.post.answer_later(self.responder, outputs, self.inputs)


class BatchPostprocessing:
    """The requests of one batch, postprocessed together once each has its outputs or its error.

    The runner answers a batch's requests one by one (and a batch split across
    contexts, or retried, in several goes): each member's outputs are held until
    the last member is in, then postprocess_batch takes those that have outputs.
    A member counts once, as a responder answers once, whatever comes after."""

    def __init__(self, post: Postprocessor, inputs: list[Tensors], inline: bool = False) -> None:
        self.post = post
        self.inputs = inputs
        self.inline = inline
        self._lock = threading.Lock()
        self._arrived: set[int] = set()
        self._ready: dict[int, Member] = {}

    def member(self, index: int, responder: Responder) -> Responder:
        return _BatchMember(self, index, responder)

    def arrived(self, index: int, responder: Responder, outputs: Tensors | None) -> None:
        """Member `index` is in: with its outputs, or None once it has been failed."""
        with self._lock:
            if index in self._arrived:
                return
            self._arrived.add(index)
            if outputs is not None:
                self._ready[index] = (responder, outputs, self.inputs[index])
            if len(self._arrived) < len(self.inputs):
                return
            members = [self._ready[i] for i in sorted(self._ready)]
        if members and self.inline:
            self.post.answer_batch(members)
        elif members:
            self.post.answer_batch_later(members)


class _BatchMember(_Wrapping):
    """One request's responder within a BatchPostprocessing."""

    def __init__(self, batch: BatchPostprocessing, index: int, responder: Responder) -> None:
        super().__init__(responder)
        self.batch = batch
        self.index = index

    def send(self, outputs: Tensors) -> None:
        # Every mode hands a staged batch's outputs over detached: valid on another thread.
        self.batch.arrived(self.index, self.responder, outputs)

    def fail(self, error: Exception) -> None:
        super().fail(error)
        self.batch.arrived(self.index, self.responder, None)
