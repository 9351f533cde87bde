"""Strategic classification: decision-dependent cost uncertainty, ambiguity, and a simulator of
strategic agents that evaluates any classifier."""

from __future__ import annotations
