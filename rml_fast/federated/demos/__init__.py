"""Runnable federated experiments (``rml-fast demo federated NAME``).

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

#: demo name -> (module under rml_fast.federated.demos, one-line description)
DEMOS: dict[str, tuple[str, str]] = {
    "threshold_watermark": (
        "threshold_watermark",
        "(t, K)-threshold watermark on digits with K clients: z-score / accuracy trade-off",
    ),
    "sohip": (
        "sohip",
        "SoHip vs local-only, FedProto and FedAvg on digits with heterogeneous clients",
    ),
}


def load_demo(name: str) -> ModuleType:
    """The demo module called ``name`` (one of :data:`DEMOS`).

    Examples
    --------
    >>> from rml_fast.federated.demos import load_demo
    >>> load_demo("sohip").__name__
    'rml_fast.federated.demos.sohip'
    """
    if name not in DEMOS:
        raise ValueError(f"name must be one of {sorted(DEMOS)}, got {name!r}")
    return importlib.import_module(f"rml_fast.federated.demos.{DEMOS[name][0]}")
