"""The engine host process: one per model version per device, shared by its Triton instances.

Started by the first instance (trtpool.host.launch) as ``python -m trtpool.host``, with
its spec as JSON on stdin and the listening socket inherited. It loads the model once
(``ModelInstance``: runtime, context pool, process file stages), answers every
instance's hello with the model's signature, merges their batches (engine.Merger) and
writes the answers into each instance's output slab.

It ends by itself: when the last instance has gone, when tritonserver is gone, or when
no instance came within STARTUP_ORPHAN_S of its start. A model that fails to load is
reported to every instance that says hello (the load error Triton shows), until
they have gone. A connection that sends a bad message is dropped alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from trtpool.errors import ProcessError, TrtpoolError
from trtpool.gpu import cuda
from trtpool.gpu.device_tensors import is_device
from trtpool.gpu.pinned_regions import PinnedRegion, pinned
from trtpool.host import protocol, wire
from trtpool.host.device_slab import MAX_DEVICE_SLAB_BYTES, ExportedSlab
from trtpool.host.engine import Answer, Merger, Reply
from trtpool.host.slab import GrowingSlab, Slab, room_for
from trtpool.instance import ModelInstance

log = logging.getLogger("trtpool")

STARTUP_ORPHAN_S = 120.0  # no instance connected by then: the one that started it is gone
WATCH_INTERVAL_S = 0.5  # how often the host looks at tritonserver and its connections
OUTPUT_SLAB_BYTES = 1 << 20  # an output slab's first size; it grows to the largest answer
SEND_TIMEOUT_S = 10  # an instance that has not read its answer by then is dropped


class Counts:
    """The host's running totals that the instances publish as metrics (trtpool.triton.metrics)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batch_sizes: Counter[int] = Counter()
        self.stage_ns: Counter[str] = Counter()
        self.stage_failed: Counter[str] = Counter()

    def record_batch(self, size: int) -> None:
        with self.lock:
            self.batch_sizes[size] += 1

    def record_stage(self, stage: str, ns: int, ok: bool) -> None:
        with self.lock:
            self.stage_ns[stage] += ns
            if not ok:
                self.stage_failed[stage] += 1


class Connection:
    """One instance: its input slab (read here), its output slab (written here)."""

    def __init__(self, host: Host, sock: socket.socket, number: int) -> None:
        self.host = host
        self.sock = sock
        self.number = number
        self.peer = wire.peer_credentials(sock)[0]
        self.inputs: Slab | None = None
        self.device_inputs: ExportedSlab | None = None  # where the instance's GPU inputs come (CUDA IPC)
        self.outputs = GrowingSlab(f"trtpool-out-{number}", OUTPUT_SLAB_BYTES)
        self._send_lock = threading.Lock()
        self._running: int | None = None  # the id of the run in flight
        self._closed = False
        self._state = threading.Lock()  # _running and _closed, set by the worker answering and by close()
        self._pinned: PinnedRegion | None = None  # the input slab, page-locked on a GPU

    def serve(self) -> None:
        try:
            while True:
                message, fds = wire.receive(self.sock)
                if not self._handle(message, fds):
                    return
        except wire.ConnectionClosed:
            pass
        except (wire.MessageError, ValueError, OverflowError, RecursionError) as exc:
            # ValueError and the others: numbers or nesting past what numpy and json take
            log.warning("engine host: instance pid %d sent a bad message, dropping its connection: %s", self.peer, exc)
            self._send_quietly({"op": "error", "error": str(exc)})
        except OSError as exc:
            log.warning("engine host: the connection of instance pid %d failed: %s", self.peer, exc)
        finally:
            self.close()
            self.host.gone(self)

    def _handle(self, message: wire.Message, fds: list[int]) -> bool:
        op = message["op"]
        if op == "run":
            self._run(message, fds)
            return True
        for fd in fds:  # only a run carries a slab
            os.close(fd)
        if fds:
            raise wire.MessageError(f"a '{op}' message came with file descriptors")
        if op == "hello":
            self._send(self.host.hello())
            return True
        if op == "stats":
            self._send({"op": "stats", **self.host.stats(self)})
            return True
        if op == "device_slab":
            self._send(self._export_device_slab(message.get("bytes")))
            return True
        if op == "bye":
            return False
        raise wire.MessageError(f"unknown op {op!r:.40}")

    def _run(self, message: wire.Message, fds: list[int]) -> None:
        if len(fds) > 1:
            for fd in fds:
                os.close(fd)
            raise wire.MessageError(f"a run came with {len(fds)} file descriptors, expected at most 1")
        run_id = message.get("id")
        if self._running is not None:  # (before a new slab is taken: the run in flight may read the old one)
            for fd in fds:
                os.close(fd)
            raise wire.MessageError(f"run {run_id} came while run {self._running} is in flight")
        if fds:  # a new input slab: the old one's memory goes once no view of it is left
            self._take_inputs(Slab.attach(fds[0]))
        requests = message.get("requests")
        if not isinstance(run_id, int) or not isinstance(requests, list) or self.inputs is None:
            raise wire.MessageError("a run needs an integer 'id', a list of 'requests' and an input slab")
        tensors = []
        probes = []
        for request in requests:
            if not isinstance(request, dict):
                raise wire.MessageError("a request must be an object")
            inputs: dict[str, Any] = self.inputs.read(request.get("inputs"))
            if "device_inputs" in request:
                if self.device_inputs is None:
                    raise wire.MessageError("a run named device inputs before a device slab was asked for")
                inputs.update(self.device_inputs.read(request["device_inputs"]))
            tensors.append(inputs)
            probes.append(request.get("probe") is True)
        with self._state:
            self._running = run_id
        self.host.submit(tensors, probes, Reply(len(tensors), lambda answers: self._answer(run_id, answers)))

    def _take_inputs(self, slab: Slab) -> None:
        """The instance's new input slab, page-locked in place on a GPU (the old one unlocked
        first: no run of this connection is in flight, so no copy reads it)."""
        self._unpin()
        self.inputs = slab
        self._pinned = self.host.pin(slab, f"the input slab of instance pid {self.peer}")

    def _unpin(self) -> None:
        if self._pinned is not None:
            try:
                self._pinned.close()
            except cuda.CudaError as exc:
                log.warning("engine host: unlocking the input slab of instance pid %d: %s", self.peer, exc)
            self._pinned = None

    def _export_device_slab(self, nbytes: Any) -> wire.Message:
        """A new device slab for this instance's GPU inputs (the old one goes once no batch reads
        it), or why there is none."""
        if self._running is not None:
            raise wire.MessageError(f"a device slab was asked for while run {self._running} is in flight")
        if not isinstance(nbytes, int) or not 0 < nbytes <= MAX_DEVICE_SLAB_BYTES:
            raise wire.MessageError(
                f"a device slab's 'bytes' must be an integer from 1 to {MAX_DEVICE_SLAB_BYTES:,}, got {nbytes!r:.40}"
            )
        self.device_inputs = None
        try:
            self.device_inputs = self.host.device_slab(nbytes)
        except TrtpoolError as exc:
            log.warning("engine host: no device slab for instance pid %d: %s", self.peer, exc)
            return {"op": "device_slab", "refused": str(exc)}
        log.info(
            "engine host: instance pid %d writes its GPU inputs into %s bytes of device memory here (CUDA IPC)",
            self.peer,
            f"{self.device_inputs.size:,}",
        )
        return {"op": "device_slab", "handle": self.device_inputs.handle.hex(), "bytes": self.device_inputs.size}

    def _answer(self, run_id: int, answers: list[Answer]) -> None:
        try:
            wired = self._write_answers(answers)
        except Exception as exc:  # an output the slab cannot carry: the whole run is answered all the same
            log.exception("engine host: writing the answers of run %d", run_id)
            error = protocol.error_to_wire(
                ProcessError(f"an output could not be sent back: {type(exc).__name__}: {exc}")
            )
            wired = [error] * len(answers)
        with self._state:
            self._running = None
            gone = self._closed
        if gone:  # its instance went while the run was in flight: nothing reads the slab any more
            self._unpin()
        self._send_quietly({"op": "answer", "id": run_id, "answers": wired}, self.outputs.handover())

    def _write_answers(self, answers: list[Answer]) -> list[dict[str, Any]]:
        outputs = [a for a in answers if isinstance(a, dict)]
        slab = self.outputs.room(room_for(t for o in outputs for t in o.values()))
        wired: list[dict[str, Any]] = []
        offset = 0
        for answer in answers:
            if isinstance(answer, dict):
                descriptors, offset = slab.write(answer, offset)
                wired.append({"outputs": descriptors})
            else:
                wired.append(protocol.error_to_wire(answer))
        return wired

    def _send(self, message: wire.Message, fds: tuple[int, ...] = ()) -> None:
        with self._send_lock:
            wire.send(self.sock, message, fds)

    def _send_quietly(self, message: wire.Message, fds: tuple[int, ...] = ()) -> None:
        """An answer to an instance that may be gone, or not reading (the send timed out): its
        connection is shut down, which ends its reader thread too."""
        try:
            self._send(message, fds)
        except (TrtpoolError, OSError):
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._state:
            self._closed = True
            idle = self._running is None
        try:
            self.sock.close()
        finally:
            self.outputs.close()
            if self.inputs is not None:
                self.inputs.close()
            if idle:  # else the run in flight unlocks it once answered
                self._unpin()
            self.device_inputs = None  # freed once no batch in flight reads it


class Host:
    def __init__(self, spec: dict[str, Any], listener: socket.socket) -> None:
        self.spec = spec
        self.name = spec["model_config"].get("name", "")
        self.listener = listener
        self.counts = Counts()
        self.instance: ModelInstance | None = None
        self.merger: Merger | None = None
        self.failure: str | None = None
        self.loaded = threading.Event()
        self.started_ns = time.monotonic_ns()
        self._lock = threading.Lock()
        self._connections: dict[int, Connection] = {}
        self._ever_connected = False
        self._numbers = 0
        self._publisher: int | None = None  # the connection that last published the metrics

    # --- loading ------------------------------------------------------------------

    def load(self) -> None:
        spec = self.spec
        try:
            instance = ModelInstance(
                spec["model_config"],
                Path(spec["version_dir"]),
                spec["device"],
                self.counts.record_batch,
                self.counts.record_stage,
                hosted=True,
            )
            workers = instance.pool.size + 1  # one more: a batch is prepared while the contexts run
            self.merger = Merger(
                lambda requests, responders: instance.serve(requests, responders, inline=True),
                workers,
                spec["model_config"].get("max_batch_size", 0) or 1,
                instance.cfg.host_batch_wait_us,
            )
            self.instance = instance
        except TrtpoolError as exc:
            self.failure = str(exc)
        except Exception as exc:
            log.exception("engine host: loading model '%s'", self.name)
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            self.loaded.set()
        if self.failure:
            log.error("engine host: model '%s' did not load: %s", self.name, self.failure)
        else:
            log.info("engine host: model '%s' loaded in pid %d", self.name, os.getpid())

    def hello(self) -> wire.Message:
        self.loaded.wait()
        if self.instance is None:
            return {"op": "refused", "error": self.failure}
        return {
            "op": "ready",
            "signature": protocol.signature_to_wire(self.instance.runtime.signature),
            "host_pid": os.getpid(),
            "process_file": self.instance.stage is not None,
        }

    # --- serving ------------------------------------------------------------------

    def submit(self, tensors: list[dict[str, np.ndarray]], probes: list[bool], reply: Reply) -> None:
        responders = reply.responders()
        if self.merger is None:
            for responder in responders:
                responder.fail(TrtpoolError(f"model '{self.name}' did not load: {self.failure}"))
            return
        assert self.instance is not None  # set with the merger
        served_tensors, served = [], []
        for request, probe, responder in zip(tensors, probes, responders, strict=False):
            if probe and self.instance.stage is not None:  # untouched by user code (trtpool.triton.probes)
                responder.send({})
            else:
                served_tensors.append(request)
                served.append(responder)
        if served:
            batched = self.instance.cfg.max_batch_size > 0
            rows = sum(next(iter(t.values())).shape[0] if batched and t else 1 for t in served_tensors)
            on_gpu = frozenset(name for t in served_tensors for name, tensor in t.items() if is_device(tensor))
            self.merger.submit(served_tensors, served, rows, on_gpu)

    def pin(self, slab: Slab, what: str) -> PinnedRegion | None:
        """An instance's input slab page-locked in place where the model runs on a GPU: its rows
        go to the device by DMA from where they lie (trtpool.gpu.host_upload)."""
        device = self.spec["device"]
        if not device.startswith("cuda"):
            return None
        cuda.set_device(cuda.device_index(device))
        return pinned(slab.memory, what)

    def device_slab(self, nbytes: int) -> ExportedSlab:
        """Device memory on the model's GPU for one instance's GPU inputs, exported to it."""
        device = self.spec["device"]
        if not device.startswith("cuda"):
            raise TrtpoolError(f"model '{self.name}' runs on the CPU ({device}): GPU inputs come through host memory")
        return ExportedSlab(nbytes, cuda.device_index(device))

    def stats(self, asking: Connection) -> dict[str, Any]:
        """Running totals and gauges for the instances' metrics; `publisher`: the oldest connection
        publishes them, so that they are counted once."""
        with self._lock:
            publisher = min(self._connections) == asking.number if self._connections else False
            connections = len(self._connections)
            takeover = publisher and self._publisher not in (None, asking.number)
            if publisher:
                self._publisher = asking.number
        if self.instance is None or self.merger is None:
            return {"publisher": False}
        pool = self.instance.pool
        with self.counts.lock:
            counts = {
                "batch_sizes": dict(self.counts.batch_sizes),
                "stage_ns": dict(self.counts.stage_ns),
                "stage_failed": dict(self.counts.stage_failed),
            }
        return {
            "publisher": publisher,
            "takeover": takeover,
            "host_pid": os.getpid(),
            "connections": connections,
            "pool": asdict(pool.stats),
            "running": sorted(pool.running()),
            **counts,
            "queue_depth": self.merger.depth,
            "merged": dict(self.merger.merged),
            "busy_ns": self.merger.busy_ns_so_far(),
            "uptime_ns": time.monotonic_ns() - self.started_ns,
        }

    # --- connections --------------------------------------------------------------

    def accept_forever(self) -> None:
        """Accept instances until the host should end (module docstring); then return."""
        self.listener.settimeout(WATCH_INTERVAL_S)
        server_pid = self.spec["server_pid"]
        while True:
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                if self._should_end(server_pid):
                    return
                continue
            except OSError as exc:  # out of descriptors, say: the instances already here go on
                log.error("engine host: accepting an instance failed: %s", exc)
                time.sleep(WATCH_INTERVAL_S)
                continue
            sock.settimeout(None)
            # An instance that stops reading must not hold a worker that answers it: sends give up.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", SEND_TIMEOUT_S, 0))
            if wire.peer_credentials(sock)[1] != os.getuid():
                log.warning(
                    "engine host: refused a connection from another user (uid %d)", wire.peer_credentials(sock)[1]
                )
                sock.close()
                continue
            with self._lock:
                self._numbers += 1
                number = self._numbers
            try:
                connection = Connection(self, sock, number)
            except OSError as exc:  # its output slab could not be made
                log.error("engine host: an instance's connection could not be set up: %s", exc)
                sock.close()
                continue
            with self._lock:
                self._connections[connection.number] = connection
                self._ever_connected = True
            threading.Thread(target=connection.serve, name=f"trtpool-conn-{connection.number}", daemon=True).start()

    def gone(self, connection: Connection) -> None:
        with self._lock:
            self._connections.pop(connection.number, None)

    def _should_end(self, server_pid: int) -> bool:
        if not _alive(server_pid):
            log.warning("engine host: tritonserver (pid %d) is gone; ending", server_pid)
            return True
        with self._lock:
            if self._connections:
                return False
            if self._ever_connected:
                return True
        if time.monotonic_ns() - self.started_ns > STARTUP_ORPHAN_S * 1e9:
            log.warning("engine host: no instance connected in %.0f s; ending", STARTUP_ORPHAN_S)
            return True
        return False

    def close(self) -> None:
        self.listener.close()  # new instances start a new host from here on
        if self.merger is not None:
            self.merger.close()
        if self.instance is not None:
            self.instance.close()


def _alive(pid: int) -> bool:
    """Whether a process runs: a killed server that its parent has not reaped yet is a zombie,
    which signal 0 still reaches."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def log_stream(log_fd: int) -> TextIO:
    """Where the host's log lines go: the file description its starter shared (tritonserver's own
    stderr, as a stub inherits it: the lines outlive the starter, and interleave with the server's
    at one offset); else this process's stderr, which the starter relays."""
    try:
        return open(log_fd, "a", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    except OSError:  # not passed on
        return sys.stderr


def main() -> None:
    spec = json.load(sys.stdin)
    logging.basicConfig(
        stream=log_stream(spec.get("log_fd", 2)),
        level=logging.INFO,
        format=f"%(levelname)s trtpool engine host [{spec['model_config'].get('name', '')}] %(message)s",
    )
    logging.raiseExceptions = False  # a log line to a starter that is gone is dropped, not raised
    listener = socket.socket(fileno=spec["listen_fd"])
    host = Host(spec, listener)
    threading.Thread(target=host.load, name="trtpool-host-load", daemon=True).start()
    try:
        host.accept_forever()
    finally:
        host.close()
    os._exit(0)  # daemon threads blocked on dead connections need not be joined
