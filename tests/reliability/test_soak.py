"""A short soak: every mode and client kind at once, every answer checked
(bench/soak.py runs the same for longer and records the figures)."""
from __future__ import annotations

from tests.harness.soak import soak

DURATION_S = 20


def test_mixed_traffic_gets_every_answer_right(reliability):
    tallies = soak(reliability.server, DURATION_S, seed=15)
    for kind, tally in tallies.items():
        assert tally.requests > 0, f"{kind}: no request completed"
        assert (tally.errors, tally.wrong) == (0, 0), f"{kind}: {tally}"
    assert reliability.server.ready()
