"""FlakyOnnxRuntime: the real ONNX Runtime runtime whose contexts misbehave on
sentinel values, to inject failures and slow batches into a real server.

    first element == SENTINEL  the context breaks (and stays broken until rebuilt)
    first element == SLOW      the run takes SLOW_SECONDS longer

Selected in a config with  parameters { key: "runtime" value: { string_value:
"tests.doubles.flaky_runtime:FlakyOnnxRuntime" } }.
"""
from __future__ import annotations

import time

import numpy as np

from trtpool.device_tensors import to_host
from trtpool.runtimes.onnxruntime import OnnxContext, OnnxRuntime

SENTINEL = 1.0e30
SLOW = 2.0e30
SLOW_SECONDS = 1.0


class FlakyContext(OnnxContext):
    broken = False
    slow = False

    def submit(self, parts):
        if self.broken:
            raise RuntimeError(f"context {self.index} is broken and must be rebuilt")
        first = np.concatenate([to_host(t) for t in next(iter(parts.values()))])
        if np.any(first == SENTINEL):
            self.broken = True
            raise RuntimeError(f"injected failure in context {self.index}")
        self.slow = bool(np.any(first == SLOW))
        super().submit(parts)

    def complete(self):
        if self.slow:
            time.sleep(SLOW_SECONDS)
        return super().complete()


class FlakyOnnxRuntime(OnnxRuntime):
    name = "flaky-onnxruntime"

    def create_context(self, index: int) -> FlakyContext:
        return FlakyContext(self, index)
