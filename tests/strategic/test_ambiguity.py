"""Oracles for rml_fast.strategic.ambiguity (spec tabular_decisions.md section 5.4).

* projections: interval closed form, finite-H active set and ball bisection equal cvxpy's
  QP/SOCP solution (finite: 1e-6; ball: KKT conditions exactly plus cvxpy at its own accuracy);
* best responses equal a brute-force search over a fine grid of destinations (2-D) and land on
  the boundary of R_H at cost < 1;
* delta = 0 is standard strategic classification (Hardt et al.): the fitted accuracy equals a
  brute-force search over every threshold in 1-D;
* the numba threshold sweep equals a plain double loop;
* optimal accuracy is weakly monotone in delta: flat (exactly) for interval ambiguity, and the
  trained finite / ball learners are never below full disclosure on synthetic and real data;
* bad input (one class, empty R_H) raises errors that name it.
"""

from __future__ import annotations

import numpy as np
import pytest

from rml_fast.strategic import _ambiguity_numba as nb
from rml_fast.strategic.ambiguity import (
    AmbiguousStrategicClassifier,
    BallSet,
    FiniteSet,
    InfeasibleRevealedSetError,
    IntervalSet,
    exact_interval_sweep,
    maxmin_best_response,
    maxmin_response,
)
from rml_fast.strategic.ambiguity import _project as project


def _random_finite(rng, K, d):
    W = rng.normal(size=(K, d))
    b = rng.normal(size=K) * 0.5
    return FiniteSet(W, b)


# --- projections ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_finite_projection_equals_cvxpy(seed):
    rng = np.random.default_rng(seed)
    K, d = [(2, 2), (3, 2), (3, 4), (5, 3)][seed]
    H = _random_finite(rng, K, d)
    X = rng.normal(size=(30, d)) * 2
    X = X[~H.in_region(X)]
    Z_exact = project(X, H, "auto", False)
    Z_ref = project(X, H, "cvxpy", False)
    np.testing.assert_allclose(Z_exact, Z_ref, atol=1e-6)
    # on the boundary: feasible, and at least one constraint tight
    m = Z_exact @ H.W.T - H.b
    assert m.min() > -1e-9 and np.abs(m.min(axis=1)).max() < 1e-9


def test_finite_projection_many_members_uses_the_qp():
    rng = np.random.default_rng(5)
    W = rng.normal(size=(10, 3))
    H = FiniteSet(W, W @ np.array([0.5, 0.5, 0.5]) - rng.uniform(0, 0.5, size=10))  # non-empty
    X = rng.normal(size=(12, 3)) * 3
    Xa, ma = maxmin_best_response(X, H)
    Xc, mc = maxmin_best_response(X, H, method="cvxpy")
    np.testing.assert_array_equal(ma, mc)
    np.testing.assert_allclose(Xa, Xc, atol=1e-9)


def test_interval_projection_closed_form():
    rng = np.random.default_rng(1)
    w = np.array([3.0, -4.0])  # ||w|| = 5
    H = IntervalSet(w, -1.0, 2.0)
    X = rng.normal(size=(200, 2))
    Xn, moved = maxmin_best_response(X, H, alpha=0.5)  # radius 2
    dist = (2.0 - X @ w) / 5.0
    np.testing.assert_array_equal(moved, (dist > 0) & (dist < 2.0))
    np.testing.assert_allclose(Xn[moved], X[moved] + dist[moved, None] * w / 5.0, atol=1e-8)
    Zc = project(X[moved], H, "cvxpy", False)
    np.testing.assert_allclose(Xn[moved], Zc, atol=1e-6)


def test_ball_projection_kkt_and_cvxpy():
    rng = np.random.default_rng(2)
    H = BallSet(np.array([1.0, 0.5, 0.0]), 0.3, 0.4)
    X = rng.normal(size=(40, 3)) * 1.5
    X = X[~H.in_region(X)]
    Z = project(X, H, "auto", False)
    g = H.radius * np.linalg.norm(Z, axis=1) - Z @ H.w0 + H.b0
    np.testing.assert_allclose(g, 0.0, atol=1e-10)  # on the boundary
    # KKT: x - z = lam * grad g(z), lam >= 0, grad g = rho z/||z|| - w0
    grad = H.radius * Z / np.linalg.norm(Z, axis=1, keepdims=True) - H.w0
    diff = X - Z
    lam = np.sum(diff * grad, axis=1) / np.sum(grad * grad, axis=1)
    assert lam.min() > 0
    np.testing.assert_allclose(diff, lam[:, None] * grad, atol=1e-8)
    Zc = project(X, H, "cvxpy", False)  # CLARABEL at tolerances 1e-10
    np.testing.assert_allclose(Z, Zc, atol=1e-6)
    assert np.all(np.linalg.norm(X - Z, axis=1) <= np.linalg.norm(X - Zc, axis=1) + 1e-9)


# --- best responses -------------------------------------------------------------------------------


def _grid_best_utility(x, H, alpha, grid):
    """max over grid points g (and staying at x) of [1{g in R_H} - alpha/2 ||g - x||^2]."""
    inside = H.in_region(grid)
    cost = 0.5 * alpha * np.sum((grid - x) ** 2, axis=1)
    u_grid = np.where(inside, 1.0 - cost, -cost).max()
    u_stay = 1.0 if H.in_region(x[None, :])[0] else 0.0
    return max(u_grid, u_stay), grid[np.argmax(np.where(inside, 1.0 - cost, -np.inf))]


@pytest.mark.parametrize("which", ["interval", "finite", "ball"])
def test_best_response_equals_grid_brute_force(which):
    rng = np.random.default_rng(3)
    H = {"interval": IntervalSet(np.array([1.0, 1.0]), 0.0, 0.6),
         "finite": FiniteSet(np.array([[1.0, 0.2], [0.3, 1.0]]), np.array([0.4, -0.1])),
         "ball": BallSet(np.array([1.0, 0.7]), 0.2, 0.3)}[which]
    alpha = 2.0
    h = 0.01
    ax = np.arange(-3.0, 3.0 + h / 2, h)
    grid = np.stack(np.meshgrid(ax, ax), axis=-1).reshape(-1, 2)
    X = rng.uniform(-2, 2, size=(25, 2))
    Xn, moved = maxmin_best_response(X, H, alpha)
    for i in range(X.shape[0]):
        u_ours = (1.0 - 0.5 * alpha * np.sum((Xn[i] - X[i]) ** 2)) if moved[i] else \
            float(H.in_region(X[i][None, :])[0])
        u_grid, g_best = _grid_best_utility(X[i], H, alpha, grid)
        # the grid is a subset of the choices: ours is at least as good, and at most one grid
        # cell (cost gradient <= alpha * 2 * sqrt(2) h) better than the grid's best
        assert u_ours >= u_grid - 1e-9
        assert u_ours <= u_grid + alpha * 2 * np.sqrt(2) * h + 1e-9
        if moved[i] and u_ours > 0.05:  # unique maximiser away from the tie: same point
            assert np.linalg.norm(g_best - Xn[i]) < 0.1


@pytest.mark.parametrize("which", ["interval", "finite", "ball"])
def test_movers_land_on_boundary_with_cost_below_one(which):
    rng = np.random.default_rng(4)
    d = 4
    H = {"interval": IntervalSet(rng.normal(size=d), -0.3, 0.2),
         "finite": _random_finite(rng, 3, d),
         "ball": BallSet(rng.normal(size=d), 0.1, 0.3)}[which]
    alpha = 1.5
    X = rng.normal(size=(400, d))
    Xn, moved = maxmin_best_response(X, H, alpha)
    assert 0 < moved.sum() < X.shape[0]
    cost = 0.5 * alpha * np.sum((Xn - X) ** 2, axis=1)
    assert np.all(cost[moved] < 1.0)
    assert np.all(H.in_region(Xn[moved]))  # every member accepts a mover, in floating point
    # ... and it sits on the boundary: pulling it back a little leaves R_H
    back = Xn[moved] - 1e-6 * (Xn[moved] - X[moved]) / np.linalg.norm(
        Xn[moved] - X[moved], axis=1, keepdims=True)
    assert not np.any(H.in_region(back))
    # non-movers are inside R_H already or cannot reach it at cost < 1
    stay = ~moved
    Zs = project(X[stay], H, "auto", False)
    reach = 0.5 * alpha * np.sum((Zs - X[stay]) ** 2, axis=1)
    assert np.all(H.in_region(X[stay]) | (reach >= 1.0 - 1e-9))
    np.testing.assert_array_equal(Xn[stay], X[stay])
    # responses are idempotent (a responded population does not move again)
    Xnn, moved2 = maxmin_best_response(Xn, H, alpha)
    assert not moved2.any() and np.array_equal(Xnn, Xn)


def test_full_disclosure_equals_hardt_response():
    # one revealed classifier: move to the hyperplane iff within sqrt(2/alpha)
    rng = np.random.default_rng(6)
    w, b = np.array([0.6, 0.8]), 0.5
    X = rng.normal(size=(100, 2))
    Xn, moved = maxmin_best_response(X, [(w, b)], alpha=8.0)  # radius 0.5
    gap = b - X @ w
    np.testing.assert_array_equal(moved, (gap > 0) & (gap < 0.5))
    np.testing.assert_allclose(Xn[moved] @ w, b, atol=1e-8)


# --- the sweep ------------------------------------------------------------------------------------


def _plain_best(s, y, lo, hi):
    cands = [lo, hi] + [v for v in np.unique(s) if lo <= v <= hi]  # hi = inf: reject everyone
    best = -1
    for t in cands:
        c = 0
        for i in range(s.shape[0]):
            c += int((s[i] >= t) == (y[i] == 1))
        best = max(best, c)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_numba_sweep_equals_plain_loop(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    s = np.round(rng.normal(size=n), 1)  # ties
    y = rng.integers(0, 2, size=n).astype(np.int64)
    for lo, hi in [(-np.inf, np.inf), (-0.3, 0.4), (0.0, 0.0), (1.0, 5.0), (-5.0, -2.0),
                   (0.5, np.inf)]:
        t, correct = nb.best_threshold(s, y, lo, hi)
        assert correct == _plain_best(s, y, lo, hi)
        assert lo <= t <= hi
        assert int(np.sum((s >= t) == (y == 1))) == correct
    # mostly negatives with the positives at the bottom: rejecting everyone is optimal
    s = np.array([-3.0, -2.0, 0.0, 1.0, 2.0, 3.0])
    y = np.array([1, 0, 0, 0, 0, 0], dtype=np.int64)
    t, correct = nb.best_threshold(s, y, -np.inf, np.inf)
    assert correct == 5 and t > 3.0


def test_exact_sweep_flat_in_delta_and_matches_simulated_accuracy():
    rng = np.random.default_rng(7)
    s = rng.normal(size=300)
    y = (s + rng.normal(scale=0.8, size=300) > 0.3).astype(int)
    accs = []
    for delta in (0.0, 0.3, 1.0, 3.0):
        b_lo, b_hi, b_star, acc = exact_interval_sweep(s, y, radius=0.7, delta=delta)
        assert b_lo <= b_star <= b_hi and np.isclose(b_hi - b_lo, delta)
        Xn, _ = maxmin_best_response(s[:, None], IntervalSet(np.ones(1), b_lo, b_hi),
                                     alpha=2 / 0.7**2)
        assert acc == np.mean((Xn[:, 0] >= b_star) == (y == 1))
        accs.append(acc)
    # weakly monotone in delta (here flat: every accepted set is a threshold set)
    assert accs == [accs[0]] * 4
    # ... and equal to the best non-strategic threshold accuracy
    assert accs[0] * 300 == _plain_best(s, y, -np.inf, np.inf)


# --- the learner ----------------------------------------------------------------------------------


def _hardt_brute_force_1d(x, y, r):
    """max over thresholds b of accuracy after Hardt responses (x moves to b iff b-r < x < b)."""
    best = 0.0
    cands = np.concatenate([x, x + r, x + r - 1e-7, x + r + 1e-7, [x.min() - 10, x.max() + 10]])
    for b in cands:
        xn = np.where((x < b) & (x > b - r), b, x)
        best = max(best, float(np.mean((xn >= b) == (y == 1))))
    return best


@pytest.mark.parametrize("ambiguity", ["interval", "finite", "ball"])
def test_delta_zero_is_hardt_strategic_classification(ambiguity):
    rng = np.random.default_rng(8)
    x = rng.normal(size=120)
    y = (x + rng.normal(scale=1.0, size=120) > 0).astype(int)
    clf = AmbiguousStrategicClassifier(ambiguity=ambiguity, delta=0.0, alpha=2.0, epochs=20,
                                       random_state=0).fit(x[:, None], y)
    assert clf.realized_[0][0] == pytest.approx(1.0)  # the class-mean direction in 1-D
    assert clf.train_accuracy_ == pytest.approx(_hardt_brute_force_1d(x, y, 1.0), abs=1e-12)
    assert clf.score(x[:, None], y) == pytest.approx(clf.train_accuracy_)


def _wedge(n, rng):
    X = rng.uniform(-2.5, 2.5, size=(n, 2))
    y = ((X[:, 0] > 0) & (X[:, 1] > 0)).astype(int)
    return X, y


def test_ambiguity_weakly_increases_accuracy_synthetic():
    rng = np.random.default_rng(9)
    X, y = _wedge(400, rng)
    accs = {}
    for delta in (0.0, 1.0):
        clf = AmbiguousStrategicClassifier(ambiguity="finite", delta=delta, K=2, epochs=150,
                                           random_state=0).fit(X, y)
        accs[delta] = clf.train_accuracy_
        assert clf.revealed_set_.contains(*clf.realized_)
    # a quadrant is an intersection of two halfspaces: two revealed members carve it out, one
    # halfspace (full disclosure) cannot (measured: 0.9425 vs 0.92)
    assert accs[1.0] > accs[0.0] + 0.015


@pytest.fixture(scope="module")
def cancer():
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


@pytest.mark.parametrize("ambiguity", ["interval", "finite", "ball"])
def test_ambiguity_weakly_increases_accuracy_real_data(cancer, ambiguity):
    X, y = cancer
    acc = {}
    for delta in (0.0, 0.5, 1.0):
        clf = AmbiguousStrategicClassifier(ambiguity=ambiguity, delta=delta, epochs=100,
                                           random_state=0).fit(X, y)
        acc[delta] = clf.train_accuracy_
        assert acc[delta] >= clf.full_disclosure_accuracy_
        assert clf.revealed_set_.contains(*clf.realized_)
        # the accuracy reported is the accuracy of h* on recomputed max-min responses
        Xr, _ = maxmin_best_response(X, clf.revealed_set_, clf.alpha)
        w, b = clf.realized_
        assert acc[delta] == np.mean((Xr @ w - b >= 0) == (y == 1))
        # delta = 0 is full disclosure: the exact Hardt optimum for the learned direction
        s = X @ w / np.linalg.norm(w)
        if delta == 0.0:
            assert acc[0.0] == exact_interval_sweep(s, y, radius=1.0)[3]
    assert acc[0.5] >= acc[0.0] and acc[1.0] >= acc[0.0]
    if ambiguity == "interval":  # flat: interval ambiguity cannot help for a fixed direction
        assert acc[0.5] == acc[1.0] == acc[0.0]
    elif ambiguity == "finite":  # measured 0.9842 -> 0.9965 (seed 0)
        assert max(acc[0.5], acc[1.0]) > acc[0.0]


def test_predict_strategic_and_non_strategic_agree_on_responses(cancer):
    X, y = cancer
    clf = AmbiguousStrategicClassifier(ambiguity="finite", delta=0.5, epochs=30,
                                       random_state=1).fit(X, y)
    Xn, moved = clf.best_response(X)
    assert moved.any()
    np.testing.assert_array_equal(clf.predict(X), clf.predict(Xn, strategic=False))
    np.testing.assert_array_equal(clf.predict(Xn), clf.predict(Xn, strategic=False))
    # reproducible from the seed
    clf2 = AmbiguousStrategicClassifier(ambiguity="finite", delta=0.5, epochs=30,
                                        random_state=1).fit(X, y)
    np.testing.assert_array_equal(clf.revealed_set_.W, clf2.revealed_set_.W)


def test_maxmin_response_callable_uses_the_revealed_set(cancer):
    X, y = cancer
    clf = AmbiguousStrategicClassifier(ambiguity="ball", delta=0.5, epochs=20).fit(X, y)
    br = maxmin_response()
    Xn, moved, cost = br(X, clf)
    Xr, mr = clf.best_response(X)
    np.testing.assert_array_equal(Xn, Xr)
    np.testing.assert_array_equal(moved, mr)
    np.testing.assert_allclose(cost, np.where(mr, np.sum((Xr - X) ** 2, axis=1), 0.0))  # alpha 2


@pytest.mark.parametrize("ambiguity", ["interval", "finite", "ball"])
def test_the_shared_simulator_agrees_with_our_accuracy(cancer, ambiguity):
    from rml_fast.strategic.simulator import StrategicSimulator

    X, y = cancer
    clf = AmbiguousStrategicClassifier(ambiguity=ambiguity, delta=1.0, alpha=1.0, epochs=30,
                                       random_state=0).fit(X, y)
    res = StrategicSimulator(best_response=maxmin_response()).run(clf.deployed(), X, y)
    Xr, moved = clf.best_response(X)
    assert moved.any()
    np.testing.assert_array_equal(res.moved, moved)
    np.testing.assert_array_equal(res.X_response, Xr)
    assert res.accuracy == clf.score(X, y) == clf.train_accuracy_
    assert res.accuracy_truthful == np.mean(clf.predict(X, strategic=False) == y)
    # gaming rate: true negatives accepted after responding, by hand
    neg = y == 0
    w, b = clf.realized_
    assert res.gaming_rate == np.mean(Xr[neg] @ w - b >= 0)
    assert res.mean_cost == pytest.approx(np.mean(0.5 * np.sum((Xr - X) ** 2, axis=1)))


# --- bad input ------------------------------------------------------------------------------------


def test_one_class_raises():
    X = np.random.default_rng(0).normal(size=(10, 2))
    with pytest.raises(ValueError, match="one class"):
        AmbiguousStrategicClassifier().fit(X, np.ones(10))
    with pytest.raises(ValueError, match="Only binary"):
        AmbiguousStrategicClassifier().fit(X, np.arange(10) % 3)


def test_empty_robust_region_is_reported_not_answered():
    X = np.zeros((3, 2))
    H = [(np.array([1.0, 0.0]), 1.0), (np.array([-1.0, 0.0]), 1.0)]  # x1 >= 1 and x1 <= -1
    for method in ("auto", "cvxpy"):
        with pytest.raises(InfeasibleRevealedSetError, match="empty"):
            maxmin_best_response(X, H, method=method)
    with pytest.raises(InfeasibleRevealedSetError, match="empty"):
        maxmin_best_response(X, BallSet(np.array([1.0, 0.0]), 0.5, 1.5))
    assert issubclass(InfeasibleRevealedSetError, ValueError)


def test_bad_arguments_raise_before_work():
    X = np.zeros((3, 2))
    H = [(np.array([1.0, 0.0]), 1.0)]
    with pytest.raises(ValueError, match="alpha"):
        maxmin_best_response(X, H, alpha=0.0)
    with pytest.raises(ValueError, match="method"):
        maxmin_best_response(X, H, method="qp")
    with pytest.raises(ValueError, match="features"):
        maxmin_best_response(np.zeros((3, 3)), H)
    with pytest.raises(ValueError, match="b_lo"):
        IntervalSet(np.ones(2), 1.0, 0.0)
    with pytest.raises(ValueError, match="non-zero"):
        IntervalSet(np.zeros(2), 0.0, 1.0)
    with pytest.raises(ValueError, match="radius"):
        BallSet(np.ones(2), 0.0, -1.0)
    with pytest.raises(TypeError, match="H must be"):
        maxmin_best_response(X, "H")
    y = np.array([0, 1, 1])
    with pytest.raises(ValueError, match="ambiguity"):
        AmbiguousStrategicClassifier(ambiguity="box").fit(X, y)
    with pytest.raises(ValueError, match="delta"):
        AmbiguousStrategicClassifier(delta=-1.0).fit(X, y)
    Xc = np.array([[0.5, 0.0]])
    before = Xc.copy()
    maxmin_best_response(Xc, H)
    np.testing.assert_array_equal(Xc, before)  # not mutated
