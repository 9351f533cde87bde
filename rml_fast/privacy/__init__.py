"""Differential privacy: mechanisms and tight privacy accounting."""

from __future__ import annotations

from rml_fast.privacy.pld import PLDAccountant, PrivacyLossDistribution

__all__ = ["PLDAccountant", "PrivacyLossDistribution"]
