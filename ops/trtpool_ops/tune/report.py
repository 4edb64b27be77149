"""What trtpool-tune writes: the raw measurements (JSON), a markdown table of every point
and a plot of throughput against p99 with the Pareto front and the choice marked."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trtpool_ops.tune.measurement import Measurement


def pareto(measured: Sequence[Measurement]) -> list[Measurement]:
    """The points no other point beats on both throughput (higher) and p99 (lower), by p99."""
    ok = [m for m in measured if m.ok]
    front = [m for m in ok if not any(o.infer_per_s >= m.infer_per_s and o.p99_ms <= m.p99_ms and
                                      (o.infer_per_s, o.p99_ms) != (m.infer_per_s, m.p99_ms) for o in ok)]
    return sorted(front, key=lambda m: m.p99_ms)


def markdown(record: dict[str, Any]) -> str:
    lines = [f"# trtpool-tune: {record['model']}", "",
             f"- client profile: {json.dumps(record['client'])}",
             f"- objective: {record['objective']}",
             f"- measured {len(record['measurements'])} point(s) in {record['minutes']:.1f} min ({record['stopped']}); "
             f"the whole grid of this space is {record['space']['grid_size']}",
             f"- chosen: {record['chosen']['label'] if record['chosen'] else 'none'} ({record['reason']})", "",
             "| # | configuration | infer/s | p50 ms | p99 ms | GPU MiB | s | note |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    chosen = record["chosen"]["label"] if record["chosen"] else None
    front = {m["label"] for m in record["pareto"]}
    for i, m in enumerate(record["measurements"], 1):
        note = ", ".join(n for n, on in (("chosen", m["label"] == chosen), ("Pareto", m["label"] in front),
                                         (m.get("note", ""), "note" in m)) if on)
        if "error" in m:
            first = m["error"].splitlines()[0] if m["error"] else ""
            lines.append(f"| {i} | {m['label']} | — | — | — | — | {m['seconds']} | failed: {first[:160]} |")
        else:
            memory = "—" if m.get("gpu_memory_mib") is None else f"{m['gpu_memory_mib']:.0f}"
            lines.append(f"| {i} | {m['label']} | {m['infer_per_s']:.1f} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} "
                         f"| {memory} | {m['seconds']} | {note} |")
    return "\n".join(lines) + "\n"


def plot(measured: Sequence[Measurement], chosen: Measurement | None, title: str, path: Path,
         p99_bound: float | None = None) -> bool:
    """The PNG; False where matplotlib is not installed (extra trtpool[tune])."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    from matplotlib import pyplot

    ok = [m for m in measured if m.ok]
    figure, axes = pyplot.subplots(figsize=(8, 5.5))
    for mode in sorted({m.candidate.mode for m in ok}):
        points = [m for m in ok if m.candidate.mode == mode]
        axes.scatter([m.p99_ms for m in points], [m.infer_per_s for m in points], label=mode, alpha=0.75)
    front = pareto(ok)
    axes.plot([m.p99_ms for m in front], [m.infer_per_s for m in front], "k--", lw=1, label="Pareto front")
    if chosen is not None and chosen.ok:
        axes.scatter([chosen.p99_ms], [chosen.infer_per_s], s=260, facecolors="none", edgecolors="red",
                     linewidths=2, label=f"chosen: {chosen.candidate.label}")
    if p99_bound is not None:
        axes.axvline(p99_bound, color="grey", ls=":", label=f"p99 bound {p99_bound:g} ms")
    axes.set_xlabel("p99 latency (ms)")
    axes.set_ylabel("throughput (inferences/s)")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return True


def write(out: Path, record: dict[str, Any], measured: Sequence[Measurement], chosen: Measurement | None,
          p99_bound: float | None) -> list[Path]:
    """tune.json, report.md and tune.png under `out`; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "tune.json", out / "report.md"]
    paths[0].write_text(json.dumps(record, indent=2) + "\n")
    paths[1].write_text(markdown(record))
    if plot(measured, chosen, f"{record['model']}: {record['objective']}", out / "tune.png", p99_bound):
        paths.append(out / "tune.png")
    return paths
