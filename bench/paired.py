"""Two models served side by side in one server, measured one after the other
by perf_analyzer with the order swapped every round (ABBA), and compared pair
by pair: on a noisy machine a ratio taken within one round holds where an
absolute figure does not."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.record import default_out, provenance, write_json
from tests.harness.perf import perf_analyzer
from tests.harness.server import TritonServer
from trtpool_builder.examples import write_example


def arguments(doc: str, result_name: str, concurrency: int) -> argparse.ArgumentParser:
    """The options every paired benchmark takes; scripts add their own."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", default="tiny", help="a small model makes per-request costs visible")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=concurrency)
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=default_out(result_name))
    return parser


def serve_and_alternate(
    build: Callable[[Path, Path], None], models: tuple[str, str], args: argparse.Namespace, extra: tuple[str, ...] = ()
) -> dict[str, list[dict]]:
    """build(repo, onnx) writes the two model folders; one server serves both."""
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        build(base / "repo", write_example(args.example, base / "model.onnx"))
        server = TritonServer(base / "repo", base / "server.log").start()
        try:
            return alternate(server, models, args.rounds, args.concurrency, args.interval_ms, extra)
        finally:
            server.stop()


def alternate(
    server: TritonServer,
    models: tuple[str, str],
    rounds: int,
    concurrency: int,
    interval_ms: int,
    extra: tuple[str, ...] = (),
    before: Callable[[str], dict] | None = None,
) -> dict[str, list[dict]]:
    """perf_analyzer rounds of the two models in ABBA order; `before(model)` runs ahead of
    each of a model's rounds, and what it returns is kept with the round."""
    rows: dict[str, list[dict]] = {model: [] for model in models}
    for round_index in range(rounds):
        for model in models if round_index % 2 == 0 else models[::-1]:
            noted = before(model) if before else {}
            [row] = perf_analyzer(
                model,
                server.grpc_url,
                concurrency=str(concurrency),
                interval_ms=interval_ms,
                max_trials=10,
                extra=("--stability-percentage", "30", *extra),
            )
            rows[model].append({"infer_per_s": row["Inferences/Second"], "p99_us": row["p99 latency"], **noted})
            print(
                f"round {round_index} {model:12s} {row['Inferences/Second']:8.1f} infer/s "
                f"p99 {row['p99 latency'] / 1000:6.1f} ms",
                flush=True,
            )
    return rows


def compared(first: list[dict], second: list[dict], key: str, faster: str | None = None) -> dict:
    """first's `key` over second's, round by round, and their median; with `faster`,
    also how many rounds the ratio was above 1, under that name. A round where either
    measurement failed (no `key`: perf_analyzer found no stable window) is left out, and counted."""
    ratios = [a[key] / b[key] for a, b in zip(first, second, strict=False) if a.get(key) and b.get(key)]
    summary: dict = {
        "per_round": [round(r, 3) for r in ratios],
        "median": round(statistics.median(ratios), 3) if ratios else None,
    }
    if len(ratios) < len(first):
        summary["failed_rounds"] = len(first) - len(ratios)
    if faster:
        summary[faster] = sum(r > 1 for r in ratios)
    return summary


def write_record(out: Path, benchmark: str, model: str, concurrency: int, rows: dict[str, list[dict]]) -> dict:
    """The JSON record, with the first model's throughput over the second's per round."""
    first, second = rows
    record = {
        "benchmark": benchmark,
        **provenance(),
        "model": model,
        "concurrency": concurrency,
        "rounds": rows,
        f"{first}_over_{second}_throughput": compared(
            rows[first], rows[second], "infer_per_s", faster=f"rounds_{first}_faster"
        ),
    }
    write_json(out, record)
    print(json.dumps(record[f"{first}_over_{second}_throughput"]))
    return record
