"""LLM evaluation: judge reliability (IRT), judge attacks (BITE), endpoint change detection (B3IT),
value intensity (VALUEFLOW) and cultural translation quality (CULTURE-MT).

Model-facing parts take black-box callables (:mod:`rml_fast.evaluation._protocols`).
"""

from __future__ import annotations

__all__: list[str] = []  # the public names live in the submodules
