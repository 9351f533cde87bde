"""Human-centred decisions: ASR-ICL recourse for black-box predictors and robust human-AI
complementarity."""

from __future__ import annotations

__all__: list[str] = []
