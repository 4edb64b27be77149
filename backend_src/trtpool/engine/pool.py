"""The context pool: sizing, fair hand-out, failure and rebuild, elasticity, statistics.

Free contexts are handed out last in, first out; a context whose run fails is rebuilt while the
others serve. An elastic pool (parameters.Elasticity) grows off the request path when batches
wait and closes contexts that idle; nothing above the pool sees the count change.
The policy in full: docs/design/context-pool.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NoReturn

from trtpool.errors import ConfigError, ContextFailure, InvalidInput
from trtpool.parameters import Elasticity
from trtpool.runtimes.base import ExecutionContext, Parts, Runtime

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
        size,
        "min" if ceiling else "",
        free,
        memory_fraction,
        budget,
        per_context,
        fits,
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
    current: int = 0  # contexts that exist now (free or running)
    minimum: int = 0
    maximum: int = 0
    grown: int = 0  # contexts added by the elastic policy
    shrunk: int = 0  # contexts closed by the elastic policy
    grow_failures: int = 0  # contexts the policy could not make


class OutOfService(ExecutionContext):
    """Holds the slot of a context whose rebuild failed (after a sticky CUDA error,
    say): any use raises ContextFailure with both errors, and the pool then
    tries the rebuild again."""

    def __init__(self, index: int, cause: Exception, rebuild_error: Exception) -> None:
        self.index = index
        self._message = (
            f"context {index} is out of service: it failed ({cause}) and rebuilding it "
            f"failed too ({type(rebuild_error).__name__}: {rebuild_error})"
        )

    def submit(self, parts: Parts) -> NoReturn:
        raise ContextFailure(self._message)

    def complete(self) -> NoReturn:
        raise ContextFailure(self._message)

    def __getattr__(self, name: str) -> NoReturn:  # a runtime's own attributes
        raise ContextFailure(self._message)

    def close(self) -> None:
        pass


class ContextPool:
    """Execution contexts over one runtime, handed out first come, first served.

    Waiting batches are served in arrival order (a ticket queue): one that
    arrives while others wait never overtakes them. With `elastic` the count
    follows the load between its bounds (module docstring); without, it is
    `size` from start to end.
    """

    def __init__(self, runtime: Runtime, size: int, elastic: Elasticity | None = None) -> None:
        if size < 1:
            raise ConfigError(f"parameter 'contexts': {size} is too small; expected a whole number >= 1")
        self.runtime = runtime
        self.size = size  # the most contexts at once
        self.elastic = elastic if elastic is not None and elastic.min_contexts < size else None
        minimum = min(size, elastic.min_contexts) if elastic is not None else size
        self.stats = PoolStats({index: ContextStats() for index in range(size)}, minimum=minimum, maximum=size)
        self._lock = threading.Lock()
        self._available = threading.Condition(self._lock)  # takers wait here
        self._changed = threading.Condition(self._lock)  # the policy thread waits here
        self._free: list[ExecutionContext] = []  # a stack: last given back, first handed out
        self._idle_since: dict[int, int] = {}  # free context index -> monotonic ns given back
        self._taken_at: dict[int, int] = {}  # running context index -> monotonic ns taken
        self._waiting: dict[object, int] = {}  # tickets of waiting takers, oldest first -> ns
        self._live: set[int] = set()  # indexes of contexts that exist
        self._retry_after = 0  # no growth before this (after a failed one)
        self._closing = False
        try:
            for index in range(minimum):
                context = runtime.create_context(index)
                with self._lock:
                    self._push(context)
                self._live.add(index)
        except Exception:
            for context in self._free:
                context.close()
            raise
        self.stats.current = minimum
        self._policy: threading.Thread | None = None
        if self.elastic is not None:
            self._policy = threading.Thread(target=self._follow_load, name="trtpool-elastic", daemon=True)
            self._policy.start()

    # ---- hand-out -----------------------------------------------------------------

    def running(self) -> set[int]:
        """The indexes of the contexts running a batch now."""
        with self._lock:
            return set(self._taken_at)

    def take(self) -> ExecutionContext:
        """A free context, waiting for one if none is; hand it back with ``give``.

        Taking and giving back may happen on different threads (a pipelined
        batch is submitted in execute() and completed on a completion thread).
        """
        start = time.monotonic_ns()
        ticket = object()
        with self._lock:
            self._waiting[ticket] = start
            if not self._free:
                self._changed.notify()  # every context is busy: the policy may grow the pool
            while not (self._free and next(iter(self._waiting)) is ticket):
                self._available.wait()
            del self._waiting[ticket]
            context = self._free.pop()
            del self._idle_since[context.index]
            if self._free and self._waiting:
                self._available.notify_all()  # the next in line may take one too
            taken = time.monotonic_ns()
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
        with self._lock:
            self._push(context)

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

    def _push(self, context: ExecutionContext) -> None:
        """Make a context free (the lock held)."""
        self._free.append(context)
        self._idle_since[context.index] = time.monotonic_ns()
        self._available.notify_all()
        self._changed.notify()  # its idle time starts: the policy may close it later

    def _rebuild(self, broken: ExecutionContext, cause: Exception) -> ExecutionContext:
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

    # ---- elasticity -----------------------------------------------------------------

    def _follow_load(self) -> None:
        """The policy thread: grow or shrink by one context at a time, never on a request's thread."""
        while True:
            with self._lock:
                if self._closing:
                    return
                grow, idle = self._next_step()
            if grow:
                self._grow()
            elif idle is not None:
                self._shrink(idle)
                del idle  # its host memory goes with the last reference, not at the next step

    def _next_step(self) -> tuple[bool, ExecutionContext | None]:
        """What the policy does next (the lock held): grow; shrink, by the free context
        returned (taken out of the free ones); or neither, after waiting until one may be
        due or something changed."""
        policy = self.elastic
        assert policy is not None  # the policy thread runs only in an elastic pool
        now = time.monotonic_ns()
        due: list[int] = []
        if len(self._live) < self.size and not self._free and self._waiting:
            grow_at = max(next(iter(self._waiting.values())) + policy.grow_after_wait_us * 1000, self._retry_after)
            if grow_at <= now:
                return True, None
            due.append(grow_at)
        if len(self._live) > self.stats.minimum and self._free:
            longest_idle = self._free[0]  # the stack's bottom was given back first
            close_at = self._idle_since[longest_idle.index] + int(policy.shrink_after_idle_s * 1e9)
            if close_at <= now:
                self._free.pop(0)
                del self._idle_since[longest_idle.index]
                self._live.discard(longest_idle.index)
                self.stats.current = len(self._live)
                return False, longest_idle
            due.append(close_at)
        self._changed.wait((min(due) - now) / 1e9 if due else None)
        return False, None

    def _grow(self) -> None:
        assert self.elastic is not None  # the policy thread runs only in an elastic pool
        with self._lock:
            index = min(set(range(self.size)) - self._live)
            self._live.add(index)
        started = time.monotonic()
        try:
            free, need = self.runtime.free_memory_bytes(), self.runtime.context_memory_bytes()
            if free < need:  # stop before the device runs out, not at its last byte
                raise MemoryError(f"{free} bytes are free on the device and a context needs {need}")
            context = self.runtime.create_context(index)
        except Exception as exc:  # noqa: BLE001 - out of memory, or anything else: serve on with what there is
            with self._lock:
                self._live.discard(index)
                self.stats.grow_failures += 1
                self._retry_after = time.monotonic_ns() + int(self.elastic.shrink_after_idle_s * 1e9)
            log.warning(
                "elastic pool: context %d could not be made (%s: %s); serving on with %d context(s), next try in %g s",
                index,
                type(exc).__name__,
                exc,
                len(self._live),
                self.elastic.shrink_after_idle_s,
            )
            return
        with self._lock:
            self._push(context)
            self.stats.grown += 1
            self.stats.current = len(self._live)
        log.info(
            "elastic pool: context %d joined in %.3f s; %d context(s)",
            index,
            time.monotonic() - started,
            self.stats.current,
        )

    def _shrink(self, context: ExecutionContext) -> None:
        try:
            context.close()
        except Exception:
            log.exception("elastic pool: closing idle context %d", context.index)
        with self._lock:
            self.stats.shrunk += 1
        log.info("elastic pool: idle context %d closed; %d context(s)", context.index, self.stats.current)

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._changed.notify_all()
        if self._policy is not None:
            self._policy.join()
        while self._free:
            self._free.pop().close()
        self.runtime.close()
