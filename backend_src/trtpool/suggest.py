""" "Did you mean ...?" for a mistyped name: the one accepted name closest to it (difflib), shared by
the config's parameter keys and trtpool-serve's flags."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, accepted: Iterable[str]) -> str | None:
    """The accepted name `name` most likely misspells, or None where none is close."""
    matches = difflib.get_close_matches(name, sorted(accepted), n=1)
    return matches[0] if matches else None
