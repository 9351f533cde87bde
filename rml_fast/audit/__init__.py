"""Auditing risk models by interventions on their inputs.

:mod:`rml_fast.audit.interventional` -- S(H)NAP generative interventional attribution
(arXiv:2602.02560): Shapley values and pairwise interactions (SII, BII, STII, Moebius,
Faith-Shap / LMPI) of a game whose players are interventions produced by any generator and
whose value is any risk model's output on the intervened input; exact (all ``2**n``
coalitions, batched, numba transforms) or sampled within a budget.
"""

from __future__ import annotations

from rml_fast.audit.interventional import (
    AttributionResult,
    FeatureGroupGenerator,
    GenerativeInterventionalAttribution,
    InpaintingGenerator,
    InterventionGame,
    ObjectScene,
    OracleSceneGenerator,
    ToyRiskModel,
    coalition_values,
    exact_attribution,
    exact_attribution_reference,
    insertion_curve,
    kernel_sampling,
    make_object_scene,
    make_toy_lung_dataset,
    permutation_sampling,
    toy_lung_scene,
)

__all__ = [
    "AttributionResult",
    "FeatureGroupGenerator",
    "GenerativeInterventionalAttribution",
    "InpaintingGenerator",
    "InterventionGame",
    "ObjectScene",
    "OracleSceneGenerator",
    "ToyRiskModel",
    "coalition_values",
    "exact_attribution",
    "exact_attribution_reference",
    "insertion_curve",
    "kernel_sampling",
    "make_object_scene",
    "make_toy_lung_dataset",
    "permutation_sampling",
    "toy_lung_scene",
]
