"""Triton status codes carried across a front's BLS hop.

tritonserver 2.51's Python backend hands a front its target's error message but not its code, so
a decoupled trtpool model's errors other than INTERNAL end in " [status <CODE>]" (tagging), and a
front turns such an error back into one with that code (untagging). Both are views of pb_utils
with one attribute replaced. Where the code is lost: docs/design/status-relay.md.
"""

from __future__ import annotations

import re
from typing import Any

from trtpool.triton.pb_api import BlsPbUtils, ErrorCode, InferenceResponse, PbUtils, TritonError, TritonErrorType

TAGGED = re.compile(r"^(?P<message>.*) \[status (?P<code>[A-Z_]+)\]$", re.DOTALL)
CODES = ("INVALID_ARG", "UNAVAILABLE", "CANCELLED", "NOT_FOUND", "UNSUPPORTED", "ALREADY_EXISTS", "UNKNOWN")


class _Overlay:
    """pb_utils with some attributes replaced."""

    def __init__(self, pb_utils: PbUtils, **replaced: object) -> None:
        self._pb = pb_utils
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pb, name)


class _TaggingError:
    """Stands in for pb_utils.TritonError: the same codes; an error's message
    ends with its code's name unless the code is INTERNAL."""

    def __init__(self, triton_error: TritonErrorType) -> None:
        self._error = triton_error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._error, name)  # INVALID_ARG, UNAVAILABLE, ...

    def __call__(self, message: str, code: ErrorCode | None = None) -> TritonError:
        error = self._error
        code = error.INTERNAL if code is None else code
        name = next((n for n in CODES if getattr(error, n) == code), None)
        return error(f"{message} [status {name}]" if name else message, code)


def tagging(pb_utils: PbUtils) -> PbUtils:
    """pb_utils for a model a front may forward to: its errors name their code."""
    return _Overlay(pb_utils, TritonError=_TaggingError(pb_utils.TritonError))


def untagged(pb_utils: PbUtils, error: TritonError) -> TritonError:
    """A TritonError with the code its message names, or `error` as it is."""
    match = TAGGED.match(error.message())
    if match is None or match["code"] not in CODES:
        return error
    return pb_utils.TritonError(match["message"], getattr(pb_utils.TritonError, match["code"]))


def untagging(pb_utils: BlsPbUtils) -> BlsPbUtils:
    """pb_utils for a front: the responses it builds from its target's errors carry their codes."""

    def response(*args: Any, error: TritonError | None = None, **kwargs: Any) -> InferenceResponse:
        if error is not None:
            kwargs["error"] = untagged(pb_utils, error)
        return pb_utils.InferenceResponse(*args, **kwargs)

    return _Overlay(pb_utils, InferenceResponse=response)
