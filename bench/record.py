"""Where a benchmark's figures came from (when, by which command, on what
machine), how every benchmark writes its JSON record, and where a run writes
when --out is not given."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

# A run's output without --out: ignored by git. The tracked records under bench/results/ are
# written only where --out names them, so no run replaces one by default.
RUNS = Path(__file__).resolve().parent / "runs"


def default_out(name: str) -> Path:
    return RUNS / name


def provenance() -> dict[str, Any]:
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": platform.processor()},
    }


def write_json(out: Path, record: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
