"""Interpretability methods.

Query circuits (EAP graph, EAP-IG scores, batched circuit evaluation, NDF, Best-of-N search) are
imported eagerly; the other methods (NaNA, TopK SAEs, Query Lens, MFA, head stability, ExPLAIND,
TRACED, behavioural geometry, belief dynamics, EnergyDPS) load on first use of one of their names.
"""

from __future__ import annotations

import importlib
from typing import Any

from rml_fast.interp.attribution import eap_ig_scores
from rml_fast.interp.circuit_eval import evaluate_masks, evaluate_masks_hooked
from rml_fast.interp.circuit_metrics import (
    LogitDiff,
    logit_diff,
    ndf,
    nfs,
    sizes_from_densities,
)
from rml_fast.interp.draw import draw_circuit
from rml_fast.interp.edge_graph import EdgeGraph
from rml_fast.interp.query_circuits import QueryCircuitSearch, sample_edge_masks

__all__ = [
    "EdgeGraph",
    "LogitDiff",
    "QueryCircuitSearch",
    "draw_circuit",
    "eap_ig_scores",
    "evaluate_masks",
    "evaluate_masks_hooked",
    "logit_diff",
    "ndf",
    "nfs",
    "sample_edge_masks",
    "sizes_from_densities",
]

#: public name -> submodule, for the methods loaded on first use
_LAZY = {
    "BeliefDynamicsModel": "belief_dynamics",
    "CompletenessReport": "explaind",
    "DEUBank": "nana",
    "EnergyDPS": "energy_dps",
    "ExactPathKernel": "explaind",
    "FEATURES": "traced",
    "GaussianPriorEps": "energy_dps",
    "HeldOutWordsRegression": "behavior_geometry",
    "IMAGENET_MEAN": "energy_dps",
    "IMAGENET_STD": "energy_dps",
    "MixtureOfFactorAnalyzers": "mfa",
    "NativeNetworkAnatomy": "nana",
    "QueryLens": "query_lens",
    "SparseDict": "query_lens",
    "StabilityStudy": "head_stability",
    "SyntheticAgent": "behavior_geometry",
    "TopKSAE": "sae",
    "TracedScorer": "traced",
    "TrainingHistory": "explaind",
    "UnitActivation": "energy_dps",
    "attention_signatures": "head_stability",
    "center_mask": "energy_dps",
    "centered_cosine": "behavior_geometry",
    "collect_forced_choice": "behavior_geometry",
    "collect_free_association": "behavior_geometry",
    "cosine_similarity_rows": "behavior_geometry",
    "count_matrix": "behavior_geometry",
    "deu_decompose": "nana",
    "fit_channel_maps": "query_lens",
    "fourier_concentration": "nana",
    "head_distinctness": "head_stability",
    "head_importance": "head_stability",
    "head_representations": "head_stability",
    "head_similarity": "head_stability",
    "head_stability": "head_stability",
    "input_score": "query_lens",
    "kinematics": "traced",
    "last_position": "explaind",
    "layer_stability": "head_stability",
    "layerwise_rsa": "behavior_geometry",
    "linear_cka": "head_stability",
    "make_energy": "energy_dps",
    "match_heads": "head_stability",
    "mfa_interchange": "mfa",
    "mfa_steer": "mfa",
    "mfa_steering_hook": "mfa",
    "minilm_hidden_states": "mfa",
    "output_score": "query_lens",
    "pack_trajectories": "traced",
    "pairwise_similarity": "head_stability",
    "ppmi": "behavior_geometry",
    "reduce_map": "energy_dps",
    "residual_stability": "head_stability",
    "rsa": "behavior_geometry",
    "sample_pairs": "behavior_geometry",
    "segment_steps": "traced",
    "simulate_curves": "belief_dynamics",
    "simulate_trajectories": "traced",
    "stability_from_similarity": "head_stability",
    "stability_importance_correlation": "head_stability",
    "stability_null": "head_stability",
    "steering_vector": "belief_dynamics",
    "step_embeddings": "traced",
    "subspace_overlap": "query_lens",
    "svcca": "head_stability",
    "trace_features": "traced",
    "train_topk_sae": "sae",
    "train_with_history": "explaind",
    "unsupervised_score": "traced",
}

__all__ += sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"rml_fast.interp.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'rml_fast.interp' has no attribute {name!r}")
