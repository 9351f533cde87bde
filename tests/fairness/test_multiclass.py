"""OptFair multi-class fair classification: closed forms, an exact LP, fairlearn, KKT, contracts."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from rml_fast.fairness.multiclass import (
    InfeasibleError,
    OptFairInProcessing,
    OptFairPostProcessor,
    OptFairReduction,
    disparity,
    exact_fair_lp,
    fairness_frontier,
)

# --- data -----------------------------------------------------------------------------------------


def _binary(n=6000, seed=0):
    """Calibrated binary problem: eta known, y ~ Bernoulli(eta), group shifts the score."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, n)
    eta1 = 1 / (1 + np.exp(-(1.5 * rng.normal(size=n) + 1.0 * a - 0.3)))
    P = np.column_stack([1 - eta1, eta1])
    y = (rng.random(n) < eta1).astype(np.int64)
    return P, y, a


def _multiclass(n=4000, K=3, G=3, seed=0):
    """Gaussian-mixture features with a group shift; true eta of a softmax model."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, G, n)
    X = rng.normal(size=(n, 4)) + 0.8 * a[:, None]
    W = rng.normal(size=(4, K))
    logits = X @ W
    eta = np.exp(logits - logits.max(1, keepdims=True))
    eta /= eta.sum(1, keepdims=True)
    y = (eta.cumsum(1) < rng.random(n)[:, None]).sum(1)
    return X, eta, np.minimum(y, K - 1), a


def _cells(seed=1, n=20, K=3, G=2):
    """A discrete problem: 20 cells with known eta, P(A|cell) and masses."""
    rng = np.random.default_rng(seed)
    return (rng.dirichlet(np.ones(K), size=n), rng.dirichlet(np.ones(G), size=n),
            rng.dirichlet(np.ones(n)))


class _Identity(ClassifierMixin, BaseEstimator):
    """A prefit 'model' whose predict_proba is its input (the base probabilities)."""

    def fit(self, X, y):
        self.classes_ = np.array([0, 1])
        return self

    def predict_proba(self, X):
        return np.asarray(X)

    def predict(self, X):
        return np.asarray(X).argmax(1)


# --- oracles --------------------------------------------------------------------------------------


@pytest.mark.parametrize("solver", ["lbfgs", "fista"])
@pytest.mark.parametrize("constraint", ["dp", "eop", "eo"])
def test_loose_xi_gives_zero_lambda_and_base_argmax(constraint, solver):
    """xi above the base classifier's disparity => lambda* = 0 and predictions = argmax eta."""
    _, eta, y, a = _multiclass(n=1500)
    est = OptFairPostProcessor("passthrough", constraint=constraint, xi=1.0, solver=solver)
    est.fit(eta, y, a)
    assert np.all(est.lambda_ == 0.0)
    np.testing.assert_array_equal(est.predict(eta, a), eta.argmax(1))


def test_dp_matches_fairlearn_threshold_optimizer():
    """Attribute-aware, K=2, DP, tau -> 0, xi = 0: fairlearn's group thresholds, same optimum."""
    from fairlearn.postprocessing import ThresholdOptimizer

    P, y, a = _binary()
    to = ThresholdOptimizer(estimator=_Identity().fit(P, y), constraints="demographic_parity",
                            prefit=True, predict_method="predict_proba")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fairlearn's own warnings are not ours
        to.fit(P, y, sensitive_features=a)
        pmf = to._pmf_predict(P, sensitive_features=a)
    est = OptFairPostProcessor("passthrough", constraint="dp", xi=0.0, tau=1e-3).fit(P, y, a)
    H = est.predict_proba(P, a)
    n = len(y)
    # both are exactly demographic-parity fair on the calibration set
    assert disparity(pmf, y, a) < 1e-6
    assert disparity(H, y, a) < 1e-4
    # same accuracy on the labels, up to label noise; ours optimises the eta-objective
    assert abs(H[np.arange(n), y].mean() - pmf[np.arange(n), y].mean()) < 0.01
    assert (P * H).sum(1).mean() >= (P * pmf).sum(1).mean() - 1e-3
    # and both are deterministic thresholds per group (up to one randomised score)
    assert np.mean(H.max(1) > 0.99) > 0.95


def test_eo_agrees_with_fairlearn_threshold_optimizer():
    """K=2 equalised odds at xi = 0: accuracy and label-based disparity agree with fairlearn."""
    from fairlearn.postprocessing import ThresholdOptimizer

    P, y, a = _binary(seed=3)
    to = ThresholdOptimizer(estimator=_Identity().fit(P, y), constraints="equalized_odds",
                            prefit=True, predict_method="predict_proba")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        to.fit(P, y, sensitive_features=a)
        pmf = to._pmf_predict(P, sensitive_features=a)
    est = OptFairPostProcessor("passthrough", constraint="eo", xi=0.0, tau=1e-3).fit(P, y, a)
    H = est.predict_proba(P, a)
    n = len(y)
    assert abs(H[np.arange(n), y].mean() - pmf[np.arange(n), y].mean()) < 0.015
    # ours constrains the model-based rates exactly; the label-based ones up to sampling noise
    assert np.abs(est.constraint_values_).max() < 1e-4
    assert disparity(H, y, a, "eo") < 0.02
    assert disparity(pmf, y, a, "eo") < 1e-6


@pytest.mark.parametrize("constraint", ["dp", "eop", "eo"])
def test_constraints_hold_and_kkt(constraint):
    """Calibration-set constraints within xi + 1e-4; lambda_c != 0 => constraint c active."""
    _, eta, y, a = _multiclass(n=3000)
    xi = 0.03
    est = OptFairPostProcessor("passthrough", constraint=constraint, xi=xi).fit(eta, y, a)
    g = est.constraint_values_
    assert np.abs(g).max() <= xi + 1e-4
    active = est.lambda_ != 0
    assert active.any()                      # the base classifier violates xi = 0.03
    np.testing.assert_allclose(np.abs(g[active]), xi, atol=1e-4)
    np.testing.assert_array_equal(np.sign(g[active]), np.sign(est.lambda_[active]))
    if constraint == "dp":                   # attribute-aware DP = the empirical disparity of h
        assert disparity(est.predict_proba(eta, a), y, a) <= xi + 1e-4
    assert len(est.constraint_labels_) == g.size


@pytest.mark.parametrize("solver", ["fista", "lbfgs"])
def test_dual_objective_is_monotone(solver):
    """The accepted iterates' dual objective never increases (FISTA with restart; L-BFGS-B)."""
    _, eta, y, a = _multiclass(n=2000, seed=4)
    est = OptFairPostProcessor("passthrough", constraint="eo", xi=0.01, solver=solver,
                               tau=0.01).fit(eta, y, a)
    hist = np.asarray(est.dual_history_)
    assert hist.size > 3
    assert np.all(np.diff(hist) <= 1e-12 * np.abs(hist[:-1]).max())
    assert est.converged_


def test_fista_and_lbfgs_reach_the_same_dual_optimum():
    """Both solvers minimise the same convex dual: equal accuracy and constraint values."""
    _, eta, y, a = _multiclass(n=2000, seed=5)
    hs = [OptFairPostProcessor("passthrough", constraint="dp", xi=0.02, solver=s)
          .fit(eta, y, a).predict_proba(eta, a) for s in ("fista", "lbfgs")]
    assert abs((hs[0] * eta).sum(1).mean() - (hs[1] * eta).sum(1).mean()) < 1e-4


def test_two_cell_closed_form():
    """Two cells, one per group, K=2, DP: accuracy 0.55 + 0.3 min(1, 2 xi) in closed form."""
    eta = np.array([[0.9, 0.1], [0.2, 0.8]])
    p = np.eye(2)
    for xi in (0.0, 0.1, 0.3, 0.6):
        exact = 0.55 + 0.3 * min(1.0, 2 * xi)
        assert exact_fair_lp(eta, p, xi=xi)["accuracy"] == pytest.approx(exact, abs=1e-6)
        est = OptFairPostProcessor("passthrough", xi=xi, tau=1e-4).fit(eta, [0, 1],
                                                                          group_proba=p)
        H = est.predict_proba(eta, group_proba=p)
        assert (H * eta).sum(1).mean() == pytest.approx(exact, abs=1e-3)


@pytest.mark.parametrize("constraint", ["dp", "eop", "eo"])
def test_twenty_cells_match_the_exact_lp(constraint):
    """Discrete 20-cell problem: OptFair-post with the true eta attains the LP accuracy."""
    eta, p, w = _cells()
    y = np.arange(20) % 3
    for xi in (0.0, 0.02, 0.1):
        lp = exact_fair_lp(eta, p, constraint=constraint, xi=xi, sample_weight=w)
        assert lp["violation"] <= xi + 1e-6
        est = OptFairPostProcessor("passthrough", constraint=constraint, xi=xi, tau=1e-3)
        est.fit(eta, y, sample_weight=w, group_proba=p)
        H = est.predict_proba(eta, group_proba=p)
        acc = float(w @ (H * eta).sum(1))
        assert abs(acc - lp["accuracy"]) < 1e-3, (xi, acc, lp["accuracy"])
        assert np.abs(est.constraint_values_).max() <= xi + 1e-4


def test_integer_sample_weights_equal_repeated_rows():
    """Weight 2 on a row is the same empirical dual as the row twice: the same classifier."""
    _, eta, y, a = _multiclass(n=600, seed=12)
    wts = np.random.default_rng(0).integers(1, 3, 600)
    rep = np.repeat(np.arange(600), wts)
    e1 = OptFairPostProcessor("passthrough", constraint="eop", xi=0.01, tau=0.05)
    e2 = OptFairPostProcessor("passthrough", constraint="eop", xi=0.01, tau=0.05)
    H1 = e1.fit(eta, y, a, sample_weight=wts).predict_proba(eta, a)
    H2 = e2.fit(eta[rep], y[rep], a[rep]).predict_proba(eta, a)
    np.testing.assert_allclose(H1, H2, atol=1e-3)
    np.testing.assert_allclose(e1.constraint_values_, e2.constraint_values_, atol=1e-5)


def test_frontier_is_monotone_and_feasible():
    """Accuracy grows with xi, each point is within its xi, xi=1 is the base classifier."""
    _, eta, y, a = _multiclass(n=2000, seed=6)
    xis = [0.0, 0.01, 0.03, 0.1, 1.0]
    fr = fairness_frontier(eta, y, a, xis)
    assert np.all(np.diff(fr["acc"]) >= -2e-3)
    assert np.all(fr["violation"] <= np.asarray(xis) + 1e-4)
    assert fr["acc_argmax"][-1] == pytest.approx(np.mean(eta.argmax(1) == y))


# --- estimator behaviour --------------------------------------------------------------------------


def test_attribute_blind_pipeline():
    """A Pipeline with a group estimator: predict(X) without A, and the true-group DP shrinks."""
    X, _, y, a = _multiclass(n=3000, seed=7)
    pipe = Pipeline([("scale", StandardScaler()),
                     ("optfair", OptFairPostProcessor(group_estimator=LogisticRegression(),
                                                      xi=0.01))])
    pipe.fit(X, y, optfair__sensitive_features=a)
    yhat = pipe.predict(X)
    base = pipe.named_steps["optfair"].estimator_.predict(pipe.named_steps["scale"].transform(X))
    assert disparity(yhat, y, a) < 0.5 * disparity(base, y, a)
    assert np.abs(pipe.named_steps["optfair"].constraint_values_).max() <= 0.01 + 1e-4


def test_randomized_predict_is_seeded_and_follows_h():
    """randomized=True draws labels from h, reproducibly from random_state."""
    _, eta, y, a = _multiclass(n=4000, seed=8)
    est = OptFairPostProcessor("passthrough", xi=0.0, tau=0.2, randomized=True,
                               random_state=3).fit(eta, y, a)
    y1, y2 = est.predict(eta, a), est.predict(eta, a)
    np.testing.assert_array_equal(y1, y2)
    H = est.predict_proba(eta, a)
    freq = np.bincount(y1, minlength=3) / len(y1)
    np.testing.assert_allclose(freq, H.mean(0), atol=0.03)


def test_in_processing_reduces_disparity():
    """The saddle-point model is fairer than the same model trained without constraints."""
    X, _, y, a = _multiclass(n=3000, seed=9)
    plain = OptFairInProcessing(epochs=20, random_state=0).fit(X, y)
    fair = OptFairInProcessing(xi=0.01, epochs=20, random_state=0).fit(X, y, a)
    d_plain, d_fair = disparity(plain.predict_proba(X), y, a), disparity(fair.predict_proba(X), y, a)
    assert d_fair < 0.5 * d_plain
    assert np.abs(fair.constraint_values_).max() < 0.05
    assert plain.score(X, y) > 0.5


def test_in_processing_is_seeded():
    X, _, y, a = _multiclass(n=500, seed=10)
    p1 = OptFairInProcessing(epochs=3, random_state=1).fit(X, y, a).predict_proba(X)
    p2 = OptFairInProcessing(epochs=3, random_state=1).fit(X, y, a).predict_proba(X)
    np.testing.assert_array_equal(p1, p2)


@pytest.mark.parametrize("xi", [0.01, 0.05])
def test_reduction_matches_fairlearn_exponentiated_gradient(xi):
    """K=2 DP: the same learner under fairlearn's ExponentiatedGradient; both meet xi exactly,
    ours is at least as accurate (both are mixtures chosen by an LP over best responses)."""
    from fairlearn.reductions import DemographicParity, ExponentiatedGradient

    rng = np.random.default_rng(0)
    n = 3000
    a = rng.integers(0, 2, n)
    X = np.column_stack([rng.normal(size=n) + a, rng.normal(size=n)])
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0.5).astype(int)
    H = OptFairReduction(xi=xi, max_iter=40).fit(X, y, a).predict_proba(X)
    eg = ExponentiatedGradient(LogisticRegression(max_iter=1000),
                               DemographicParity(difference_bound=xi))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eg.fit(X, y, sensitive_features=a)
        pmf = eg._pmf_predict(X)
    # fairlearn's bound is on max_a |E[h|a] - E[h]| for class 1: for K=2 our DP is the same
    assert disparity(H, y, a) <= xi + 1e-6
    assert disparity(pmf, y, a) <= xi + 1e-6
    assert H[np.arange(n), y].mean() >= pmf[np.arange(n), y].mean() - 0.01


@pytest.mark.parametrize("constraint", ["dp", "eo"])
def test_reduction_multiclass_meets_the_constraints(constraint):
    """K=3, G=3: the mixture meets its label-based constraints and beats the constant rule."""
    X, _, y, a = _multiclass(n=2000, seed=11)
    red = OptFairReduction(constraint=constraint, xi=0.03, max_iter=15).fit(X, y, a)
    H = red.predict_proba(X)
    assert np.abs(red.constraint_values_).max() <= 0.03 + 1e-6
    assert disparity(H, y, a, constraint) <= 0.03 + 1e-6
    assert H[np.arange(len(y)), y].mean() > np.bincount(y).max() / len(y)
    np.testing.assert_allclose(red.weights_.sum(), 1.0)


# --- bad input ------------------------------------------------------------------------------------


def test_bad_input_raises_clear_errors():
    _, eta, y, a = _multiclass(n=300)
    with pytest.raises(InfeasibleError, match="xi"):
        OptFairPostProcessor("passthrough", xi=-0.1).fit(eta, y, a)
    with pytest.raises(InfeasibleError, match="infeasible"):
        exact_fair_lp(eta, np.eye(3)[a], xi=-1e-3)
    with pytest.raises(InfeasibleError):
        OptFairInProcessing(xi=-1.0).fit(eta, y, a)
    with pytest.raises(ValueError, match="one class"):
        OptFairPostProcessor("passthrough").fit(eta, np.zeros(300, int), a)
    with pytest.raises(ValueError, match="group"):
        OptFairPostProcessor("passthrough").fit(eta, y, np.zeros(300))
    with pytest.raises(ValueError, match="constraint"):
        OptFairPostProcessor("passthrough", constraint="parity").fit(eta, y, a)
    with pytest.raises(ValueError, match="probability"):
        OptFairPostProcessor("passthrough").fit(eta * 2, y, a)
    est = OptFairPostProcessor("passthrough").fit(eta, y, a)
    with pytest.raises(ValueError, match="sensitive_features"):
        est.predict(eta)
    with pytest.raises(ValueError, match="not seen"):
        est.predict(eta, a + 7)
    with pytest.raises(ValueError, match="group"):
        disparity(y, y, np.ones(300))


def test_inputs_are_not_mutated():
    _, eta, y, a = _multiclass(n=300)
    copies = eta.copy(), y.copy(), a.copy()
    OptFairPostProcessor("passthrough", constraint="eo").fit(eta, y, a).predict(eta, a)
    for before, after in zip(copies, (eta, y, a), strict=True):
        np.testing.assert_array_equal(before, after)
