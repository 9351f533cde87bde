"""Call signatures of the black-box models the evaluation methods take.

Every model-facing part of :mod:`rml_fast.evaluation` takes one of these plain callables, so
that an API client, a local model or a deterministic test stand-in all plug in the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "BatchGen",
    "Embedder",
    "PairJudge",
    "PointJudge",
    "Ranker",
    "TextGen",
    "TokenSampler",
]

TextGen = Callable[[str], str]
"""``prompt -> text``."""

BatchGen = Callable[[list[str]], list[str]]
"""``prompts -> texts`` (one output per prompt, same order)."""

Embedder = Callable[[list[str]], np.ndarray]
"""``texts -> (n, d)`` float32 array whose rows are L2-normalised."""

PointJudge = Callable[[str, str], tuple[float, str]]
"""``(question, response) -> (score, explanation)``."""

PairJudge = Callable[[str, str, str], tuple[float, str]]
"""``(question, response_a, response_b) -> (signed score, explanation)``; > 0 favours ``a``."""

Ranker = Callable[[str, list[str]], list[int]]
"""``(instruction, texts) -> permutation of range(len(texts))``, best first."""

TokenSampler = Callable[[str, int], list[str]]
"""``(prompt, n) -> n`` first output tokens sampled at temperature 0."""
