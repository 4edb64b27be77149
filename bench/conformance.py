"""Conformance on the ONNX node-test corpus: how many of the cases that ONNX Runtime answers
right trtpool answers right, as exported and with every dimension dynamic
(tests/conformance/node_suite.py says how a case runs); and that every case whose graph
Triton cannot carry (types it lacks, sequences, maps, optionals) is refused by name.

    .venv/bin/python bench/conformance.py --out bench/results/conformance.json
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import default_out, provenance, write_json  # noqa: E402
from tests.conformance.node_suite import VARIANTS, collect, refusal_mistakes, run_corpus, uncarriable  # noqa: E402


def _reason_kind(reason: str) -> str:
    if reason.startswith("not ONNX-Runtime-valid"):
        return "not ONNX-Runtime-valid"
    if " has ONNX type " in reason:
        return "type " + reason.rsplit(" ", 1)[-1]
    return "sequence, map or optional I/O"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=default_out("conformance.json"))
    args = parser.parse_args()
    import onnx
    import onnxruntime

    started = time.monotonic()
    cases = collect()
    record = {
        **provenance(),
        "corpus": f"onnx {onnx.__version__} node tests (onnx.backend.test.case.node), first data set each",
        "cases": len(cases),
        "reference": f"onnxruntime {onnxruntime.__version__}",
    }
    for variant in VARIANTS:
        began = time.monotonic()
        result = run_corpus(cases, variant)
        record.update(result.record())
        record[f"{variant}_failures"] = result.failures
        record[f"{variant}_excluded"] = dict(Counter(_reason_kind(r) for r in result.excluded.values()))
        record[f"{variant}_excluded_cases"] = result.excluded
        record[f"{variant}_seconds"] = round(time.monotonic() - began, 1)
        print(f"{variant}: {result.right} of {result.valid} right ({len(result.excluded)} excluded)", flush=True)
    left_out = uncarriable(cases)
    mistakes = refusal_mistakes(left_out)
    record.update(
        uncarriable_cases=len(left_out),
        uncarriable_refused_by_name=len(left_out) - len(mistakes),
        uncarriable_mistakes=mistakes,
    )
    print(f"Triton cannot carry {len(left_out)}: {len(left_out) - len(mistakes)} refused by name", flush=True)
    record["seconds"] = round(time.monotonic() - started, 1)
    write_json(args.out, record)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
