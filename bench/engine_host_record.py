"""Issue 36's record from several runs of bench/engine_host.py made in one loan of one machine.

A 10-minute call holds a few concurrencies of one case, so a loan's figures come in several files
(the sweep, the best shape, a higher concurrency). Per case and transport, each variant's best row
over all the runs is its figure (the row names its file and concurrency); the issue's headline keys
follow from those as bench/engine_host.py makes them for one run. Each run's own ratios, measured
side by side on one server, are kept beside them under `same_run`. A figure no run of the loan
measured ((f), the in-process ceiling) comes from --ceiling, an earlier record, and says so.

    python3 bench/engine_host_record.py bench/results/h200/engine_host_sweep_resnet50.json ... \\
        --ceiling bench/results/h200/engine_host_seventh.json --out bench/results/h200/engine_host.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine_host import headline  # noqa: E402
from bench.record import write_json  # noqa: E402

CEILING_KEY = "jpeg_inprocess_ceiling_images_per_s"


def rows_with_source(run: Path, case: dict) -> dict[str, dict[str, list[dict]]]:
    """Every measured row of a run's case, by transport and variant, each naming its run and concurrency."""
    rows: dict[str, dict[str, list[dict]]] = {}
    for transport, by_variant in case["by_concurrency"].items():
        for variant, by_concurrency in by_variant.items():
            for concurrency, row in by_concurrency.items():
                if "infer_per_s" in row:
                    source = {"run": run.name, "concurrency": int(concurrency)}
                    rows.setdefault(transport, {}).setdefault(variant, []).append({**row, **source})
    return rows


def merged_case(runs: list[tuple[Path, dict]]) -> dict:
    """One case over several runs: each variant's best row, and GPU memory from the run of that row."""
    rows: dict[str, dict[str, list[dict]]] = {}
    memory_by_run = {run.name: case["gpu_memory_mib"] for run, case in runs}
    for run, case in runs:
        for transport, by_variant in rows_with_source(run, case).items():
            for variant, found in by_variant.items():
                rows.setdefault(transport, {}).setdefault(variant, []).extend(found)
    best = {
        transport: {variant: max(found, key=lambda r: r["infer_per_s"]) for variant, found in by_variant.items()}
        for transport, by_variant in rows.items()
    }
    memory = {}
    for by_variant in best.values():
        for variant, row in by_variant.items():
            memory.setdefault(variant, memory_by_run[row["run"]].get(variant))
    return {"best": best, "gpu_memory_mib": memory}


def record(paths: list[Path], ceiling: Path | None) -> dict:
    runs = [(path, json.loads(path.read_text())) for path in paths]
    by_case: dict[str, list[tuple[Path, dict]]] = {}
    for path, run in runs:
        for name, case in run["cases"].items():
            by_case.setdefault(name, []).append((path, case))
    figures: dict = {}
    cases = {}
    for name, case_runs in by_case.items():
        cases[name] = merged_case(case_runs) | {
            "runs": [{"run": p.name, "date": c["date"], "command": c["command"]} for p, c in case_runs]
        }
        figures |= headline(name, cases[name])
    for key in ("gpu_memory_mib_host_x6", "gpu_memory_mib_one_instance"):  # the keys, by case
        figures[key] = {case: figures.pop(f"{key}_{case}") for case in by_case if f"{key}_{case}" in figures}
    if ceiling is not None and "jpeg_host_infer_per_s" in figures:
        earlier = json.loads(ceiling.read_text())
        figures[CEILING_KEY] = earlier[CEILING_KEY]
        figures["jpeg_inprocess_ceiling_from"] = f"{ceiling.name} (an earlier loan: no run of this one measured (f))"
        figures["jpeg_host_over_inprocess_ceiling"] = round(figures["jpeg_host_infer_per_s"] / earlier[CEILING_KEY], 3)
    same_run = {path.name: {k: v for k, v in run.items() if k.endswith("_host_over_now")} for path, run in runs}
    machines = {json.dumps(c["machine"], sort_keys=True) for _, run in runs for c in run["cases"].values()}
    return {**figures, "same_run": same_run, "machines": [json.loads(m) for m in machines], "cases": cases}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+", help="bench/engine_host.py's --out files of one loan")
    parser.add_argument("--ceiling", type=Path, help="an earlier record holding (f), " + CEILING_KEY)
    parser.add_argument("--note", default="", help="the loan: machine, date, session")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    write_json(args.out, {"note": args.note, **record(args.runs, args.ceiling)})
    print(json.dumps({k: v for k, v in json.loads(args.out.read_text()).items() if k != "cases"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
