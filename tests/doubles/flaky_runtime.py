"""FlakyOnnxRuntime: the real ONNX Runtime runtime whose contexts misbehave on
sentinel values, to inject failures and slow batches into a real server.

    an element == SENTINEL        the context breaks (and stays broken until rebuilt)
    an element == SLOW            the run takes SLOW_SECONDS longer
    an element == KILL            the run raises SystemExit, which ends the thread running it
    an element == KILL_AT_SUBMIT  submitting the batch raises SystemExit

and whose runtime cannot make contexts while told so:

    a file FAIL_CREATE_FILE in the model's version folder
                                  making any context but context 0 raises MemoryError
                                  (as a device out of memory would)
    runtime.creations_allowed     an Event: making a context waits until it is set
                                  (in-process tests hold a creation with it)

Registered as the runtime `test_flaky_onnxruntime` by the metadata beside it
(trtpool_test_doubles-0.dist-info: entry point group trtpool.runtimes). Only
the tests see it: the harness runs tritonserver from this folder, which the
Python backend stub has on its path, and importing this module puts the folder
on the importing process's path too (the builder loads a folder before writing
it, in the test or benchmark process). A config selects
it with  parameters { key: "runtime" value: { string_value: "test_flaky_onnxruntime" } }.
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np

from trtpool.gpu.device_tensors import to_host
from trtpool.runtimes.onnxruntime import OnnxContext, OnnxRuntime

SENTINEL = 1.0e30
SLOW = 2.0e30
KILL = 3.0e30
KILL_AT_SUBMIT = 4.0e30
SLOW_SECONDS = 1.0
REGISTERED_NAME = "test_flaky_onnxruntime"
FAIL_CREATE_FILE = "fail_context_creation"

if str(Path(__file__).parent) not in sys.path:  # the registration beside this file
    sys.path.append(str(Path(__file__).parent))


class FlakyContext(OnnxContext):
    broken = False
    slow = False
    kill = False

    def submit(self, parts):
        if self.broken:
            raise RuntimeError(f"context {self.index} is broken and must be rebuilt")
        first = np.concatenate([to_host(t) for t in next(iter(parts.values()))])
        if np.any(first == SENTINEL):
            self.broken = True
            raise RuntimeError(f"injected failure in context {self.index}")
        if np.any(first == KILL_AT_SUBMIT):
            raise SystemExit(f"injected SystemExit while submitting to context {self.index}")
        self.slow = bool(np.any(first == SLOW))
        self.kill = bool(np.any(first == KILL))
        super().submit(parts)

    def complete(self):
        if self.slow:
            time.sleep(SLOW_SECONDS)
        if self.kill:
            self.kill = False
            raise SystemExit(f"injected SystemExit while running in context {self.index}")
        return super().complete()


class FlakyOnnxRuntime(OnnxRuntime):
    name = "flaky-onnxruntime"

    def __init__(self, cfg, path) -> None:
        super().__init__(cfg, path)
        self.fail_marker = Path(path).parent / FAIL_CREATE_FILE
        self.creations_allowed = threading.Event()
        self.creations_allowed.set()

    def create_context(self, index: int) -> FlakyContext:
        if index > 0 and self.fail_marker.exists():
            raise MemoryError(f"injected: out of memory making context {index} ({self.fail_marker} exists)")
        self.creations_allowed.wait()
        return FlakyContext(self, index)
