"""The lint, format and type checks: ruff and mypy as the dev extras pin them are the ones installed,
the README's test command (scripts/test.sh, which CI runs) runs them before pytest, the tree passes
them as CONTRIBUTING.md quotes them, and the Protocols the type checker holds the Triton-facing code
to (trtpool.triton.pb_api) name only what the pb_utils double, itself held to the real stub, has."""
from __future__ import annotations

import re
import subprocess
from importlib.metadata import version

import pytest
from packaging.requirements import Requirement

from tests.doubles import pb_utils_double
from tests.harness.docs import ROOT, command_argv, quoted_command
from trtpool.triton import pb_api

TOOLS = ("ruff", "mypy")


def _dev_pins() -> dict[str, str]:
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11+")
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    requirements = [Requirement(line) for line in dev]
    return {r.name: str(r.specifier) for r in requirements if r.name in TOOLS}


def test_the_dev_extras_pin_ruff_and_mypy_to_the_versions_installed():
    pins = _dev_pins()
    assert set(pins) == set(TOOLS), pins
    for tool, specifier in pins.items():
        assert re.fullmatch(r"==\d+(\.\d+)+", specifier), f"{tool}: pin an exact version, not '{specifier}'"
        assert specifier == f"=={version(tool)}", \
            f"{tool} {version(tool)} is installed, the dev extras pin {specifier}: run scripts/setup.sh"


def test_the_readmes_test_command_checks_lint_format_and_types_before_pytest():
    lines = [line.strip() for line in (ROOT / "scripts" / "test.sh").read_text().splitlines()]
    steps = ["-m ruff check", "-m ruff format --check", "-m mypy", "-m pytest"]
    where = [next((i for i, line in enumerate(lines) if line.endswith(step) or f"{step} " in line), None)
             for step in steps]
    assert None not in where, dict(zip(steps, where, strict=True))
    assert where == sorted(where), f"scripts/test.sh runs {steps} in another order: lines {where}"
    assert "set -euo pipefail" in lines, "a finding must stop scripts/test.sh before pytest"


@pytest.mark.parametrize("prefix", [".venv/bin/ruff check", ".venv/bin/ruff format", ".venv/bin/mypy"])
def test_the_checks_contributing_quotes_find_nothing(prefix):
    quoted = quoted_command(prefix, "CONTRIBUTING.md")
    done = subprocess.run(command_argv(quoted), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{quoted}:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"


# Each Protocol and what stands for it in the double. BLS's BlsRequest (InferenceRequest.exec, the
# front's call) is left out: the double has no BLS, as pb_api's docstring says.
DOUBLED = {
    pb_api.Tensor: pb_utils_double.Tensor, pb_api.TensorType: pb_utils_double.Tensor,
    pb_api.TritonError: pb_utils_double.TritonError, pb_api.TritonErrorType: pb_utils_double.TritonError,
    pb_api.InferenceResponse: pb_utils_double.InferenceResponse,
    pb_api.ResponseSender: pb_utils_double._ResponseSender,   # pb_utils has no name for these two
    pb_api.InferenceRequest: pb_utils_double.InferenceRequest,
    pb_api.Metric: pb_utils_double._Metric,
    pb_api.MetricFamily: pb_utils_double.MetricFamily, pb_api.MetricFamilyType: pb_utils_double.MetricFamily,
    pb_api.PbUtils: pb_utils_double,
}


@pytest.mark.parametrize("protocol", DOUBLED, ids=lambda p: p.__name__)
def test_each_pb_api_protocol_names_only_what_the_pb_utils_double_has(protocol):
    double = DOUBLED[protocol]
    members = [name for name in vars(protocol) if not name.startswith("_")]
    assert members, protocol
    assert [name for name in members if not hasattr(double, name)] == []
