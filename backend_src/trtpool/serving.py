"""Requests -> validated batches -> contexts -> outputs split back per request.

Triton-agnostic: the caller passes each request's input arrays and two
callbacks. ``emit(i, outputs)`` receives, for a batch that ran from host
memory, numpy views into the context's output buffers, valid only during the
call (copy them out, e.g. into Triton tensors); for a batch that ran on the
GPU (``run_device``), torch slices of tensors the caller owns.
``fail(i, error)`` receives the error for request i alone.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtpool.buffers import gather, split_points
from trtpool.device_tensors import concat_on_device, is_device, to_host
from trtpool.errors import ContextFailure, InvalidInput, TrtpoolError
from trtpool.pool import ContextPool
from trtpool.validate import check_request

log = logging.getLogger("trtpool")

Emit = Callable[[int, dict[str, Any]], None]  # numpy views, or owned torch slices from run_device
Fail = Callable[[int, Exception], None]
BatchObserver = Callable[[int], None]


@dataclass
class Item:
    """One valid request: its position in the execute() call and its tensors."""

    index: int
    tensors: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]

    @property
    def batch(self) -> int:
        return next(iter(self.shapes.values()))[0]


def shape_key(shapes: dict[str, tuple[int, ...]], batched: bool) -> tuple:
    """Requests with equal keys can share one batch: their shapes differ in the batch size only."""
    return tuple((name, shape[1:] if batched else shape) for name, shape in sorted(shapes.items()))


class BatchRunner:
    """Runs one list of requests (a Triton batch) on the context pool."""

    def __init__(self, pool: ContextPool, on_batch: BatchObserver | None = None) -> None:
        self.pool = pool
        self.signature = pool.runtime.signature
        self._on_batch = on_batch or (lambda size: None)
        self._executor = ThreadPoolExecutor(max_workers=pool.size, thread_name_prefix="trtpool-chunk")

    def run(self, requests: Sequence[dict[str, np.ndarray]], emit: Emit, fail: Fail) -> None:
        items = []
        for index, tensors in enumerate(requests):
            try:
                items.append(Item(index, tensors, check_request(self.signature, tensors)))
            except InvalidInput as exc:
                fail(index, exc)
        chunks = self.plan(items)
        if len(chunks) == 1:
            self.run_chunk(chunks[0], emit, fail)
        else:
            # Parts of one large batch run on several contexts at once.
            for future in [self._executor.submit(self.run_chunk, c, emit, fail) for c in chunks]:
                future.result()

    def plan(self, items: list[Item]) -> list[list[Item]]:
        """Group requests of equal non-batch shape into chunks that fit one profile."""
        if not self.signature.batched:
            return [[item] for item in items]
        groups: dict[tuple, list[Item]] = {}
        for item in items:
            groups.setdefault(shape_key(item.shapes, batched=True), []).append(item)
        chunks = []
        for group in groups.values():
            limit = self.chunk_limit(group[0])
            chunk: list[Item] = []
            for item in group:
                if chunk and sum(i.batch for i in chunk) + item.batch > limit:
                    chunks.append(chunk)
                    chunk = []
                chunk.append(item)
            chunks.append(chunk)
        return chunks

    def chunk_limit(self, item: Item) -> int:
        """The largest batch any profile takes for this request's other dimensions."""
        limits = [
            p.ranges[next(iter(item.shapes))].max[0]
            for p in self.signature.profiles
            if p.fits(item.shapes)
        ]
        return max(limits)

    def run_chunk(self, chunk: list[Item], emit: Emit, fail: Fail) -> None:
        shapes = {
            name: (sum(i.batch for i in chunk),) + shape[1:] if self.signature.batched else shape
            for name, shape in chunk[0].shapes.items()
        }
        try:
            with self.pool.acquire() as context:
                if hasattr(context, "run_device") and any(map(is_device, chunk[0].tensors.values())):
                    # Inputs already on the GPU stay there: no host copies.
                    outputs = context.run_device(
                        {name: concat_on_device([i.tensors[name] for i in chunk]) for name in shapes})
                else:
                    for name, shape in shapes.items():
                        gather([to_host(i.tensors[name]) for i in chunk], context.inputs.view(name, shape))
                    outputs = context.run(shapes)
                self._on_batch(shapes[next(iter(shapes))][0] if self.signature.batched else 1)
                self._emit_all(chunk, outputs, emit, fail)
        except InvalidInput as exc:
            for item in chunk:
                fail(item.index, exc)
        except Exception as exc:
            # The pool has rebuilt the context. Retry each request alone so that
            # only the request that breaks a context gets the error.
            if len(chunk) > 1:
                for item in chunk:
                    self.run_chunk([item], emit, fail)
            else:
                message = exc if isinstance(exc, TrtpoolError) else f"{type(exc).__name__}: {exc}"
                fail(chunk[0].index, ContextFailure(f"execution failed: {message}"))

    def _emit_all(self, chunk: list[Item], outputs: dict[str, np.ndarray], emit: Emit, fail: Fail) -> None:
        bounds = split_points([i.batch for i in chunk]) if self.signature.batched else [(None, None)]
        for item, (start, stop) in zip(chunk, bounds):
            try:
                emit(item.index, {name: out[start:stop] for name, out in outputs.items()})
            except Exception as exc:  # a response that cannot be built fails alone
                log.exception("building the response of request %d", item.index)
                fail(item.index, exc)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
