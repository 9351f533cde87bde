"""Translation-equivariant neural processes on scattered points: set-Fourier convolutions
(SFConv), their Volterra extension (SFVConv), the SFConvCNP / SFVConvCNP models, task
generators with the exact GP oracle, and a training loop (arXiv 2606.01172).

Submodules are imported on first use so that ``import rml_fast.neural_processes`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SetFourierConv": "sfconv",
    "SetFourierVolterraConv": "sfconv",
    "SetFourierConvBlock": "sfconv",
    "SetFourierVolterraConvBlock": "sfconv",
    "SFConvCNP": "models",
    "SFVConvCNP": "models",
    "nll_loss": "models",
    "CONFIGS": "models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"rml_fast.neural_processes.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'rml_fast.neural_processes' has no attribute {name!r}")
