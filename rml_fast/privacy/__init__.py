"""Differential privacy: SGG mechanisms and tight privacy-loss-distribution accounting."""

from __future__ import annotations

from rml_fast.privacy.pld import PLDAccountant, PrivacyLossDistribution
from rml_fast.privacy.sgg import SGGMechanism, optimal_sgg

__all__ = ["PLDAccountant", "PrivacyLossDistribution", "SGGMechanism", "optimal_sgg"]
