"""Interpretability methods: query circuits (EAP graph, EAP-IG scores, batched circuit
evaluation, NDF, Best-of-N search)."""

from __future__ import annotations

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
