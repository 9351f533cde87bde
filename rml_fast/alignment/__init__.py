"""Alignment objectives: preference-optimisation losses with their incentive-score decomposition and
reward calibration, AIR, ARSPO and f-divergence unlearning (torch losses for plain loops and TRL)."""

from __future__ import annotations

__all__: list[str] = []  # the public names live in the submodules
