"""Decoupled mode: asking the server about cancellation for every request
against only for requests that waited in trtpool's queue.

One server, two decoupled models over the same ONNX file, ONNX Runtime on the
CPU: `waited` has the default `cancel_check_after_microseconds` (10 ms: only
requests that sat in a backlog are asked), `every` sets it to 0 (each request
is asked before it runs: one stub-to-server round trip each). perf_analyzer
over gRPC streaming, the two in turn (bench/paired.py).

    .venv/bin/python bench/cancel_check.py --rounds 12 --out bench/results/cpu_cancel_check.json
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.paired import arguments, serve_and_alternate, write_record  # noqa: E402
from tests.harness.repository import set_parameters  # noqa: E402
from trtpool_builder.examples import get_example  # noqa: E402
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder  # noqa: E402


def main() -> None:
    parser = arguments(__doc__, "cpu_cancel_check.json", concurrency=16)
    parser.add_argument("--contexts", type=int, default=2)
    args = parser.parse_args()

    def build(repo: Path, onnx: Path) -> None:
        options = ServingOptions(
            runtime="onnxruntime", contexts=str(args.contexts), mode="decoupled", instance_kind="cpu"
        )
        profiles = get_example(args.example).serving_profiles()
        for name in ("waited", "every"):
            make_model_folder(repo, name, onnx, profiles, options)
        set_parameters(repo / "every", cancel_check_after_microseconds="0")

    rows = serve_and_alternate(build, ("waited", "every"), args, extra=("--streaming",))
    write_record(
        args.out,
        "cancel_check",
        f"{args.example} example, fp32, ONNX Runtime CPU, {args.contexts} contexts, decoupled mode",
        args.concurrency,
        rows,
    )


if __name__ == "__main__":
    main()
