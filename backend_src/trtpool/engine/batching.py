"""Requests -> validated batches -> contexts -> outputs split back per request.

Triton-agnostic: the caller passes each request's input arrays and its
Responder (trtpool.engine.answer). ``send`` receives the request's slice of the
batch's outputs; without ``detach`` they are views of the context's buffers, to
be used within the call (build the response from them), since the context is
handed to the next batch afterwards. ``fail`` receives that request's error alone.

A batch runs in two steps, ``start`` (take a free context, submit the batch)
and ``finish`` (wait, answer, give the context back), so that a pipelined
caller can start the next batch while this one runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtpool.engine.answer import Responder
from trtpool.engine.pool import ContextPool
from trtpool.errors import ContextFailure, InvalidInput, TrtpoolError
from trtpool.gpu.buffers import split_points
from trtpool.model.signature import Signature
from trtpool.model.validate import accept
from trtpool.runtimes.base import ExecutionContext, Parts

log = logging.getLogger("trtpool")

BatchObserver = Callable[[int], None]


@dataclass(eq=False)  # identity only: an item's tensors cannot be compared
class Item:
    """One valid request: the responder that answers it, and its tensors."""

    responder: Responder
    tensors: dict[str, Any]
    shapes: dict[str, tuple[int, ...]]
    batch: int = field(init=False)  # rows along the batch axis (of a batched model)

    def __post_init__(self) -> None:
        first = next(iter(self.shapes.values()), ())
        self.batch = first[0] if first else 1


def shape_key(shapes: dict[str, tuple[int, ...]], batched: bool) -> tuple:
    """Requests with equal keys can share one batch: their shapes differ in the batch size only."""
    return tuple((name, shape[1:] if batched else shape) for name, shape in sorted(shapes.items()))


class BatchPlanner:
    """The one batching rule, shared by the runner and the decoupled scheduler:
    requests of one shape key join one batch when some optimization profile
    admits the combined batch; a group is split only above the largest batch
    any profile takes for its shapes (or where the profiles leave a gap)."""

    def __init__(self, signature: Signature) -> None:
        self.signature = signature

    def _with_batch(self, shapes: dict[str, tuple[int, ...]], batch: int) -> dict[str, tuple[int, ...]]:
        return {name: (batch, *shape[1:]) for name, shape in shapes.items()}

    def fits(self, items: Sequence[Item]) -> bool:
        total = sum(item.batch for item in items)
        shapes = self._with_batch(items[0].shapes, total)
        return any(profile.fits(shapes) for profile in self.signature.profiles)

    def largest_batch(self, item: Item) -> int:
        """The largest batch any profile takes for this request's other dimensions."""
        return max(
            (p.max_batch() for p in self.signature.profiles if p.fits(self._with_batch(item.shapes, p.max_batch()))),
            default=item.batch,
        )

    def fitting_head(self, items: Sequence[Item]) -> int:
        """How many leading items form a batch some profile admits (at least one:
        each request alone was checked against the profiles)."""
        count = len(items)
        while count > 1 and not self.fits(items[:count]):
            count -= 1
        return count

    def plan(self, items: Sequence[Item]) -> list[list[Item]]:
        """Chunks of equal-shape requests, each admitted by one profile, in arrival order."""
        if not self.signature.batched:
            return [[item] for item in items]
        groups: dict[tuple, list[Item]] = {}
        for item in items:
            groups.setdefault(shape_key(item.shapes, batched=True), []).append(item)
        chunks = []
        for group in groups.values():
            limit = self.largest_batch(group[0])
            pending: list[Item] = []
            rows = 0
            for item in group:
                if pending and rows + item.batch > limit:
                    chunks += self._admitted(pending)
                    pending, rows = [], 0
                pending.append(item)
                rows += item.batch
            chunks += self._admitted(pending)
        return chunks

    def _admitted(self, items: list[Item]) -> list[list[Item]]:
        chunks = []
        while items:
            head = self.fitting_head(items)
            chunks.append(items[:head])
            items = items[head:]
        return chunks


def _split_rows(output: Any, rows: list[int]) -> Sequence[Any]:
    """Views of `output`'s rows per request: a device tensor's in one call (torch's split; slicing
    it 64 times cost a host 6% of its time), a host array's by slicing."""
    if isinstance(output, np.ndarray):
        return [output[start:stop] for start, stop in split_points(rows)]
    return output.split(rows)


class BatchRunner:
    """Runs requests on the context pool: one batch per chunk the planner makes."""

    def __init__(self, pool: ContextPool, on_batch: BatchObserver | None = None) -> None:
        self.pool = pool
        self.signature = pool.runtime.signature
        self.planner = BatchPlanner(self.signature)
        self._on_batch = on_batch or (lambda size: None)
        self._executor = ThreadPoolExecutor(max_workers=pool.size, thread_name_prefix="trtpool-chunk")

    def validate(self, requests: Sequence[dict[str, Any]], responders: Sequence[Responder]) -> list[Item]:
        """The valid requests as items; each invalid one is failed with its reason."""
        items = []
        for tensors, responder in zip(requests, responders, strict=True):
            try:
                items.append(Item(responder, *accept(self.signature, tensors)))
            except InvalidInput as exc:
                responder.fail(exc)
        return items

    def run(self, requests: Sequence[dict[str, Any]], responders: Sequence[Responder], detach: bool = False) -> None:
        """Run every request and answer each through its responder before returning (`detach`: see finish)."""
        chunks = self.planner.plan(self.validate(requests, responders))
        if len(chunks) == 1:
            self.run_chunk(chunks[0], detach)
        else:
            # Parts of one large batch run on several contexts at once.
            for future in [self._executor.submit(self.run_chunk, c, detach) for c in chunks]:
                future.result()

    def run_chunk(self, chunk: list[Item], detach: bool = False) -> None:
        context = self.start(chunk, detach)
        if context is not None:
            self.finish(context, chunk, detach)

    def start(self, chunk: list[Item], detach: bool = False) -> ExecutionContext | None:
        """Take a free context (waiting for one) and submit the chunk to it. None when
        the submit failed: the chunk has then been answered already (retried requests
        answered as `finish` would, `detach` included)."""
        context = self.pool.take()
        parts: Parts = {name: [item.tensors[name] for item in chunk] for name in chunk[0].shapes}
        try:
            context.submit(parts)
        except Exception as exc:  # noqa: BLE001 - any runtime's failure fails the chunk and rebuilds the context
            self.pool.give(context, exc)
            self._failed(chunk, exc, detach)
            return None
        except BaseException:  # the thread is ending: the context goes back, rebuilt, first
            self.pool.give(context, ContextFailure("a submit was interrupted"))
            raise
        return context

    def finish(self, context: ExecutionContext, chunk: list[Item], detach: bool = False) -> None:
        """Wait for the chunk's batch, answer its requests, give the context back.

        Answers are built from views of the context's buffers, so by default the
        context is given back after the last send. With `detach` the batch's
        outputs are copied first (one copy per output) and the context goes back
        before any answer is sent: for callers whose answers are slow to send, or
        read only after the context may have taken another batch."""
        failure = None
        unstackable = None
        try:
            outputs = context.complete()
            self._on_batch(sum(item.batch for item in chunk) if self.signature.batched else 1)
            unstackable = self._unstackable(chunk, outputs)
            if unstackable:
                pass
            elif detach:  # host views copied; device outputs are the caller's already
                outputs = {
                    name: np.array(array) if isinstance(array, np.ndarray) else array for name, array in outputs.items()
                }
            else:
                self._answer_all(chunk, outputs)
        except Exception as exc:  # noqa: BLE001 - any runtime's failure fails the chunk and rebuilds the context
            failure = exc
        finally:
            self.pool.give(context, failure)
        if failure is not None:
            self._failed(chunk, failure, detach)
        elif unstackable:
            log.warning("%s; the batch's %d requests run one at a time", unstackable, len(chunk))
            for item in chunk:
                self.run_chunk([item], detach)
        elif detach:
            self._answer_all(chunk, outputs)

    def _unstackable(self, chunk: list[Item], outputs: dict[str, np.ndarray]) -> str | None:
        """Why a batch of several requests cannot be cut back into them (an output whose
        first dimension is not the batch's rows, e.g. sized by the data), or None. A batch
        of one request needs no cutting: its outputs are the request's as they came out."""
        if len(chunk) < 2:
            return None
        rows = sum(item.batch for item in chunk)
        for name, array in outputs.items():
            if array.shape[:1] != (rows,):
                return f"output '{name}' came out with shape {list(array.shape)} for a batch of {rows} rows"
        return None

    def _failed(self, chunk: list[Item], error: Exception, detach: bool) -> None:
        if isinstance(error, InvalidInput):
            for item in chunk:
                item.responder.fail(error)
        elif len(chunk) > 1:
            # The pool has rebuilt the context. Retry each request alone so that
            # only a request that breaks a context gets the error.
            for item in chunk:
                self.run_chunk([item], detach)
        else:
            message = error if isinstance(error, TrtpoolError) else f"{type(error).__name__}: {error}"
            chunk[0].responder.fail(ContextFailure(f"execution failed: {message}"))

    def _answer_all(self, chunk: list[Item], outputs: dict[str, np.ndarray]) -> None:
        if len(chunk) == 1:  # the outputs are the request's (scalars too)
            per_request = [outputs]
        else:
            rows = [i.batch for i in chunk]
            pieces = {name: _split_rows(out, rows) for name, out in outputs.items()}
            per_request = [{name: pieces[name][i] for name in outputs} for i in range(len(chunk))]
        for position, (item, answer) in enumerate(zip(chunk, per_request, strict=True)):
            try:
                item.responder.send(answer)
            except Exception as exc:  # a response that cannot be built fails alone
                log.exception("building the response of request %d of the batch", position)
                item.responder.fail(exc)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
