"""Robust strategic classification with decision-dependent costs (spec section 4.4 oracles).

* SOCP optimality: the Lagrange dual objective re-derived from cvxpy's dual values equals the
  primal objective recomputed from ``(w, b)`` (duality gap ~ 0), duals feasible, KKT stationarity.
* ``kappa_lo == kappa_hi`` -> the nominal strategic classifier (an independent cvxpy formulation).
* ``gamma = 0`` -> stages decouple and equal single-stage robust solutions.
* 1-D: the SOCP optimum equals a brute-force grid over ``(w, b)``; with 0-1 loss and best-responding
  agents, the optimal threshold is the non-strategic one shifted by ``1/kappa``.
* ``param_search`` is at least as good as a finer brute-force grid over ``g`` (solved here with
  an independent cvxpy model) and as ``alternating``.
* FICO: the robust classifier is gamed less than a non-strategic one under the worst-case cost.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from rml_fast.datasets import load_binarized
from rml_fast.strategic.decision_dependent import (
    InfeasibleProgramError,
    RobustStrategicClassifier,
    SolverFailedError,
    TwoStageDDURobustClassifier,
    _check_status,
    robust_strategic_objective,
)
from rml_fast.strategic.simulator import StrategicSimulator


def _data(seed=0, n=80, d=3, shift=1.0):
    rng = np.random.default_rng(seed)
    X = np.r_[rng.normal(-shift, 1, (n // 2, d)), rng.normal(shift, 1, (n // 2, d))]
    y = np.r_[np.zeros(n // 2, int), np.ones(n // 2, int)]
    return X, y


def _nominal_cvxpy(X, y_pm, kappa, C, cost_norm):
    """The nominal strategic hinge SVM written directly (norm atoms, no epigraph)."""
    w, b = cp.Variable(X.shape[1]), cp.Variable()
    s = X @ w + b
    neg, pos = y_pm < 0, y_pm > 0
    dual = cp.norm(w, 2) if cost_norm == 2 else cp.norm(w, "inf")
    loss = (cp.sum(cp.pos(1 + s[np.flatnonzero(neg)] + dual / kappa))
            + cp.sum(cp.pos(1 - s[np.flatnonzero(pos)]))) / X.shape[0]
    prob = cp.Problem(cp.Minimize(loss + 0.5 * C * cp.sum_squares(w)))
    prob.solve(solver="CLARABEL")
    return w.value, float(b.value), prob.value


@pytest.mark.parametrize(("cost_norm", "weights"),
                         [(2, None), (1, None), ("weighted-l1", np.array([1.0, 3.0, np.inf]))])
def test_duality_gap_rederived_from_dual_values(cost_norm, weights):
    X, y = _data(1)
    C, k = 0.5, 1.5
    clf = RobustStrategicClassifier(cost_norm=cost_norm, cost_weights=weights, kappa_lo=k,
                                    kappa_hi=3.0, C=C).fit(X, y)
    cert = clf.certificate_
    w, b = clf.coef_[0], clf.intercept_[0]
    y_pm = np.where(y == 1, 1.0, -1.0)
    n = len(y)
    # primal, recomputed from (w, b) only
    s = X @ w + b
    if cost_norm == 2:
        dual_norm = np.linalg.norm(w)
    elif cost_norm == 1:
        dual_norm = np.abs(w).max()
    else:
        dual_norm = np.max(np.abs(w[:2]) / weights[:2])
    P = np.mean(np.where(y_pm < 0, np.maximum(0, 1 + s + dual_norm / k),
                         np.maximum(0, 1 - s))) + 0.5 * C * w @ w
    # dual: D = sum(alpha) - ||X^T(y alpha) + u||^2 / (2C), the Lagrange dual of the SOCP
    alpha, u = cert.alpha, cert.u
    v = X.T @ (y_pm * alpha) + u
    D = alpha.sum() - v @ v / (2 * C)
    assert abs(P - cert.primal) < 1e-10
    assert abs(P - D) < 1e-6 * max(1.0, abs(P))
    assert abs(cert.gap) < 1e-6
    # dual feasibility and KKT stationarity
    assert np.all(alpha >= -1e-9) and np.all(alpha <= 1 / n + 1e-8)
    assert abs(y_pm @ alpha) < 1e-7
    reach = alpha[y_pm < 0].sum() / k
    if cost_norm == 2:
        assert np.linalg.norm(u) <= reach + 1e-7
    elif cost_norm == 1:
        assert np.abs(u).sum() <= reach + 1e-7
    else:
        assert np.sum(weights[:2] * np.abs(u[:2])) <= reach + 1e-7 and u[2] == 0.0
    np.testing.assert_allclose(w, v / C, atol=1e-6)
    # complementary slackness: points strictly inside the margin carry no multiplier
    margin = np.where(y_pm < 0, 1 + s + dual_norm / k, 1 - s)
    assert np.all(alpha[margin < -1e-3] < 1e-6)


@pytest.mark.parametrize("cost_norm", [2, 1])
def test_kappa_equal_is_nominal_strategic(cost_norm):
    X, y = _data(2)
    y_pm = np.where(y == 1, 1.0, -1.0)
    k = 2.0
    w_ref, b_ref, val = _nominal_cvxpy(X, y_pm, k, 1.0, cost_norm)
    nominal = RobustStrategicClassifier(cost_norm=cost_norm, kappa_lo=k, kappa_hi=k).fit(X, y)
    np.testing.assert_allclose(nominal.coef_[0], w_ref, atol=1e-5)
    assert nominal.intercept_[0] == pytest.approx(b_ref, abs=1e-5)
    assert nominal.objective_ == pytest.approx(val, abs=1e-7)
    # the robust fit over [k, 4k] is the nominal fit at its worst case k
    robust = RobustStrategicClassifier(cost_norm=cost_norm, kappa_lo=k, kappa_hi=4 * k).fit(X, y)
    np.testing.assert_allclose(robust.coef_, nominal.coef_, atol=1e-6)
    # guarding against cheaper manipulation shrinks the reach ||w||_* / kappa
    cheap = RobustStrategicClassifier(cost_norm=cost_norm, kappa_lo=k / 4, kappa_hi=k).fit(X, y)
    assert (np.linalg.norm(cheap.coef_) / (k / 4)) < np.linalg.norm(nominal.coef_) / k * 4


@pytest.mark.parametrize("method", ["param_search", "alternating"])
def test_gamma_zero_decouples_stages(method):
    X1, y1 = _data(3)
    X2, y2 = _data(4, n=60)
    single1 = RobustStrategicClassifier(kappa_lo=1.5, kappa_hi=2.0).fit(X1, y1)
    single2 = RobustStrategicClassifier(kappa_lo=1.5, kappa_hi=2.0).fit(X2, y2)
    two = TwoStageDDURobustClassifier(kappa_lo=1.5, kappa_hi=2.0, gamma=0.0, method=method,
                                      n_grid=5).fit(X1, y1, X2, y2)
    (w1, b1), (w2, b2) = two.coef_stage_
    assert b1 == pytest.approx(single1.intercept_[0], abs=1e-5)
    np.testing.assert_allclose(w1, single1.coef_[0], atol=1e-5)
    np.testing.assert_allclose(w2, single2.coef_[0], atol=1e-5)
    assert b2 == pytest.approx(single2.intercept_[0], abs=1e-5)
    assert two.kappa_stage_.tolist() == [1.5, 1.5]
    assert two.objective_ == pytest.approx(single1.objective_ + single2.objective_, abs=1e-6)


def test_one_dimensional_socp_equals_brute_force_grid():
    rng = np.random.default_rng(5)
    x = np.r_[rng.normal(-1, 1, 30), rng.normal(1.5, 1, 30)]
    y = np.r_[-np.ones(30), np.ones(30)]
    k, C = 2.0, 0.3
    clf = RobustStrategicClassifier(kappa_lo=k, kappa_hi=3.0, C=C).fit(x[:, None], y)
    ws = np.linspace(-3, 3, 301)
    bs = np.linspace(-4, 4, 401)
    W, B = np.meshgrid(ws, bs, indexing="ij")
    S = W[..., None] * x + B[..., None]
    neg = y < 0
    L = np.where(neg, np.maximum(0, 1 + S + np.abs(W)[..., None] / k), np.maximum(0, 1 - S))
    obj = L.mean(axis=-1) + 0.5 * C * W**2
    i, j = np.unravel_index(np.argmin(obj), obj.shape)
    assert clf.intercept_[0] == pytest.approx(bs[j], abs=0.1)
    assert clf.objective_ <= obj.min() + 1e-7  # the SOCP is at least as good as every grid point
    assert clf.objective_ >= obj.min() - 0.02  # and the grid gets close (step 0.02)
    assert clf.coef_[0, 0] == pytest.approx(ws[i], abs=0.06)
    assert robust_strategic_objective(clf.coef_[0], clf.intercept_[0], x[:, None], y, k, C) \
        == pytest.approx(clf.objective_)


def test_one_dimensional_threshold_shifts_by_one_over_kappa():
    """0-1 loss, agents best-respond: optimal threshold = non-strategic optimum + 1/kappa."""
    rng = np.random.default_rng(6)
    x = np.r_[rng.normal(0, 1, 80), rng.normal(1.2, 1, 80)]
    y = np.r_[np.zeros(80, int), np.ones(80, int)]
    X = x[:, None]
    k = 2.5  # 1/k = 0.4, a multiple of the grid step
    h = 0.02
    ts = np.round(np.arange(-150, 201) * h, 10)

    class Thr:
        classes_ = np.array([0, 1])

        def __init__(self, t):
            self.coef_, self.intercept_ = np.array([[1.0]]), np.array([-t])

        def predict(self, Z):
            return (Z[:, 0] - (-self.intercept_[0]) > 0).astype(int)

    acc0 = np.array([np.mean((x > t) == y) for t in ts])
    sim = StrategicSimulator(kappa=k)
    acc_s = np.array([sim.run(Thr(t), X, y).accuracy for t in ts])
    t0 = ts[acc0 == acc0.max()]
    ts_star = ts[acc_s == acc_s.max()]
    assert acc_s.max() == pytest.approx(acc0.max())
    np.testing.assert_allclose(np.sort(ts_star), np.sort(t0[t0 + 1 / k <= ts[-1]] + 1 / k),
                               atol=1e-9)


def _independent_two_stage_value(X1, y1, X2, y2, g, kl, gam, C):
    """min L1 s.t. ||w1||_1 <= g, then stage 2 at kappa_lo - gamma * g(w1), with cvxpy atoms."""
    w, b = cp.Variable(X1.shape[1]), cp.Variable()
    s = X1 @ w + b
    neg = y1 < 0
    loss = (cp.sum(cp.pos(1 + s[np.flatnonzero(neg)] + cp.norm(w, 2) / kl))
            + cp.sum(cp.pos(1 - s[np.flatnonzero(~neg)]))) / X1.shape[0]
    p1 = cp.Problem(cp.Minimize(loss + 0.5 * C * cp.sum_squares(w)), [cp.norm1(w) <= g])
    p1.solve(solver="CLARABEL")
    g1 = min(np.abs(w.value).sum(), g)
    _, _, v2 = _nominal_cvxpy(X2, y2, kl - gam * g1, C, 2)
    return p1.value + v2


def test_param_search_beats_finer_brute_force_grid_and_alternating():
    X, y = _data(7, n=60, shift=0.8)
    kl, gam, C = 1.0, 0.6, 0.5
    ps = TwoStageDDURobustClassifier(kappa_lo=kl, kappa_hi=2.0, gamma=gam, C=C, n_grid=11,
                                     method="param_search").fit(X, y)
    alt = TwoStageDDURobustClassifier(kappa_lo=kl, kappa_hi=2.0, gamma=gam, C=C,
                                      method="alternating").fit(X, y)
    single = RobustStrategicClassifier(kappa_lo=kl, C=C).fit(X, y)
    g_free = np.abs(single.coef_[0]).sum()
    g_hi = min(g_free, (kl - 0.1 * kl) / gam)
    y_pm = np.where(y == 1, 1.0, -1.0)
    fine = np.linspace(0, g_hi, 41)
    vals = [_independent_two_stage_value(X, y_pm, X, y_pm, g, kl, gam, C) for g in fine]
    assert ps.objective_ <= min(vals) + 1e-5
    assert ps.objective_ <= alt.objective_ + 1e-5
    # the decision dependence makes the stage-1 rule less manipulable than the myopic one
    assert ps.g_ <= g_free + 1e-8 and ps.g_ < 0.95 * g_free
    assert ps.kappa_stage_[1] == pytest.approx(kl - gam * ps.g_)
    # reported stage objectives add up and are certified
    assert ps.objective_ == pytest.approx(ps.stage_objectives_.sum())
    assert all(abs(c.gap) < 1e-6 for c in ps.certificates_)
    # alternating never increases its objective
    assert np.all(np.diff(alt.search_path_[:, 1]) <= 1e-9)


def test_labels_any_two_classes_same_rule():
    X, y01 = _data(8, n=40)
    ypm = np.where(y01 == 1, 1, -1)
    ystr = np.where(y01 == 1, "grant", "deny")  # "grant" > "deny": the accepted class
    a = RobustStrategicClassifier().fit(X, y01)
    b = RobustStrategicClassifier().fit(X, ypm)
    c = RobustStrategicClassifier().fit(X, ystr)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-8)
    np.testing.assert_allclose(a.coef_, c.coef_, atol=1e-8)
    assert set(c.predict(X)) <= {"grant", "deny"}


def test_bad_input_and_infeasible_programs_raise():
    X, y = _data(9, n=20)
    with pytest.raises(ValueError, match="one class"):
        RobustStrategicClassifier().fit(X, np.ones(20))
    with pytest.raises(ValueError, match="one class"):
        TwoStageDDURobustClassifier().fit(X, np.zeros(20))
    with pytest.raises(ValueError, match="Only binary"):
        RobustStrategicClassifier().fit(X, np.arange(20) % 3)
    with pytest.raises(ValueError, match="kappa_lo must be <= kappa_hi"):
        RobustStrategicClassifier(kappa_lo=3.0, kappa_hi=1.0).fit(X, y)
    with pytest.raises(ValueError, match="cost_weights"):
        RobustStrategicClassifier(cost_norm="weighted-l1").fit(X, y)
    with pytest.raises(ValueError, match="method"):
        TwoStageDDURobustClassifier(method="nope").fit(X, y)
    with pytest.raises(ValueError, match="X2 and y2"):
        TwoStageDDURobustClassifier().fit(X, y, X2=X)
    with pytest.raises(InfeasibleProgramError, match="coef_bounds are infeasible"):
        RobustStrategicClassifier(coef_bounds=(1.0, 0.0)).fit(X, y)
    with pytest.raises(InfeasibleProgramError, match="kappa_floor"):
        TwoStageDDURobustClassifier(kappa_floor=2.0, kappa_lo=1.0).fit(X, y)
    # w >= 1 on 3 features: g(w_1) = ||w_1||_1 >= 3, gamma * 3 > kappa_lo - floor -> infeasible,
    # detected by the solver, reported for both methods (never a solution)
    for method in ("param_search", "alternating"):
        est = TwoStageDDURobustClassifier(gamma=0.5, coef_bounds=(1.0, np.inf), method=method)
        with pytest.raises(InfeasibleProgramError, match="infeasible"):
            est.fit(X, y)
        assert not hasattr(est, "coef_")
    with pytest.raises(SolverFailedError, match="unbounded"):
        _check_status("unbounded", "test program")
    with pytest.raises(InfeasibleProgramError, match="infeasible"):
        _check_status("infeasible", "test program")


def test_fico_robust_is_gamed_less_than_non_strategic():
    X, y, _ = load_binarized("fico-binary")
    rng = np.random.default_rng(0)
    idx = rng.choice(len(y), 1500, replace=False)
    Xs = StandardScaler().fit_transform(X[idx].astype(float))
    ys = y[idx]
    k_lo = 2.0
    robust = RobustStrategicClassifier(kappa_lo=k_lo, kappa_hi=4.0, C=0.1).fit(Xs, ys)
    naive = LogisticRegression(C=1.0).fit(Xs, ys)
    sim = StrategicSimulator(kappa=k_lo)
    r_rob, r_nai = sim.run(robust, Xs, ys), sim.run(naive, Xs, ys)
    assert r_rob.gaming_rate <= r_nai.gaming_rate
    assert r_rob.accuracy >= r_nai.accuracy - 0.02
    assert abs(robust.certificate_.gap) < 1e-5
    # two stages with decision-dependent costs vs. deploying the myopic robust rule twice
    gam = 0.4
    two = TwoStageDDURobustClassifier(kappa_lo=k_lo, kappa_hi=4.0, gamma=gam, C=0.1,
                                      method="alternating").fit(Xs, ys)
    k2_base = k_lo - gam * np.abs(robust.coef_[0]).sum()
    assert two.kappa_stage_[1] >= k2_base - 1e-9  # it protects stage-2 costs
    assert k2_base > 0
    base2 = StrategicSimulator(kappa=k2_base).run(robust, Xs, ys)
    dd2 = StrategicSimulator(kappa=two.kappa_stage_[1]).run(two.stage_rule(2), Xs, ys)
    assert dd2.gaming_rate <= base2.gaming_rate
