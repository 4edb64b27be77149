"""FlakyOnnxRuntime: the real ONNX Runtime runtime whose contexts break when a
batch carries the sentinel value, to inject context failures under load.

Selected in a config with  parameters { key: "runtime" value: { string_value:
"tests.doubles.flaky_runtime:FlakyOnnxRuntime" } }.
"""
from __future__ import annotations

import numpy as np

from trtpool.runtimes.onnxruntime import OnnxContext, OnnxRuntime

SENTINEL = 1.0e30  # a request whose first element is this breaks its context


class FlakyContext(OnnxContext):
    broken = False

    def run(self, shapes):
        if self.broken:
            raise RuntimeError(f"context {self.index} is broken and must be rebuilt")
        first = next(iter(shapes))
        if np.any(self.inputs.view(first, shapes[first]) == SENTINEL):
            self.broken = True
            raise RuntimeError(f"injected failure in context {self.index}")
        return super().run(shapes)


class FlakyOnnxRuntime(OnnxRuntime):
    name = "flaky-onnxruntime"

    def create_context(self, index: int) -> FlakyContext:
        return FlakyContext(self, index)
