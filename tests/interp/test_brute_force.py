"""Brute force over all 2^17 circuits of a 1-layer 4-head attention-only model.

The exact best NDF per circuit size bounds what the Best-of-N search can return, and the
search's own NDF values must equal the brute-force values of the masks it returns."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rml_fast.interp import EdgeGraph, LogitDiff, QueryCircuitSearch, evaluate_masks, ndf
from rml_fast.models import TinyConfig, TinyTransformer


@pytest.fixture(scope="module")
def brute():
    cfg = TinyConfig(n_layers=1, d_model=16, n_heads=4, d_mlp=None, n_ctx=8, d_vocab=11)
    model = TinyTransformer(cfg, seed=7)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    g = EdgeGraph.from_model(model)
    assert g.n_edges == 17
    clean = torch.tensor([[1, 5, 2, 9, 4, 5]])
    corrupt = torch.tensor([[1, 7, 3, 9, 0, 5]])
    metric = LogitDiff(pos=-1, answer=2, wrong=(3,))
    edges = torch.nonzero(g.real_edge_mask)
    codes = torch.arange(2**17)
    bits = (codes[:, None] >> torch.arange(17)[None, :]) & 1  # [2^17, 17]
    masks = torch.zeros(2**17, g.n_fwd, g.n_bwd, dtype=torch.bool)
    masks[:, edges[:, 0], edges[:, 1]] = bits.bool()
    vals = evaluate_masks(model, g, clean, corrupt, masks, metric, chunk=16384)
    with torch.no_grad():
        l_full, l_corr = float(metric(model(clean))), float(metric(model(corrupt)))
    scores = ndf(l_full, vals.double().numpy(), l_corr)
    sizes = bits.sum(1).numpy()
    return model, g, clean, corrupt, metric, edges, scores, sizes, (l_full, l_corr)


def _code(mask, edges):
    on = mask[edges[:, 0], edges[:, 1]].long()
    return int((on << torch.arange(17)).sum())


def test_brute_force_is_consistent(brute):
    _, _g, *_, scores, sizes, (l_full, l_corr) = brute
    assert abs(l_full - l_corr) > 0.5  # a non-degenerate query
    assert scores[2**17 - 1] == pytest.approx(1.0, abs=1e-5)  # full circuit
    assert scores[0] == pytest.approx(0.0, abs=1e-5)  # empty circuit
    best = [scores[sizes <= n].max() for n in range(18)]
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(best))  # monotone
    assert best[3] < 0.999  # small circuits are not trivially faithful


@pytest.mark.parametrize("sampler", ["edge", "noise"])
def test_search_is_bounded_by_and_approaches_the_optimum(brute, sampler):
    model, _g, clean, corrupt, metric, edges, scores, sizes, _ = brute
    n_list = [2, 3, 4, 6, 8]
    opt = np.array([scores[sizes <= n].max() for n in n_list])
    gaps = []
    for n_samples in (1, 16, 256):
        search = QueryCircuitSearch(
            n_edges=n_list, n_samples=n_samples, sampler=sampler, random_state=0, progress=False,
            noise_std=0.5, steps=3,
        ).fit(model, clean, corrupt, metric)  # fmt: skip
        for i, n in enumerate(n_list):
            circuit = search.circuit_[i]
            assert int(circuit.sum()) <= n
            code = _code(circuit, edges)
            # the search's NDF of its circuit is the brute-force NDF of that mask
            assert search.ndf_[i] == pytest.approx(scores[code], abs=1e-5)
            assert search.ndf_[i] <= opt[i] + 1e-6
        gaps.append(float(np.mean(opt - search.ndf_)))
    assert gaps[2] <= gaps[1] + 1e-9 and gaps[1] <= gaps[0] + 1e-9
    if sampler == "edge":  # 256 Gumbel-top-n draws: near the exact optimum
        assert gaps[2] < 0.05
        assert gaps[2] < gaps[0] or gaps[0] < 1e-9
