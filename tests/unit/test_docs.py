"""The README and docs/ stay one navigable set: every page under docs/ is linked from the
README, and every relative link in them points at a file that exists (and, with an anchor,
at a heading of that file)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.harness.docs import PAGES, ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lstrip("#").strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_anchor(line) for line in page.read_text().splitlines() if line.startswith("#")}


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def test_every_parameter_trtpool_accepts_is_in_the_configuration_table():
    """docs/configuration.md lists each config.pbtxt parameter key the backend accepts (config.KNOWN_KEYS)."""
    from trtpool.parameters import KNOWN_KEYS

    table = [line for line in (ROOT / "docs" / "configuration.md").read_text().splitlines() if line.startswith("| `")]
    documented = {key for line in table for key in re.findall(r"`(\w+)`", line.split(" | ")[0])}
    assert sorted(KNOWN_KEYS - documented) == []
