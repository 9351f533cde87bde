"""Small real data sets shipped inside the package (no download)."""

from __future__ import annotations

from rml_fast.datasets.evaluation import load_pvq_anchors, load_pvq_hierarchy, load_science
from rml_fast.datasets.series import load_lynx
from rml_fast.datasets.tabular import BINARIZED_DATASETS, load_binarized

__all__ = [
    "BINARIZED_DATASETS",
    "load_binarized",
    "load_lynx",
    "load_pvq_anchors",
    "load_pvq_hierarchy",
    "load_science",
]
