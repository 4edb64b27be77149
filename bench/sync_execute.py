"""Sync mode's execute as a plain call against the same execute as a coroutine.

One server, two models over the same ONNX file, 1 context, sync mode, ONNX
Runtime on the CPU: `plain` is trtpool as shipped; `coroutine` is
bench/coroutine_model.py, trtpool's model.py with `async def execute`, which
the Python backend's stub runs on its event-loop thread (a thread hop per
execute). perf_analyzer over gRPC, the two in turn (bench/paired.py).

    .venv/bin/python bench/sync_execute.py --rounds 8 --out bench/results/cpu_sync_execute.json
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.paired import arguments, serve_and_alternate, write_record  # noqa: E402
from trtpool_builder.examples import get_example  # noqa: E402
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config, write_config  # noqa: E402


def main() -> None:
    args = arguments(__doc__, "cpu_sync_execute.json", concurrency=8).parse_args()

    def build(repo: Path, onnx: Path) -> None:
        options = ServingOptions(runtime="onnxruntime", contexts="1", mode="sync", instance_kind="cpu")
        profiles = get_example(args.example).serving_profiles()
        for name in ("plain", "coroutine"):
            make_model_folder(repo, name, onnx, profiles, options)
        config = read_config(repo / "coroutine")
        config.backend = "python"  # the same model.py, loaded from the model's folder
        write_config(repo / "coroutine", config)
        shutil.copyfile(ROOT / "bench" / "coroutine_model.py", repo / "coroutine" / "1" / "model.py")

    rows = serve_and_alternate(build, ("plain", "coroutine"), args)
    write_record(
        args.out,
        "sync_execute",
        f"{args.example} example, fp32, ONNX Runtime CPU, 1 context, sync mode",
        args.concurrency,
        rows,
    )


if __name__ == "__main__":
    main()
