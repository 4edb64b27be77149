"""A process file's postprocess faces, run on the post workers before a request is answered.

``answering`` gives each request a responder that postprocesses before it answers: alone
(``postprocess``), or with the rest of its batch (``postprocess_batch``, once every member
has its outputs or its error). What user code returns is checked against the outputs
config.pbtxt declares; whatever it raises or returns wrongly is that request's ProcessError.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from trtpool.engine.answer import Responder
from trtpool.errors import ProcessError
from trtpool.model.dtypes import NUMPY_DTYPES
from trtpool.process.answering import BatchPostprocessing, Postprocessing
from trtpool.process.faces import Faces
from trtpool.process.file import ProcessFile, Tensors
from trtpool.process.observe import StageObserver, timed, why

log = logging.getLogger("trtpool")

Member = tuple[Responder, Tensors, Tensors]  # a request's responder, its engine outputs, its inputs


class Postprocessor:
    def __init__(
        self, process: ProcessFile, declared_outputs: dict[str, str], faces: Faces, threads: int, observe: StageObserver
    ) -> None:
        """`declared_outputs`: config.pbtxt's outputs, name -> data_type (what postprocess must return)."""
        self.process = process
        self.faces = faces
        self.declared_outputs = declared_outputs
        self._declared_names = sorted(declared_outputs)
        self._output_dtypes = {name: NUMPY_DTYPES.get(data_type) for name, data_type in declared_outputs.items()}
        self._observe = observe
        self._file = process.path.name
        self._post = ThreadPoolExecutor(threads, thread_name_prefix="trtpool-post")

    def answering(self, responders: list[Responder], inputs: list[Tensors], inline: bool = False) -> list[Responder]:
        """Responders that postprocess before they answer: each alone, or the batch together
        (on a post worker, or with `inline` in the thread that completes the batch)."""
        if self.faces.batch_post:
            batch = BatchPostprocessing(self, inputs, inline)
            return [batch.member(i, responder) for i, responder in enumerate(responders)]
        if self.process.postprocess is None:
            return list(responders)
        return [Postprocessing(self, responder, request) for responder, request in zip(responders, inputs, strict=True)]

    def postprocess(self, outputs: Tensors, inputs: Tensors) -> Tensors:
        """The response's outputs; ProcessError naming what postprocess did wrong."""
        function = self.process.postprocess
        assert function is not None
        with timed(self._observe, "post") as outcome:
            try:
                returned = function(outputs, inputs)
            except BaseException as exc:
                raise ProcessError(f"{self._file} postprocess() raised {why(exc)}") from exc
            tensors = self._response_outputs(returned)
            outcome["ok"] = True
            return tensors

    def postprocess_batch(self, outputs: list[Tensors], inputs: list[Tensors]) -> list[Tensors | Exception]:
        """The responses' outputs for requests answered together, or each one's error."""
        face = self.process.postprocess_batch
        assert face is not None  # the batch face serves only where the file has it (choose_faces)
        with timed(self._observe, "post_batch") as outcome:
            try:
                returned = face(outputs, inputs)
            except BaseException as exc:  # noqa: BLE001 - user code: even SystemExit fails only these requests
                error = ProcessError(f"{self._file} postprocess_batch() raised {why(exc)}")
                return [error] * len(outputs)
            if not isinstance(returned, list | tuple) or len(returned) != len(outputs):
                error = ProcessError(
                    f"{self._file} postprocess_batch() returned a {type(returned).__name__}, "
                    f"expected a list of {len(outputs)} (one per request)"
                )
                return [error] * len(outputs)
            outcome["ok"] = True
        answers: list[Tensors | Exception] = []
        for entry in returned:
            try:
                if isinstance(entry, BaseException):
                    raise ProcessError(f"{self._file} postprocess_batch() failed the request: {why(entry)}")
                answers.append(self._response_outputs(entry, "postprocess_batch()"))
            except ProcessError as exc:
                self._observe("post", 0, False)
                answers.append(exc)
        return answers

    def _response_outputs(self, returned: Any, face: str = "postprocess()") -> Tensors:
        declared = self._declared_names
        if not isinstance(returned, dict) or sorted(returned) != declared:
            given = sorted(returned) if isinstance(returned, dict) else f"a {type(returned).__name__}"
            raise ProcessError(
                f"{self._file} {face} returned {given}, expected a dict of the outputs "
                f"config.pbtxt declares: {declared}"
            )
        outputs = {}
        for name, value in returned.items():
            data_type = self.declared_outputs[name]
            if data_type == "TYPE_STRING":
                outputs[name] = np.asarray(value, dtype=np.object_)
                continue
            array = np.asarray(value)
            want = self._output_dtypes[name]
            if array.dtype != want:
                raise ProcessError(
                    f"{self._file} {face} returned output '{name}' as {array.dtype}, "
                    f"config.pbtxt declares {data_type} ({want})"
                )
            outputs[name] = array
        return outputs

    def answer_later(self, responder: Responder, outputs: Tensors, inputs: Tensors) -> None:
        """Postprocess on a post worker, then answer (`outputs` must outlive this call)."""
        self._post.submit(self._answer, responder, outputs, inputs)

    def _answer(self, responder: Responder, outputs: Tensors, inputs: Tensors) -> None:
        try:
            final = self.postprocess(outputs, inputs)
        except Exception as exc:  # noqa: BLE001 - user code's failure answers its request, the worker goes on
            log.warning("%s", exc)
            responder.fail(exc)
            return
        responder.send(final)

    def answer_batch_later(self, members: list[Member]) -> None:
        """postprocess_batch on a post worker for (responder, outputs, inputs) of a batch, then answer."""
        self._post.submit(self.answer_batch, members)

    def answer_batch(self, members: list[Member]) -> None:
        responders, outputs, inputs = zip(*members, strict=True)
        for responder, answer in zip(responders, self.postprocess_batch(list(outputs), list(inputs)), strict=True):
            if isinstance(answer, Exception):
                log.warning("%s", answer)
                responder.fail(answer)
            else:
                responder.send(answer)

    def close(self) -> None:
        """After the engine's last batch: its postprocessing is still answered."""
        self._post.shutdown(wait=True)
