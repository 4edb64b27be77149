"""Write docs/reference/parameters.md from trtpool.parameters.PARAMETERS, the one table of the model
parameters, so that the page says what the code reads; --check only compares (exit 1 if the
page differs), as tests/repo/test_docs.py does."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trtpool.parameters import PARAMETERS, Parameter

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "parameters.md"
COMMAND = ".venv/bin/python scripts/parameters_page.py"

HEADER = f"""# Model parameters

[Back to the configuration](../configuration.md)

The keys of config.pbtxt's `parameters` that trtpool takes, each given as a string value. An
unset or empty one takes its default; a key not listed here is refused when the model loads,
naming the closest one. [configuration.md](../configuration.md) says more about several of
them.

This page is generated from `PARAMETERS` in backend_src/trtpool/parameters.py, which also reads
and refuses the values: after changing the table, run `{COMMAND}`.

| parameter | accepts | default | what it does |
| --- | --- | --- | --- |
"""


def _row(parameter: Parameter) -> str:
    default = f"`{parameter.default}`" if parameter.default else "none"
    return f"| `{parameter.key}` | {parameter.kind.accepts} | {default} | {parameter.doc} |\n"


def page() -> str:
    return HEADER + "".join(_row(parameter) for parameter in PARAMETERS.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare only: exit 1 if the page differs")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.check:
        args.page.parent.mkdir(parents=True, exist_ok=True)
        args.page.write_text(page())
        return 0
    if not args.page.is_file() or args.page.read_text() != page():
        print(f"{args.page} is not what trtpool.parameters.PARAMETERS gives: run {COMMAND}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
