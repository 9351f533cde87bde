"""Interpretable trees: falling trees and exact Rashomon sets (GraviTree), binarisers."""

from __future__ import annotations

from rml_fast.trees._tree import FallingTree
from rml_fast.trees.binarize import QuantileBinarizer, ThresholdGuessBinarizer
from rml_fast.trees.falling import (
    FallingRashomonSet,
    FallingTreeClassifier,
    IncompleteSearchError,
    IncompleteSearchWarning,
    rashomon_sweep,
)
from rml_fast.trees.grid import rashomon_grid

__all__ = [
    "FallingRashomonSet",
    "FallingTree",
    "FallingTreeClassifier",
    "IncompleteSearchError",
    "IncompleteSearchWarning",
    "QuantileBinarizer",
    "ThresholdGuessBinarizer",
    "rashomon_grid",
    "rashomon_sweep",
]
