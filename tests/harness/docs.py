"""The commands and messages README.md and docs/*.md quote, read as the tests read them.

A quote is a command of a ```bash block (continuation lines joined, comments left out),
another fenced block (named by its first line), or an inline code span that holds a space
or names a script (scripts/, bench/, deploy/ *.sh or *.py)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```", re.S | re.M)
SPAN = re.compile(r"`([^`]+)`")
SCRIPT = re.compile(r"^(scripts|bench|deploy)/\S+\.(sh|py)$")


def shell_commands(block: str) -> list[str]:
    """A bash block's commands, each on one line."""
    commands, current = [], ""
    for line in block.splitlines():
        if not current and line.lstrip().startswith("#"):
            continue
        current += line.strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip() + " "
            continue
        command = " ".join(re.sub(r"\s#\s.*$", "", current).split())
        if command:
            commands.append(command)
        current = ""
    return commands


def quotes(page: Path) -> list[str]:
    text = page.read_text()
    found = []
    for language, block in FENCE.findall(text):
        if language == "bash":
            found += shell_commands(block)
        else:
            found.append(next(line.strip() for line in block.splitlines() if line.strip()))
    for span in SPAN.findall(FENCE.sub("", text)):
        span = " ".join(span.split())
        if " " in span or SCRIPT.match(span):
            found.append(span)
    return found


def quoted_command(prefix: str, page: str = "README.md") -> str:
    """The one command a page quotes that starts with `prefix` (or is `prefix`, where others start with it)."""
    matches = {q for q in quotes(ROOT / page) if q.startswith(prefix)}
    [command] = {prefix} & matches or matches
    return command


def command_argv(command: str, replacements: dict[str, str] | None = None) -> list[str]:
    """A quoted command as argv, each `old` of `replacements` replaced by its `new` first."""
    for old, new in (replacements or {}).items():
        assert old in command, f"{old!r} is not in {command!r}"
        command = command.replace(old, new)
    return shlex.split(command)


def fenced_block(first_line: str, page: str = "README.md") -> str:
    """The one fenced block of a page whose first line is `first_line`, as written."""
    [block] = [block for _, block in FENCE.findall((ROOT / page).read_text())
               if block.strip().splitlines()[0].strip() == first_line]
    return block
