"""The context pool: sizing, fair hand-out, failure and rebuild, statistics."""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NoReturn

from trtpool.errors import ConfigError, ContextFailure, InvalidInput
from trtpool.runtimes.base import ExecutionContext, Runtime

log = logging.getLogger("trtpool")


def auto_size(runtime: Runtime, memory_fraction: float, ceiling: int | None = None) -> int:
    """How many contexts fit in memory_fraction of the device's free memory (at least 1)."""
    free = runtime.free_memory_bytes()
    per_context = max(1, runtime.context_memory_bytes())
    budget = int(free * memory_fraction)
    fits = budget // per_context
    size = max(1, fits if ceiling is None else min(fits, ceiling))
    log.info(
        "contexts: auto -> %d = max(1, %s(floor(%d free bytes x %.2f memory_fraction = %d) / "
        "%d bytes per context = %d%s))",
        size, "min" if ceiling else "", free, memory_fraction, budget, per_context, fits,
        f", ceiling {ceiling}" if ceiling else "",
    )
    return size


@dataclass
class ContextStats:
    runs: int = 0
    busy_ns: int = 0
    failures: int = 0
    rebuilds: int = 0


@dataclass
class PoolStats:
    contexts: dict[int, ContextStats] = field(default_factory=dict)
    wait_ns: int = 0
    acquisitions: int = 0


class OutOfService:
    """Holds the slot of a context whose rebuild failed (after a sticky CUDA error,
    say): any use raises ContextFailure with both errors, and the pool then
    tries the rebuild again."""

    def __init__(self, index: int, cause: Exception, rebuild_error: Exception) -> None:
        self.index = index
        self._message = (f"context {index} is out of service: it failed ({cause}) and rebuilding it "
                         f"failed too ({type(rebuild_error).__name__}: {rebuild_error})")

    def __getattr__(self, name: str) -> NoReturn:
        raise ContextFailure(self._message)

    def close(self) -> None:
        pass


class ContextPool:
    """N execution contexts over one runtime, handed out first come, first served.

    queue.Queue wakes blocked getters in arrival order (its Condition keeps a
    FIFO of waiters), so a waiting batch is never overtaken.
    """

    def __init__(self, runtime: Runtime, size: int) -> None:
        if size < 1:
            raise ConfigError(f"parameter 'contexts': {size} is too small; expected a whole number >= 1")
        self.runtime = runtime
        self.size = size
        self.stats = PoolStats()
        self._lock = threading.Lock()
        self._taken_at: dict[int, int] = {}  # context index -> monotonic ns when taken
        self._free: queue.Queue[ExecutionContext] = queue.Queue()
        for index in range(size):
            self._free.put(runtime.create_context(index))
            self.stats.contexts[index] = ContextStats()

    def take(self) -> ExecutionContext:
        """A free context, waiting for one if none is; hand it back with ``give``.

        Taking and giving back may happen on different threads (a pipelined
        batch is submitted in execute() and completed on a completion thread).
        """
        start = time.monotonic_ns()
        context = self._free.get()
        taken = time.monotonic_ns()
        with self._lock:
            self.stats.wait_ns += taken - start
            self.stats.acquisitions += 1
            self._taken_at[context.index] = taken
        return context

    def give(self, context: ExecutionContext, failure: Exception | None = None) -> None:
        """Put a context back. A failure other than an input error means the context
        may be broken: it is closed, rebuilt and put back in its place."""
        with self._lock:
            taken = self._taken_at.pop(context.index)
        stats = self.stats.contexts[context.index]
        stats.runs += 1
        stats.busy_ns += time.monotonic_ns() - taken
        if failure is not None and not isinstance(failure, InvalidInput):
            context = self._rebuild(context, failure)
        self._free.put(context)

    @contextmanager
    def acquire(self) -> Iterator[ExecutionContext]:
        """``take`` and ``give`` around a block on one thread."""
        context = self.take()
        failure = None
        try:
            yield context
        except Exception as exc:
            failure = exc
            raise
        finally:
            self.give(context, failure)

    def _rebuild(self, broken: ExecutionContext, cause: Exception) -> ExecutionContext | OutOfService:
        stats = self.stats.contexts[broken.index]
        stats.failures += 1
        log.warning("context %d failed (%s); rebuilding it", broken.index, cause)
        try:
            broken.close()
        except Exception:  # a broken context may fail to close too; the rebuild matters
            log.exception("closing failed context %d", broken.index)
        try:
            fresh = self.runtime.create_context(broken.index)
        except Exception as exc:
            # Keep the slot: the next run on it fails, saying why, and tries the rebuild again.
            log.exception("rebuilding context %d failed", broken.index)
            return OutOfService(broken.index, cause, exc)
        stats.rebuilds += 1
        return fresh

    def close(self) -> None:
        while not self._free.empty():
            self._free.get_nowait().close()
        self.runtime.close()
