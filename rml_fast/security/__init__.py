"""Security: defenses of vision-language models against visual prompt injection.

GTM (gradient-guided token masking, :mod:`rml_fast.security.gtm`) loads on first use of one of
its names (it imports torch).
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> submodule, loaded on first use
_LAZY = {
    name: "gtm"
    for name in (
        "CallableVLMAdapter",
        "GTMDefense",
        "LlavaAdapter",
        "TinyVLMAdapter",
        "VLMAdapter",
        "VLMInputs",
        "adversarial_loss",
        "attack_success_rate",
        "hsgn_scores",
        "image_hijack_pgd",
        "n_masked",
        "ranking_consistency",
        "topk_mask",
    )
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"rml_fast.security.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
