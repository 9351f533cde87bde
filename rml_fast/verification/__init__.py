"""Verification games: the Neural Concept Verifier (a prover-verifier game over concept encodings)."""

from __future__ import annotations

__all__: list[str] = []
