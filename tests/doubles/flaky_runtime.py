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

from trtpool.runtimes.onnxruntime import OnnxContext, OnnxRuntime

SENTINEL = 1.0e30
SLOW = 2.0e30
SLOW_SECONDS = 1.0


class FlakyContext(OnnxContext):
    broken = False

    def run(self, shapes):
        if self.broken:
            raise RuntimeError(f"context {self.index} is broken and must be rebuilt")
        first = next(iter(shapes))
        staged = self.inputs.view(first, shapes[first])
        if np.any(staged == SENTINEL):
            self.broken = True
            raise RuntimeError(f"injected failure in context {self.index}")
        if np.any(staged == SLOW):
            time.sleep(SLOW_SECONDS)
        return super().run(shapes)


class FlakyOnnxRuntime(OnnxRuntime):
    name = "flaky-onnxruntime"

    def create_context(self, index: int) -> FlakyContext:
        return FlakyContext(self, index)
