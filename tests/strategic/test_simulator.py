"""The simulator of strategic agents: closed-form best responses against brute force, and the
simulator's bookkeeping against hand-computed outcomes."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from rml_fast.strategic.simulator import (
    StrategicSimulator,
    grid_best_response,
    linear_best_response,
    linear_rule,
    move_cost,
)


class _Affine:
    """A bare linear rule with only decision_function/predict (no coef_)."""

    def __init__(self, w, b):
        self.w, self.b = np.asarray(w, float), float(b)
        self.classes_ = np.array([0, 1])

    def decision_function(self, X):
        return np.asarray(X) @ self.w + self.b

    def predict(self, X):
        return self.classes_[(self.decision_function(X) > 0).astype(int)]


def _data(seed=0, n=200, d=3):
    rng = np.random.default_rng(seed)
    X = np.r_[rng.normal(-1, 1, (n // 2, d)), rng.normal(1, 1, (n // 2, d))]
    y = np.r_[np.zeros(n // 2, int), np.ones(n // 2, int)]
    return X, y


@pytest.mark.parametrize(("cost_norm", "weights"), [(2, None), (1, None),
                                               ("weighted-l1", np.array([0.5, 2.0, np.inf]))])
def test_moves_land_on_boundary_and_cost_at_most_one(cost_norm, weights):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 3))
    w, b = np.array([1.0, -2.0, 0.5]), 0.3
    kappa = rng.uniform(0.5, 3.0, size=500)
    Xn, moved = linear_best_response(X, w, b, kappa, cost_norm=cost_norm, weights=weights)
    s0, s1 = X @ w + b, Xn @ w + b
    assert moved.any() and (~moved).any()
    # moved agents: were rejected, are now on the boundary (nudged to the accepted side)
    assert (s0[moved] <= 0).all()
    assert (s1[moved] > 0).all() and np.all(s1[moved] < 1e-9)
    cost = move_cost(Xn - X, kappa, cost_norm=cost_norm, weights=weights)
    assert np.all(cost[moved] <= 1 + 1e-9)
    # non-moved agents are unchanged; rejected non-movers could not afford the crossing
    np.testing.assert_array_equal(Xn[~moved], X[~moved])
    if cost_norm == 2:
        dual = np.linalg.norm(w)
    elif cost_norm == 1:
        dual = np.abs(w).max()
    else:
        dual = np.max(np.abs(w[:2]) / weights[:2])  # the immutable third feature never moves
        np.testing.assert_array_equal(Xn[:, 2], X[:, 2])
    rej_stay = (~moved) & (s0 <= 0)
    assert np.all(kappa[rej_stay] * (-s0[rej_stay]) / dual >= 1.0)


def test_tie_does_not_move():
    # cheapest crossing costs exactly 1: kappa * dist = 2 * 0.5
    Xn, moved = linear_best_response(np.array([[-0.5, 0.0]]), np.array([1.0, 0.0]), 0.0, 2.0)
    assert not moved[0]
    np.testing.assert_array_equal(Xn, [[-0.5, 0.0]])


@pytest.mark.parametrize("cost_norm", [2, 1])
def test_closed_form_equals_brute_force_grid(cost_norm):
    # 2-D grid fine enough that the closed-form targets lie (almost) on it
    w, b = np.array([1.0, 0.5]), -0.2
    g = np.linspace(-3, 3, 241)
    cand = np.array(np.meshgrid(g, g)).reshape(2, -1).T
    rng = np.random.default_rng(2)
    X = rng.uniform(-2, 2, size=(60, 2))
    kappa = 1.3
    rule = _Affine(w, b)
    Xn_cf, moved_cf = linear_best_response(X, w, b, kappa, cost_norm=cost_norm)
    Xn_bf, moved_bf = grid_best_response(X, rule, cand, kappa, cost_norm=cost_norm)
    cost_cf = move_cost(Xn_cf - X, kappa, cost_norm)
    cost_bf = move_cost(Xn_bf - X, kappa, cost_norm)
    # agents whose decision is not at the grid's resolution edge agree on whether to move
    margin = np.abs(1 - kappa * np.maximum(-(X @ w + b), 0) /
                    (np.linalg.norm(w) if cost_norm == 2 else np.abs(w).max()))
    clear = margin > 0.05
    np.testing.assert_array_equal(moved_cf[clear], moved_bf[clear])
    # the grid optimum can only be (slightly) more expensive than the exact one
    both = moved_cf & moved_bf
    assert np.all(cost_bf[both] >= cost_cf[both] - 1e-9)
    assert np.all(cost_bf[both] <= cost_cf[both] + kappa * 0.025 * 2)
    if cost_norm == 2:  # the l2 move is unique: the grid point is within a cell of it
        assert np.max(np.abs(Xn_bf[both] - Xn_cf[both])) < 0.06


def test_linear_rule_recovers_affine_map_without_coef():
    rule = _Affine([2.0, -1.0, 0.5], 0.7)
    w, b = linear_rule(rule, 3)
    np.testing.assert_allclose(w, [2.0, -1.0, 0.5])
    assert b == pytest.approx(0.7)
    with pytest.raises(TypeError, match="linear classifier"):
        linear_rule(DecisionTreeClassifier().fit([[0.0], [1.0]], [0, 1]), 1)


def test_simulator_numbers_by_hand():
    X = np.array([[-3.0], [-0.5], [-0.2], [0.3], [1.0], [-0.8]])
    y = np.array([0, 0, 0, 1, 1, 1])
    rule = _Affine([1.0], 0.0)
    res = StrategicSimulator(kappa=1.0).run(rule, X, y)
    # movers: -0.5, -0.2, -0.8 (distance < 1); -3 stays
    assert res.moved.tolist() == [False, True, True, False, False, True]
    assert res.gaming_rate == pytest.approx(2 / 3)
    assert res.manipulation_rate == pytest.approx(2 / 3)
    assert res.accuracy == pytest.approx(4 / 6)  # -3 rejected (right), 2 gamers accepted (wrong)
    assert res.accuracy_truthful == pytest.approx(5 / 6)
    assert res.mean_cost == pytest.approx((0.5 + 0.2 + 0.8) / 6, abs=1e-9)
    assert res.move_rate == pytest.approx(0.5)


def test_simulator_rounds_kappa_callable_and_sequence():
    X, y = _data()
    clf = LogisticRegression().fit(X, y)
    kappas = [4.0, 2.0, 1.0]
    sim = StrategicSimulator(kappa=lambda t, prev: kappas[t], n_rounds=3)
    res = sim.run(clf, X, y)
    gr = res.series("gaming_rate")
    assert gr.shape == (3,)
    # cheaper manipulation against a fixed rule: gaming can only grow
    assert np.all(np.diff(gr) >= 0) and gr[-1] > gr[0]
    # one round per kappa gives the same numbers
    for t, k in enumerate(kappas):
        single = StrategicSimulator(kappa=k).run(clf, X, y)
        assert single.gaming_rate == pytest.approx(gr[t])
    # a sequence of rules, one per round
    strict = LogisticRegression(C=10.0).fit(X, y)
    res2 = StrategicSimulator(n_rounds=2).run([clf, strict], X, y)
    assert res2.history[1].classifier is strict


def test_simulator_retrain_callback_sees_responses():
    X, y = _data(3)
    seen = []

    def retrain(clf, X_resp, y_, t):
        seen.append((t, X_resp.copy()))
        return LogisticRegression().fit(X_resp, y_)

    res = StrategicSimulator(n_rounds=3, retrain=retrain, kappa=1.0).run(
        LogisticRegression().fit(X, y), X, y)
    assert [t for t, _ in seen] == [0, 1]
    np.testing.assert_array_equal(seen[0][1], res.history[0].X_response)
    assert res.history[1].classifier is not res.history[0].classifier


def test_simulator_random_kappa_reproducible():
    X, y = _data(4)
    clf = LogisticRegression().fit(X, y)
    a = StrategicSimulator(kappa=(0.5, 3.0), rng=7).run(clf, X, y)
    b = StrategicSimulator(kappa=(0.5, 3.0), rng=7).run(clf, X, y)
    np.testing.assert_array_equal(a.moved, b.moved)
    assert a.mean_cost == b.mean_cost


def test_callable_best_response_on_a_tree():
    X, y = _data(5, n=60, d=2)
    tree = DecisionTreeClassifier(max_depth=2, random_state=0).fit(X, y)
    g = np.linspace(-4, 4, 41)
    cand = np.array(np.meshgrid(g, g)).reshape(2, -1).T
    br = functools.partial(grid_best_response, candidates=cand, kappa=1.0)
    res = StrategicSimulator(best_response=br, kappa=1.0).run(tree, X, y)
    # every mover is accepted by the tree and paid less than its gain
    assert res.moved.any()
    assert np.all(tree.predict(res.X_response[res.moved]) == 1)
    assert np.all(res.cost[res.moved] < 1.0)
    # and the linear closed form refuses a nonlinear rule with a clear message
    with pytest.raises(TypeError, match="linear classifier"):
        StrategicSimulator().run(tree, X, y)


def test_callable_returning_cost_is_used():
    X, y = _data(6, n=20, d=2)
    clf = LogisticRegression().fit(X, y)

    def br(X_, clf_):
        Xn, moved = linear_best_response(X_, clf_.coef_[0], clf_.intercept_[0], 1.0)
        return Xn, moved, np.where(moved, 0.25, 0.0)

    res = StrategicSimulator(best_response=br).run(clf, X, y)
    assert res.mean_cost == pytest.approx(0.25 * res.moved.mean())


def test_bad_input_is_named():
    X, y = _data(n=10, d=2)
    clf = LogisticRegression().fit(X, y)
    with pytest.raises(ValueError, match="cost_norm"):
        linear_best_response(X, np.ones(2), 0.0, cost_norm=3)
    with pytest.raises(ValueError, match="weights"):
        linear_best_response(X, np.ones(2), 0.0, cost_norm="weighted-l1")
    with pytest.raises(ValueError, match="kappa"):
        linear_best_response(X, np.ones(2), 0.0, kappa=-1.0)
    with pytest.raises(ValueError, match="w must have shape"):
        linear_best_response(X, np.ones(3), 0.0)
    with pytest.raises(ValueError, match="n_rounds"):
        StrategicSimulator(n_rounds=0).run(clf, X, y)
    with pytest.raises(ValueError, match="best_response"):
        StrategicSimulator(best_response="nope").run(clf, X, y)
    with pytest.raises(ValueError, match="y must have shape"):
        StrategicSimulator().run(clf, X, y[:-1])
    with pytest.raises(ValueError, match="n_rounds=2 rules"):
        StrategicSimulator(n_rounds=2).run([clf], X, y)
    X0 = X.copy()
    StrategicSimulator(kappa=0.1).run(clf, X, y)
    np.testing.assert_array_equal(X, X0)  # the caller's data is never modified
