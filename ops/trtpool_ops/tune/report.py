"""What trtpool-tune writes: the raw measurements (JSON), a markdown table of every point
and a plot of throughput against p99 with the Pareto front and the choice marked."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trtpool_ops.tune.measurement import Measurement
from trtpool_ops.tune.perf import summary


def pareto(measured: Sequence[Measurement]) -> list[Measurement]:
    """The points no other point beats on both throughput (higher) and p99 (lower), by p99."""
    ok = [m for m in measured if m.ok]
    front = [
        m
        for m in ok
        if not any(
            o.infer_per_s >= m.infer_per_s
            and o.p99_ms <= m.p99_ms
            and (o.infer_per_s, o.p99_ms) != (m.infer_per_s, m.p99_ms)
            for o in ok
        )
    ]
    return sorted(front, key=lambda m: m.p99_ms)


def noise_note(rivals: Sequence[Measurement], noise: float) -> str:
    """Whether the choice is surely ahead (Objective.rivals: the points it does not surely beat)."""
    if not rivals:
        return (
            f"the choice leads every other point by more than the noise ({noise:.0%}), and its windows "
            "overlap none of theirs"
        )
    return (
        f"the choice is within noise of {len(rivals)} other point(s): "
        + "; ".join(m.candidate.label for m in rivals)
        + f" (throughput within {noise:.0%} of it, or windows overlapping its): each serves about as well, "
        "and a repeat run may choose another"
    )


def next_steps(model: str, config: Path, over: bool) -> str:
    """What the user does for Triton to serve the choice: it reads config.pbtxt only, at load."""
    reload = (
        f"then reload the model: restart tritonserver, or under --model-control-mode explicit load "
        f"'{model}' again (POST /v2/repository/models/{model}/load)"
    )
    if over:
        return f"config.pbtxt now holds the choice (the original is config.pbtxt.orig); {reload}"
    return (
        f"Triton reads only config.pbtxt, so the choice in {config} is not served yet: replace config.pbtxt "
        f"with it (--write-config does, keeping the original as config.pbtxt.orig; by hand: cp {config} "
        f"{config.with_name('config.pbtxt')}), {reload}"
    )


def _windows(m: dict[str, Any]) -> str:
    windows = m.get("windows_infer_per_s") or []
    return f"{min(windows):.1f}–{max(windows):.1f}" if windows else "—"  # noqa: RUF001 - a range, typeset


def markdown(record: dict[str, Any]) -> str:
    lines = [
        f"# trtpool-tune: {record['model']}",
        "",
        f"- client profile: {json.dumps(record['client'])}",
        f"- objective: {record['objective']}",
        f"- measured {len(record['measurements'])} point(s) in {record['minutes']:.1f} min ({record['stopped']}); "
        f"the whole grid of this space is {record['space']['grid_size']}",
        f"- chosen: {record['chosen']['label'] if record['chosen'] else 'none'} ({record['reason']})",
        *(f"- {record[key]}" for key in ("noise_note", "next") if key in record),
        "",
        "Each point's infer/s is the mean of the windows perf_analyzer settled on; their range is its noise.",
        "",
        "| # | configuration | infer/s | infer/s per window | p50 ms | p99 ms | GPU MiB | s | note |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    chosen = record["chosen"]["label"] if record["chosen"] else None
    front = {m["label"] for m in record["pareto"]}
    for i, m in enumerate(record["measurements"], 1):
        note = ", ".join(
            n
            for n, on in (
                ("chosen", m["label"] == chosen),
                ("Pareto", m["label"] in front),
                (m.get("note", ""), "note" in m),
            )
            if on
        )
        if "error" in m:
            cause = summary(m["error"]).replace("|", "\\|")
            lines.append(f"| {i} | {m['label']} | — | — | — | — | — | {m['seconds']} | failed: {cause} |")
        else:
            memory = "—" if m.get("gpu_memory_mib") is None else f"{m['gpu_memory_mib']:.0f}"
            lines.append(
                f"| {i} | {m['label']} | {m['infer_per_s']:.1f} | {_windows(m)} | {m['p50_ms']:.2f} "
                f"| {m['p99_ms']:.2f} | {memory} | {m['seconds']} | {note} |"
            )
    return "\n".join(lines) + "\n"


def point_label(number: int, m: Measurement) -> str:
    """A point's label on the plot: its row in report.md and its mode and contexts."""
    return f"#{number} {m.candidate.mode}, {m.candidate.contexts} ctx"


def plot(
    measured: Sequence[Measurement], chosen: Measurement | None, title: str, path: Path, p99_bound: float | None = None
) -> bool:
    """The PNG; False where matplotlib is not installed (extra trtpool[tune])."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure = draw(pyplot, measured, chosen, title, p99_bound)
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return True


def draw(
    pyplot: Any, measured: Sequence[Measurement], chosen: Measurement | None, title: str, p99_bound: float | None
) -> Any:
    """The figure: every point labelled with its row in report.md, the Pareto front, the choice."""
    ok = [m for m in measured if m.ok]
    figure, axes = pyplot.subplots(figsize=(8, 5.5))
    for mode in sorted({m.candidate.mode for m in ok}):
        points = [m for m in ok if m.candidate.mode == mode]
        axes.scatter([m.p99_ms for m in points], [m.infer_per_s for m in points], label=mode, alpha=0.75)
    for number, m in enumerate(measured, 1):
        if m.ok:
            axes.annotate(
                point_label(number, m), (m.p99_ms, m.infer_per_s), textcoords="offset points", xytext=(4, 4), fontsize=7
            )
    front = pareto(ok)
    axes.plot([m.p99_ms for m in front], [m.infer_per_s for m in front], "k--", lw=1, label="Pareto front")
    if chosen is not None and chosen.ok:
        axes.scatter(
            [chosen.p99_ms],
            [chosen.infer_per_s],
            s=260,
            facecolors="none",
            edgecolors="red",
            linewidths=2,
            label=f"chosen: {chosen.candidate.label}",
        )
    if p99_bound is not None:
        axes.axvline(p99_bound, color="grey", ls=":", label=f"p99 bound {p99_bound:g} ms")
    axes.set_xlabel("p99 latency (ms)")
    axes.set_ylabel("throughput (inferences/s)")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    return figure


def write(
    out: Path,
    record: dict[str, Any],
    measured: Sequence[Measurement],
    chosen: Measurement | None,
    p99_bound: float | None,
) -> list[Path]:
    """tune.json, report.md and tune.png under `out`; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "tune.json", out / "report.md"]
    paths[0].write_text(json.dumps(record, indent=2) + "\n")
    paths[1].write_text(markdown(record))
    if plot(measured, chosen, f"{record['model']}: {record['objective']}", out / "tune.png", p99_bound):
        paths.append(out / "tune.png")
    return paths
