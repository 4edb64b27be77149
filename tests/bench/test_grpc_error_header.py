"""bench/grpc_error_header.py: one round of its probe, on the side that must survive."""
from __future__ import annotations

from pathlib import Path

from bench.grpc_error_header import one_round


def test_streams_without_the_header_survive_refusals_and_are_counted(tmp_path: Path):
    row = one_round(tmp_path / "round", header=False, threads=2, seconds=3.0)
    assert row["header"] is False and not row["died"] and row["fatal_lines"] == [], row
    assert row["streams"] > 8 and row["unexpected_answers"] == 0 and row["seconds"] >= 3.0, row
