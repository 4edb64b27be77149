"""Real YOLO exports through trtpool-build --precision fp16 and trtpool-model (issue 19).

Two steps, because the exporter needs torch and ultralytics, which trtpool does not:

    # 1. export, in any environment with them (random weights from the .yaml, nothing downloaded):
    python3 -m venv /tmp/yolo-venv
    /tmp/yolo-venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    /tmp/yolo-venv/bin/pip install "ultralytics==8.3.0" onnx onnxslim   # or the newest ultralytics
    /tmp/yolo-venv/bin/python bench/yolo_fp16.py export --dir /tmp/yolo-exports
    # 2. build each export as a user would, with the project's tools:
    .venv/bin/python bench/yolo_fp16.py build --dir /tmp/yolo-exports --out bench/results/yolo_fp16.json

`export` writes every combination of model (yolov8n, yolo11n), dynamic axes (yes, no), opset
(12, 17) and onnxslim (yes, no) at imgsz 320, and versions.json. `build` runs
`trtpool-build --precision fp16` (and fp32 where fp16 fails, to tell fp16 failures from others)
and `trtpool-model` on each engine, and records each command's exit status and error line.

Up to ultralytics 8.3.x the anchor grid is torch.arange(end=w, dtype=float32), which torch.onnx's
TorchScript exporter writes as a float Range on a size cast to float; converted whole to fp16,
TensorRT-RTX 1.7 refused every dynamic export ("Input 0's element type (float) differs from input
1's element type (half)"). Later ultralytics releases write an int64 Range and a Cast after it.
torch 2.9 and later default to the dynamo exporter, which ultralytics 8.3.0 does not opt out of;
`export` asks for the TorchScript exporter, as newer ultralytics releases do.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import default_out, provenance, write_json  # noqa: E402

MODELS = ("yolov8n.yaml", "yolo11n.yaml")
IMGSZ = 320
DYNAMIC_SHAPES = f"images=1x3x{IMGSZ}x{IMGSZ}:1x3x{IMGSZ}x{IMGSZ}:4x3x640x640"


def export(folder: Path) -> None:
    import functools
    from importlib.metadata import version

    import torch
    from ultralytics import YOLO

    # ultralytics 8.3.x calls torch.onnx.export without `dynamo`; torch >= 2.9 would use dynamo.
    torch.onnx.export = functools.partial(torch.onnx.export, dynamo=False)
    folder.mkdir(parents=True, exist_ok=True)
    done = {}
    for cfg, dynamic, opset, simplify in itertools.product(MODELS, (True, False), (12, 17), (True, False)):
        shapes, graph = "dynamic" if dynamic else "static", "slim" if simplify else "raw"
        name = f"{cfg.removesuffix('.yaml')}_{shapes}_op{opset}_{graph}"
        try:
            path = YOLO(cfg).export(format="onnx", dynamic=dynamic, imgsz=IMGSZ, opset=opset, simplify=simplify)
            os.replace(path, folder / f"{name}.onnx")
            done[name] = "exported"
        except Exception as exc:  # noqa: BLE001 - recorded, the matrix goes on
            done[name] = f"failed: {type(exc).__name__}: {exc}"
        print(name, done[name], flush=True)
    versions = {p: version(p) for p in ("ultralytics", "torch", "onnx", "onnxslim")}
    (folder / "versions.json").write_text(json.dumps({"versions": versions, "exports": done}, indent=2) + "\n")


def _run(command: list[str]) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "CleanUnusedInitializers" not in line]
    error = next((i for i, line in enumerate(lines) if "error:" in line), None)
    return {
        "command": " ".join(Path(command[0]).name if i == 0 else c for i, c in enumerate(command)),
        "rc": done.returncode,
        "error": " ".join(lines[error : error + 8]) if error is not None else None,
        "last_line": lines[-1] if lines else "",
    }


def build(folder: Path, out: Path) -> None:
    from importlib.metadata import version

    import onnxruntime

    bin_dir = Path(sys.executable).parent
    work = folder / "built"
    work.mkdir(exist_ok=True)
    results = {}
    for onnx_file in sorted(folder.glob("*.onnx")):
        name = onnx_file.stem
        shapes = ["--shapes", DYNAMIC_SHAPES] if "_dynamic_" in name else []
        entry = {}
        for precision in ("fp16", "fp32"):
            plan = work / f"{name}.{precision}.plan"
            entry[precision] = _run(
                [
                    str(bin_dir / "trtpool-build"),
                    "--onnx",
                    str(onnx_file),
                    "--output",
                    str(plan),
                    "--precision",
                    precision,
                    *shapes,
                ]
            )
            if entry[precision]["rc"] == 0:
                entry[f"{precision}_model"] = _run(
                    [
                        str(bin_dir / "trtpool-model"),
                        str(plan),
                        "--repo",
                        str(work / "repo"),
                        "--name",
                        f"{name}_{precision}",
                    ]
                )
            if precision == "fp16" and entry["fp16"]["rc"] == 0:
                break  # fp32 only to tell an fp16 failure from any other
        results[name] = entry
        print(name, {k: v["rc"] for k, v in entry.items()}, flush=True)
    exported = json.loads((folder / "versions.json").read_text())
    from trtpool_builder.engine.trt_module import load_trt

    trt, _ = load_trt(None)
    fp16_failed = sorted(n for n, e in results.items() if e["fp16"]["rc"] != 0)
    write_json(
        out,
        {
            **provenance(),
            "exporter": exported["versions"],
            "exports": exported["exports"],
            "builder": {
                "trt_module": f"{trt.__name__} {trt.__version__}",
                "onnxruntime": onnxruntime.__version__,
                "onnx": version("onnx"),
            },
            "dynamic_shapes": DYNAMIC_SHAPES,
            "built_fp16": len(results) - len(fp16_failed),
            "total": len(results),
            "fp16_failed": fp16_failed,
            "fp16_failed_but_fp32_built": sorted(n for n in fp16_failed if results[n].get("fp32", {}).get("rc") == 0),
            "results": results,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=("export", "build"))
    parser.add_argument("--dir", type=Path, required=True, help="where the exports are (written by export)")
    parser.add_argument("--out", type=Path, default=default_out("yolo_fp16.json"))
    args = parser.parse_args()
    export(args.dir) if args.step == "export" else build(args.dir, args.out)


if __name__ == "__main__":
    main()
