"""Fairness: optimal multi-class fair classifiers and fairness-metric compatibility games."""

from __future__ import annotations

__all__: list[str] = []  # the public names live in the submodules
