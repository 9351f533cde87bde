"""SRLS: support recovery, debiasing, CV/stability/fixed-k selection, GCV ridge, steering."""

from __future__ import annotations

import numpy as np
import pytest

from rml_fast.kernels.lasso import lasso, ridge_refit
from rml_fast.steering import SRLS, SAEDecoderAdapter, srls_steering_vector
from rml_fast.steering._ridge import gcv_ridge_mu


@pytest.fixture(scope="module")
def spec_design():
    """The seeded synthetic design of specs/steering_eval.md §1.4."""
    rng = np.random.default_rng(0)
    d, m = 256, 2048
    D = rng.standard_normal((d, m))
    D = np.asfortranarray(D / np.linalg.norm(D, axis=0))
    S = np.sort(rng.choice(m, 8, replace=False))
    w = np.zeros(m)
    w[S] = rng.choice([-1.0, 1.0], 8) * (1 + rng.random(8))
    sigma = 0.01
    y = D @ w + sigma * rng.standard_normal(d)
    return D, w, S, y, sigma, rng


def test_exact_support_recovery_and_debiasing(spec_design):
    D, w, S, y, sigma, _ = spec_design
    d, m = D.shape
    lam = 2 * sigma * np.sqrt(2 * np.log(m)) / d
    res = lasso(D, y, lam, tol=1e-10)
    np.testing.assert_array_equal(np.flatnonzero(res.coef), S)
    mu = gcv_ridge_mu(D, y, S)[0]
    refit = ridge_refit(D, y, S, mu)
    assert np.linalg.norm(refit - w) < np.linalg.norm(res.coef - w)
    # the refit essentially removes the Lasso's shrinkage bias (|bias| ~ d lam per coefficient)
    assert np.linalg.norm(refit - w) < 0.2 * np.linalg.norm(res.coef - w)


@pytest.mark.parametrize("support", ["cv", "stability", "fixed_k"])
def test_srls_recovers_support_from_pairs(spec_design, support):
    D, w, S, _, sigma, _ = spec_design
    rng = np.random.default_rng(1)
    n = 30
    deltas = (D @ w)[None, :] + sigma * np.sqrt(n) * rng.standard_normal((n, D.shape[0]))
    est = SRLS(support=support, k=8, rng=0).fit(D, deltas)
    np.testing.assert_array_equal(est.support_, S)
    assert np.linalg.norm(est.coef_ - w) < np.linalg.norm(est.lasso_coef_ - w)
    np.testing.assert_allclose(est.steering_vector_, D @ est.coef_)
    assert est.dual_gap_ >= 0
    if support == "cv":
        assert est.cv_scores_.shape[1] == 5
        assert est.alpha_ in est.path_
    if support == "stability":
        assert np.all(est.stability_scores_[S] >= 0.6)


def test_cv_one_standard_error_rule(spec_design):
    D, w, _, _, sigma, _ = spec_design
    rng = np.random.default_rng(2)
    n = 20
    deltas = (D @ w)[None, :] + 3 * sigma * np.sqrt(n) * rng.standard_normal((n, D.shape[0]))
    groups = np.repeat(np.arange(10), 2)
    est = SRLS(n_alphas=15, rng=0).fit(D, deltas, groups)
    scores = est.cv_scores_
    mean = scores.mean(1)
    se = scores.std(1, ddof=1) / np.sqrt(scores.shape[1])
    best = int(np.argmin(mean))
    chosen = int(np.flatnonzero(est.path_ == est.alpha_)[0])
    assert chosen <= best
    assert mean[chosen] <= mean[best] + se[best]
    assert np.all(mean[:chosen] > mean[best] + se[best])


def test_token_axis_is_averaged_and_groups_are_respected(spec_design):
    D, w, _, _, _, _ = spec_design
    rng = np.random.default_rng(3)
    base = (D @ w)[None, None, :] + 0.05 * rng.standard_normal((12, 3, D.shape[0]))
    a = SRLS(support="fixed_k", k=8).fit(D, base)
    b = SRLS(support="fixed_k", k=8).fit(D, base.mean(axis=1))
    np.testing.assert_allclose(a.coef_, b.coef_)


def test_relax_phi_blend_and_ridge_options(spec_design):
    D, w, S, _, _, _ = spec_design
    rng = np.random.default_rng(4)
    deltas = (D @ w)[None, :] + 0.02 * rng.standard_normal((10, D.shape[0]))
    ybar = deltas.mean(0)
    e0 = SRLS(support="fixed_k", k=8, ridge="fixed", ridge_mu=0.01).fit(D, deltas)
    e1 = SRLS(support="fixed_k", k=8, ridge="fixed", ridge_mu=0.01, relax_phi=1.0).fit(D, deltas)
    eh = SRLS(support="fixed_k", k=8, ridge="fixed", ridge_mu=0.01, relax_phi=0.5).fit(D, deltas)
    np.testing.assert_allclose(e0.coef_, ridge_refit(D, ybar, S, 0.01), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(e1.coef_, e1.lasso_coef_)
    np.testing.assert_allclose(eh.coef_, 0.5 * (e0.coef_ + e1.coef_), atol=1e-12)
    en = SRLS(support="fixed_k", k=8, ridge="none").fit(D, deltas)
    ls = np.linalg.lstsq(D[:, S], ybar, rcond=None)[0]
    np.testing.assert_allclose(en.coef_[S], ls, rtol=1e-8)


def test_gcv_matches_brute_force():
    rng = np.random.default_rng(5)
    n, k = 40, 6
    X = rng.standard_normal((n, k))
    y = X @ rng.standard_normal(k) + 0.5 * rng.standard_normal(n)
    mu, grid, scores = gcv_ridge_mu(X, y, np.arange(k))
    for g, s in zip(grid, scores, strict=True):
        H = X @ np.linalg.solve(X.T @ X + n * g * np.eye(k), X.T)
        brute = n * np.sum((y - H @ y) ** 2) / (n - np.trace(H)) ** 2
        np.testing.assert_allclose(s, brute, rtol=1e-8)
    assert mu == grid[np.argmin(scores)]


def test_transform_numpy_and_torch(spec_design):
    torch = pytest.importorskip("torch")
    D, w, _, _, _, _ = spec_design
    est = SRLS(support="fixed_k", k=8).fit(D, (D @ w)[None, :] + np.zeros((3, 1)))
    v = est.steering_vector_
    H = np.random.default_rng(6).standard_normal((2, 5, D.shape[0]))
    mask = np.zeros((2, 5), dtype=bool)
    mask[:, 2:] = True
    out = est.transform(H, 0.7, token_mask=mask)
    np.testing.assert_allclose(out[:, :2], H[:, :2])
    np.testing.assert_allclose(out[:, 2:], H[:, 2:] + 0.7 * v)
    Ht = torch.from_numpy(H).float()
    out_t = est.transform(Ht, 0.7, token_mask=torch.from_numpy(mask))
    assert out_t.dtype == torch.float32
    np.testing.assert_allclose(out_t.numpy(), out, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="last dimension"):
        est.transform(H[..., :3], 1.0)
    with pytest.raises(ValueError, match="token_mask"):
        est.transform(H, 1.0, token_mask=np.ones((3, 5), dtype=bool))


def test_affine_decoder_fact():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    d, m = 16, 64
    enc = torch.nn.Linear(d, m)
    dec = torch.nn.Linear(m, d)

    class SAE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.decoder = enc, dec

    adapter = SAEDecoderAdapter.from_torch(SAE())
    assert adapter.D.shape == (d, m)
    assert adapter.D.flags.f_contiguous
    h = torch.randn(5, d)
    z = torch.relu(enc(h)).detach().numpy()
    delta = np.random.default_rng(7).standard_normal(m).astype(np.float32)
    edit = adapter.decode(z + delta) - adapter.decode(z)
    np.testing.assert_allclose(edit, np.broadcast_to(adapter.D @ delta, edit.shape), atol=1e-4)
    np.testing.assert_allclose(adapter.decode(z), dec(torch.from_numpy(z)).detach().numpy(), atol=1e-5)
    # SAELens layout
    W = np.random.default_rng(8).standard_normal((m, d))
    a2 = SAEDecoderAdapter.from_arrays(W, np.ones(d), layout="md")
    np.testing.assert_array_equal(a2.D, W.T)


def test_srls_steering_vector_and_params(spec_design):
    D, w, S, _, _, _ = spec_design
    deltas = (D @ w)[None, :] + np.zeros((4, 1))
    delta, v = srls_steering_vector(D, deltas, support="fixed_k", k=8)
    np.testing.assert_array_equal(np.flatnonzero(delta), S)
    np.testing.assert_allclose(v, D @ delta)
    est = SRLS(cv=3)
    assert est.get_params()["cv"] == 3
    assert est.set_params(cv=4).cv == 4
    with pytest.raises(ValueError, match="unknown parameter"):
        est.set_params(bogus=1)


@pytest.mark.parametrize(
    ("params", "fit_args", "match"),
    [
        ({"support": "lasso"}, None, "support"),
        ({"support": "fixed_k"}, None, "k must be given"),
        ({"ridge": "fixed"}, None, "ridge_mu"),
        ({"cv": 1}, None, "cv"),
        ({"relax_phi": 1.5}, None, "relax_phi"),
        ({"alphas": [0.1, 0.2]}, None, "non-increasing"),
        ({}, "bad_shape", "last dimension"),
        ({}, "nan", "finite"),
        ({}, "groups", "groups"),
        ({}, "one_group", "2 distinct groups"),
    ],
)
def test_bad_input(params, fit_args, match):
    rng = np.random.default_rng(9)
    D = rng.standard_normal((8, 20))
    deltas = rng.standard_normal((6, 8))
    groups = None
    if fit_args == "bad_shape":
        deltas = deltas[:, :5]
    elif fit_args == "nan":
        deltas[0, 0] = np.nan
    elif fit_args == "groups":
        groups = np.arange(5)
    elif fit_args == "one_group":
        groups = np.zeros(6)
    with pytest.raises(ValueError, match=match):
        SRLS(**params).fit(D, deltas, groups)


def test_transform_before_fit_raises():
    with pytest.raises(RuntimeError, match="not fitted"):
        SRLS().transform(np.zeros((2, 3)), 1.0)
