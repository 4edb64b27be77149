"""A process file's preprocess faces, checked: what goes to the engine, or why a request is refused.

``preprocess`` takes one request, ``preprocess_batch`` the batch (one call; a call that raises
is made again for each request alone, so only the request that breaks it fails). Whatever user
code raises becomes that request's InvalidInput (the client's error); what it returns is checked
against the engine's signature, and a wrong return is a ProcessError (the file's fault).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trtpool.errors import InvalidInput, ProcessError, Refused
from trtpool.model.signature import Signature
from trtpool.model.validate import accept
from trtpool.process.faces import Faces
from trtpool.process.file import ProcessFile, Refusable, Tensors
from trtpool.process.observe import StageObserver, timed, why


def _names(inputs: Tensors) -> str:
    listed = ", ".join(f"'{name}'" for name in inputs)
    return f"input {listed}" if len(inputs) == 1 else f"inputs {listed}"


def _refusal(inputs: Tensors, file: str, face: str, exc: BaseException) -> InvalidInput:
    """The client's error for a request user code refused: a Refused says what it refuses itself;
    any other exception is named with its class (it may be the file's own fault)."""
    if isinstance(exc, Refused):
        return InvalidInput(f"{file} {face} refused {exc}")
    return InvalidInput(f"{_names(inputs)}: {file} {face} refused it: {why(exc)}")


class Preprocessor:
    def __init__(
        self, process: ProcessFile, signature: Signature, faces: Faces, device: str, observe: StageObserver
    ) -> None:
        """`faces`: which faces serve; `device`: the instance's, told to preprocess_batch."""
        self.process = process
        self.signature = signature
        self.faces = faces
        self.device = device
        self._observe = observe
        self._file = process.path.name

    def preprocess(self, inputs: Tensors) -> Tensors:
        """One request's engine inputs. Raises InvalidInput when preprocess refuses the
        request (the client's error), ProcessError when it returns what the engine cannot take."""
        function = self.process.preprocess
        if function is None:
            return inputs
        with timed(self._observe, "pre") as outcome:
            try:
                returned = function(inputs)
            except ProcessError:  # a preprocess worker process died: not the request's fault
                raise
            except BaseException as exc:  # user code: even SystemExit fails this request only
                raise _refusal(inputs, self._file, "preprocess()", exc) from exc
            tensors = self._engine_inputs(returned, "preprocess()")
            outcome["ok"] = True
            return tensors

    def _engine_inputs(self, returned: Any, face: str) -> Tensors:
        if not isinstance(returned, dict):
            expected = [spec.name for spec in self.signature.inputs]
            raise ProcessError(
                f"{self._file} {face} returned a {type(returned).__name__}, expected a dict "
                f"of the engine's inputs {expected}"
            )
        tensors = {name: value if hasattr(value, "dtype") else np.asarray(value) for name, value in returned.items()}
        try:
            tensors, _ = accept(self.signature, tensors)
        except InvalidInput as exc:
            raise ProcessError(f"{self._file} {face} returned what the engine cannot take: {exc}") from None
        return tensors

    def one(self, inputs: Tensors) -> Tensors | Exception:
        """One request's engine inputs, or the exception that refuses it, by the face that serves."""
        if self.faces.batch_pre:
            return self.preprocess_batch([inputs])[0]
        try:
            return self.preprocess(inputs)
        except Exception as exc:  # noqa: BLE001 - user code's failure refuses its request alone
            return exc

    def preprocess_batch(self, requests: Sequence[Tensors]) -> list[Tensors | Exception]:
        """Each request's engine inputs, or the exception that refuses it, from the batch face:
        one call for the batch; a call that raises is made again for each request alone."""
        returned = self._call_batch_face(list(requests))
        if isinstance(returned, list):
            return [self._engine_entry(requests[i], entry, i) for i, entry in enumerate(returned)]
        if len(requests) > 1:
            return [entry for inputs in requests for entry in self.preprocess_batch([inputs])]
        return [returned]

    def _call_batch_face(self, requests: list[Tensors]) -> list[Refusable] | Exception:
        """The batch face's list (checked: one entry per request), or the exception that refuses
        the batch: InvalidInput for the user's exception, ProcessError for a wrong return."""
        face = self.process.preprocess_batch
        assert face is not None  # the batch face serves only where the file has it (choose_faces)
        with timed(self._observe, "pre_batch") as outcome:
            try:
                returned = face(requests, self.device)
            except ProcessError as exc:
                return exc
            except BaseException as exc:  # noqa: BLE001 - user code: even SystemExit fails only these requests
                return _refusal(requests[0], self._file, "preprocess_batch()", exc)
            if not isinstance(returned, list | tuple) or len(returned) != len(requests):
                given = (
                    f"{len(returned)} entries" if isinstance(returned, list | tuple) else f"a {type(returned).__name__}"
                )
                return ProcessError(
                    f"{self._file} preprocess_batch() returned {given}, expected a list of "
                    f"{len(requests)} (one per request: its engine inputs, or an exception)"
                )
            outcome["ok"] = True
            return list(returned)

    def _engine_entry(self, inputs: Tensors, entry: Refusable, index: int) -> Tensors | Exception:
        if isinstance(entry, BaseException):
            self._observe("pre", 0, False)
            if isinstance(entry, InvalidInput | ProcessError):
                return entry
            return _refusal(inputs, self._file, "preprocess_batch()", entry)
        try:
            return self._engine_inputs(entry, "preprocess_batch()")
        except ProcessError as exc:
            return exc
