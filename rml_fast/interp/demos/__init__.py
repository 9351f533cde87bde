"""Runnable interpretability experiments (``rml-fast demo interp NAME``).

Every demo module here defines

``run(*, seed=0, quick=False, out=None, progress=True) -> dict``
    runs the experiment (``quick``: the smallest setting that still shows the effect), writes a
    PNG figure to ``out`` when given (needs matplotlib) and returns the numbers it found;
``format_table(result) -> str``
    a plain-text table of those numbers.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["DEMOS", "load_demo"]

#: demo name -> (module under rml_fast.interp.demos, one-line description)
DEMOS: dict[str, tuple[str, str]] = {
    "grokking": (
        "grokking",
        "ExPLAIND: component influence through grokking of modular addition",
    ),
    "head_stability": (
        "head_stability",
        "Adam vs AdamW: attention-head stability across independently initialised refits",
    ),
    "energy_dps": (
        "energy_dps",
        "EnergyDPS vs activation maximisation vs top-k retrieval for digits-CNN logits",
    ),
}


def load_demo(name: str) -> ModuleType:
    """The demo module called ``name`` (one of :data:`DEMOS`)."""
    if name not in DEMOS:
        raise ValueError(f"name must be one of {sorted(DEMOS)}, got {name!r}")
    return importlib.import_module(f"rml_fast.interp.demos.{DEMOS[name][0]}")
