"""What went wrong, from tritonserver's log: the lines a user needs first."""
from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path

# Triton's error lines: "E1203 05:40:04.27 ...] ..." and "error: creating server: ...".
ERROR_LINE = re.compile(r"^(E\d{4} |error: )")
# Error lines tritonserver 2.51 logs at every start on a machine without a CUDA driver
# (server.cc), whatever then fails: noise beside the real reason.
NOT_A_CAUSE = ('"CudaDriverHelper has not been initialized."',)
USAGE = "Usage: tritonserver"
USAGE_HEADING = re.compile(r"^[A-Z][\w /]*:$")   # "Server:", "Memory/Device Management:"
UNRECOGNIZED = re.compile(r"unrecognized option '(--[^'=]+)")


def command_line_errors(lines: Sequence[str], own_flags: Sequence[str]) -> list[str]:
    """tritonserver refused a flag: its reason ("...: unrecognized option '--x'", 'Bad option: ...')
    sits around a usage text of a hundred lines; keep the reason, drop the usage."""
    causes = [line for line in lines if line and not line[0].isspace() and not line.startswith(USAGE)
              and not USAGE_HEADING.match(line)]
    for cause in list(causes):
        match = UNRECOGNIZED.search(cause)
        close = difflib.get_close_matches(match.group(1), own_flags, n=1) if match else []
        if close:
            causes.append(f"(did you mean trtpool-serve's {close[0]}?)")
    return causes + ["(tritonserver --help lists its flags; trtpool-serve --help lists trtpool-serve's)"]


def log_errors(log: Path | None, own_flags: Sequence[str] = ()) -> str:
    """The log's error lines (a refused flag's reason first), else its last 20 lines."""
    if log is None or not log.exists():
        return ""
    lines = log.read_text(errors="replace").splitlines()
    if any(line.startswith(USAGE) for line in lines):
        return "\n".join(command_line_errors(lines, own_flags))
    errors = [line for line in lines if ERROR_LINE.match(line) and not line.endswith(NOT_A_CAUSE)]
    return "\n".join(errors or lines[-20:])
