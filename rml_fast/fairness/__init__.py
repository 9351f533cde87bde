"""Fairness: optimal multi-class fair classifiers and fairness-metric compatibility games."""

from __future__ import annotations
