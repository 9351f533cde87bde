"""QueryCircuitSearch on trained zoo models and its invariants."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rml_fast.interp import (
    EdgeGraph,
    LogitDiff,
    QueryCircuitSearch,
    evaluate_masks,
    ndf,
    sample_edge_masks,
    sizes_from_densities,
)
from rml_fast.models import TinyTransformer


def direct_logit_attribution(model, query):
    """Each head's direct contribution to L at the answer position (through the final LN scale)."""
    _, c = model.run_with_cache(query.clean)
    L = model.cfg.n_layers
    final = c[f"blocks.{L - 1}.hook_resid_post"][0, query.pos]
    scale = (final - final.mean()).pow(2).mean().add(1e-5).sqrt()
    w = model.ln_final.w.detach() if model.ln_final is not None else torch.ones_like(final)
    direction = (
        model.unembed[:, query.answer] - model.unembed[:, list(query.wrong)].mean(1)
    ).detach() * w
    out = {}
    for layer in range(L):
        r = c[f"blocks.{layer}.attn.hook_result"][0, query.pos]
        r = r - r.mean(-1, keepdim=True)
        for h in range(model.cfg.n_heads):
            out[f"a{layer}.h{h}"] = float(r[h] @ direction / scale)
    return out


def check_expected_heads(model, task, n_queries=3):
    """The model does the task, and each query circuit (10% density) keeps a direct edge into
    the logits from a head that writes the answer there (name-mover-like for IOI, a copying head
    for induction), identified independently by direct logit attribution: one of the two heads
    with the largest DLA. The trained weights depend on the CPU's float rounding (BLAS and SIMD
    kernels), and the induction model splits the copying over two layer-1 heads whose DLA order
    changes from query to query and from CPU to CPU (e.g. 6.3 and 2.8, or 4.2 and 5.4); the
    16-sample search may keep either."""
    g = EdgeGraph.from_model(model)
    sizes = sizes_from_densities(g.n_edges, [0.1])
    for q in task.queries(n_queries, rng=1):
        metric = LogitDiff.from_query(q)
        with torch.no_grad():
            gap = float(metric(model(q.clean)) - metric(model(q.corrupt)))
        assert gap > 3.0, f"the model does not perform the task (L(q) - L(q') = {gap:.2f})"
        dla = direct_logit_attribution(model, q)
        writers = set(sorted(dla, key=dla.get)[-2:])
        search = QueryCircuitSearch(
            sizes, n_samples=16, sampler="edge", random_state=0, progress=False
        )
        search.fit(model, q.clean, q.corrupt, metric)
        edges = g.edges(search.circuit_[0])
        assert any((h, "logits") in edges for h in writers), (writers, edges)


def test_induction_circuits_keep_the_copying_head(induction_small):
    model, task = induction_small
    check_expected_heads(model, task)
    with pytest.raises(AssertionError):
        check_expected_heads(TinyTransformer(model.cfg, seed=0), task)


def test_ioi_circuits_keep_the_name_mover(ioi_small):
    model, task = ioi_small
    check_expected_heads(model, task)
    with pytest.raises(AssertionError):
        check_expected_heads(TinyTransformer(model.cfg, seed=0), task)


@pytest.fixture(scope="module")
def ioi_query(ioi_small):
    model, task = ioi_small
    q = task.queries(1, rng=3)[0]
    return model, task, q, LogitDiff.from_query(q)


@pytest.mark.parametrize("sampler", ["edge", "noise", "para"])
@pytest.mark.parametrize("construct", ["topn", "greedy"])
def test_search_results_are_consistent(ioi_query, sampler, construct):
    model, task, q, metric = ioi_query
    g = EdgeGraph.from_model(model)
    # each paraphrase has its own length, so its own answer position
    views = [(v.clean, v.corrupt, LogitDiff.from_query(v)) for v in task.paraphrases(q)]
    sizes = [5, 20, 60]
    search = QueryCircuitSearch(
        sizes, n_samples=4, sampler=sampler, construct=construct, random_state=0, progress=False
    ).fit(model, q.clean, q.corrupt, metric, views=views if sampler == "para" else None)
    assert search.candidates_.shape == (3, 4, g.n_fwd, g.n_bwd)
    assert bool((search.candidates_.flatten(-2).sum(-1) <= torch.tensor(sizes)[:, None]).all())
    # stored NDFs are the NDFs of the candidates on the original query
    flat = search.candidates_.reshape(-1, g.n_fwd, g.n_bwd)
    vals = evaluate_masks(model, g, q.clean, q.corrupt, flat, metric)
    expect = ndf(search.l_full_, vals.double().numpy(), search.l_corr_).reshape(3, 4)
    np.testing.assert_allclose(search.ndf_all_, expect, atol=1e-6)
    np.testing.assert_allclose(search.ndf_, np.nanmax(expect, axis=1), atol=1e-6)
    for i in range(3):
        assert torch.equal(search.circuit_[i], search.candidates_[i, search.best_index_[i]])
        assert torch.equal(g.prune(search.circuit_[i]), search.circuit_[i])
    np.testing.assert_allclose(search.ndf_curve(), search.ndf_)
    np.testing.assert_allclose(search.ndf_curve(sizes), search.ndf_, atol=1e-6)


def test_samplers_views(ioi_query):
    model, task, q, metric = ioi_query
    views = [(v.clean, v.corrupt, LogitDiff.from_query(v)) for v in task.paraphrases(q)]
    para = QueryCircuitSearch(20, n_samples=3, sampler="para", progress=False)
    para.fit(model, q.clean, q.corrupt, metric, views=views)
    assert para.scores_.shape[0] == 3 and not torch.allclose(para.scores_[0], para.scores_[1])
    assert isinstance(para.ndf_, float) and para.circuit_.shape == (
        para.graph_.n_fwd,
        para.graph_.n_bwd,
    )
    noise0 = QueryCircuitSearch(20, n_samples=3, sampler="noise", noise_std=0.0, progress=False)
    noise0.fit(model, q.clean, q.corrupt, metric)
    assert torch.equal(noise0.candidates_[0, 0], noise0.candidates_[0, 1])
    edge = QueryCircuitSearch(20, n_samples=8, sampler="edge", random_state=0, progress=False)
    edge.fit(model, q.clean, q.corrupt, metric)
    # candidate 0 is the deterministic top-n, so BoN is never worse than it
    assert torch.equal(edge.candidates_[0, 0], edge.graph_.topn(edge.scores_[0], 20))
    assert edge.ndf_ >= edge.ndf_all_[0, 0]


def test_paraphrase_views_must_contain_the_answer_position(ioi_query):
    model, task, q, metric = ioi_query
    paras = task.paraphrases(q)
    other = next(v for v in paras if v.clean.shape[1] != q.clean.shape[1])
    search = QueryCircuitSearch(20, n_samples=2, sampler="para", progress=False)
    # reusing the query's metric (pos = P - 1) in a view of another length used to read
    # another token (or wrap around) without an error
    with pytest.raises(ValueError, match=r"views\[1\] has \d+ positions.*own answer position"):
        search.fit(model, q.clean, q.corrupt, metric, views=[(q.clean, q.corrupt), (other.clean, other.corrupt)])
    # a view's own metric with an out-of-range position is named too
    bad = LogitDiff(other.clean.shape[1], other.answer, other.wrong)
    with pytest.raises(ValueError, match=r"views\[0\]: pos must be in"):
        search.fit(model, q.clean, q.corrupt, metric, views=[(other.clean, other.corrupt, bad)])
    assert not hasattr(search, "ndf_")
    # -1 (last) is valid in every view
    last = LogitDiff(-1, q.answer, q.wrong)
    search.fit(model, q.clean, q.corrupt, last, views=[(v.clean, v.corrupt) for v in paras[:2]])
    assert np.isfinite(search.ndf_)


def test_sample_edge_masks():
    g = EdgeGraph.from_config(2, 4)
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(g.n_fwd, g.n_bwd, generator=gen) * g.real_edge_mask
    masks = sample_edge_masks(g, scores, 10, 50, rng=0, include_topn=False)
    assert masks.shape == (50, g.n_fwd, g.n_bwd)
    assert bool((masks.flatten(1).sum(1) <= 10).all())
    # a tiny temperature reproduces the top-n, a huge one spreads over many edges
    cold = sample_edge_masks(g, scores, 10, 5, temperature=1e-6, rng=1, include_topn=False)
    assert all(torch.equal(m, g.topn(scores, 10)) for m in cold)
    hot = sample_edge_masks(g, scores, 10, 200, temperature=1e6, rng=1, include_topn=False)
    assert int(hot.any(0).sum()) > int(cold.any(0).sum())
    again = sample_edge_masks(g, scores, 10, 50, rng=0, include_topn=False)
    assert torch.equal(masks, again)


def _tiny():
    from rml_fast.models import TinyConfig

    cfg = TinyConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=10)
    return TinyTransformer(cfg, seed=0), torch.tensor([[1, 2, 3]]), torch.tensor([[1, 4, 3]])


def test_answer_position_past_the_end_raises():
    # pos=3 on a 3-token prompt used to wrap to position 0 (identical in clean and corrupt),
    # so every NDF came out NaN without an error
    model, clean, corrupt = _tiny()
    g = EdgeGraph.from_model(model)
    search = QueryCircuitSearch(3, n_samples=2, sampler="edge", random_state=0, progress=False)
    for pos in (3, -4):
        with pytest.raises(ValueError, match=r"pos must be in \[-3, 3\)"):
            search.fit(model, clean, corrupt, LogitDiff(pos, 2, (4,)))
        with pytest.raises(ValueError, match=r"pos must be in \[-3, 3\)"):
            evaluate_masks(model, g, clean, corrupt, g.real_edge_mask[None], LogitDiff(pos, 2, (4,)))
    assert not hasattr(search, "ndf_")
    # -3 is the first position, as in Python indexing
    first = evaluate_masks(model, g, clean, corrupt, g.real_edge_mask[None], LogitDiff(-3, 2, (4,)))
    torch.testing.assert_close(first, LogitDiff(0, 2, (4,))(model(clean)), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("ablation", "same_prompt", "wrong"),
    [("patching", True, (4,)), ("patching", False, (2,)), ("zero", False, (2,)),
     ("mean", False, (2,))],
)
def test_degenerate_query_raises_instead_of_nan_ndf(ablation, same_prompt, wrong):
    model, clean, corrupt = _tiny()
    if same_prompt:  # L(M(q)) == L(M(q')): the NDF denominator is zero
        corrupt = clean.clone()
    if ablation == "mean":
        corrupt = torch.cat([corrupt, clean])
    search = QueryCircuitSearch(3, n_samples=2, sampler="edge", ablation=ablation,
                                random_state=0, progress=False)
    with pytest.raises(ValueError, match=r"NDF is undefined \(NaN\).*metric\.pos"):
        search.fit(model, clean, corrupt, LogitDiff(-1, 2, wrong))  # wrong == (2,): L = 0
    assert not hasattr(search, "ndf_")
    # a non-degenerate query on the same model fits, with finite NDFs
    if ablation != "mean":
        search.fit(model, clean, torch.tensor([[1, 4, 3]]), LogitDiff(-1, 2, (4,)))
        assert np.isfinite(search.ndf_all_).all()


def test_invalid_parameters(ioi_query):
    model, _, q, metric = ioi_query
    with pytest.raises(ValueError, match="sampler"):
        QueryCircuitSearch(5, sampler="bon").fit(model, q.clean, q.corrupt, metric)
    with pytest.raises(ValueError, match="construct"):
        QueryCircuitSearch(5, construct="acdc").fit(model, q.clean, q.corrupt, metric)
    with pytest.raises(ValueError, match="n_edges"):
        QueryCircuitSearch(10**6, sampler="edge").fit(model, q.clean, q.corrupt, metric)
    with pytest.raises(ValueError, match="views"):
        QueryCircuitSearch(5, sampler="para").fit(model, q.clean, q.corrupt, metric)
    with pytest.raises(ValueError, match="n_samples"):
        QueryCircuitSearch(5, n_samples=0).fit(model, q.clean, q.corrupt, metric)
    with pytest.raises(RuntimeError, match="fit"):
        QueryCircuitSearch(5).ndf_curve()
