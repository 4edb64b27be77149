"""Finding a model's engine host, or starting it: one per model version, device and server.

The host listens on an abstract Unix socket (Linux): a name with no file behind it,
which vanishes with the last process holding it, so nothing is left behind by a
killed server. The name is derived from what makes a host the same host (the user,
tritonserver's pid and start time, the model's config, its version folder and the
files in it, the device), so every instance of the model on that device finds it and
a reload with a changed config or engine file gets a host of its own. Abstract names
carry no file permissions: both ends check the other's user id (SO_PEERCRED), which
is what mode 0700 gives a socket file.

Who starts it is decided by the kernel: an instance that finds no host tries to bind
the name; the one whose bind succeeds starts the host with the bound socket, every
other one connects. That is also how a host that died is replaced, up to
MAX_STARTS starts in START_WINDOW_S per instance; after that the instance stops
starting it and says why (a host that dies at every start needs the operator).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from trtpool.errors import Unavailable
from trtpool.host import wire
from trtpool.process.workers import environment_python

log = logging.getLogger("trtpool")

MAX_STARTS = 5
START_WINDOW_S = 60.0
CONNECT_RETRY_S = 0.02
_LOG_LEVELS = {"ERROR": logging.ERROR, "WARNING": logging.WARNING, "INFO": logging.INFO}


def _start_time(pid: int) -> str:
    """A process's start time in clock ticks since boot (a pid may be reused, this pair not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def _files(version_dir: Path) -> list[tuple[str, int, int]]:
    """Every file under the version folder (links followed), with its size and time: a model file
    changed in place, in a subfolder too, makes another host."""
    found = []
    for path in version_dir.rglob("*"):
        try:
            stat = path.stat()
        except OSError:  # a dangling link: nothing to load from it
            continue
        found.append((str(path.relative_to(version_dir)), stat.st_size, stat.st_mtime_ns))
    return sorted(found)


def host_address(model_config: dict[str, Any], version_dir: Path, device: str, server_pid: int) -> bytes:
    key = json.dumps(
        [os.getuid(), server_pid, _start_time(server_pid), model_config, str(version_dir), _files(version_dir), device],
        sort_keys=True,
        default=str,
    )
    return b"\0trtpool-host-" + hashlib.sha256(key.encode()).hexdigest()[:40].encode()


def _exit_cause(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class Launcher:
    """One instance's way to its model's engine host."""

    def __init__(self, spec: dict[str, Any], log_fd: int = 2) -> None:
        """`spec`: what the host loads (model_config, version_dir, device) and server_pid. `log_fd`:
        where a host this instance starts writes its log lines: this process's stderr, which a Triton
        stub shares with tritonserver (one file description, one offset: the lines interleave with
        the server's instead of overwriting them, and outlive this instance)."""
        self.spec = spec
        self.log_fd = log_fd
        self.name = spec["model_config"].get("name", "")
        self.address = host_address(spec["model_config"], Path(spec["version_dir"]), spec["device"], spec["server_pid"])
        self._starts: deque[float] = deque()
        self._started: dict[int, threading.Event] = {}  # pid of each host this instance started -> ended
        self.last_exit: str | None = None  # how the last host this instance started ended
        self.started = 0  # hosts this instance started (trtpool_host_starts_total)

    def connect(self, timeout_s: float) -> socket.socket:
        """A connection to the running host, starting one where none runs."""
        deadline = time.monotonic() + timeout_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.address)
                self._check_owner(sock)
                return sock
            except ConnectionRefusedError:  # no host listens (yet, or any more)
                sock.close()
            except BaseException:
                sock.close()
                raise
            if self._start_if_first():
                continue
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"no engine host of model '{self.name}' accepted a connection within "
                    f"{timeout_s:.0f} s (another instance is starting it)"
                )
            time.sleep(CONNECT_RETRY_S)

    @staticmethod
    def _check_owner(sock: socket.socket) -> None:
        pid, uid = wire.peer_credentials(sock)
        if uid != os.getuid():
            raise Unavailable(
                f"the engine host's socket is held by pid {pid} of another user (uid {uid}); "
                f"refusing to send it requests"
            )

    def _start_if_first(self) -> bool:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.address)
        except OSError as exc:
            listener.close()
            if exc.errno == errno.EADDRINUSE:  # another instance won: it is starting the host
                return False
            raise
        try:
            self._count_start()
            listener.listen(256)
            self._spawn(listener)
        finally:
            listener.close()  # the host holds it now
        return True

    def _count_start(self) -> None:
        now = time.monotonic()
        while self._starts and now - self._starts[0] > START_WINDOW_S:
            self._starts.popleft()
        if len(self._starts) >= MAX_STARTS:
            raise Unavailable(
                f"the engine host of model '{self.name}' was started {len(self._starts)} times in "
                f"{START_WINDOW_S:.0f} s and ended each time (last: {self.last_exit}); not starting "
                f"it again: see the log, then reload the model"
            )
        self._starts.append(now)

    def _spawn(self, listener: socket.socket) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        # The model, device and server on the command line: what `ps` shows an operator.
        command = [
            environment_python(),
            "-m",
            "trtpool.host",
            self.name,
            self.spec["device"],
            str(self.spec["server_pid"]),
        ]
        log_fd = os.dup(self.log_fd)  # a number of its own: the child's 2 becomes the relayed pipe
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                pass_fds=(listener.fileno(), log_fd),
                start_new_session=True,
            )
        finally:
            os.close(log_fd)
        assert process.stdin is not None
        process.stdin.write(json.dumps({**self.spec, "listen_fd": listener.fileno(), "log_fd": log_fd}).encode())
        process.stdin.close()
        self.started += 1
        log.info("model '%s': started its engine host, pid %d (%s)", self.name, process.pid, self.spec["device"])
        self._started[process.pid] = threading.Event()
        threading.Thread(target=self._relay, args=(process,), name="trtpool-host-log", daemon=True).start()

    def _relay(self, process: subprocess.Popen) -> None:
        """What else the host prints to its stderr (a crash's traceback) into this instance's
        (Triton's) log, then how it ended."""
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode(errors="replace").rstrip()
            log.log(_LOG_LEVELS.get(line.split(" ", 1)[0], logging.INFO), "%s", line)
        self.last_exit = _exit_cause(process.wait())
        self._started[process.pid].set()
        level = logging.INFO if process.returncode == 0 else logging.ERROR
        log.log(level, "model '%s': its engine host (pid %d) %s", self.name, process.pid, self.last_exit)

    def how_it_ended(self, pid: int, timeout_s: float = 1.0) -> str | None:
        """How host `pid` ended, when this instance started it (its parent sees the exit status)."""
        ended = self._started.get(pid)
        return self.last_exit if ended is not None and ended.wait(timeout_s) else None
