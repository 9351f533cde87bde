"""Strategic classification: decision-dependent cost uncertainty, ambiguity, and a simulator of
strategic agents that evaluates any classifier."""

from __future__ import annotations

__all__: list[str] = []  # the public names live in the submodules
