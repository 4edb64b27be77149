"""The reference pages hold to the code: docs/reference/metrics.md names every metric trtpool
defines and no other, and docs/reference/errors.md names every error class a request or a load
can end with."""
from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from tests.harness.docs import ROOT

REFERENCE = ROOT / "docs" / "reference"
METRIC = re.compile(r"trtpool_[a-z_]+")


def _backend_metrics() -> set[str]:
    """The metric names the backend's metrics module hands to Triton's MetricFamily: every string
    in it that is a whole metric name (its docstring's list is one string, not counted)."""
    source = Path(importlib.util.find_spec("trtpool.triton.metrics").origin).read_text()
    return {node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and METRIC.fullmatch(node.value)}


def _watchdog_metrics() -> set[str]:
    """The watchdog's metrics as prometheus_client exposes them (a counter's samples end in _total)."""
    from trtpool_ops.watch_metrics import WatchMetrics

    return {family.name + ("_total" if family.type == "counter" else "")
            for family in WatchMetrics().registry.collect()}


def test_the_metrics_page_names_every_metric_and_no_other():
    page = (REFERENCE / "metrics.md").read_text()
    defined = _backend_metrics() | _watchdog_metrics()
    assert len(_backend_metrics()) >= 19 and len(_watchdog_metrics()) == 4, defined   # the scan finds them
    tabled = {match for line in page.splitlines() if line.startswith("| `trtpool_")
              for match in METRIC.findall(line.split(" | ")[0])}
    assert sorted(defined - tabled) == [], "defined in the code but not in the page's tables"
    assert sorted(set(METRIC.findall(page)) - defined) == [], "named on the page but defined nowhere"


def test_the_errors_page_names_every_error_class():
    from trtpool import errors

    classes = {name for name, value in vars(errors).items()
               if isinstance(value, type) and issubclass(value, errors.TrtpoolError) and value is not errors.TrtpoolError}
    page = (REFERENCE / "errors.md").read_text()
    assert classes and sorted(name for name in classes if f"`{name}`" not in page) == []
