"""Does tritonserver survive gRPC streams opened with the `triton_grpc_error: true` header when
each stream carries ONE request and some of them are refused? (docs/reliability.md's table)

A plain Python-backend decoupled model (tests/harness/refusing_model.py), no trtpool. Each
round starts a fresh tritonserver; `--threads` client threads each open stream after stream,
one request per stream, every fourth refused by the model, until the server dies or
`--seconds` pass. Rounds with and without the header alternate, so both sides share the
machine's state. The record says, per round, whether and when tritonserver died and how.

    .venv/bin/python bench/grpc_error_header.py --rounds 5 --out bench/results/grpc_error_header_cpu.json
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tritonclient.utils import InferenceServerException  # noqa: E402

from bench.record import default_out, provenance, write_json  # noqa: E402
from tests.harness.refusing_model import MODEL, refusing_request, write_refusing_model  # noqa: E402
from tests.harness.server import DEATH_LINES, TritonServer  # noqa: E402
from tests.harness.streams import StreamClient  # noqa: E402

FATAL = (*DEATH_LINES, "ASSERTION FAILED", "API misuse")


def _streams(server: TritonServer, header: bool, until: float, tally: Counter[str]) -> None:
    """One request per stream, every fourth refused, until the server dies or `until`; counts the
    streams and the answers that were not what the model sends (an error for a request it
    serves, outputs for one it refuses, none at all)."""
    index = 0
    while server.process.poll() is None and time.monotonic() < until:
        refused = index % 4 == 0
        try:
            with StreamClient(server.grpc_url, status_codes=header) as stream:
                stream.send(MODEL, refusing_request(index, refused), str(index))
                answers = stream.collect(1, timeout=30)
            expected = answers.errors != [] if refused else list(answers.outputs) == [str(index)]
        except (InferenceServerException, queue.Empty):
            expected = False
            time.sleep(0.05)  # the server is going down: the loop's test ends this thread
        tally["streams"] += 1
        tally["unexpected_answers"] += not expected
        index += 1


def one_round(base: Path, header: bool, threads: int, seconds: float) -> dict[str, Any]:
    base.mkdir()
    write_refusing_model(base / "repo")
    server = TritonServer(base / "repo", base / "server.log").start()
    tally: Counter[str] = Counter()
    started = time.monotonic()
    workers = [
        threading.Thread(target=_streams, args=(server, header, started + seconds, tally)) for _ in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    lasted = time.monotonic() - started
    died = server.process.poll() is not None
    log = server.log_text()
    server.stop()
    return {
        "header": header,
        "died": died,
        "return_code": server.process.returncode if died else None,
        "fatal_lines": [line.strip() for line in log.splitlines() if any(mark in line for mark in FATAL)],
        "seconds": round(lasted, 1),
        "streams": tally["streams"],
        "unexpected_answers": tally["unexpected_answers"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="rounds per side")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0, help="the most one round lasts")
    parser.add_argument("--out", type=Path, default=default_out("grpc_error_header.json"))
    args = parser.parse_args()
    rounds = []
    with TemporaryDirectory() as tmp:
        for number in range(args.rounds):
            for header in (True, False):
                row = one_round(Path(tmp) / f"{number}-{header}", header, args.threads, args.seconds)
                print(row, flush=True)
                rounds.append(row)
    summary = {
        side: {
            "rounds": len(rows),
            "died": sum(r["died"] for r in rows),
            "streams": sum(r["streams"] for r in rows),
            "seconds_to_death": [r["seconds"] for r in rows if r["died"]],
        }
        for side, rows in (
            ("with_header", [r for r in rounds if r["header"]]),
            ("without_header", [r for r in rounds if not r["header"]]),
        )
    }
    write_json(
        args.out,
        {
            **provenance(),
            "what": "tritonserver 2.51, a plain Python-backend decoupled model; one request per gRPC stream, "
            "every fourth refused; --threads clients opening streams one after another",
            "settings": {"threads": args.threads, "seconds": args.seconds, "rounds": args.rounds},
            "summary": summary,
            "rounds": rounds,
        },
    )
    print(summary)


if __name__ == "__main__":
    main()
