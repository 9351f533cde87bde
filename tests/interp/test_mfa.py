"""Mixture of factor analyzers (rml_fast.interp.mfa) against closed forms, dense brute force,
scikit-learn's FactorAnalysis / GaussianMixture in the limiting cases, EM monotonicity, Adam vs
EM, planted recovery, steering invariants, resuming, and findings on zoo / MiniLM activations."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch
from scipy.linalg import subspace_angles
from scipy.optimize import linear_sum_assignment
from scipy.special import logsumexp
from scipy.stats import multivariate_normal
from sklearn.decomposition import FactorAnalysis
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.mixture import GaussianMixture

from rml_fast.evaluation.embedders import minilm_available
from rml_fast.exceptions import ConvergenceWarning
from rml_fast.interp.mfa import (
    MixtureOfFactorAnalyzers,
    mfa_interchange,
    mfa_steer,
    mfa_steering_hook,
    minilm_hidden_states,
)

MFA = MixtureOfFactorAnalyzers


def _random_params(K, D, q, *, per_comp=False, seed=0, sep=1.0):
    rng = np.random.default_rng(seed)
    means = sep * rng.normal(size=(K, D))
    W = rng.normal(size=(K, D, q))
    psi = rng.uniform(0.2, 1.5, size=(K, D) if per_comp else D)
    w = rng.dirichlet(np.ones(K) * 3)
    return means, W, psi, w


def _planted(K=4, D=12, q=2, N=3000, seed=0, per_comp=False):
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(K, D))
    means *= 12.0 / np.linalg.norm(means, axis=1, keepdims=True)
    W = 1.5 * rng.normal(size=(K, D, q))
    psi = rng.uniform(0.05, 0.2, size=(K, D) if per_comp else D)
    truth = MFA.from_params(means, W, psi, np.full(K, 1.0 / K))
    X, labels = truth.sample(N, rng=seed + 1)
    return truth, X, labels


# ------------------------------------------------------------------ closed forms, brute force


def test_spec_closed_form():
    """Spec §4.4: K=1, D=2, W=[[1],[0]], Ψ=I, μ=0; and the two-component responsibilities."""
    m = MFA.from_params(np.zeros((1, 2)), np.array([[[1.0], [0.0]]]), np.ones(2), np.ones(1))
    np.testing.assert_allclose(m.score_samples([[0.0, 0.0], [2.0, 0.0]]),
                               [-2.184451, -3.184451], atol=1e-6)
    Ez, C = m.posterior_latents([[2.0, 0.0]])
    np.testing.assert_allclose([Ez[0, 0, 0], C[0, 0, 0]], [1.0, 0.5], atol=1e-12)
    m2 = MFA.from_params(np.array([[0.0, 0.0], [3.0, 0.0]]), np.array([[[1.0], [0.0]]] * 2),
                         np.ones(2), np.array([0.5, 0.5]))
    np.testing.assert_allclose(m2.predict_proba([[1.0, 0.0]])[0, 0], 0.679179, atol=1e-6)
    np.testing.assert_allclose(m2.score_samples([[1.0, 0.0]]), [-2.740727], atol=1e-6)


@pytest.mark.parametrize("per_comp", [False, True])
def test_density_and_posterior_equal_dense_brute_force(per_comp):
    """log p(x), responsibilities and the factor posterior equal a dense D×D computation."""
    K, D, q = 3, 5, 2
    means, W, psi, w = _random_params(K, D, q, per_comp=per_comp, seed=3)
    m = MFA.from_params(means, W, psi, w)
    X = np.random.default_rng(4).normal(size=(40, D)) * 2
    comp = np.empty((40, K))
    for k in range(K):
        Psi = np.diag(psi[k] if per_comp else psi)
        comp[:, k] = np.log(w[k]) + multivariate_normal(means[k], W[k] @ W[k].T + Psi).logpdf(X)
    np.testing.assert_allclose(m.score_samples(X), logsumexp(comp, axis=1), rtol=1e-10)
    np.testing.assert_allclose(m.predict_proba(X), np.exp(comp - logsumexp(comp, 1)[:, None]),
                               atol=1e-10)
    Ez, Cz = m.posterior_latents(X)
    for k in range(K):
        C = W[k] @ W[k].T + np.diag(psi[k] if per_comp else psi)
        G = W[k].T @ np.linalg.inv(C)
        np.testing.assert_allclose(Ez[:, k], (X - means[k]) @ G.T, atol=1e-10)
        np.testing.assert_allclose(Cz[k], np.eye(q) - G @ W[k], atol=1e-10)
    # tempered responsibilities: softmax of the scaled log joint
    t = m.predict_proba(X, tau=2.0)
    np.testing.assert_allclose(t, np.exp(comp / 2 - logsumexp(comp / 2, 1)[:, None]), atol=1e-10)


def test_dictionary_reconstruction_identity():
    """transform(X) @ dictionary().T == reconstruct(X); top_k keeps the largest blocks only."""
    m = MFA.from_params(*_random_params(4, 6, 3, seed=5))
    X = np.random.default_rng(6).normal(size=(30, 6))
    np.testing.assert_allclose(m.transform(X) @ m.dictionary().T, m.reconstruct(X), atol=1e-10)
    c = m.transform(X, top_k=2).reshape(30, 4, 4)
    assert ((c[:, :, 0] > 0).sum(axis=1) <= 2).all()
    R = m.predict_proba(X)
    top = np.argsort(-R, axis=1)[:, :2]
    np.testing.assert_allclose(np.take_along_axis(c[:, :, 0], top, 1),
                               np.take_along_axis(R, top, 1))


# ------------------------------------------------------------------ scikit-learn limiting cases


def test_one_component_equals_factor_analysis():
    """K=1: same (μ, W, Ψ) -> FactorAnalysis' log-likelihood; EM fit >= FA fit, same W Wᵀ."""
    rng = np.random.default_rng(0)
    Wt = rng.normal(size=(8, 2)) * 2
    X = rng.normal(size=(1500, 2)) @ Wt.T + rng.normal(size=(1500, 8)) * rng.uniform(0.3, 1, 8)
    X += 3.0
    fa = FactorAnalysis(n_components=2, tol=1e-8, max_iter=5000, svd_method="lapack").fit(X)
    m = MFA.from_params(fa.mean_[None], fa.components_.T[None], fa.noise_variance_, np.ones(1))
    np.testing.assert_allclose(m.score_samples(X), fa.score_samples(X), rtol=1e-9)
    ours = MFA(n_components=1, rank=2, tol=1e-9, max_iter=3000, random_state=0).fit(X)
    assert ours.converged_
    aug = MFA(n_components=1, rank=2, tol=1e-9, max_iter=3000, em_variant="augmented",
              random_state=0).fit(X)
    np.testing.assert_allclose(aug.score(X), fa.score(X), atol=1e-5)
    assert ours.score(X) >= fa.score(X) - 1e-6
    np.testing.assert_allclose(ours.score(X), fa.score(X), atol=1e-5)
    # loadings equal up to rotation: W Wᵀ and Ψ agree
    ww, ww_fa = ours.loadings_[0] @ ours.loadings_[0].T, fa.components_.T @ fa.components_
    assert np.linalg.norm(ww - ww_fa) < 1e-3 * np.linalg.norm(ww_fa)  # both stop at a tol
    np.testing.assert_allclose(ours.psi_, fa.noise_variance_, rtol=1e-2)
    np.testing.assert_allclose(ours.means_[0], X.mean(0), atol=1e-12)  # aecm: μ exact


def test_zero_factors_equals_diagonal_gaussian_mixture():
    """q=0, Ψ per component: same params -> GaussianMixture(diag) score_samples and
    predict_proba; the EM fit reaches the same optimum (log-likelihood and partition)."""
    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(c, s, size=(300, 4))
                        for c, s in [(-4, 0.5), (0, 1.0), (5, [0.3, 1, 2, 0.5])]])
    gm = GaussianMixture(3, covariance_type="diag", tol=1e-8, max_iter=1000,
                         random_state=0).fit(X)
    m = MFA.from_params(gm.means_, np.zeros((3, 4, 0)), gm.covariances_, gm.weights_)
    np.testing.assert_allclose(m.score_samples(X), gm.score_samples(X), rtol=1e-10)
    np.testing.assert_allclose(m.predict_proba(X), gm.predict_proba(X), atol=1e-10)
    ours = MFA(3, rank=0, shared_psi=False, tol=1e-10, max_iter=1000, random_state=0).fit(X)
    np.testing.assert_allclose(ours.score(X), gm.score(X), atol=1e-5)
    assert adjusted_rand_score(ours.predict(X), gm.predict(X)) == 1.0


# ------------------------------------------------------------------ EM / Adam


@pytest.mark.parametrize(("per_comp", "variant"),
                         [(False, "aecm"), (True, "aecm"), (False, "augmented"),
                          (True, "augmented")])
def test_em_log_likelihood_never_decreases(per_comp, variant):
    """Both EM variants: the log-likelihood history is non-decreasing (to float tolerance)."""
    _, X, _ = _planted(K=3, D=10, q=2, N=1500, seed=2, per_comp=per_comp)
    m = MFA(5, 3, shared_psi=not per_comp, init="random_points", init_loadings="random",
            em_variant=variant, tol=0.0, max_iter=60, random_state=0)
    with pytest.warns(ConvergenceWarning):
        m.fit(X)
    h = np.array(m.loglik_history_)
    assert len(h) == 60
    assert np.all(np.diff(h) >= -1e-9 * np.abs(h[1:])), np.diff(h).min()
    assert h[-1] > h[0] + 1.0  # it did move


def test_planted_mixture_recovery():
    """Samples of a known MFA: means, weights and local subspaces are recovered."""
    truth, X, labels = _planted(K=4, D=12, q=2, N=4000, seed=7)
    m = MFA(4, 2, tol=1e-6, max_iter=2000, random_state=0).fit(X)
    d = np.linalg.norm(truth.means_[:, None] - m.means_[None], axis=2)
    r, c = linear_sum_assignment(d)
    assert d[r, c].max() < 1.0  # sampling error of a mean along W: ~0.25
    # the fitted centroid is the centroid of the points of its planted region
    emp = np.stack([X[labels == i].mean(0) for i in r])
    np.testing.assert_allclose(m.means_[c], emp, atol=0.02)
    np.testing.assert_allclose(m.weights_[c], truth.weights_, atol=0.03)
    for i, j in zip(r, c, strict=True):
        ang = np.degrees(subspace_angles(truth.loadings_[i], m.loadings_[j]).max())
        assert ang < 5.0, ang
    np.testing.assert_allclose(m.psi_, truth.psi_, rtol=0.25)
    assert adjusted_rand_score(labels, m.predict(X)) > 0.99
    assert m.score(X) >= truth.score(X) - 1e-3  # the MLE beats the truth on its own sample


def test_adam_reaches_em_log_likelihood():
    """Minibatch Adam on the NLL (reference recipe, float64) reaches EM's log-likelihood."""
    _, X, _ = _planted(K=3, D=8, q=2, N=1500, seed=3)
    em = MFA(3, 2, tol=1e-6, max_iter=5000, random_state=0).fit(X)
    ad = MFA(3, 2, solver="adam", lr=2e-2, batch_size=500, max_epochs=40, tol=0.0,
             dtype="float64", random_state=0).fit(X)
    assert ad.n_iter_ == 40
    assert ad.score(X) > em.score(X) - 0.02, (ad.score(X), em.score(X))
    assert ad.score(X) <= em.score(X) + 1e-3  # EM is at the optimum
    # the best epoch was kept: its training NLL is the minimum of the history
    assert max(ad.loglik_history_) == pytest.approx(ad.loglik_history_[int(np.argmax(
        ad.loglik_history_))])


@pytest.mark.parametrize("solver", ["em", "adam"])
def test_resume_equals_uninterrupted(solver):
    """k iterations + pickle + (n − k) more (warm_start) == n iterations."""
    _, X, _ = _planted(K=3, D=6, q=2, N=600, seed=4)
    kw = {"tol": 0.0, "random_state": 0, "solver": solver, "lr": 1e-2, "batch_size": 100,
          "dtype": "float64"}
    budget = "max_iter" if solver == "em" else "max_epochs"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        full = MFA(3, 2, **kw, **{budget: 6}).fit(X)
        part = MFA(3, 2, **kw, **{budget: 2}).fit(X)
        part = pickle.loads(pickle.dumps(part))
        part.set_params(warm_start=True, **{budget: 4})
        part.fit(X)
    assert part.n_iter_ == full.n_iter_ == 6
    for a in ("means_", "loadings_", "psi_", "weights_"):
        np.testing.assert_allclose(getattr(part, a), getattr(full, a), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(part.loglik_history_, full.loglik_history_, rtol=1e-10)


# ------------------------------------------------------------------ steering / localisation


def test_steering_invariants_and_region_change():
    """α=0 is the identity, α=1 with k maps to μ_k, local steering adds W_k z, and steering
    toward region k raises its responsibility."""
    _, X, _ = _planted(K=3, D=8, q=2, N=900, seed=5)
    m = MFA(3, 2, random_state=0).fit(X)
    x = torch.tensor(X[:50])
    assert torch.equal(mfa_steer(x, m, k=1, alpha=0.0), x)
    np.testing.assert_allclose(mfa_steer(x, m, k=1, alpha=1.0).numpy(),
                               np.broadcast_to(m.means_[1], (50, 8)), atol=1e-12)
    z = np.array([0.5, -1.0])
    np.testing.assert_allclose(mfa_steer(X[:50], m, k=2, alpha=0.3, z=z),
                               X[:50] + 0.3 * (m.means_[2] - X[:50]) + m.loadings_[2] @ z,
                               atol=1e-12)
    R = m.predict_proba(X)
    soft = mfa_steer(X[:5], m, k=None, alpha=1.0)
    np.testing.assert_allclose(soft, R[:5] @ m.means_, atol=1e-12)
    src = m.predict(X)
    for k in range(3):
        away = X[src != k][:40]
        before = m.predict_proba(away)[:, k]
        after = m.predict_proba(mfa_steer(away, m, k=k, alpha=0.6))[:, k]
        assert np.all(after > before)
        near = m.predict_proba(mfa_steer(away, m, k=k, alpha=0.9))[:, k]
        assert np.mean(near > 0.5) > 0.9
        # local steering along W_k keeps the activation in region k
        moved = mfa_steer(away, m, k=k, alpha=1.0, z=np.array([1.0, 1.0]))
        assert np.all(m.predict(moved) == k)


def test_interchange_with_all_atoms_swaps_reconstructions():
    """With every atom, the interchange adds reconstruct(src) − reconstruct(base)."""
    m = MFA.from_params(*_random_params(3, 5, 2, seed=8))
    rng = np.random.default_rng(9)
    xb, xs = rng.normal(size=(7, 5)), rng.normal(size=(7, 5))
    new, S = mfa_interchange(m, xb, xs, np.arange(9))
    np.testing.assert_array_equal(S, np.arange(9))
    np.testing.assert_allclose(new, xb + m.reconstruct(xs) - m.reconstruct(xb), atol=1e-10)
    _, S2 = mfa_interchange(m, xb, xs, 3)
    dc = np.abs(m.transform(xs) - m.transform(xb)).mean(0)
    assert set(S2) == set(np.argsort(-dc)[:3])


def test_steering_hook_in_tiny_transformer(induction_small):
    """A steering hook at α=1 sets the hooked residual of every position to μ_k."""
    model, task = induction_small
    tokens, _, _ = task.train_batch(16, torch.Generator().manual_seed(0))
    name = "blocks.0.hook_resid_post"
    _, cache = model.run_with_cache(tokens, names=[name])
    acts = cache[name].reshape(-1, cache[name].shape[-1]).double().numpy()
    m = MFA(4, 2, random_state=0).fit(acts)
    _, steered = model.run_with_cache(
        tokens, names=[name], hooks=[(name, mfa_steering_hook(m, k=2, alpha=1.0))])
    np.testing.assert_allclose(steered[name].numpy(),
                               np.broadcast_to(m.means_[2], steered[name].shape), atol=1e-5)


# ------------------------------------------------------------------ findings on real models


def _region_nmi(model, task, k=16):
    tokens, targets, mask = task.train_batch(96, torch.Generator().manual_seed(1))
    name = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names=[name])
    acts = cache[name][mask].double().numpy()
    y = targets[mask].numpy()
    m = MFA(k, 4, random_state=0, max_iter=100).fit(acts)
    return normalized_mutual_info_score(y, m.predict(acts))


def test_finding_trained_induction_regions_encode_next_token(induction_small):
    """On the trained induction model, MFA regions of the final residual stream (at the
    predictable second-copy positions) carry the next token far better than on the same
    architecture at random initialisation."""
    from rml_fast.models.transformer import TinyTransformer

    model, task = induction_small
    trained = _region_nmi(model, task)
    rand = _region_nmi(TinyTransformer(model.cfg, seed=0).eval(), task)
    assert trained > rand + 0.15, (trained, rand)


@pytest.mark.skipif(not minilm_available(), reason="offline MiniLM wheel not installed")
def test_minilm_token_activations_have_local_low_rank_structure():
    """Real MiniLM token activations: held-out log-likelihood of the MFA beats both limiting
    cases (a single factor analyzer and a diagonal mixture with as many regions)."""
    words = ["cat", "dog", "car", "tree", "river", "music", "house", "bread", "city", "storm"]
    texts = [f"the {a} and the {b} were seen near the {c} today"
             for a in words for b in words[::-1] for c in words[:3]]
    H, toks, idx = minilm_hidden_states(texts, layer=3)
    assert H.shape[1] == 384 and len(toks) == H.shape[0] == len(idx)
    train, test = H[idx % 4 != 0].astype(np.float64), H[idx % 4 == 0].astype(np.float64)
    mfa = MFA(8, 4, random_state=0, max_iter=50).fit(train)
    fa = MFA(1, 4, random_state=0, max_iter=50).fit(train)
    gmm = MFA(8, 0, random_state=0, max_iter=50).fit(train)
    assert mfa.score(test) > fa.score(test) + 5.0
    assert mfa.score(test) > gmm.score(test) + 5.0


# ------------------------------------------------------------------ bad input


def test_bad_input_raises_clear_errors_without_mutation():
    X = np.random.default_rng(0).normal(size=(30, 3))
    X0 = X.copy()
    with pytest.raises(TypeError, match="n_components"):
        MFA(n_components=2.5).fit(X)
    with pytest.raises(ValueError, match="rank"):
        MFA(rank=-1).fit(X)
    with pytest.raises(ValueError, match="solver"):
        MFA(solver="sgd").fit(X)
    with pytest.raises(ValueError, match="n_samples"):
        MFA(n_components=40).fit(X)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        MFA(2, 1).fit(bad)
    m = MFA(2, 1, random_state=0).fit(X)
    np.testing.assert_array_equal(X, X0)
    with pytest.raises(ValueError, match="features"):
        m.score_samples(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="tau"):
        m.predict_proba(X, tau=0.0)
    with pytest.raises(ValueError, match="k must be"):
        mfa_steer(X, m, k=5, alpha=0.5)
    with pytest.raises(ValueError, match="z must have shape"):
        mfa_steer(X, m, k=0, alpha=0.5, z=[1.0, 2.0])
    with pytest.raises(ValueError, match="needs a target region"):
        mfa_steer(X, m, k=None, alpha=0.5, z=[1.0])
    with pytest.raises(ValueError, match="last dimension"):
        mfa_steer(np.zeros((2, 4)), m, k=0, alpha=0.5)
    with pytest.raises(ValueError, match="psi must be positive"):
        MFA.from_params(np.zeros((1, 2)), np.zeros((1, 2, 1)), np.array([1.0, 0.0]), [1.0])
    with pytest.raises(ValueError, match="loadings must have shape"):
        MFA.from_params(np.zeros((1, 2)), np.zeros((1, 3, 1)), np.ones(2), [1.0])
    with pytest.raises(ValueError, match="weights"):
        MFA.from_params(np.zeros((2, 2)), np.zeros((2, 2, 1)), np.ones(2), [0.3, 0.3])
    with pytest.raises(ValueError, match="atoms"):
        mfa_interchange(m, X, X, np.array([99]))
