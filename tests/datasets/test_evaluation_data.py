"""The shipped LLM-evaluation data sets: shapes, ranges, and agreement with the shared copies."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

from rml_fast.datasets import load_pvq_anchors, load_pvq_hierarchy, load_science


def test_science_is_the_mirt_table():
    Y, names = load_science()
    assert names == ["Comfort", "Work", "Future", "Benefit"]
    assert Y.shape == (392, 4) and Y.dtype == np.int64
    # every item uses all four categories
    for j in range(4):
        assert set(np.unique(Y[:, j])) == {1, 2, 3, 4}


def test_pvq_anchor_intensities_have_the_sign_of_their_level():
    raw = json.loads(
        (resources.files("rml_fast.datasets") / "data" / "valueflow_pvq_anchors.json").read_text("utf-8")
    )
    anchors = load_pvq_anchors()
    assert set(anchors) == set(raw)
    for value, levels in raw.items():
        flat = [(it["text"], float(it["intensity"])) for lvl in levels.values() for it in lvl]
        assert anchors[value] == flat
        for level, items in levels.items():
            assert all(np.sign(it["intensity"]) == np.sign(int(level)) for it in items), value


def test_pvq_hierarchy_reaches_every_anchored_value():
    h = load_pvq_hierarchy()["hierarchy"]
    seen, stack = set(), ["root"]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(h.get(node, []))
    assert set(load_pvq_anchors()) <= seen
