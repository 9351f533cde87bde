"""Experiments that show each alignment objective's claimed effect on toy policies and denoisers.

``rml-fast demo alignment NAME`` runs one. Every demo module here defines

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

#: demo name -> (module under rml_fast.alignment.demos, one-line description)
DEMOS: dict[str, tuple[str, str]] = {
    "calibration": ("calibration", "DPO vs DPO + reward calibration: chosen likelihood on a toy policy"),
    "air": ("air", "GRPO, V-REx and AIR: anchor vs open-ended accuracy on toy intents"),
    "arspo": ("arspo", "unit-weight GRPO vs ARSPO on an easy + hard two-task bandit"),
    "unlearning": ("unlearning", "MSE, Hellinger and chi-squared unlearning of a toy denoiser's concept"),
}


def load_demo(name: str) -> ModuleType:
    """The demo module called ``name`` (one of :data:`DEMOS`)."""
    if name not in DEMOS:
        raise ValueError(f"name must be one of {sorted(DEMOS)}, got {name!r}")
    return importlib.import_module(f"rml_fast.alignment.demos.{DEMOS[name][0]}")
