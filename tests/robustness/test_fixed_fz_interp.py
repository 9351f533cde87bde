"""Regression tests for the interp entry points fixed against the fuzzer's contract (issue 25).

Each case is a mutation the fuzzer reported (NaN, a meta tensor, None, a wrong type or shape):
the call must raise a ValueError / TypeError whose message names the user's argument (as a
word), before any work and without changing the caller's arrays.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from rml_fast.interp import EdgeGraph, LogitDiff, logit_diff
from rml_fast.interp.attribution import metric_rows
from rml_fast.interp.behavior_geometry import (
    SyntheticAgent,
    centered_cosine,
    cosine_similarity_rows,
    ppmi,
    rsa,
)
from rml_fast.interp.belief_dynamics import simulate_curves, steering_vector
from rml_fast.interp.energy_dps import (
    EnergyDPS,
    GaussianPriorEps,
    center_mask,
    make_energy,
    reduce_map,
)
from rml_fast.interp.explaind import CompletenessReport, last_position, train_with_history
from rml_fast.interp.head_stability import head_similarity, linear_cka, match_heads
from rml_fast.interp.mfa import MixtureOfFactorAnalyzers
from rml_fast.interp.nana import DEUBank, NativeNetworkAnatomy, deu_decompose
from rml_fast.interp.query_lens import SparseDict, subspace_overlap
from rml_fast.interp.sae import TopKSAE
from rml_fast.interp.traced import TracedScorer, step_embeddings


def _raises_naming(exc_type, name, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` raises ``exc_type`` whose message names ``name`` as a word."""
    with pytest.raises(exc_type) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", msg), msg
    return msg


def _nan_at(a, pos=0):
    b = np.array(a, dtype=float, copy=True)
    b.reshape(-1)[pos] = np.nan
    return b


# --- circuits ----------------------------------------------------------------------------


def test_logit_diff_refuses_nan_and_out_of_vocab_ids():
    logits = torch.tensor([[[0.0, 1.0, 3.0]]])
    assert float(logit_diff(logits, 0, 2, [0, 1])) == 2.5  # unchanged valid result
    bad = logits.clone()
    bad[0, 0, 2] = math.nan
    _raises_naming(ValueError, "logits", logit_diff, bad, 0, 2, [0, 1])
    _raises_naming(ValueError, "pos_ids", logit_diff, logits, 0, 31, [0, 1])
    _raises_naming(ValueError, "pos_ids", logit_diff, logits, 0, -1, [0, 1])
    _raises_naming(TypeError, "neg_ids", logit_diff, logits, 0, 2, None)
    _raises_naming(TypeError, "pos", logit_diff, logits, "not-a-value", 2, [0, 1])
    _raises_naming(TypeError, "logits", logit_diff, logits.long(), 0, 2, [0, 1])


def test_logit_diff_from_rows_checks_rows():
    m = LogitDiff(-1, 2, (0,))
    rows = torch.tensor([[1.0, 0.0, 4.0]])
    assert float(m.from_rows(rows)) == 3.0
    _raises_naming(ValueError, "rows", m.from_rows, torch.tensor([[math.nan, 0.0, 4.0]]))
    _raises_naming(TypeError, "rows", m.from_rows, rows.numpy())
    _raises_naming(ValueError, "rows", m.from_rows, rows[None])


def test_edge_graph_arguments_are_named():
    g = EdgeGraph(2, 2)
    assert g.head_index(1, 1) == 1 + 1 * 3 + 1
    _raises_naming(TypeError, "has_mlp", EdgeGraph, 2, 2, None)
    _raises_naming(TypeError, "layer", g.head_index, "1", 0)
    _raises_naming(TypeError, "head", g.qkv_index, 0, None, "q")
    _raises_naming(ValueError, "which", g.qkv_index, 0, 0, "x")
    _raises_naming(ValueError, "mask", g.prune, g.real_edge_mask.to("meta"))
    _raises_naming(ValueError, "scores", g.topn, torch.zeros(g.n_fwd, g.n_bwd).to("meta"), 3)


def test_metric_rows_checks_steps():
    logits = torch.zeros(4, 2, 3)
    _raises_naming(ValueError, "steps", metric_rows, LogitDiff(-1, 2, (0,)), logits, 0)
    _raises_naming(TypeError, "steps", metric_rows, LogitDiff(-1, 2, (0,)), logits, 1.5)


# --- energy-guided DPS --------------------------------------------------------------------


def test_center_mask_and_reduce_map_name_their_arguments():
    assert center_mask(4, 6, 0.5).sum() == 6
    _raises_naming(ValueError, "frac", center_mask, 4, 4, 0.0)
    _raises_naming(TypeError, "h", center_mask, None, 4, 0.5)
    _raises_naming(TypeError, "w", center_mask, 4, math.nan, 0.5)
    A = torch.tensor([[[0.0, -1.0], [2.0, 1.0]]])
    _raises_naming(TypeError, "A", reduce_map, A.numpy(), "max")
    _raises_naming(ValueError, "A", reduce_map, A.to("meta"), "max")


def test_gaussian_prior_and_dps_step():
    betas = torch.full((10,), 0.1)
    _raises_naming(ValueError, "mu", GaussianPriorEps, torch.tensor([math.nan, 0.0]),
                   torch.eye(2), betas)
    _raises_naming(ValueError, "mu", GaussianPriorEps, torch.zeros(0), torch.eye(2), betas)
    _raises_naming(ValueError, "betas", GaussianPriorEps, torch.zeros(2), torch.eye(2),
                   betas.to("meta"))
    eps = GaussianPriorEps(torch.zeros(2), torch.eye(2), betas)
    _raises_naming(ValueError, "t", eps, torch.ones(1, 2), torch.tensor([[9]]))
    dps = EnergyDPS(eps, betas.double(), energy=make_energy("max"),
                    activation=lambda x: x.sum(1), sampler="ddpm")
    x = torch.zeros(3, 2, dtype=torch.float64)
    _raises_naming(ValueError, "t_prev", dps.step, x, x, 3, 5, None)
    _raises_naming(TypeError, "t", dps.step, x, x, None, 2, None)
    _raises_naming(ValueError, "noise", dps.step, x, x, 3, 2, x[:0])


# --- head stability ------------------------------------------------------------------------


def test_head_stability_names_its_arguments():
    sig = torch.rand(1, 2, 6, generator=torch.Generator().manual_seed(0))
    bad = sig.clone()
    bad[0, 0, 0] = math.nan
    _raises_naming(ValueError, "sig_a", head_similarity, bad, sig)
    _raises_naming(TypeError, "sig_b", head_similarity, sig, sig.numpy())
    _raises_naming(ValueError, "sig_a", head_similarity, sig[:0], sig)
    _raises_naming(ValueError, "sim", match_heads, torch.eye(2).to("meta"))
    _raises_naming(ValueError, "X", linear_cka, torch.randn(4, 3).to("meta"), torch.randn(4, 3))


# --- behaviour geometry, belief dynamics ----------------------------------------------------


def test_behavior_geometry_refuses_nan_input():
    X = np.random.default_rng(0).normal(size=(6, 3))
    S = centered_cosine(X)
    X_before = X.copy()
    _raises_naming(ValueError, "X", centered_cosine, _nan_at(X))
    _raises_naming(ValueError, "A", cosine_similarity_rows, _nan_at(X))
    _raises_naming(ValueError, "S2", rsa, S, _nan_at(S, 1))
    _raises_naming(ValueError, "C", ppmi, np.ones((1, 2, 2)))
    np.testing.assert_array_equal(X, X_before)


def test_synthetic_agent_names_an_unknown_cue():
    agent = SyntheticAgent(["cat", "dog", "car"], [[1.0, 0], [0.9, 0.1], [0, 1.0]], beta=50, rng=0)
    _raises_naming(ValueError, "cue", agent.pick, "__no_such_option__", ["dog"], 1)
    _raises_naming(TypeError, "k", agent.pick, "cat", ["dog"], math.nan)


def test_belief_dynamics_helpers_name_their_arguments():
    a = np.array([[1.0, 2.0], [3.0, 2.0]])
    _raises_naming(TypeError, "acts_neg", steering_vector, a, torch.zeros(1, 2))
    _raises_naming(TypeError, "b", simulate_curves, [[0, 0.0]], b=None, a=[1.0], gamma=1.0)
    _raises_naming(ValueError, "gamma", simulate_curves, [[0, 0.0]], b=0.0, a=[1.0],
                   gamma=math.inf)


# --- estimators wrapping sklearn's validate_data ------------------------------------------


def test_sklearn_style_estimators_name_X():
    X = np.random.default_rng(0).normal(size=(20, 3))
    _raises_naming(ValueError, "X", MixtureOfFactorAnalyzers(1, 1).fit, X[:0])
    _raises_naming(ValueError, "X", MixtureOfFactorAnalyzers(1, 1).fit, X[None])
    y = np.arange(20) % 2
    _raises_naming(ValueError, "X", TracedScorer().fit, X[:0], y)
    _raises_naming(ValueError, "y", TracedScorer().fit, X, y.astype(object) * 0.5)


# --- ExPLAIND, NaNA, Query Lens, SAE, TRACED ------------------------------------------------


def test_explaind_entry_points():
    out = torch.arange(12.0).view(1, 3, 4)
    bad = out.clone()
    bad[0, 0, 0] = math.nan
    _raises_naming(ValueError, "output", last_position, bad)
    t = torch.zeros(2, 1)
    _raises_naming(ValueError, "target", CompletenessReport, t + math.nan, t, t, 0.0, 0.0, 0.0)
    model = torch.nn.Linear(2, 1)
    before = [p.detach().clone() for p in model.parameters()]
    _raises_naming(ValueError, "lr", train_with_history, model, torch.nn.MSELoss(),
                   (torch.zeros(4, 2), torch.zeros(4, 1)), n_steps=1, lr=1e300, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_nana_entry_points():
    _raises_naming(ValueError, "W", deu_decompose, torch.eye(3).to("meta"))
    U = torch.eye(2)
    _raises_naming(ValueError, "U", DEUBank, U + math.nan, torch.ones(2), U)
    _raises_naming(TypeError, "sca", NativeNetworkAnatomy.dominant_pathway,
                   torch.ones(1, 1, 3, dtype=torch.long))


def test_query_lens_sae_and_traced_entry_points():
    W = torch.diag(torch.tensor([3.0, 2.0, 0.0, 0.0]))
    _raises_naming(ValueError, "W_i", subspace_overlap, W + math.nan, W, 2)
    sae = TopKSAE(4, 6, k=2, seed=0)
    _raises_naming(ValueError, "W_enc", SparseDict, sae.W_enc.detach() + math.nan,
                   sae.W_dec.detach().T.contiguous(), sae.b_enc.detach(), sae.b_dec.detach(), 0)
    _raises_naming(TypeError, "seed", TopKSAE, 4, 6, 2, seed=math.nan)
    _raises_naming(ValueError, "z", sae.decode, torch.zeros(1, 6).to("meta"))
    _raises_naming(ValueError, "x", sae.encode, torch.zeros(1, 4).to("meta"))
    _raises_naming(ValueError, "hidden", step_embeddings, np.zeros((0, 2)), [slice(0, 1)])
