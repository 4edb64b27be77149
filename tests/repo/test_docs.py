"""The README, CONTRIBUTING.md and docs/ stay one navigable set: every page under docs/ can be reached
from the README through relative links, and every relative link in every Markdown file of the
repository points at a file that exists (and, with an anchor, at a heading of that file)."""
from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.docs import PAGES, ROOT, command_argv, quoted_command

LINK = re.compile(r"\]\(([^)\s]+)\)")
MARKDOWN = sorted(ROOT / name for name in subprocess.run(
    ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], cwd=ROOT, capture_output=True,
    text=True, check=True).stdout.split())


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lstrip("#").strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_anchor(line) for line in page.read_text().splitlines() if line.startswith("#")}


def _relative_links(page: Path) -> list[tuple[str, Path, str]]:
    """Each relative link of a page: as written, the file or folder it names, its anchor."""
    links = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        links.append((target, (page.parent / path).resolve() if path else page.resolve(), anchor))
    return links


def test_every_docs_page_can_be_reached_from_the_readme():
    """Following relative links from the README (a link to a folder reaches the pages in it)."""
    reached: set[Path] = set()
    todo = [(ROOT / "README.md").resolve()]
    while todo:
        page = todo.pop()
        if page in reached:
            continue
        reached.add(page)
        for _, file, _ in _relative_links(page):
            if file.is_dir():
                todo += [p.resolve() for p in file.glob("*.md")]
            elif file.suffix == ".md" and file.is_file():
                todo.append(file)
    unreached = [str(p.relative_to(ROOT)) for p in PAGES if p.resolve() not in reached]
    assert not unreached, f"pages no link from the README leads to: {unreached}"


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    broken = []
    for target, file, anchor in _relative_links(page):
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def _documented_keys(page: Path) -> set[str]:
    """The keys named in the first column of a page's parameter table (the one headed "| parameter |")."""
    lines = page.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| parameter |"))
    table = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2:]))
    return {key for line in table for key in re.findall(r"`(\w+)`", line.split(" | ")[0])}


def test_every_parameter_trtpool_accepts_is_in_the_reference_page():
    """docs/reference/parameters.md lists each config.pbtxt parameter key the backend accepts
    (config.KNOWN_KEYS) and no other; docs/configuration.md links to it and names no other keys."""
    from trtpool.parameters import KNOWN_KEYS
    from trtpool.modes.front import FRONT_PARAMETERS

    assert _documented_keys(ROOT / "docs" / "reference" / "parameters.md") == KNOWN_KEYS
    configuration = ROOT / "docs" / "configuration.md"
    assert "(reference/parameters.md)" in configuration.read_text()
    assert _documented_keys(configuration) - KNOWN_KEYS - FRONT_PARAMETERS == {"max_batch_size"}


def _page_check(page: Path) -> subprocess.CompletedProcess:
    """The command the page quotes to regenerate it, run with --check against `page`."""
    command = quoted_command(".venv/bin/python scripts/parameters_page.py", "docs/reference/parameters.md")
    argv = command_argv(command, {".venv/bin/python": sys.executable})
    return subprocess.run([*argv, "--check", "--page", str(page)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_the_parameters_page_is_what_the_table_generates(tmp_path: Path):
    """The committed page is what trtpool.parameters.PARAMETERS gives, and a page that differs is caught."""
    page = ROOT / "docs" / "reference" / "parameters.md"
    done = _page_check(page)
    assert done.returncode == 0, done.stderr
    stale = tmp_path / "parameters.md"
    stale.write_text(page.read_text().replace("| `postprocess_threads` | auto, or", "| `postprocess_threads` | 1, or"))
    assert stale.read_text() != page.read_text()
    done = _page_check(stale)
    assert done.returncode == 1 and "run .venv/bin/python scripts/parameters_page.py" in done.stderr
