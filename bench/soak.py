"""Soak: every mode and client kind at once against one real tritonserver for a long
while, every answer checked against its reference (tests/harness/soak.py, the
same traffic the reliability suite runs for 20 s), with the server's and the
stubs' resident memory sampled along the way.

    nice -n 10 .venv/bin/python bench/soak.py --duration 600 --out bench/results/cpu_soak.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import default_out, provenance, write_json  # noqa: E402
from tests.harness.reliability_repo import MODELS, build_reliability_repository  # noqa: E402
from tests.harness.server import TritonServer  # noqa: E402
from tests.harness.soak import soak  # noqa: E402

MIB = 2**20


def memory(server: TritonServer, started: float) -> dict[str, float]:
    return {
        "at_s": round(time.monotonic() - started, 1),
        "server_rss_mib": round(server.rss_bytes() / MIB, 1),
        "stubs_rss_mib": round(server.stubs_rss_bytes() / MIB, 1),
        "stubs": len(server.stub_pids()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of traffic")
    parser.add_argument("--sample-every", type=float, default=30.0, help="seconds between memory samples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=default_out("cpu_soak.json"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        repo = build_reliability_repository(Path(scratch) / "repo", Path(scratch) / "onnx")
        server = TritonServer(repo, Path(scratch) / "server.log").start()
        try:
            started = time.monotonic()
            samples = [memory(server, started)]
            done = threading.Event()

            def sample() -> None:
                while not done.wait(args.sample_every):
                    samples.append(memory(server, started))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            tallies = soak(server, args.duration, seed=args.seed)
            done.set()
            sampler.join()
            elapsed = time.monotonic() - started
            samples.append(memory(server, started))
            still_ready = server.ready()
        finally:
            server.stop()

    record = {
        **provenance(),
        "duration_s": round(elapsed, 1),
        "models": list(MODELS),
        "totals": {key: sum(getattr(t, key) for t in tallies.values()) for key in ("requests", "errors", "wrong")},
        "by_client": {kind: asdict(tally) for kind, tally in tallies.items()},
        "memory": {"start": samples[0], "end": samples[-1], "samples": samples},
        "server_ready_at_end": still_ready,
    }
    write_json(args.out, record)
    print(
        f"{record['totals']} in {record['duration_s']} s; server RSS {samples[0]['server_rss_mib']} -> "
        f"{samples[-1]['server_rss_mib']} MiB, stubs {samples[0]['stubs_rss_mib']} -> "
        f"{samples[-1]['stubs_rss_mib']} MiB; {args.out}"
    )


if __name__ == "__main__":
    main()
