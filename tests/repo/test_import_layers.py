"""scripts/import_layers.py: the packages' folders form layers (no import goes round), and
docs/architecture.md's picture is the one the code makes."""
from __future__ import annotations

import pytest

from scripts import import_layers


def test_no_import_between_boxes_goes_round():
    floor = import_layers.floors(import_layers.box_graph())
    assert floor["trtpool.errors"] == 0 and floor["trtpool_builder.cli"] > floor["trtpool.instance"] > 0


def test_a_circle_is_named():
    with pytest.raises(ValueError, match="a -> b -> c -> a"):
        import_layers.floors({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()})


def test_the_picture_draws_only_arrows_no_longer_path_implies():
    graph = {"top": {"middle", "bottom"}, "middle": {"bottom"}, "bottom": set()}
    drawn = import_layers.picture(graph, import_layers.floors(graph))
    assert "top --> middle" in drawn and "middle --> bottom" in drawn and "top --> bottom" not in drawn


def test_the_architecture_page_draws_what_the_code_imports():
    page = import_layers.DOC.read_text()
    assert import_layers.with_block(page, import_layers.doc_block()) == page, \
        "docs/architecture.md's picture is stale: run .venv/bin/python scripts/import_layers.py --write"
