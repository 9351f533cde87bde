"""Small real data sets for the LLM-evaluation methods (graded responses, value anchors).

Sources and licences are listed in ``rml_fast/datasets/data/README.md``.
"""

from __future__ import annotations

import csv
import json
from importlib import resources
from typing import Any

import numpy as np

__all__ = ["load_pvq_anchors", "load_pvq_hierarchy", "load_science"]


def _data_file(name: str):
    return resources.files("rml_fast.datasets") / "data" / name


def load_science() -> tuple[np.ndarray, list[str]]:
    """The ``Science`` data of R's ``ltm``/``mirt``: 392 respondents x 4 Likert items.

    The classic example of Samejima's graded response model (Euro-Barometer 38.1 items
    on attitudes to science and technology; Karlheinz & Melich, 1992).

    Returns
    -------
    Y : ndarray of shape (392, 4), int64
        Responses in categories 1..4 (row order as in mirt's ``Science``).
    item_names : list of str of length 4
        ``["Comfort", "Work", "Future", "Benefit"]``.

    Examples
    --------
    >>> from rml_fast.datasets import load_science
    >>> Y, names = load_science()
    >>> Y.shape, names[0], int(Y.min()), int(Y.max())
    ((392, 4), 'Comfort', 1, 4)
    """
    with _data_file("science_grm.csv").open("r", newline="") as fh:
        rows = list(csv.reader(fh))
    return np.array(rows[1:], dtype=np.int64), rows[0]


def load_pvq_anchors() -> dict[str, list[tuple[str, float]]]:
    """VALUEFLOW's PVQ anchor panel: texts with value intensities in [-10, 10].

    12 Schwartz values (PVQ), 20 texts each (5 per intensity level -2, -1, +1, +2),
    every text scored on VALUEFLOW's intensity scale.

    Returns
    -------
    dict
        value name -> list of ``(text, intensity)`` (240 pairs in all), levels in the
        order -2, -1, 1, 2.

    Examples
    --------
    >>> from rml_fast.datasets import load_pvq_anchors
    >>> anchors = load_pvq_anchors()
    >>> len(anchors), sum(len(v) for v in anchors.values())
    (12, 240)
    >>> all(-10 <= s <= 10 for v in anchors.values() for _, s in v)
    True
    """
    with _data_file("valueflow_pvq_anchors.json").open("r", encoding="utf-8") as fh:
        raw = json.load(fh)
    return {
        value: [(item["text"], float(item["intensity"])) for level in levels.values() for item in level]
        for value, levels in raw.items()
    }


def load_pvq_hierarchy() -> dict[str, Any]:
    """The PVQ value hierarchy of VALUEFLOW (root -> higher-order -> value -> sub-value).

    Returns
    -------
    dict
        ``{"hierarchy": {node: [children, ...]}, "definitions": {node: str}}``; the root
        node is ``"root"``. A value may have more than one parent (Schwartz's circle).

    Examples
    --------
    >>> from rml_fast.datasets import load_pvq_hierarchy
    >>> h = load_pvq_hierarchy()
    >>> h["hierarchy"]["root"]
    ['growth', 'self-protection']
    """
    with _data_file("valueflow_pvq_hierarchy.json").open("r", encoding="utf-8") as fh:
        return json.load(fh)
