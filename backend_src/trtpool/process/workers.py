"""process.py's ``preprocess`` in worker processes (parameter ``preprocess_processes``).

Each pre thread hands its request to one of N spawned workers, each of which imports process.py
and runs its ``setup`` once; the checks and errors stay in the stub. A worker that dies fails the
requests it held (ProcessError) and the pool is made anew. Why processes, and how they end with
the stub: docs/design/preprocess-workers.md.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

from trtpool.errors import ConfigError, ProcessError
from trtpool.process.file import ProcessFile, Tensors, load_process_file

log = logging.getLogger("trtpool")

STARTUP_TIMEOUT_S = 120  # a worker imports process.py and its libraries, then runs setup
PARENT_CHECK_S = 1.0  # how often a worker looks whether its stub is still there

_worker_process: ProcessFile | None = None  # in a worker: the model's process.py, set up


def _exit_with_the_stub(stub: int) -> None:
    """End this worker once the stub that started it is gone (killed, crashed): a
    worker blocked on its task queue would otherwise outlive it, and the watchdog's
    reload would leave it behind."""
    while os.getppid() == stub:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def _start_worker(stub: int, version_dir: str, model_config: dict[str, Any]) -> None:
    global _worker_process
    threading.Thread(target=_exit_with_the_stub, args=(stub,), name="trtpool-stub-watch", daemon=True).start()
    _worker_process = load_process_file(Path(version_dir), model_config)


def _started() -> bool:
    return _worker_process is not None


def _preprocess_in_worker(inputs: Tensors) -> Tensors:
    """preprocess in this worker. An exception the stub could not unpickle (one whose
    __init__ takes other arguments) would break the whole pool: it goes back as its text."""
    assert _worker_process is not None and _worker_process.preprocess is not None
    try:
        return _worker_process.preprocess(inputs)
    except BaseException as exc:
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:  # noqa: BLE001 - whatever unpickling raises, the text goes back instead
            raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
        raise


def environment_python() -> str:
    """The Python interpreter of the running environment (in the stub, sys.executable
    is the stub binary, which cannot run a worker)."""
    if Path(sys.executable).name.startswith("python"):
        return sys.executable
    for name in (f"python{sys.version_info.major}.{sys.version_info.minor}", "python3", "python"):
        candidate = Path(sys.prefix) / "bin" / name
        if candidate.is_file():
            return str(candidate)
    raise RuntimeError(f"no Python interpreter found in {sys.prefix}/bin for preprocess_processes")


def _match_the_tracker_to_the_interpreter() -> None:
    """A stub linked to an older libpython than the environment's standard library (the
    set-up here: Debian's libpython3.11.so of 3.11.2 under pyenv's 3.11.7 library) has a
    C RLock without ``_recursion_count``, which multiprocessing's resource tracker of the
    newer library calls before it starts: give the tracker the library's own
    pure-Python RLock, which has it."""
    tracker: Any = resource_tracker._resource_tracker  # its _lock is private: typeshed leaves it out
    if not hasattr(tracker._lock, "_recursion_count"):
        tracker._lock = threading._PyRLock()  # type: ignore[attr-defined]  # private: typeshed leaves it out


class ProcessPreprocess:
    """A callable with preprocess's signature that runs it in one of `processes` workers."""

    def __init__(self, version_dir: Path, model_config: dict[str, Any], processes: int) -> None:
        _match_the_tracker_to_the_interpreter()
        self._context = multiprocessing.get_context("spawn")
        self._context.set_executable(environment_python())
        self._arguments = (os.getpid(), str(version_dir), model_config)
        self._processes = processes
        self._lock = threading.Lock()
        self._pool = self._new_pool()
        try:  # the workers started and set up now: a failure is the load's, not a request's
            for started in [self._pool.submit(_started) for _ in range(processes)]:
                started.result(timeout=STARTUP_TIMEOUT_S)
        except Exception as exc:
            self._pool.shutdown(wait=False, cancel_futures=True)
            raise ConfigError(
                f"parameter 'preprocess_processes': the worker processes did not start ({type(exc).__name__}: {exc})"
            ) from exc

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            self._processes, mp_context=self._context, initializer=_start_worker, initargs=self._arguments
        )

    def __call__(self, inputs: Tensors) -> Tensors:
        pool = self._pool
        try:
            return pool.submit(_preprocess_in_worker, inputs).result()
        except BrokenProcessPool as exc:
            with self._lock:
                if self._pool is pool:  # the first to see it replaces it
                    log.error("a preprocess worker process died; starting the pool again")
                    self._pool = self._new_pool()
            raise ProcessError(
                f"a preprocess worker process died while this request was in its pool ({exc}); "
                f"the pool was started again: retry"
            ) from exc

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
