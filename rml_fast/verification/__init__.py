"""Verification games: the Neural Concept Verifier (a prover-verifier game over concept encodings).

Submodules are imported on first use so that ``import rml_fast.verification`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = dict.fromkeys(
    ["ConceptVerifier", "KSparseProver", "NeuralConceptVerifier", "morgana_loss"], "ncv"
)

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"rml_fast.verification.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'rml_fast.verification' has no attribute {name!r}")
