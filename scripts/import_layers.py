"""The layers of trtpool's packages, read from their imports: one box per folder (a top-level
module is a box of its own), its floor within its package (one above the highest box of the
package it imports), and a Mermaid picture of each package for docs/architecture.md.

    .venv/bin/python scripts/import_layers.py            # print the floors and the picture
    .venv/bin/python scripts/import_layers.py --write    # put the picture into docs/architecture.md

An import between boxes that closes a circle is an error naming it: a lower floor never imports
a higher one. tests/repo/test_import_layers.py holds the docs to the code and the code to that rule.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "trtpool": ROOT / "backend_src" / "trtpool",
    "trtpool_builder": ROOT / "builder" / "trtpool_builder",
    "trtpool_ops": ROOT / "ops" / "trtpool_ops",
}
DOC = ROOT / "docs" / "architecture.md"
START, END = "<!-- import-layers: start (scripts/import_layers.py --write) -->", "<!-- import-layers: end -->"


def modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package by its own name)."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The known modules that module `name` imports (at any depth of its code)."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
            targets.add(base)
    result = set()
    for target in targets:
        while target and target not in known:  # `from a.b import name`: the module a.b
            target = target.rpartition(".")[0]
        if target and target != name:
            result.add(target)
    return result


def box(module: str) -> str:
    """trtpool.engine.pool -> trtpool.engine; trtpool.instance -> trtpool.instance."""
    parts = module.split(".")
    return ".".join(parts[:2])


def box_graph(package: str | None = None) -> dict[str, set[str]]:
    """Boxes and the boxes each imports: of every package, or of one (its imports of others left out)."""
    known = modules()
    inside = {name: path for name, path in known.items() if package in (None, name.split(".")[0])}
    graph: dict[str, set[str]] = {box(name): set() for name in inside}
    for name, path in inside.items():
        graph[box(name)].update(box(t) for t in imported(name, path, known) if box(t) in graph and box(t) != box(name))
    return graph


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each box's floor: 0 for a box that imports none, else one above the highest it imports.
    ValueError naming the circle where imports go round."""
    floor: dict[str, int] = {}
    visiting: list[str] = []

    def visit(node: str) -> int:
        if node in floor:
            return floor[node]
        if node in visiting:
            circle = [*visiting[visiting.index(node) :], node]
            raise ValueError("imports go round: " + " -> ".join(circle))
        visiting.append(node)
        floor[node] = 1 + max((visit(d) for d in graph[node]), default=-1)
        visiting.pop()
        return floor[node]

    for node in sorted(graph):
        visit(node)
    return floor


def picture(graph: dict[str, set[str]], floor: dict[str, int]) -> str:
    """Mermaid, bottom to top, one row a floor; an arrow only where no longer path says it already."""

    def reachable(start: str) -> set[str]:
        seen, todo = set(), list(graph[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(graph[node])
        return seen

    ident = {node: node.replace(".", "_") for node in graph}
    lines = ["```mermaid", "flowchart BT"]
    for level in sorted(set(floor.values())):
        members = sorted(n for n in graph if floor[n] == level)
        lines.append(f'  subgraph floor{level}["floor {level}"]')
        lines += [f'    {ident[n]}["{n}"]' for n in members]
        lines.append("  end")
    for node in sorted(graph):
        indirect = set().union(*(reachable(d) for d in graph[node])) if graph[node] else set()
        lines += [f"  {ident[node]} --> {ident[d]}" for d in sorted(graph[node] - indirect)]
    lines.append("```")
    return "\n".join(lines)


def doc_block() -> str:
    parts = []
    for package in PACKAGES:
        graph = box_graph(package)
        parts.append(f"`{package}`:\n\n{picture(graph, floors(graph))}")
    return "\n".join([START, "\n\n".join(parts), END])


def with_block(text: str, block: str) -> str:
    if START not in text or END not in text:
        raise SystemExit(f"{DOC} has no {START} ... {END} block to fill")
    head, _, rest = text.partition(START)
    return head + block + rest.partition(END)[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write the picture into {DOC.relative_to(ROOT)}")
    args = parser.parse_args()
    if args.write:
        DOC.write_text(with_block(DOC.read_text(), doc_block()))
        return 0
    for package in PACKAGES:
        graph = box_graph(package)
        floor = floors(graph)
        for level in sorted(set(floor.values())):
            print(f"{package} floor {level}: " + ", ".join(sorted(n for n in graph if floor[n] == level)))
    floors(box_graph())  # and no circle across the packages either
    return 0


if __name__ == "__main__":
    sys.exit(main())
