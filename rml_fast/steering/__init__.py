"""Steering with sparse-autoencoder features (SRLS) and strength tuning by Bayesian optimisation."""

from __future__ import annotations

from rml_fast.steering.bayes_opt import BOResult, bayes_opt_strength
from rml_fast.steering.srls import SRLS, SAEDecoderAdapter, SteeringWarning, srls_steering_vector

__all__ = [
    "SRLS", "BOResult", "SAEDecoderAdapter", "SteeringWarning", "bayes_opt_strength",
    "srls_steering_vector",
]
