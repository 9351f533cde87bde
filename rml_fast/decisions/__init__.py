"""Human-centred decisions: ASR-ICL recourse for black-box predictors (including in-context tabular
predictors) and robust human-AI complementarity.

Submodules are imported on first use so that ``import rml_fast.decisions`` stays light (the
in-context predictors need torch).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    **dict.fromkeys(
        [
            "AdaptiveSubspaceRecourse",
            "RecourseResult",
            "as_predict_proba",
            "asr_recourse",
            "validity_under",
        ],
        "recourse",
    ),
    **dict.fromkeys(
        [
            "AttentionICL",
            "ICLTabularNet",
            "TransformerICL",
            "pretrained_icl_cached",
            "pretrained_icl_transformer",
            "train_icl_transformer",
        ],
        "icl_predictor",
    ),
    **dict.fromkeys(
        [
            "STRATEGIES",
            "RobustComplementarity",
            "RobustWeight",
            "SimulatedForecasts",
            "bootstrap_error_moments",
            "compare_strategies",
            "decide",
            "error_moments",
            "optimal_pooling_weight",
            "pool",
            "pooling_gain",
            "pooling_mse",
            "robust_improvement_interval",
            "robust_pooling_weight",
            "simulate_forecasts",
            "worst_case_gain",
        ],
        "complementarity",
    ),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"rml_fast.decisions.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'rml_fast.decisions' has no attribute {name!r}")
