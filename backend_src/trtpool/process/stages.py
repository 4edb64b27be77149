"""A model's processing stages around the engine: what serving sees of a process file.

    requests -> preprocess (pre workers) -> the engine's batch -> postprocess (post workers) -> responses

Each mode hands a batch's requests and responders to the Stage: ``before`` (sync),
``before_then`` (pipelined: preprocessed on a worker, then started), ``before_each``
(decoupled: each request preprocessed, then queued). A request preprocess refuses is answered
at once; the others go on as engine inputs with responders that postprocess before they
answer (trtpool.process.postprocess). User code never raises into the instance.
The design: docs/design/stages.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from trtpool.engine.answer import Responder
from trtpool.errors import Overloaded
from trtpool.model.signature import Signature
from trtpool.process.faces import Faces
from trtpool.process.file import ProcessFile, Tensors
from trtpool.process.observe import StageObserver, unobserved
from trtpool.process.postprocess import Postprocessor
from trtpool.process.preprocess import Preprocessor

log = logging.getLogger("trtpool")


class Stage:
    def __init__(
        self,
        process: ProcessFile,
        signature: Signature,
        declared_outputs: dict[str, str],
        pre_threads: int,
        post_threads: int,
        max_waiting: int,
        observe: StageObserver | None = None,
        faces: Faces = Faces(),
        device: str = "cpu",
    ) -> None:
        """`declared_outputs`: config.pbtxt's outputs, name -> data_type (what postprocess must return).
        `max_waiting`: decoupled requests preprocessing or waiting for a pre worker (max_queue_size).
        `faces`: which faces serve (choose_faces); `device`: the instance's, told to preprocess_batch."""
        self.process = process
        self.faces = faces
        observe = observe or unobserved
        self.pre = Preprocessor(process, signature, faces, device, observe)
        self.post = Postprocessor(process, declared_outputs, faces, post_threads, observe)
        self._pre = ThreadPoolExecutor(pre_threads, thread_name_prefix="trtpool-pre")
        # Pipelined mode's batches being preprocessed: beyond these, execute() waits.
        self._batches = ThreadPoolExecutor(pre_threads, thread_name_prefix="trtpool-pre-batch")
        self._batch_slots = threading.Semaphore(pre_threads)
        self._max_waiting = max_waiting
        self._waiting_slots = threading.Semaphore(max_waiting)

    def before(
        self, requests: Sequence[Tensors], responders: Sequence[Responder], inline: bool = False
    ) -> tuple[list[Tensors], list[Responder]]:
        """Preprocess the requests, in parallel on the pre workers; answer each that fails.
        Returns the others' engine inputs and responders that postprocess before answering
        (`inline`: postprocess_batch runs in the thread that hands over the batch's last outputs)."""
        if self.faces.batch_pre:
            results = self.pre.preprocess_batch(requests)
        elif self.process.preprocess is None or len(requests) == 1:
            results = [self.pre.one(inputs) for inputs in requests]
        else:
            results = list(self._pre.map(self.pre.one, requests))
        kept_inputs, kept_responders, engine_inputs = [], [], []
        for inputs, result, responder in zip(requests, results, responders, strict=True):
            if isinstance(result, Exception):
                responder.fail(result)
            else:
                engine_inputs.append(result)
                kept_inputs.append(inputs)
                kept_responders.append(responder)
        return engine_inputs, self.post.answering(kept_responders, kept_inputs, inline)

    def before_then(
        self,
        requests: Sequence[Tensors],
        responders: Sequence[Responder],
        then: Callable[[list[Tensors], list[Responder]], None],
    ) -> None:
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

    def before_each(self, inputs: Tensors, responder: Responder, then: Callable[[Tensors, Responder], None]) -> None:
        """Preprocess one request on a pre worker, then hand it on (the decoupled queue);
        refused at once, as a full queue refuses, when max_waiting requests are ahead of it."""
        if not self._waiting_slots.acquire(blocking=False):
            responder.fail(
                Overloaded(
                    f"overloaded: {self._max_waiting} requests are being preprocessed or wait "
                    f"for it (max_queue_size {self._max_waiting}); retry later"
                )
            )
            return

        def run() -> None:
            try:
                result = self.pre.one(inputs)
            finally:
                self._waiting_slots.release()
            if isinstance(result, Exception):
                responder.fail(result)
                return
            try:
                then(result, self.post.answering([responder], [inputs])[0])
            except Exception as exc:  # never leave the request unanswered
                log.exception("queueing a preprocessed request")
                responder.fail(exc)

        self._pre.submit(run)

    def close_pre(self) -> None:
        """Finish the preprocessing in hand; its batches have reached the engine when this returns."""
        self._batches.shutdown(wait=True)
        self._pre.shutdown(wait=True)

    def close(self) -> None:
        """After close_pre and after the engine's last batch: its postprocessing is still answered."""
        self.close_pre()
        self.post.close()
