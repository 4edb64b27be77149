"""How long each call of user code took and whether it succeeded, for the stage metrics.

The observer is told (stage, nanoseconds, ok) per call: stage "pre" or "post" for a
per-request face, "pre_batch" or "post_batch" for a batch face's call; a request a batch
face refuses counts as one failed "pre" or "post" of 0 ns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

StageObserver = Callable[[str, int, bool], None]


def unobserved(stage: str, ns: int, ok: bool) -> None:
    """The observer when nobody observes."""


@contextmanager
def timed(observe: StageObserver, stage: str) -> Iterator[dict[str, bool]]:
    """Time the block as `stage`; it sets outcome["ok"] when it succeeded."""
    start = time.perf_counter_ns()
    outcome = {"ok": False}
    try:
        yield outcome
    finally:
        observe(stage, time.perf_counter_ns() - start, outcome["ok"])


def why(exc: BaseException) -> str:
    """An exception as a message names it: its class, then its text."""
    return f"{type(exc).__name__}: {exc}"
