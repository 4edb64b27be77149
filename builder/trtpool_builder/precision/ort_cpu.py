"""The builder's ONNX Runtime sessions: on the CPU, with ONNX Runtime's own warnings kept out
of what users read (graph clean-up notes such as CleanUnusedInitializersAndNodeArgs, one per
unused initializer: four for the tiny example, hundreds after an fp16 conversion). Its
errors still reach the user, as exceptions and at its ERROR level."""

from __future__ import annotations

from typing import Any

from trtpool_builder.errors import BuildError

ORT_ERROR = 3  # ONNX Runtime's log severities: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal


def cpu_session(model: str | bytes, what: str) -> Any:
    """An onnxruntime.InferenceSession of `model` (a path or serialized bytes); BuildError naming
    `what` if ONNX Runtime cannot load it."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = ORT_ERROR
    try:
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types for unsupported graphs
        raise BuildError(f"ONNX Runtime cannot load {what}: {exc}") from exc
