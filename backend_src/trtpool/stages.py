"""A model's processing stages around the engine: what serving sees of a process file.

    requests -> preprocess (pre workers, one request each, in parallel)
             -> the engine's batch (the runner, any mode; the context's buffers)
             -> postprocess (post workers, one request each) -> responses

The handlers hand a batch's requests and responders to the stage: each request
is preprocessed (a failure answers that request alone), and the rest go on as
engine inputs with responders that postprocess before they answer.

    sync        ``before``: execute() preprocesses its batch, runs it, returns
    pipelined   ``before_then``: execute() returns while its batch is preprocessed;
                up to ``pre_threads`` batches are preprocessed at once, then each
                is started on a context from the worker that preprocessed it
    decoupled   ``before_each``: each request is preprocessed, then queued;
                ``max_queue_size`` bounds the requests waiting for or in
                preprocessing, as it bounds the queue after it

Postprocessing runs on the post workers in every mode, so a batch's
postprocessing overlaps the next batch's preprocessing and compute. User code
never raises into the instance: its exceptions become the request's error.

With the batch faces (``preprocess_batch``, ``postprocess_batch``; which faces
serve: ``choose_faces``) one call takes the batch's requests together, on the
worker that holds the batch: on a GPU instance it decodes the batch on the
device and hands the engine device tensors. It answers per request: an
exception in its list refuses that request alone, and a call that raises is
retried one request at a time, so only the request that breaks it fails.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtpool.engine.answer import Responder
from trtpool.errors import InvalidInput, Overloaded, ProcessError, Refused
from trtpool.model.signature import TRITON_DTYPES, Signature
from trtpool.model.validate import check_request
from trtpool.process_file import ProcessFile, Refusable, Tensors

log = logging.getLogger("trtpool")

# stage ("pre", "post", or "pre_batch", "post_batch" for a batch face's call), nanoseconds
# it took, whether it succeeded (a batch face's refused requests: one failure each, 0 ns)
StageObserver = Callable[[str, int, bool], None]
_NUMPY_DTYPES = {name: dtype for dtype, name in TRITON_DTYPES.items()}


@dataclass(frozen=True)
class Faces:
    """Which of a process file's faces serve: the batch face (True) or the per-request one."""

    batch_pre: bool = False
    batch_post: bool = False


def choose_faces(process: ProcessFile, wanted: str, device: str) -> Faces:
    """`wanted` is the parameter process_faces: "batch" or "request" prefers those faces,
    "auto" the batch faces on a GPU instance (decode on the device) and the per-request
    faces on a CPU one (requests in parallel on the pre workers). A face the file lacks
    gives way to the other of its side."""
    prefer_batch = wanted == "batch" or (wanted == "auto" and device != "cpu")

    def batch(per_request: Callable | None, whole_batch: Callable | None) -> bool:
        return whole_batch is not None and (per_request is None or prefer_batch)
    return Faces(batch(process.preprocess, process.preprocess_batch),
                 batch(process.postprocess, process.postprocess_batch))


def _names(inputs: Tensors) -> str:
    listed = ", ".join(f"'{name}'" for name in inputs)
    return f"input {listed}" if len(inputs) == 1 else f"inputs {listed}"


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _refusal(inputs: Tensors, file: str, face: str, exc: BaseException) -> InvalidInput:
    """The client's error for a request user code refused: a Refused says what it refuses itself;
    any other exception is named with its class (it may be the file's own fault)."""
    if isinstance(exc, Refused):
        return InvalidInput(f"{file} {face} refused {exc}")
    return InvalidInput(f"{_names(inputs)}: {file} {face} refused it: {_why(exc)}")


class Stage:
    def __init__(self, process: ProcessFile, signature: Signature, declared_outputs: dict[str, str],
                 pre_threads: int, post_threads: int, max_waiting: int,
                 observe: StageObserver | None = None, faces: Faces = Faces(), device: str = "cpu") -> None:
        """`declared_outputs`: config.pbtxt's outputs, name -> data_type (what postprocess must return).
        `max_waiting`: decoupled requests preprocessing or waiting for a pre worker (max_queue_size).
        `faces`: which faces serve (choose_faces); `device`: the instance's, told to preprocess_batch."""
        self.process = process
        self.faces = faces
        self.device = device
        self.signature = signature
        self.declared_outputs = declared_outputs
        self._declared_names = sorted(declared_outputs)
        self._output_dtypes = {name: _NUMPY_DTYPES.get(data_type) for name, data_type in declared_outputs.items()}
        self._observe = observe or (lambda stage, ns, ok: None)
        self._file = process.path.name
        self._pre = ThreadPoolExecutor(pre_threads, thread_name_prefix="trtpool-pre")
        # Pipelined mode's batches being preprocessed: beyond these, execute() waits.
        self._batches = ThreadPoolExecutor(pre_threads, thread_name_prefix="trtpool-pre-batch")
        self._batch_slots = threading.Semaphore(pre_threads)
        self._post = ThreadPoolExecutor(post_threads, thread_name_prefix="trtpool-post")
        self._max_waiting = max_waiting
        self._waiting_slots = threading.Semaphore(max_waiting)

    # --- preprocessing ------------------------------------------------------------

    def preprocess(self, inputs: Tensors) -> Tensors:
        """One request's engine inputs. Raises InvalidInput when preprocess refuses the
        request (the client's error), ProcessError when it returns what the engine cannot take."""
        function = self.process.preprocess
        if function is None:
            return inputs
        with self._timed("pre") as outcome:
            try:
                returned = function(inputs)
            except ProcessError:  # a preprocess worker process died: not the request's fault
                raise
            except BaseException as exc:  # user code: even SystemExit fails this request only
                raise _refusal(inputs, self._file, "preprocess()", exc) from exc
            tensors = self._engine_inputs(returned, "preprocess()")
            outcome["ok"] = True
            return tensors

    @contextmanager
    def _timed(self, stage: str) -> Iterator[dict[str, bool]]:
        """Time the block as `stage`; it sets outcome["ok"] when it succeeded."""
        start = time.perf_counter_ns()
        outcome = {"ok": False}
        try:
            yield outcome
        finally:
            self._observe(stage, time.perf_counter_ns() - start, outcome["ok"])

    def _engine_inputs(self, returned: Any, face: str) -> Tensors:
        if not isinstance(returned, dict):
            expected = [spec.name for spec in self.signature.inputs]
            raise ProcessError(f"{self._file} {face} returned a {type(returned).__name__}, expected a dict "
                               f"of the engine's inputs {expected}")
        tensors = {name: value if hasattr(value, "dtype") else np.asarray(value) for name, value in returned.items()}
        try:
            check_request(self.signature, tensors)
        except InvalidInput as exc:
            raise ProcessError(f"{self._file} {face} returned what the engine cannot take: {exc}") from None
        return tensors

    def _preprocess_or_error(self, inputs: Tensors) -> Tensors | Exception:
        if self.faces.batch_pre:
            return self.preprocess_batch([inputs])[0]
        try:
            return self.preprocess(inputs)
        except Exception as exc:
            return exc

    def before(self, requests: Sequence[Tensors], responders: Sequence[Responder], inline: bool = False
               ) -> tuple[list[Tensors], list[Responder]]:
        """Preprocess the requests, in parallel on the pre workers; answer each that fails.
        Returns the others' engine inputs and responders that postprocess before answering
        (`inline`: postprocess_batch runs in the thread that hands over the batch's last outputs)."""
        if self.faces.batch_pre:
            results = self.preprocess_batch(requests)
        elif self.process.preprocess is None or len(requests) == 1:
            results = [self._preprocess_or_error(inputs) for inputs in requests]
        else:
            results = list(self._pre.map(self._preprocess_or_error, requests))
        kept_inputs, kept_responders, engine_inputs = [], [], []
        for inputs, result, responder in zip(requests, results, responders):
            if isinstance(result, Exception):
                responder.fail(result)
            else:
                engine_inputs.append(result)
                kept_inputs.append(inputs)
                kept_responders.append(responder)
        return engine_inputs, self.answering_all(kept_responders, kept_inputs, inline)

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
        with self._timed("pre_batch") as outcome:
            try:
                returned = self.process.preprocess_batch(requests, self.device)
            except ProcessError as exc:
                return exc
            except BaseException as exc:  # user code: even SystemExit fails only these requests
                return _refusal(requests[0], self._file, "preprocess_batch()", exc)
            if not isinstance(returned, list | tuple) or len(returned) != len(requests):
                given = f"{len(returned)} entries" if isinstance(returned, list | tuple) else \
                    f"a {type(returned).__name__}"
                return ProcessError(f"{self._file} preprocess_batch() returned {given}, expected a list of "
                                    f"{len(requests)} (one per request: its engine inputs, or an exception)")
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

    def before_then(self, requests: Sequence[Tensors], responders: Sequence[Responder],
                    then: Callable[[list[Tensors], list[Responder]], None]) -> None:
        """``before`` on a worker, then hand the batch on (to the pipeline, which starts it on a
        context); returns at once unless every slot holds a batch (then Triton's queue fills)."""
        self._batch_slots.acquire()

        def run() -> None:
            try:
                then(*self.before(requests, responders))
            except Exception as exc:  # never leave a request unanswered (a responder answers once)
                log.exception("preprocessing a batch")
                for responder in responders:
                    responder.fail(exc)
            finally:
                self._batch_slots.release()
        self._batches.submit(run)

    def before_each(self, inputs: Tensors, responder: Responder,
                    then: Callable[[Tensors, Responder], None]) -> None:
        """Preprocess one request on a pre worker, then hand it on (the decoupled queue);
        refused at once, as a full queue refuses, when max_waiting requests are ahead of it."""
        if not self._waiting_slots.acquire(blocking=False):
            responder.fail(Overloaded(f"overloaded: {self._max_waiting} requests are being preprocessed or wait "
                                      f"for it (max_queue_size {self._max_waiting}); retry later"))
            return

        def run() -> None:
            try:
                result = self._preprocess_or_error(inputs)
            finally:
                self._waiting_slots.release()
            if isinstance(result, Exception):
                responder.fail(result)
                return
            try:
                then(result, self.answering_all([responder], [inputs])[0])
            except Exception as exc:  # never leave the request unanswered
                log.exception("queueing a preprocessed request")
                responder.fail(exc)
        self._pre.submit(run)

    # --- postprocessing -----------------------------------------------------------

    def answering_all(self, responders: list[Responder], inputs: list[Tensors], inline: bool = False
                      ) -> list[Responder]:
        """Responders that postprocess before they answer: each alone, or the batch together
        (on a post worker, or with `inline` in the thread that completes the batch)."""
        if self.faces.batch_post:
            batch = _BatchPostprocessing(self, inputs, inline)
            return [batch.member(i, responder) for i, responder in enumerate(responders)]
        if self.process.postprocess is None:
            return list(responders)
        return [_Postprocessing(self, responder, request) for responder, request in zip(responders, inputs)]

    def postprocess(self, outputs: Tensors, inputs: Tensors) -> Tensors:
        """The response's outputs; ProcessError naming what postprocess did wrong."""
        function = self.process.postprocess
        assert function is not None
        with self._timed("post") as outcome:
            try:
                returned = function(outputs, inputs)
            except BaseException as exc:
                raise ProcessError(f"{self._file} postprocess() raised {_why(exc)}") from exc
            tensors = self._response_outputs(returned)
            outcome["ok"] = True
            return tensors

    def postprocess_batch(self, outputs: list[Tensors], inputs: list[Tensors]) -> list[Tensors | Exception]:
        """The responses' outputs for requests answered together, or each one's error."""
        with self._timed("post_batch") as outcome:
            try:
                returned = self.process.postprocess_batch(outputs, inputs)
            except BaseException as exc:
                error = ProcessError(f"{self._file} postprocess_batch() raised {_why(exc)}")
                return [error] * len(outputs)
            if not isinstance(returned, list | tuple) or len(returned) != len(outputs):
                error = ProcessError(f"{self._file} postprocess_batch() returned a {type(returned).__name__}, "
                                     f"expected a list of {len(outputs)} (one per request)")
                return [error] * len(outputs)
            outcome["ok"] = True
        answers: list[Tensors | Exception] = []
        for entry in returned:
            try:
                if isinstance(entry, BaseException):
                    raise ProcessError(f"{self._file} postprocess_batch() failed the request: {_why(entry)}")
                answers.append(self._response_outputs(entry, "postprocess_batch()"))
            except ProcessError as exc:
                self._observe("post", 0, False)
                answers.append(exc)
        return answers

    def _response_outputs(self, returned: Any, face: str = "postprocess()") -> Tensors:
        declared = self._declared_names
        if not isinstance(returned, dict) or sorted(returned) != declared:
            given = sorted(returned) if isinstance(returned, dict) else f"a {type(returned).__name__}"
            raise ProcessError(f"{self._file} {face} returned {given}, expected a dict of the outputs "
                               f"config.pbtxt declares: {declared}")
        outputs = {}
        for name, value in returned.items():
            data_type = self.declared_outputs[name]
            if data_type == "TYPE_STRING":
                outputs[name] = np.asarray(value, dtype=np.object_)
                continue
            array = np.asarray(value)
            want = self._output_dtypes[name]
            if array.dtype != want:
                raise ProcessError(f"{self._file} {face} returned output '{name}' as {array.dtype}, "
                                   f"config.pbtxt declares {data_type} ({want})")
            outputs[name] = array
        return outputs

    def answer_later(self, responder: Responder, outputs: Tensors, inputs: Tensors) -> None:
        """Postprocess on a post worker, then answer (`outputs` must outlive this call)."""
        self._post.submit(self._answer, responder, outputs, inputs)

    def _answer(self, responder: Responder, outputs: Tensors, inputs: Tensors) -> None:
        try:
            final = self.postprocess(outputs, inputs)
        except Exception as exc:
            log.warning("%s", exc)
            responder.fail(exc)
            return
        responder.send(final)

    def answer_batch_later(self, members: list[tuple[Responder, Tensors, Tensors]]) -> None:
        """postprocess_batch on a post worker for (responder, outputs, inputs) of a batch, then answer."""
        self._post.submit(self.answer_batch, members)

    def answer_batch(self, members: list[tuple[Responder, Tensors, Tensors]]) -> None:
        responders, outputs, inputs = zip(*members)
        for responder, answer in zip(responders, self.postprocess_batch(list(outputs), list(inputs))):
            if isinstance(answer, Exception):
                log.warning("%s", answer)
                responder.fail(answer)
            else:
                responder.send(answer)

    def close_pre(self) -> None:
        """Finish the preprocessing in hand; its batches have reached the engine when this returns."""
        self._batches.shutdown(wait=True)
        self._pre.shutdown(wait=True)

    def close(self) -> None:
        """After close_pre and after the engine's last batch: its postprocessing is still answered."""
        self.close_pre()
        self._post.shutdown(wait=True)


class _Wrapping:
    """A responder in front of a request's own: failing and cancellation go straight to it."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder

    def fail(self, error: Exception) -> None:
        self.responder.fail(error)

    def cancelled(self) -> bool:
        return self.responder.cancelled()


class _Postprocessing(_Wrapping):
    """A responder that postprocesses on the stage's post workers before it answers."""

    def __init__(self, stage: Stage, responder: Responder, inputs: Tensors) -> None:
        super().__init__(responder)
        self.stage = stage
        self.inputs = inputs

    def send(self, outputs: Tensors) -> None:
        # Every mode hands a staged batch's outputs over detached: valid on another thread.
        self.stage.answer_later(self.responder, outputs, self.inputs)


class _BatchPostprocessing:
    """The requests of one batch, postprocessed together once each has its outputs or its error.

    The runner answers a batch's requests one by one (and a batch split across
    contexts, or retried, in several goes): each member's outputs are held until
    the last member is in, then postprocess_batch takes those that have outputs.
    A member counts once, as a responder answers once, whatever comes after."""

    def __init__(self, stage: Stage, inputs: list[Tensors], inline: bool = False) -> None:
        self.stage = stage
        self.inputs = inputs
        self.inline = inline
        self._lock = threading.Lock()
        self._arrived: set[int] = set()
        self._ready: dict[int, tuple[Responder, Tensors, Tensors]] = {}

    def member(self, index: int, responder: Responder) -> Responder:
        return _BatchMember(self, index, responder)

    def arrived(self, index: int, responder: Responder, outputs: Tensors | None) -> None:
        """Member `index` is in: with its outputs, or None once it has been failed."""
        with self._lock:
            if index in self._arrived:
                return
            self._arrived.add(index)
            if outputs is not None:
                self._ready[index] = (responder, outputs, self.inputs[index])
            if len(self._arrived) < len(self.inputs):
                return
            members = [self._ready[i] for i in sorted(self._ready)]
        if members and self.inline:
            self.stage.answer_batch(members)
        elif members:
            self.stage.answer_batch_later(members)


class _BatchMember(_Wrapping):
    """One request's responder within a _BatchPostprocessing."""

    def __init__(self, batch: _BatchPostprocessing, index: int, responder: Responder) -> None:
        super().__init__(responder)
        self.batch = batch
        self.index = index

    def send(self, outputs: Tensors) -> None:
        # Every mode hands a staged batch's outputs over detached: valid on another thread.
        self.batch.arrived(self.index, self.responder, outputs)

    def fail(self, error: Exception) -> None:
        super().fail(error)
        self.batch.arrived(self.index, self.responder, None)
