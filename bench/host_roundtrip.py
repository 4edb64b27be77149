"""Issue 36: what the engine host's transport costs, in µs a run, on any machine.

--runs sequential runs of --requests batch-1 requests each, from a HostClient through an engine
host started from here and back (no Triton), beside the same ONNX Runtime session run in this
process on the same requests; the median and p99 of each, and their difference (the transport).

It needs only trtpool, numpy and onnxruntime, so it runs in the H200 image's own Python: --prepare
DIR writes the tiny example's model and the host's spec there (on a machine with the builder),
--from DIR measures with them.

    .venv/bin/python bench/host_roundtrip.py --out bench/results/engine_host_cpu.json
    .venv/bin/python bench/host_roundtrip.py --prepare .whl/roundtrip        # then, on the H200:
    python3 bench/host_roundtrip.py --from .whl/roundtrip --out $OUT/host_roundtrip.json   # bench/gpu/h200.sh
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / part) for part in ("backend_src", "builder", "")]

from bench.record import default_out, provenance, write_json  # noqa: E402

SPEC = "spec.json"


def prepare(folder: Path) -> None:
    """The tiny example (16 floats in, 4 out) as a version folder, and the spec a host is started with."""
    from tests.harness.repository import add_example
    from trtpool_builder.folder.load_check import as_triton_hands_it
    from trtpool_builder.folder.model_folder import read_config

    with tempfile.TemporaryDirectory() as scratch:
        model = add_example(Path(scratch) / "repo", Path(scratch) / "onnx", "tiny", "tiny", contexts="1")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.onnx").write_bytes((model / "1" / "model.onnx").read_bytes())
        (folder / SPEC).write_text(json.dumps({"model_config": as_triton_hands_it(read_config(model))}))


def timed(call: Callable[[], object], runs: int) -> dict[str, float]:
    for _ in range(max(runs // 10, 1)):  # warm-up
        call()
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - start) / 1000)
    return {"us_median": round(float(np.median(samples)), 1), "us_p99": round(float(np.percentile(samples, 99)), 1)}


def measure(folder: Path, runs: int, requests: int) -> dict:
    import onnxruntime as ort

    from trtpool.host.client import HostClient
    from trtpool.host.launch import Launcher

    spec = {
        **json.loads((folder / SPEC).read_text()),
        "version_dir": str(folder),
        "device": "cpu",
        "server_pid": os.getpid(),
    }
    client = HostClient(Launcher(spec))
    client.attach()
    try:
        batch = [{"INPUT0": np.ones((1, 16), np.float32)} for _ in range(requests)]
        session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
        stacked = {"INPUT0": np.ones((requests, 16), np.float32)}
        host = timed(lambda: client.run(batch, [False] * requests), runs)
        in_process = timed(lambda: session.run(None, stacked), runs)
    finally:
        client.close()
    return {
        "requests_per_run": requests,
        "host_round_trip": host,
        "in_process": in_process,
        "round_trip_us": round(host["us_median"] - in_process["us_median"], 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--requests", type=str, default="1,64", help="requests per run, comma-separated")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--prepare", type=Path, metavar="DIR", help="write the model and spec to DIR, then end")
    source.add_argument("--from", dest="source", type=Path, metavar="DIR", help="a folder --prepare wrote")
    parser.add_argument("--out", type=Path, default=default_out("host_roundtrip.json"))
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare)
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.source or Path(scratch)
        if args.source is None:
            prepare(folder)
        results = [measure(folder, args.runs, int(n)) for n in args.requests.split(",")]
    for result in results:
        print(result, flush=True)
    record = json.loads(args.out.read_text()) if args.out.exists() else {"cases": {}}
    record.setdefault("cases", {})["roundtrip"] = {**provenance(), "by_requests": results}
    write_json(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
