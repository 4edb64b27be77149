"""A thin instance's side of the engine host: requests in, answers out, no CUDA here.

``HostClient.run`` writes a batch's input tensors into the instance's input slab (once),
sends one message and waits for the answer; the outputs come back as views of the
host's output slab, valid until the next run. Inputs that Triton left on the GPU are
copied device to device into the host's memory instead (trtpool.host.device_slab): the
instance's one piece of CUDA work, and only where its inputs come on the GPU. A host
that goes away fails the batch in flight with Unavailable naming it and how it ended;
the next run finds or starts a new one (trtpool.host.launch), so the model serves again
once it has loaded.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from typing import Any

import numpy as np

from trtpool.errors import ConfigError, TrtpoolError, Unavailable
from trtpool.gpu import cuda
from trtpool.gpu.device_tensors import is_device, to_host
from trtpool.host import protocol, wire
from trtpool.host.device_slab import ImportedSlab, can_travel, room_for_device
from trtpool.host.launch import Launcher
from trtpool.host.slab import GrowingSlab, Slab, input_major, room_for
from trtpool.model.signature import Signature

log = logging.getLogger("trtpool")

START_TIMEOUT_S = 600.0  # the host loads the model before it answers (a large engine, a first build)
RUN_TIMEOUT_S = 300.0  # one batch, queued behind every other instance's at the host
INPUT_SLAB_BYTES = 1 << 20
DEVICE_SLAB_TIMEOUT_S = 60.0  # the host allocates and exports device memory (between its batches)

Answer = dict[str, np.ndarray] | TrtpoolError


class HostClient:
    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.name = launcher.name
        device = launcher.spec["device"]
        self.device_index = cuda.device_index(device) if device.startswith("cuda") else 0
        self.signature: Signature | None = None
        self.process_file = False
        self.host_pid: int | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()  # one exchange at a time on the connection
        self._inputs = GrowingSlab(f"trtpool-in-{os.getpid()}", INPUT_SLAB_BYTES)
        self._outputs: Slab | None = None
        self._device_slab: ImportedSlab | None = None
        self._device_refused: str | None = None  # why GPU inputs go through host memory instead
        self._ids = itertools.count(1)
        self._runs = 0  # batches sent to a host and answered
        self._round_trip_ns = 0  # from sending each of them to its answer

    def attach(self) -> None:
        """Connect (starting the host if none runs) and learn the model's signature. The
        host's load error is raised as this instance's (ConfigError: the model does not load)."""
        with self._lock:
            self._attach()

    def _attach(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            sock = self.launcher.connect(max(deadline - time.monotonic(), 1.0))
            try:
                wire.send(sock, {"op": "hello", "pid": os.getpid()})
                sock.settimeout(max(deadline - time.monotonic(), 1.0))
                reply, _ = self._receive(sock, "its model to load")
                break
            except wire.ConnectionClosed:  # a host that was ending as this instance came: the next one
                sock.close()
                if time.monotonic() > deadline:
                    raise Unavailable(
                        f"no engine host of model '{self.name}' answered this instance's hello "
                        f"within {START_TIMEOUT_S:.0f} s"
                    ) from None
            except BaseException:
                sock.close()
                raise
        if reply["op"] == "refused":
            sock.close()
            raise ConfigError(str(reply.get("error")))
        self.signature = protocol.signature_from_wire(reply["signature"])
        self.process_file = bool(reply.get("process_file"))
        self.host_pid = int(reply["host_pid"])
        self._sock = sock
        self._inputs.fresh = True  # a new host has not seen the input slab
        self._outputs = None  # nor sent its output slab (the old one's memory goes with its views)
        self._drop_device_slab()  # nor exported a device slab
        self._device_refused = None

    def _receive(self, sock: socket.socket, waiting_for: str) -> tuple[wire.Message, list[int]]:
        try:
            message, fds = wire.receive(sock)
        except TimeoutError:
            raise Unavailable(
                f"the engine host of model '{self.name}' did not answer within "
                f"{sock.gettimeout():.0f} s while this instance waited for {waiting_for}"
            ) from None
        if message["op"] == "error":
            raise Unavailable(f"the engine host of model '{self.name}' refused a message: {message.get('error')}")
        return message, fds

    def run(self, requests: list[dict[str, Any]], probes: list[bool]) -> list[Answer]:
        """Each request's outputs (views, valid until the next run) or its error. Inputs are numpy
        arrays, or GPU tensors (torch's) where Triton left them on the GPU."""
        with self._lock:
            try:
                if self._sock is None:
                    self._attach()
                return self._exchange(requests, probes)
            except (wire.ConnectionClosed, wire.MessageError, OSError, Unavailable) as exc:
                error = self._lost(exc)
                return [error] * len(requests)
            except ConfigError as exc:  # a host started again could not load the model
                return [Unavailable(f"the engine host of model '{self.name}' could not load it: {exc}")] * len(requests)
            except cuda.CudaError as exc:  # copying GPU inputs into the host's memory
                return [exc] * len(requests)

    def _exchange(self, requests: list[dict[str, Any]], probes: list[bool]) -> list[Answer]:
        assert self._sock is not None
        in_host, on_gpu, device_slab = requests, None, None
        if any(is_device(t) for tensors in requests for t in tensors.values()):
            in_host, on_gpu, device_slab = self._split(requests)
        slab = self._inputs.room(room_for(t for tensors in in_host for t in tensors.values()))
        wired: list[dict[str, Any]] = [
            {"probe": probe, "inputs": descriptors}
            for probe, descriptors in zip(probes, input_major(slab.write_tensor, in_host), strict=True)
        ]
        if device_slab is not None and on_gpu is not None:
            cuda.set_device(self.device_index)  # the current device is per thread
            for entry, descriptors in zip(wired, input_major(device_slab.write_tensor, on_gpu), strict=True):
                if descriptors:
                    entry["device_inputs"] = descriptors
            device_slab.finish()
        run_id = next(self._ids)
        sent = time.monotonic_ns()
        wire.send(self._sock, {"op": "run", "id": run_id, "requests": wired}, self._inputs.handover())
        self._sock.settimeout(RUN_TIMEOUT_S)
        reply, fds = self._receive(self._sock, "a batch's answers")
        self._runs += 1
        self._round_trip_ns += time.monotonic_ns() - sent
        if fds:
            self._outputs = Slab.attach(fds[0])
        if reply["op"] != "answer" or reply.get("id") != run_id:
            raise Unavailable(
                f"the engine host of model '{self.name}' answered {reply['op']} {reply.get('id')} to run {run_id}"
            )
        return [self._answer(entry) for entry in reply["answers"]]

    def _split(
        self, requests: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, ImportedSlab | None]:
        """A batch with GPU inputs: its tensors for the input slab, those for the device slab and
        the device slab (None, None where the host takes none: all of them to host memory)."""
        requests = self._placed(requests)
        device_slab = self._device_room(
            room_for_device([t for tensors in requests for t in tensors.values() if is_device(t)])
        )
        if device_slab is None:  # the host took none: this batch's GPU inputs go to host memory too
            return self._placed(requests), None, None
        in_host = [{n: t for n, t in r.items() if not is_device(t)} for r in requests]
        return in_host, [{n: t for n, t in r.items() if is_device(t)} for r in requests], device_slab

    def _placed(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The batch with each input on one side for every request: on the GPU where all of the
        batch's copies are there and can go through a device slab, else copied to host memory."""
        if self._device_refused is not None:
            on_gpu: set[str] = set()
        else:
            names = {name for tensors in requests for name in tensors}
            on_gpu = {
                name for name in names if all(is_device(t[name]) and can_travel(t[name]) for t in requests if name in t)
            }
        return [
            {name: t if name in on_gpu or not is_device(t) else to_host(t) for name, t in tensors.items()}
            for tensors in requests
        ]

    def _device_room(self, needed: int) -> ImportedSlab | None:
        """A device slab of at least `needed` bytes from the host; None where none is needed, or
        where the host (or CUDA here) cannot give one, which is remembered until the next host."""
        if not needed:
            return None
        held = self._device_slab
        if held is not None and held.size >= needed:
            return held
        assert self._sock is not None
        grown = max(needed, 2 * held.size if held else 0)
        self._drop_device_slab()  # unmapped here before the host frees it
        wire.send(self._sock, {"op": "device_slab", "bytes": grown})
        self._sock.settimeout(DEVICE_SLAB_TIMEOUT_S)
        reply, _ = self._receive(self._sock, "a device slab")
        try:
            if "refused" in reply:
                raise TrtpoolError(str(reply["refused"]))
            self._device_slab = ImportedSlab(bytes.fromhex(reply["handle"]), int(reply["bytes"]), self.device_index)
        except (TrtpoolError, ValueError, KeyError, TypeError) as exc:
            self._device_refused = str(exc)
            log.warning(
                "model '%s': GPU inputs go to the engine host through host memory: no device slab (%s)",
                self.name,
                exc,
            )
        return self._device_slab

    def _drop_device_slab(self) -> None:
        if self._device_slab is not None:
            with contextlib.suppress(cuda.CudaError):
                self._device_slab.close()
            self._device_slab = None

    def _answer(self, entry: dict[str, Any]) -> Answer:
        if "outputs" in entry:
            assert self._outputs is not None
            return self._outputs.read(entry["outputs"])
        return protocol.error_from_wire(entry)

    def _lost(self, cause: Exception) -> Unavailable:
        """Drop the connection; the error that answers the batch in flight."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if isinstance(cause, Unavailable):
            return cause
        pid = f" (pid {self.host_pid})" if self.host_pid else ""
        how = self.launcher.how_it_ended(self.host_pid) if self.host_pid else None
        ended = f"; it {how}" if how else ""
        log.error(
            "model '%s': the engine host%s went away (%s%s); the next batch starts or finds a new one",
            self.name,
            pid,
            cause,
            ended,
        )
        return Unavailable(
            f"the engine host of model '{self.name}'{pid} went away while it held this request "
            f"({cause}{ended}); it is being restarted: retry"
        )

    def counts(self) -> dict[str, int]:
        """This instance's own running totals for its metrics (trtpool.triton.metrics.INSTANCE_COUNTERS)."""
        return {"starts": self.launcher.started, "runs": self._runs, "round_trip_us": self._round_trip_ns // 1000}

    def stats(self) -> dict[str, Any] | None:
        """The host's totals for the metrics, or None while there is no host."""
        with self._lock:
            if self._sock is None:
                return None
            try:
                wire.send(self._sock, {"op": "stats"})
                reply, _ = self._receive(self._sock, "its statistics")
                return reply
            except (wire.ConnectionClosed, OSError, Unavailable) as exc:
                self._lost(exc)
                return None

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                with contextlib.suppress(TrtpoolError, OSError):
                    wire.send(self._sock, {"op": "bye"})
                self._sock.close()
                self._sock = None
            self._inputs.close()
