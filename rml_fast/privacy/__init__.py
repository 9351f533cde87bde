"""Differential privacy: SGG mechanisms and tight privacy-loss-distribution accounting."""

from __future__ import annotations

from rml_fast.privacy.pld import PLDAccountant, PrivacyLossDistribution
from rml_fast.privacy.sgg import SGGMechanism, optimal_sgg

__all__ = ["PLDAccountant", "PrivacyLossDistribution", "SGGMechanism", "optimal_sgg"]

# DP-C4 / per-sample clipping (issue 4): imported lazily, so that the accountant does not
# pull in torch (and the estimators scikit-learn) until they are used.
_LAZY = {
    "ClippingEngine": "rml_fast.privacy.clipping",
    "NonFiniteGradientError": "rml_fast.privacy.clipping",
    "per_sample_losses": "rml_fast.privacy.clipping",
    "clip_and_accumulate": "rml_fast.privacy.clipping",
    "coupled_norms": "rml_fast.privacy.clipping",
    "per_sample_grad_norms": "rml_fast.privacy.clipping",
    "DPC4Optimizer": "rml_fast.privacy.dp_c4",
    "make_private_dpc4": "rml_fast.privacy.dp_c4",
    "train_private": "rml_fast.privacy.dp_c4",
    "DPC4Classifier": "rml_fast.privacy.dp_c4_linear",
    "DPC4Regressor": "rml_fast.privacy.dp_c4_linear",
}
__all__ += sorted(_LAZY)


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rml_fast.privacy' has no attribute {name!r}")
