"""The corpus files, fetched (or found cached) once per test session."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus.fetch import FetchError, fetch


@pytest.fixture(scope="session")
def corpus_files() -> dict[str, Path]:
    try:
        return fetch()
    except FetchError as exc:
        pytest.fail(f"the corpus could not be fetched: {exc}")
