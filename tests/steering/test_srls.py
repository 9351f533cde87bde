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
    with pytest.raises(ValueError, match="token_mask"):
        est.transform(Ht, 1.0, token_mask=torch.ones((3, 5), dtype=torch.bool))


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


# -- issue 27: no silent clamps, one data orientation, adapters as D -----------------------


def _small_problem(seed=12, d=16, m=48, n=10):
    rng = np.random.default_rng(seed)
    D = rng.standard_normal((d, m))
    D /= np.linalg.norm(D, axis=0)
    w = np.zeros(m)
    w[[2, 9, 30]] = [1.5, -1.0, 2.0]
    deltas = (D @ w)[None, :] + 0.01 * rng.standard_normal((n, d))
    return D, w, deltas


def _forbid_work(monkeypatch):
    """Make any Lasso work fail, so that a test shows an error is raised before it."""
    import rml_fast.steering.srls as srls_mod

    def boom(*args, **kwargs):
        raise AssertionError("work was done before the input check")

    monkeypatch.setattr(srls_mod, "lasso_path", boom)
    monkeypatch.setattr(srls_mod, "lambda_max", boom)


@pytest.mark.parametrize(("groups", "n_groups"), [(np.repeat([0, 1], 5), 2),
                                                  (np.repeat([0, 1, 2, 3], [3, 3, 2, 2]), 4)])
def test_cv_more_folds_than_groups_raises_before_any_work(monkeypatch, groups, n_groups):
    D, _, deltas = _small_problem()
    before = deltas.copy()
    _forbid_work(monkeypatch)
    with pytest.raises(ValueError, match=rf"cv=5 folds with only {n_groups} distinct groups"):
        SRLS(cv=5).fit(D, deltas, groups)
    np.testing.assert_array_equal(deltas, before)


def test_cv_default_groups_are_pairs_and_too_few_pairs_raise(monkeypatch):
    D, _, deltas = _small_problem(n=3)
    _forbid_work(monkeypatch)
    with pytest.raises(ValueError, match=r"cv=5 folds with only 3 distinct groups.*cv to at most 3"):
        SRLS().fit(D, deltas)


def test_cv_equal_to_number_of_groups_uses_every_fold():
    D, _, deltas = _small_problem()
    est = SRLS(cv=2, n_alphas=8, rng=0).fit(D, deltas, np.repeat([0, 1], 5))
    assert est.cv_scores_.shape == (est.path_.size, 2)


def test_stability_with_one_group_raises_before_any_work(monkeypatch):
    D, _, deltas = _small_problem()
    _forbid_work(monkeypatch)
    with pytest.raises(ValueError, match="support='stability' needs at least 2 distinct groups"):
        SRLS(support="stability").fit(D, deltas, np.zeros(10))


def test_transposed_deltas_raise_with_a_hint(monkeypatch):
    D, _, deltas = _small_problem()  # d = 16, n = 10
    _forbid_work(monkeypatch)
    with pytest.raises(ValueError, match=r"one row per prompt pair.*d=16.*got shape \(16, 10\).*pass deltas\.T"):
        SRLS().fit(D, deltas.T)
    with pytest.raises(ValueError, match=r"looks like \(m, d\).*layout='md'"):
        SRLS().fit(D.T, deltas)  # a decoder in the (m, d) W_dec layout


def test_fixed_k_bounds_raise_before_any_work(monkeypatch):
    D, _, deltas = _small_problem()
    _forbid_work(monkeypatch)
    with pytest.raises(ValueError, match=r"k=49 exceeds the number of SAE features m=48"):
        SRLS(support="fixed_k", k=49).fit(D, deltas)
    with pytest.raises(ValueError, match=r"k=20 exceeds max_support=10"):
        SRLS(support="fixed_k", k=20, max_support=10).fit(D, deltas)


def test_fixed_k_not_reached_warns_and_uses_the_last_penalty():
    from rml_fast.steering import SteeringWarning

    D, _, deltas = _small_problem()  # d = 16: the Lasso support cannot reach 20
    with pytest.warns(SteeringWarning, match=r"never reached k=20 features.*at most d=16"):
        est = SRLS(support="fixed_k", k=20, n_alphas=10).fit(D, deltas)
    assert 0 < est.support_.size < 20
    assert est.alpha_ == est.path_[-1]
    np.testing.assert_array_equal(est.support_, np.flatnonzero(est.lasso_coef_))
    assert issubclass(SteeringWarning, UserWarning)


def test_empty_support_warns():
    from rml_fast.kernels.lasso import lambda_max
    from rml_fast.steering import SteeringWarning

    D, _, deltas = _small_problem()
    lm = float(lambda_max(D, deltas.mean(0)))
    with pytest.warns(SteeringWarning, match="no feature is selected"):
        est = SRLS(alphas=[10 * lm], cv=2, rng=0).fit(D, deltas)
    assert est.support_.size == 0 and not est.steering_vector_.any()
    with pytest.warns(SteeringWarning, match="no feature was selected"):
        est = SRLS(support="stability", stability_alpha=10 * lm, rng=0).fit(D, deltas)
    assert est.support_.size == 0 and not est.coef_.any()


def test_underdetermined_refit_warns():
    from rml_fast.steering import SteeringWarning

    rng = np.random.default_rng(11)
    D = rng.standard_normal((4, 30))
    D /= np.linalg.norm(D, axis=0)
    deltas = rng.standard_normal((12, 4))
    with pytest.warns(SteeringWarning, match=r"ridge='none' refits \d+ features on d=4"):
        est = SRLS(support="stability", stability_alpha=0.02, stability_threshold=0.05,
                   ridge="none", rng=0).fit(D, deltas)
    assert est.support_.size > 4


def test_device_numpy_runs_the_reference_solver(monkeypatch):
    import rml_fast.steering.srls as srls_mod

    D, _, deltas = _small_problem()
    seen = []
    real = srls_mod.lasso_path

    def spy(*args, **kwargs):
        seen.append(kwargs["backend"])
        return real(*args, **kwargs)

    monkeypatch.setattr(srls_mod, "lasso_path", spy)
    ref = SRLS(support="fixed_k", k=3, device="numpy", tol=1e-10).fit(D, deltas)
    assert set(seen) == {"reference"}
    seen.clear()
    nat = SRLS(support="fixed_k", k=3, device="cpu", tol=1e-10).fit(D, deltas)
    assert set(seen) == {"native"}
    np.testing.assert_array_equal(ref.support_, nat.support_)
    np.testing.assert_allclose(ref.coef_, nat.coef_, rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="device"):
        SRLS(device="cuda").fit(D, deltas)


def _torch_saes(D, b):
    """The three torch forms from_torch accepts, all with decoder D (d, m) and bias b."""
    torch = pytest.importorskip("torch")
    d, m = D.shape
    linear = torch.nn.Linear(m, d)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(D))
        linear.bias.copy_(torch.from_numpy(b))

    class WithDecoder(torch.nn.Module):  # dictionary-learning style: bias-free decoder + b_dec
        def __init__(self):
            super().__init__()
            self.decoder = torch.nn.Linear(m, d, bias=False)
            self.b_dec = torch.nn.Parameter(torch.from_numpy(b.copy()))
            with torch.no_grad():
                self.decoder.weight.copy_(torch.from_numpy(D))

    class SAELensLike(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.W_dec = torch.nn.Parameter(torch.from_numpy(D.T.copy()))
            self.b_dec = torch.nn.Parameter(torch.from_numpy(b.copy()))

    return {"linear": linear, "decoder": WithDecoder(), "W_dec": SAELensLike()}


@pytest.mark.parametrize("form", ["linear", "decoder", "W_dec"])
def test_from_torch_accepts_every_listed_form(form):
    D, _, _ = _small_problem()
    D = D.astype(np.float32)
    b = np.arange(D.shape[0], dtype=np.float32)
    sae = _torch_saes(D, b)[form]
    adapter = SAEDecoderAdapter.from_torch(sae)
    assert adapter.D.dtype == np.float32 and adapter.D.flags.f_contiguous
    np.testing.assert_array_equal(adapter.D, D)
    np.testing.assert_array_equal(adapter.b_dec, b)


def test_from_torch_half_precision_and_rejections():
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(12, 4).to(torch.bfloat16)
    adapter = SAEDecoderAdapter.from_torch(lin)
    assert adapter.D.dtype == np.float32 and adapter.D.shape == (4, 12)
    np.testing.assert_array_equal(adapter.D, lin.weight.float().detach().numpy())
    with pytest.raises(TypeError, match=r"torch\.nn\.Linear decoder.*\.decoder.*W_dec.*\(m, d\)"):
        SAEDecoderAdapter.from_torch(torch.nn.ReLU())
    with pytest.raises(ValueError, match="b_dec must have shape"):
        SAEDecoderAdapter(np.ones((4, 12)), np.ones(3))
    with pytest.raises(ValueError, match="last dimension m=12"):
        adapter.decode(np.ones((2, 4)))


@pytest.mark.parametrize("form", ["adapter", "linear", "decoder", "W_dec"])
def test_fit_accepts_an_adapter_or_torch_sae_as_D(form):
    D, _, deltas = _small_problem()
    D = np.asfortranarray(D.astype(np.float32))
    deltas = deltas.astype(np.float32)
    b = np.zeros(D.shape[0], dtype=np.float32)
    decoder = (SAEDecoderAdapter.from_arrays(D, b) if form == "adapter"
               else _torch_saes(D, b)[form])
    for params in ({"support": "fixed_k", "k": 3}, {"cv": 2, "n_alphas": 10, "rng": 0}):
        ref = SRLS(**params).fit(D, deltas)
        est = SRLS(**params).fit(decoder, deltas)
        np.testing.assert_array_equal(est.support_, ref.support_)
        np.testing.assert_array_equal(est.coef_, ref.coef_)
        np.testing.assert_array_equal(est.steering_vector_, ref.steering_vector_)
    delta, _ = srls_steering_vector(decoder, deltas, support="fixed_k", k=3)
    np.testing.assert_array_equal(np.flatnonzero(delta), [2, 9, 30])


def test_fit_rejects_other_objects_as_D():
    _, _, deltas = _small_problem()
    with pytest.raises(TypeError, match=r"D must be a \(d, m\) array.*SAEDecoderAdapter"):
        SRLS().fit(object(), deltas)
