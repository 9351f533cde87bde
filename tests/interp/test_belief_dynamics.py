"""Belief dynamics (arXiv 2511.00617): parameter recovery, the closed forms, the logistic special
case against scikit-learn, the bootstrap against scipy's curve_fit, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import curve_fit
from scipy.special import expit
from sklearn.linear_model import LogisticRegression

from rml_fast.interp.belief_dynamics import BeliefDynamicsModel, simulate_curves, steering_vector

TRUTH = {"b": -3.0, "a": [1.5], "gamma": 1.2, "alpha": 0.3}


def _grid(ns=(0, 1, 2, 4, 8, 16, 32, 64, 96, 128), ms=None):
    N, m = np.meshgrid(ns, np.linspace(-2, 2, 10) if ms is None else ms)
    return np.column_stack([N.ravel(), m.ravel()]).astype(float)


def test_recovers_known_parameters_within_three_standard_errors():
    X = _grid()
    y, n = simulate_curves(X, **TRUTH, n_trials=200, rng=0)
    model = BeliefDynamicsModel(loss="binomial").fit(X, y, sample_weight=n)
    se = np.sqrt(np.diag(model.cov_))
    truth = np.array([-3.0, 1.5, 1.2, 0.3])
    assert np.all(np.isfinite(se)) and np.all(se > 0)
    assert np.all(np.abs(model.coef_ - truth) < 3 * se), (model.coef_, se)
    assert model.param_names_ == ["b", "a_0", "gamma", "alpha"]


def test_linear_evidence_data_give_alpha_near_zero():
    X = _grid()
    y, n = simulate_curves(X, b=-4.0, a=[1.0], gamma=0.15, alpha=0.0, n_trials=200, rng=1)
    power = BeliefDynamicsModel(loss="binomial").fit(X, y, sample_weight=n)
    linear = BeliefDynamicsModel(loss="binomial", evidence="linear").fit(X, y, sample_weight=n)
    assert power.params_["alpha"] < 2.5 * np.sqrt(power.cov_[3, 3]) + 1e-3
    assert abs(linear.params_["gamma"] - 0.15) < 3 * np.sqrt(linear.cov_[2, 2])
    # nesting: the power model's optimum is never worse than the linear one's
    assert power.loss_ <= linear.loss_ + 1e-9


def test_no_steering_linear_evidence_is_logistic_regression():
    rng = np.random.default_rng(3)
    N = np.repeat(np.arange(0, 40, 2.0), 30)
    label = (rng.random(N.size) < expit(-2.0 + 0.12 * N)).astype(float)
    ours = BeliefDynamicsModel(loss="binomial", evidence="linear").fit(N[:, None], label)
    peer = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10_000).fit(N[:, None], label)
    np.testing.assert_allclose(ours.params_["b"], peer.intercept_[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours.params_["gamma"], peer.coef_[0, 0], rtol=1e-4, atol=1e-6)
    # aggregated counts per cell give the same fit as the Bernoulli rows
    cells = np.unique(N)
    frac = np.array([label[c == N].mean() for c in cells])
    agg = BeliefDynamicsModel(loss="binomial", evidence="linear").fit(
        cells[:, None], frac, sample_weight=np.full(cells.size, 30.0)
    )
    np.testing.assert_allclose(agg.coef_, ours.coef_, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("loss", ["squared", "binomial"])
@pytest.mark.parametrize("emission", [False, True])
@pytest.mark.parametrize("evidence", ["power", "linear"])
def test_analytic_gradient_matches_finite_differences(loss, emission, evidence):
    X = _grid(ns=(0, 1, 3, 9, 27), ms=np.linspace(-1, 1, 4))
    X = np.column_stack([X, np.linspace(-0.5, 0.7, len(X))])  # two steering vectors
    y, n = simulate_curves(X, b=-1.0, a=[0.8, -0.4], gamma=0.9, alpha=0.2, n_trials=50, rng=2)
    model = BeliefDynamicsModel(loss=loss, fit_emission=emission, evidence=evidence)
    theta = np.array(
        [-0.7, 0.5, -0.2, 0.6]
        + ([0.35] if evidence == "power" else [])
        + ([0.85, 0.1] if emission else [])
    )
    _, grad = model._objective(theta, X, y, n)
    fd = np.empty_like(theta)
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = 1e-6
        fd[i] = (
            model._objective(theta + e, X, y, n)[0] - model._objective(theta - e, X, y, n)[0]
        ) / 2e-6
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-8)


def test_phase_boundary_is_the_behavioural_midpoint_and_logit_is_linear_in_m():
    X = _grid()
    y, n = simulate_curves(X, **TRUTH, q_c=0.9, q_cbar=0.15, n_trials=300, rng=4)
    model = BeliefDynamicsModel(loss="binomial", fit_emission=True).fit(X, y, sample_weight=n)
    pr = model.params_
    assert pr["q_c"] > pr["q_cbar"]
    M = np.array([[-1.0], [0.0], [0.5]])
    N_star = model.phase_boundary_N(M)
    mid = model.predict(np.column_stack([N_star, M[:, 0]]))
    np.testing.assert_allclose(mid, (pr["q_c"] + pr["q_cbar"]) / 2, atol=1e-10)
    m_star = model.phase_boundary_m(np.array([0.0, 5.0, 50.0]))
    np.testing.assert_allclose(
        model.belief(np.column_stack([[0.0, 5.0, 50.0], m_star])), 0.5, atol=1e-10
    )
    # additivity: the log-odds are exactly linear in m at fixed N, with slope a
    m = np.linspace(-3, 3, 7)
    eta = model.log_odds(np.column_stack([np.full(7, 10.0), m]))
    np.testing.assert_allclose(np.diff(eta), pr["a"][0] * 0.5 * 2, rtol=1e-10)
    np.testing.assert_allclose(np.diff(eta, 2), 0.0, atol=1e-10)


def test_additivity_residual_is_zero_for_additive_data_and_not_for_interacting_data():
    X = _grid(ns=(0, 2, 4, 8, 16), ms=np.linspace(-1.5, 1.5, 5))
    g = np.sign(X[:, 0]) * np.abs(X[:, 0]) ** 0.7
    additive = expit(-2.0 + 1.3 * X[:, 1] + 0.8 * g)
    model = BeliefDynamicsModel().fit(X, additive)
    assert np.max(np.abs(model.additivity_residual(X, additive))) < 1e-4
    interacting = expit(-2.0 + 1.3 * X[:, 1] + 0.8 * g + 0.4 * X[:, 1] * g)
    res = BeliefDynamicsModel().fit(X, interacting).additivity_residual(X, interacting)
    assert np.max(np.abs(res)) > 0.5


def test_bootstrap_equals_curve_fit_on_each_resample():
    X = _grid(ns=(0, 1, 2, 4, 8, 16, 32), ms=np.linspace(-2, 2, 6))
    y, _ = simulate_curves(X, **TRUTH, n_trials=100, rng=5)
    model = BeliefDynamicsModel(n_starts=5).fit(X, y)
    draws = model.bootstrap(X, y, n_boot=6, rng=7)

    def f(Xt, b, a, gamma, alpha):
        N, m = Xt
        return expit(b + a * m + gamma * np.sign(N) * np.abs(N) ** (1 - alpha))

    gen = np.random.default_rng(7)
    n = X.shape[0]
    for draw in draws:
        idx = gen.integers(0, n, n)
        p, _ = curve_fit(
            f,
            X[idx].T,
            y[idx],
            p0=model.coef_,
            bounds=([-np.inf] * 3 + [0], [np.inf] * 3 + [0.99]),
            xtol=1e-14,
            ftol=1e-14,
            gtol=1e-14,
        )
        np.testing.assert_allclose(draw, p, rtol=1e-4, atol=1e-5)


def test_bootstrap_spread_agrees_with_the_asymptotic_covariance():
    X = _grid()
    y, n = simulate_curves(X, **TRUTH, n_trials=200, rng=8)
    model = BeliefDynamicsModel(loss="binomial", n_starts=5).fit(X, y, sample_weight=n)
    draws = model.bootstrap(X, y, n, n_boot=400, rng=9)
    ratio = draws.std(axis=0) / np.sqrt(np.diag(model.cov_))
    assert np.all((ratio > 0.6) & (ratio < 1.6)), ratio


def test_signed_context_is_evidence_for_the_complement():
    model = BeliefDynamicsModel(evidence="linear", n_starts=3)
    X = np.column_stack([np.arange(-10.0, 11.0), np.zeros(21)])
    model.fit(X, expit(0.3 * X[:, 0]))
    np.testing.assert_allclose(model.predict(-X), 1 - model.predict(X), atol=1e-6)


def test_steering_vector_numpy_and_torch():
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1, 1, (5, 3)), rng.normal(-1, 1, (4, 3))
    np.testing.assert_allclose(steering_vector(pos, neg), pos.mean(0) - neg.mean(0))
    t = steering_vector(torch.as_tensor(pos), torch.as_tensor(neg))
    assert isinstance(t, torch.Tensor)
    np.testing.assert_allclose(t.numpy(), pos.mean(0) - neg.mean(0))
    with pytest.raises(ValueError, match="same width"):
        steering_vector(pos, neg[:, :2])
    with pytest.raises(ValueError, match="acts_pos must be a 2-D"):
        steering_vector(pos[0], neg)


def test_bad_input_is_named_before_any_work():
    X = _grid(ns=(0, 1, 2), ms=(0.0, 1.0))
    y = np.linspace(0.1, 0.9, len(X))
    with pytest.raises(ValueError, match="evidence must be one of"):
        BeliefDynamicsModel(evidence="exp").fit(X, y)
    with pytest.raises(ValueError, match="loss must be one of"):
        BeliefDynamicsModel(loss="l1").fit(X, y)
    with pytest.raises(ValueError, match="n_starts must be an int"):
        BeliefDynamicsModel(n_starts=0).fit(X, y)
    with pytest.raises(ValueError, match="max_alpha"):
        BeliefDynamicsModel(max_alpha=1.0).fit(X, y)
    with pytest.raises(ValueError, match=r"y must lie in \[0, 1\]"):
        BeliefDynamicsModel(loss="binomial").fit(X, y + 1)
    with pytest.raises(ValueError, match="sample_weight must have shape"):
        BeliefDynamicsModel().fit(X, y, sample_weight=np.ones(2))
    model = BeliefDynamicsModel(n_starts=2).fit(X, y)
    with pytest.raises(ValueError, match=r"M must have shape \(n, 1\)"):
        model.phase_boundary_N([0.0, 1.0])
    with pytest.raises(ValueError, match="feature must be an int"):
        model.phase_boundary_m([1.0], feature=1)
    with pytest.raises(ValueError, match="n_boot must be an int"):
        model.bootstrap(X, y, n_boot=0)
    with pytest.raises(ValueError, match="a must have one gain per steering column"):
        simulate_curves(X, b=0.0, a=[1.0, 2.0], gamma=1.0)
