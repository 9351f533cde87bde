"""Interpretable trees: falling trees and exact Rashomon sets (GraviTree), binarisers."""

from __future__ import annotations

from rml_fast.trees._tree import FallingTree
from rml_fast.trees.binarize import QuantileBinarizer, ThresholdGuessBinarizer
from rml_fast.trees.falling import (
    FallingRashomonSet,
    FallingTreeClassifier,
    IncompleteSearchError,
    IncompleteSearchWarning,
)

__all__ = [
    "FallingRashomonSet",
    "FallingTree",
    "FallingTreeClassifier",
    "IncompleteSearchError",
    "IncompleteSearchWarning",
    "QuantileBinarizer",
    "ThresholdGuessBinarizer",
]
