"""The builder's own failure, and errors told in the user's terms."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from trtpool.errors import TrtpoolError


class BuildError(TrtpoolError):
    """Parsing, converting, quantizing or building failed; the message says where and why."""


@contextmanager
def naming_the_users_file(user_file: Path, copies: Mapping[Path, str]) -> Iterator[None]:
    """Errors raised inside name `user_file`, never the working copies the builder made of it:
    each copy's path (a key: a file, or a folder and any path below it) is replaced by what
    it is to the user (its value, in which '{file}' stands for the user's file)."""
    try:
        yield
    except TrtpoolError as exc:
        message = str(exc)
        for copy, meaning in sorted(copies.items(), key=lambda item: -len(str(item[0]))):
            message = re.sub(
                re.escape(str(copy)) + r"(?:/[^\s'\",:;()]*)?",
                lambda _: meaning.format(file=user_file),  # noqa: B023 - re.sub calls it at once
                message,
            )
        if message == str(exc):
            raise
        raise type(exc)(message) from exc
