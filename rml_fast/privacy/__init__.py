"""Differential privacy: mechanisms and tight privacy accounting."""

from __future__ import annotations

from rml_fast.privacy.pld import PLDAccountant, PrivacyLossDistribution

__all__ = ["PLDAccountant", "PrivacyLossDistribution"]

# DP-C4 / per-sample clipping (issue 4)
from rml_fast.privacy.clipping import (
    ClippingEngine,
    clip_and_accumulate,
    coupled_norms,
    per_sample_grad_norms,
)
from rml_fast.privacy.dp_c4 import DPC4Optimizer, make_private_dpc4
from rml_fast.privacy.dp_c4_linear import DPC4Classifier, DPC4Regressor

__all__ += [
    "ClippingEngine",
    "DPC4Classifier",
    "DPC4Optimizer",
    "DPC4Regressor",
    "clip_and_accumulate",
    "coupled_norms",
    "make_private_dpc4",
    "per_sample_grad_norms",
]
