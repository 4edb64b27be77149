"""tritonserver's output as trtpool-serve relays it, and what went wrong: the lines a user needs first."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO

from trtpool.suggest import closest

# Triton's error lines: "E1203 05:40:04.27 ...] ..." and "error: creating server: ...".
ERROR_LINE = re.compile(r"^(E\d{4} |error: )")
# Lines tritonserver 2.51 logs at every start on a machine without a GPU (server.cc, NVML,
# DCGM), whatever then fails: noise beside the real reason.
NOT_A_CAUSE = ('"CudaDriverHelper has not been initialized."',)
NO_GPU_LINES = ("CudaDriverHelper has not been initialized", "Failed to initialize NVML")
NO_GPU_NOTE = (
    "note: tritonserver's CudaDriverHelper, NVML and DCGM messages are expected on a machine "
    "without a GPU (the models run on CPU)"
)
USAGE = "Usage: tritonserver"
USAGE_HEADING = re.compile(r"^[A-Z][\w /]*:$")  # "Server:", "Memory/Device Management:"
UNRECOGNIZED = re.compile(r"unrecognized option '(--[^'=]+)")


def command_line_errors(lines: Sequence[str], own_flags: Sequence[str]) -> list[str]:
    """tritonserver refused a flag: its reason ("...: unrecognized option '--x'", 'Bad option: ...')
    sits around a usage text of a hundred lines; keep the reason, drop the usage."""
    causes = [
        line
        for line in lines
        if line and not line[0].isspace() and not line.startswith(USAGE) and not USAGE_HEADING.match(line)
    ]
    for cause in list(causes):
        match = UNRECOGNIZED.search(cause)
        close = closest(match.group(1), own_flags) if match else None
        if close:
            causes.append(f"(did you mean trtpool-serve's {close}?)")
    return [*causes, "(tritonserver --help lists its flags; trtpool-serve --help lists trtpool-serve's)"]


def start_errors(lines: Sequence[str], own_flags: Sequence[str] = ()) -> str:
    """The error lines of a failed start (a refused flag's reason first), else its last 20 lines."""
    if any(line.startswith(USAGE) for line in lines):
        return "\n".join(command_line_errors(lines, own_flags))
    errors = [line for line in lines if ERROR_LINE.match(line) and not line.endswith(NOT_A_CAUSE)]
    return "\n".join(errors or lines[-20:])


class ServerOutput:
    """Relays tritonserver's output to the log file or the terminal, line by line, and keeps what
    trtpool-serve needs while the server starts: its lines.

    On the terminal its usage text (a flag it refused) is not shown: start_errors gives the reason.
    The note on the no-GPU messages is said once on the terminal wherever the log goes (with
    --log it names the file that holds them)."""

    def __init__(self, stream: IO[bytes], sink: IO[bytes] | None, say: Callable[[str], None]) -> None:
        self.lines: list[str] = []  # until started() is called
        self._stream = stream
        self._sink = sink
        self._say = say
        self._starting = True
        self._usage = False
        self._noted = False
        self._thread = threading.Thread(target=self._relay, daemon=True)
        self._thread.start()

    def started(self) -> None:
        self._starting = False
        self.lines = []

    def finish(self, timeout: float = 5.0) -> None:
        """The output up to the server's exit has been relayed."""
        self._thread.join(timeout)

    def _relay(self) -> None:
        for raw in self._stream:
            line = raw.decode(errors="replace").rstrip("\n")
            if self._starting:
                self.lines.append(line)
                self._usage = self._usage or line.startswith(USAGE)
            if self._sink is not None:
                self._sink.write(raw)
                self._sink.flush()
            elif not self._usage:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            if not self._usage:
                self._note_no_gpu(line)

    def _note_no_gpu(self, line: str) -> None:
        if not self._noted and any(text in line for text in NO_GPU_LINES):
            self._noted = True
            self._say(NO_GPU_NOTE if self._sink is None else f"{NO_GPU_NOTE}; they are in {self._sink.name}")
