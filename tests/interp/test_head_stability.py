"""Tests of rml_fast.interp.head_stability (cross-refit attention-head stability, arXiv 2602.16740).

Oracles: the raw hook activations (signature layout), sim(A, A) = 1 and stability of identical
copies = 1, invariance to permuting the heads of a model (weights permuted, so the model computes
the same function), uniform-attention heads at cosine 1, Hungarian = brute force over all
permutations, batched similarities = a per-pair loop of direct formulas, linear CKA = the HSIC
formula and rsatoolbox's whitened RDM cosine, SVCCA/PWCCA = covariance-eigenvalue CCA, head
importance = the perplexity of a model whose W_O slice is zeroed, and the finding: induction heads
of two trained refits agree beyond the prompt-permutation null, random initialisations do not.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.linalg
import torch

from rml_fast.interp import head_stability as hs
from rml_fast.models import TinyConfig, TinyTransformer

CFG = TinyConfig(n_layers=2, d_model=16, n_heads=4, d_mlp=32, n_ctx=8, d_vocab=12)


def _prompts(n=6, p=7, seed=0):
    return torch.randint(0, 12, (n, p), generator=torch.Generator().manual_seed(seed))


def _permute_heads(model, layer, perm):
    """A copy of ``model`` whose heads in ``layer`` are reordered (same function)."""
    new = TinyTransformer(model.cfg, seed=0)
    new.load_state_dict(model.state_dict())
    attn = new.blocks[layer].attn
    with torch.no_grad():
        for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V"):
            getattr(attn, name).copy_(getattr(attn, name)[perm])
    return new.eval()


# --------------------------------------------------------------------------- signatures


def test_signature_layout_matches_the_cached_patterns():
    model = TinyTransformer(CFG, seed=1)
    prompts = _prompts()
    _, cache = model.run_with_cache(prompts)
    n, p = prompts.shape
    rows, cols = np.tril_indices(p)
    for use_scores, hook in ((False, "hook_pattern"), (True, "hook_attn_scores")):
        sig = hs.attention_signatures(model, prompts, use_scores=use_scores, batch_size=4)
        assert sig.shape == (2, 4, n * p * (p + 1) // 2)
        for layer in range(2):
            a = cache[f"blocks.{layer}.attn.{hook}"]
            want = a[:, :, rows, cols].transpose(0, 1).reshape(4, -1)
            torch.testing.assert_close(sig[layer], want.float())
    full = hs.attention_signatures(model, prompts, causal_only=False)
    torch.testing.assert_close(
        full[1].view(4, n, p, p), cache["blocks.1.attn.hook_pattern"].transpose(0, 1)
    )
    # every causal row of a pattern sums to one
    sig = hs.attention_signatures(model, prompts)[0, 2].view(n, -1)
    sums = torch.stack([sig[:, q * (q + 1) // 2 : (q + 1) * (q + 2) // 2].sum(1) for q in range(p)])
    torch.testing.assert_close(sums, torch.ones_like(sums))
    reps = hs.head_representations(model, prompts, hook="result")
    torch.testing.assert_close(
        reps[1, 3], cache["blocks.1.attn.hook_result"][:, :, 3].reshape(n * p, -1)
    )


def test_uniform_heads_have_cosine_one():
    models = []
    for seed in (0, 1):
        m = TinyTransformer(CFG, seed=seed)
        with torch.no_grad():
            for blk in m.blocks:
                blk.attn.W_Q.zero_()
                blk.attn.b_Q.zero_()
        models.append(m)
    sigs = [hs.attention_signatures(m, _prompts()) for m in models]
    sim = hs.head_similarity(sigs[0], sigs[1])
    torch.testing.assert_close(sim, torch.ones_like(sim))


# --------------------------------------------------------------------------- similarity


@pytest.mark.parametrize("measure", ["cosine", "pearson", "cka", "svcca", "pwcca"])
def test_self_similarity_is_one_and_copies_are_stable(measure):
    models = [TinyTransformer(CFG, seed=3), TinyTransformer(CFG, seed=3)]
    prompts = _prompts()
    if measure in ("cosine", "pearson"):
        sigs = [hs.attention_signatures(m, prompts) for m in models]
    else:
        sigs = [hs.head_representations(m, prompts) for m in models]
    sims = hs.pairwise_similarity(sigs, measure=measure)
    diag = sims[0, 1].diagonal(dim1=-2, dim2=-1)
    torch.testing.assert_close(diag, torch.ones_like(diag), atol=1e-6, rtol=0)
    assert float(sims.max()) <= 1 + 1e-6
    for matching in ("max", "hungarian"):
        stab = hs.head_stability(sigs, measure=measure, matching=matching)
        torch.testing.assert_close(stab, torch.ones_like(stab), atol=1e-6, rtol=0)


def test_permuting_heads_leaves_matched_stability_unchanged():
    a, b = TinyTransformer(CFG, seed=0), TinyTransformer(CFG, seed=1)
    perm = torch.tensor([2, 0, 3, 1])
    b_perm = _permute_heads(b, 1, perm)
    prompts = _prompts(8)
    x = torch.randint(0, 12, (3, 7))
    torch.testing.assert_close(b(x), b_perm(x))  # the same function
    sig = [hs.attention_signatures(m, prompts) for m in (a, b, b_perm)]
    for matching in ("max", "hungarian"):
        s1 = hs.head_stability([sig[0], sig[1]], matching=matching)
        s2 = hs.head_stability([sig[0], sig[2]], matching=matching)
        torch.testing.assert_close(s1[0], s2[0])
        torch.testing.assert_close(s1[1, 1], s2[1, 1][torch.argsort(perm)])
    # the unmatched (same-index) cosine does change
    d1 = hs.head_similarity(sig[0], sig[1])[1].diagonal()
    d2 = hs.head_similarity(sig[0], sig[2])[1].diagonal()
    assert float((d1 - d2).abs().max()) > 1e-3
    # and a self-comparison of the permuted model is matched back exactly
    assert (
        hs.match_heads(hs.head_similarity(sig[1], sig[2])[1]).tolist()
        == torch.argsort(perm).tolist()
    )


def test_batched_similarities_equal_a_per_pair_loop():
    g = torch.Generator().manual_seed(0)
    sigs = [torch.rand(2, 3, 40, generator=g) for _ in range(3)]
    reps = [torch.randn(2, 3, 30, 4, generator=g) for _ in range(3)]
    cos = hs.pairwise_similarity(sigs, chunk=7)
    pear = hs.pairwise_similarity(sigs, measure="pearson")
    cka = hs.pairwise_similarity(reps, measure="cka", chunk=11)
    for m, m2, layer, a, b in itertools.product(range(3), range(3), range(2), range(3), range(3)):
        u, v = sigs[m][layer, a].double(), sigs[m2][layer, b].double()
        assert math.isclose(
            cos[m, m2, layer, a, b], float(u @ v / (u.norm() * v.norm())), abs_tol=1e-6
        )
        uc, vc = u - u.mean(), v - v.mean()
        assert math.isclose(
            pear[m, m2, layer, a, b], float(uc @ vc / (uc.norm() * vc.norm())), abs_tol=1e-6
        )
        want = hs.linear_cka(reps[m][layer, a], reps[m2][layer, b])
        assert math.isclose(cka[m, m2, layer, a, b], want, abs_tol=1e-6)


def _hsic_cka(x, y):
    n = len(x)
    h = np.eye(n) - 1.0 / n
    k, lk = x @ x.T, y @ y.T
    return np.trace(k @ h @ lk @ h) / np.sqrt(np.trace(k @ h @ k @ h) * np.trace(lk @ h @ lk @ h))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_linear_cka_against_hsic_formula_and_rsatoolbox():
    rsatoolbox = pytest.importorskip("rsatoolbox")
    rng = np.random.default_rng(0)
    for d1, d2 in ((5, 7), (3, 3), (8, 2)):
        x = rng.standard_normal((25, d1))
        y = x @ rng.standard_normal((d1, d2)) + rng.standard_normal((25, d2))
        ours = hs.linear_cka(x, y)
        assert 0 <= ours <= 1
        assert math.isclose(ours, _hsic_cka(x, y), rel_tol=1e-9)
        rdm = lambda z: rsatoolbox.rdm.calc_rdm(rsatoolbox.data.Dataset(z), method="euclidean")  # noqa: E731
        peer = float(rsatoolbox.rdm.compare(rdm(x), rdm(y), method="cosine_cov")[0, 0])
        assert math.isclose(ours, peer, rel_tol=1e-7)
    q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    x = rng.standard_normal((30, 6))
    assert math.isclose(hs.linear_cka(x, 2.5 * x @ q + 1.0), 1.0, rel_tol=1e-12)
    assert hs.linear_cka(x, rng.standard_normal((30, 6))) < 0.5


def _cca_rhos(x, y):
    """Canonical correlations from the covariance eigenproblem (a different code path)."""
    x = x - x.mean(0)
    y = y - y.mean(0)
    sxx, syy, sxy = x.T @ x, y.T @ y, x.T @ y
    m = np.linalg.solve(sxx, sxy) @ np.linalg.solve(syy, sxy.T)
    ev = np.sort(np.clip(np.linalg.eigvals(m).real, 0, 1))[::-1]
    return np.sqrt(ev[: min(x.shape[1], y.shape[1])]), sxx, sxy, syy


def _reduce(x, keep):
    x = x - x.mean(0)
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    k = int(np.searchsorted(np.cumsum(s**2) / np.sum(s**2), keep - 1e-12) + 1)
    return x @ vt[:k].T


def _pwcca_direct(x, y, keep):
    """PWCCA as Morcos et al. describe it: canonical variates of x, weights from x's units."""
    xr, yr = _reduce(x, keep), _reduce(y, keep)
    rho, sxx, sxy, syy = _cca_rhos(xr, yr)
    # canonical directions of x: eigenvectors of Sxx^-1/2 Sxy Syy^-1 Syx Sxx^-1/2
    wx = scipy.linalg.fractional_matrix_power(sxx, -0.5)
    m = wx @ sxy @ np.linalg.solve(syy, sxy.T) @ wx
    ev, vec = np.linalg.eigh(m)
    order = np.argsort(ev)[::-1][: len(rho)]
    h = xr @ wx @ vec[:, order]  # canonical variates (unit norm)
    h /= np.linalg.norm(h, axis=0)
    alpha = np.abs(h.T @ (x - x.mean(0))).sum(1)
    return float((alpha * rho).sum() / alpha.sum())


def test_svcca_and_pwcca_against_covariance_cca():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((60, 5)) * np.array([3.0, 2.0, 1.0, 0.5, 0.05])
    y = x @ rng.standard_normal((5, 5)) + 0.7 * rng.standard_normal((60, 5))
    rho, *_ = _cca_rhos(x, y)
    assert math.isclose(hs.svcca(x, y, keep=1.0), rho.mean(), rel_tol=1e-8)
    for keep in (0.9, 0.99):
        rr, *_ = _cca_rhos(_reduce(x, keep), _reduce(y, keep))
        assert math.isclose(hs.svcca(x, y, keep=keep), rr.mean(), rel_tol=1e-8)
        assert math.isclose(
            hs.svcca(x, y, keep=keep, projection_weighted=True),
            _pwcca_direct(x, y, keep),
            rel_tol=1e-6,
        )
    a = rng.standard_normal((5, 5))
    assert math.isclose(hs.svcca(x, x @ a, keep=1.0), 1.0, rel_tol=1e-9)
    # the batched matrix agrees with the pairwise function
    reps = [torch.from_numpy(np.stack([x, y])[None]).float()]
    mat = hs.pairwise_similarity(reps, measure="pwcca", keep=0.9)[0, 0, 0]
    assert math.isclose(
        float(mat[0, 1]),
        hs.svcca(x.astype(np.float32), y.astype(np.float32), keep=0.9, projection_weighted=True),
        rel_tol=1e-5,
    )


# --------------------------------------------------------------------------- matching


def test_hungarian_equals_brute_force_and_bounds_max():
    rng = np.random.default_rng(0)
    for h in (1, 2, 3, 4, 5):
        for _ in range(5):
            sim = rng.uniform(-1, 1, (h, h))
            perm = hs.match_heads(sim).numpy()
            assert sorted(perm.tolist()) == list(range(h))
            best = max(
                sum(sim[i, p[i]] for i in range(h)) for p in itertools.permutations(range(h))
            )
            assert math.isclose(sim[np.arange(h), perm].sum(), best, rel_tol=1e-12)
    sims = torch.from_numpy(rng.uniform(0, 1, (3, 3, 2, 4, 4)))
    hung = hs.stability_from_similarity(sims, matching="hungarian")
    mx = hs.stability_from_similarity(sims, matching="max")
    assert bool((hung <= mx + 1e-12).all()) and bool((hung < mx - 1e-6).any())
    # max: mean over the other models of the row maxima, by hand
    want = (sims[0, 1, 1, 2].max() + sims[0, 2, 1, 2].max()) / 2
    assert math.isclose(float(mx[0, 1, 2]), float(want), rel_tol=1e-12)
    assert hs.layer_stability(mx).shape == (2,)


def test_distinctness_by_hand():
    sigs = [torch.rand(1, 3, 20, generator=torch.Generator().manual_seed(s)) for s in (0, 1)]
    sims = hs.pairwise_similarity(sigs)
    dist = hs.head_distinctness(sims)
    want = 1 - (sims[1, 1, 0, 2, 0] + sims[1, 1, 0, 2, 1]) / 2
    assert math.isclose(float(dist[1, 0, 2]), float(want), rel_tol=1e-12)


# --------------------------------------------------------------------------- finding


def test_induction_refits_agree_beyond_the_null_random_inits_do_not(
    induction_small, zoo_cache, monkeypatch
):
    """Two refits of the zoo's induction-small (seeds 0 and 1): their layer-1 heads agree more
    than under the prompt-permutation null (content-specific attention to the token after the
    previous occurrence), while two random initialisations stay inside their null."""
    from rml_fast.models.train import train_tiny
    from rml_fast.models.zoo import ZOO

    model0, task = induction_small
    recipe = ZOO["induction-small"]
    monkeypatch.setenv("RML_FAST_CACHE", str(zoo_cache))
    cfg = model0.cfg
    model1 = train_tiny(cfg, task, progress=False, **{**recipe.train, "seed": 1})
    prompts = task.train_batch(32, torch.Generator().manual_seed(123))[0]
    out = {}
    for name, pair in (
        ("trained", (model0, model1)),
        ("random", (TinyTransformer(cfg, seed=7), TinyTransformer(cfg, seed=8))),
    ):
        sigs = [hs.attention_signatures(m, prompts) for m in pair]
        stab = (
            hs.head_stability(sigs, matching="hungarian")[:, 1].max(1).values
        )  # best head, layer 1
        null = hs.stability_null(sigs, 32, n_perm=20, matching="hungarian", rng=0)[:, :, 1].amax(2)
        out[name] = (stab, null)
    stab, null = out["trained"]
    assert bool((stab > null.amax(0) + 0.2).all()), (stab, null.amax(0))  # seen: 0.59 vs 0.25
    stab, null = out["random"]
    assert bool((stab < null.amax(0) + 0.02).all()), (stab, null.amax(0))


# --------------------------------------------------------------------------- residual, importance


def test_residual_stability_self_and_range():
    m = [TinyTransformer(CFG, seed=0), TinyTransformer(CFG, seed=0), TinyTransformer(CFG, seed=5)]
    res_same = hs.residual_stability(m[:2], _prompts())
    torch.testing.assert_close(res_same, torch.ones(3, dtype=torch.float64))
    res = hs.residual_stability(m, _prompts())
    assert res.shape == (3,) and bool(((res >= 0) & (res <= 1 + 1e-9)).all())
    assert float(res.min()) < 0.999


def test_head_importance_equals_zeroing_the_output_weights():
    model = TinyTransformer(CFG, seed=2)
    prompts = _prompts(8)
    imp = hs.head_importance(model, prompts)

    def ppl(m):
        with torch.no_grad():
            logits = m(prompts)[:, :-1]
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, 12).double(), prompts[:, 1:].reshape(-1)
        )
        return math.exp(float(ce))

    base = ppl(model)
    for layer, head in ((0, 1), (1, 3)):
        m2 = TinyTransformer(CFG, seed=2)
        with torch.no_grad():
            m2.blocks[layer].attn.W_O[head].zero_()
        assert math.isclose(float(imp[layer, head]), ppl(m2) - base, rel_tol=1e-5, abs_tol=1e-6)
    mean_imp = hs.head_importance(model, prompts, ablation="mean")
    assert mean_imp.shape == (2, 4) and bool(torch.isfinite(mean_imp).all())
    assert float((mean_imp - imp).abs().max()) > 0


def test_stability_importance_correlation_equals_scipy_spearman():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    stab = torch.from_numpy(rng.uniform(0, 1, (3, 2, 4)))
    imp = torch.from_numpy(rng.uniform(0, 1, (3, 2, 4)))
    imp[0, 1, 2] = imp[1, 1, 3]  # a tie
    rho = hs.stability_importance_correlation(stab, imp)
    for layer in range(2):
        want = spearmanr(stab[:, layer].reshape(-1), imp[:, layer].reshape(-1)).statistic
        assert math.isclose(float(rho[layer]), want, rel_tol=1e-12)
    const = hs.stability_importance_correlation(stab, torch.ones_like(imp))
    assert bool(torch.isnan(const).all())


# --------------------------------------------------------------------------- errors


def test_bad_input_raises_clear_errors():
    model = TinyTransformer(CFG, seed=0)
    sig = hs.attention_signatures(model, _prompts())
    with pytest.raises(TypeError, match="prompts"):
        hs.attention_signatures(model, [[1, 2]])
    with pytest.raises(ValueError, match="prompts"):
        hs.attention_signatures(model, torch.rand(2, 3))
    with pytest.raises(ValueError, match="d_vocab"):
        hs.attention_signatures(model, torch.full((2, 3), 99))
    with pytest.raises(ValueError, match="use_scores"):
        hs.attention_signatures(model, _prompts(), use_scores=True, causal_only=False)
    with pytest.raises(TypeError, match="model"):
        hs.attention_signatures(torch.nn.Linear(2, 2), _prompts())
    with pytest.raises(ValueError, match="matching"):
        hs.head_stability([sig, sig], matching="greedy")
    with pytest.raises(ValueError, match="measure"):
        hs.head_stability([sig, sig], measure="euclid")
    with pytest.raises(ValueError, match="at least 2 models"):
        hs.head_stability([sig])
    with pytest.raises(ValueError, match=r"signatures\[1\]"):
        hs.head_stability([sig, sig[:, :2]])
    with pytest.raises(ValueError, match="head representations"):
        hs.head_stability([sig, sig], measure="cka")
    bad = sig.clone()
    bad[1, 2, 5] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        hs.head_stability([sig, bad])
    with pytest.raises(ValueError, match="divide"):
        hs.stability_null([sig, sig], 5)
    with pytest.raises(ValueError, match="rows"):
        hs.linear_cka(np.ones((4, 2)), np.ones((5, 2)))
    with pytest.raises(ValueError, match="H1 <= H2"):
        hs.match_heads(np.ones((3, 2)))
    with pytest.raises(ValueError, match="ablation"):
        hs.head_importance(model, _prompts(), ablation="resample")
    with pytest.raises(ValueError, match="seeds"):
        hs.StabilityStudy(CFG, "induction", seeds=(1, 1), task_kwargs={"half": 4, "d_vocab": 12})
    with pytest.raises(ValueError, match="optimizers"):
        hs.StabilityStudy(
            CFG, "induction", optimizers=("lion",), task_kwargs={"half": 4, "d_vocab": 12}
        )
    before = sig.clone()
    hs.stability_null([sig, sig.clone()], 6, n_perm=2, rng=0)
    assert torch.equal(sig, before)  # inputs are not mutated


# --------------------------------------------------------------------------- the study


def test_study_is_reproducible_and_resumes_from_cached_refits(tmp_path, monkeypatch):
    monkeypatch.setenv("RML_FAST_CACHE", str(tmp_path))
    cfg = TinyConfig(n_layers=2, d_model=16, n_heads=2, d_mlp=None, n_ctx=8, d_vocab=10)
    kw = dict(
        seeds=(0, 1, 2),
        steps=20,
        lr=1e-2,
        batch=8,
        n_prompts=6,
        n_eval=8,
        n_null=3,
        importance=True,
        progress=False,
        task_kwargs={"half": 4, "d_vocab": 10},
    )
    res = hs.StabilityStudy(cfg, "induction", **kw).run()
    assert res["labels"] == ["adam", "adamw"] and res["weight_decay"] == {"adam": 0.0, "adamw": 0.1}
    assert res["stability"]["adamw"].shape == (3, 2, 2)
    assert res["residual"]["adam"].shape == (3,) and res["perplexity"]["adam"].shape == (3,)
    assert res["importance"]["adamw"].shape == (3, 2, 2)
    assert res["importance_corr"]["adam"].shape == (2,)
    assert not torch.equal(res["stability"]["adam"], res["stability"]["adamw"])
    files = sorted((tmp_path / "models").glob("*.pt"))
    assert len(files) == 6
    files[3].unlink()  # an interrupted study: one refit missing, retrained on the next run
    res2 = hs.StabilityStudy(cfg, "induction", **kw).run()
    for key in ("stability", "layer_stability", "null_layer_stability", "residual", "perplexity"):
        for label in res["labels"]:
            torch.testing.assert_close(res[key][label], res2[key][label])


def test_demo_quick_runs(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from rml_fast.interp.demos import head_stability as demo

    monkeypatch.setenv("RML_FAST_CACHE", str(tmp_path))
    out = tmp_path / "fig.png"
    res = demo.run(quick=True, progress=False, out=out)
    assert out.is_file() and out.stat().st_size > 0
    table = demo.format_table(res)
    assert "adamw" in table and "adam" in table


def test_transformer_lens_model_gives_the_same_numbers():
    """The same weights as a TransformerLens HookedTransformer (the adapter path)."""
    pytest.importorskip("transformer_lens")
    from rml_fast.models.convert import to_transformer_lens

    model = TinyTransformer(CFG, seed=1)
    tl = to_transformer_lens(model)
    p = _prompts(5)
    for fn in (
        lambda m: hs.attention_signatures(m, p),
        lambda m: hs.attention_signatures(m, p, use_scores=True),
        lambda m: hs.head_representations(m, p, hook="result"),
        lambda m: hs.head_importance(m, p),
    ):
        torch.testing.assert_close(fn(tl), fn(model), atol=1e-5, rtol=1e-4)
    res = hs.residual_stability([model, tl], p)
    torch.testing.assert_close(res, torch.ones_like(res))
