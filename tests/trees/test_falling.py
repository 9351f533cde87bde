"""FallingTreeClassifier / FallingRashomonSet: brute force, invariants, API and errors."""

from __future__ import annotations

import doctest
import itertools

import numpy as np
import pytest

import rml_fast.datasets.tabular
import rml_fast.kernels.gravitree
import rml_fast.trees._tree
import rml_fast.trees.binarize
import rml_fast.trees.falling
from rml_fast.kernels.gravitree import canonical_string, gravitree_fit
from rml_fast.trees import (
    FallingRashomonSet,
    FallingTree,
    FallingTreeClassifier,
    IncompleteSearchError,
    IncompleteSearchWarning,
)


def _data(seed: int, n: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 2, size=(n, p))
    risk = 0.1 + 0.5 * X[:, 0] + 0.3 * X[:, 1] * (1 - X[:, 2 % p])
    return X, (rng.random(n) < risk).astype(np.int64)


def _literal_mask(lit: str, X: np.ndarray, names: list[str]) -> np.ndarray:
    name, val = lit.split(" == ")
    return X[:, names.index(name)] == int(val)


def _eval_rules(rules: list[str], X: np.ndarray, names: list[str]) -> np.ndarray:
    """Risk of each row from a rule list: the first rule whose literals all hold."""
    out = np.full(X.shape[0], np.nan)
    for rule in rules:
        body, risk = rule.split("risk = ")
        r = float(risk.split(" ")[0])
        cond = body.removeprefix("else ").removeprefix("if ").removeprefix("if ")
        cond = cond.removesuffix(" then ").strip()
        mask = np.ones(X.shape[0], dtype=bool)
        if cond:
            for lit in cond.split(" and "):
                mask &= _literal_mask(lit, X, names)
        out[np.isnan(out) & mask] = r
    return out


@pytest.mark.parametrize("branch", [None, 0, 1])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_classifier_optimum_equals_brute_force(depth, branch):
    X, y = _data(depth * 10 + (branch or 0), 40, 4)
    clf = FallingTreeClassifier(depth_budget=depth, branch_budget=branch,
                                regularization=0.01, progress=False).fit(X, y)
    ref = gravitree_fit(X, y, depth=depth, branch=branch, regularization=0.01,
                        bound_mode="optimal", backend="reference")
    assert clf.objective_ == ref.optimal_objective
    assert clf.n_optimal_trees_ == len(ref)
    t = clf.tree_
    assert t.is_falling
    assert t.depth() <= depth
    if branch is not None:
        assert t.n_branching() <= branch
    assert canonical_string(t.__dict__) in {canonical_string(ref.tree(i)) for i in range(len(ref))}


def test_classifier_predictions_are_consistent():
    X, y = _data(1, 300, 6)
    clf = FallingTreeClassifier(depth_budget=3, regularization=0.005, progress=False).fit(X, y)
    proba = clf.predict_proba(X)
    assert proba.shape == (300, 2)
    assert proba.dtype == np.float64
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(clf.predict(X), (proba[:, 1] >= 0.5).astype(np.int64))
    rank = clf.apply(X)
    # the leaf risk of each row equals the empirical risk of its leaf, and falls with the rank
    for k in np.unique(rank):
        assert proba[rank == k, 1] == pytest.approx(y[rank == k].mean())
    assert np.all(np.diff(clf.leaf_risks_) <= 0)
    assert clf.leaf_risks_[rank] == pytest.approx(proba[:, 1])
    lengths = clf.decision_path_length(X)
    assert lengths.max() <= 3
    assert lengths.min() >= 1
    names = [f"f{j}" for j in range(6)]
    np.testing.assert_allclose(_eval_rules(clf.tree_.to_rules(names), X, names),
                               np.round(proba[:, 1], 3), atol=1e-12)
    assert clf.score(X, y) == pytest.approx(np.mean(clf.predict(X) == y))


def test_rashomon_set_api_and_order():
    X, y = _data(2, 200, 6)
    rs = FallingRashomonSet(depth_budget=3, regularization=0.01, rashomon_multiplier=0.1,
                            progress=False).fit(X, y)
    n = len(rs)
    assert n == rs.n_trees_ == len(rs.objectives_) > 5
    objs = [rs[i].objective for i in range(n)]
    assert objs == sorted(objs)
    assert objs[0] == rs.optimal_objective_
    assert max(objs) <= rs.theta_ == pytest.approx(1.1 * rs.optimal_objective_)
    assert rs[-1].objective == objs[-1]
    with pytest.raises(IndexError):
        rs[n]
    with pytest.raises(TypeError):
        rs["a"]
    trees = list(rs)
    assert len({t.canonical_string() for t in trees}) == n
    assert all(t.is_falling for t in trees)
    labels = rs.predict_all(X, max_trees=7)
    assert labels.shape == (7, 200)
    assert labels.dtype == np.int8
    for k in range(7):
        np.testing.assert_array_equal(labels[k], rs[k].predict(X))
    risks = rs.predict_proba_all(X, max_trees=3)
    np.testing.assert_allclose(risks[2], rs[2].predict_proba(X)[:, 1])
    vi = rs.variable_importance()
    manual = np.zeros(6)
    for t in trees:
        manual[t.features_used()] += 1
    np.testing.assert_allclose(vi, manual / n)
    np.testing.assert_allclose(rs.variable_importance(max_trees=n), manual / n)
    first = np.zeros(6)
    for t in trees[:4]:
        first[t.features_used()] += 1
    np.testing.assert_allclose(rs.variable_importance(max_trees=4), first / 4)
    ref = gravitree_fit(X, y, depth=3, regularization=0.01, bound_value=0.1)
    assert n == len(ref)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_branch_zero_is_falling_rule_list(depth):
    X, y = _data(3, 40, 4)
    rs = FallingRashomonSet(depth_budget=depth, branch_budget=0, rashomon_multiplier=0.3,
                            progress=False).fit(X, y)
    ref = gravitree_fit(X, y, depth=depth, branch=0, regularization=0.01, bound_value=0.3,
                        backend="reference")
    assert sorted(t.canonical_string(oriented=False) for t in rs) == sorted(
        canonical_string(ref.tree(i)) for i in range(len(ref)))
    for t in rs:
        assert t.n_branching() == 0
        internal = t.feature >= 0
        # path-shaped: every internal node has at least one leaf child
        for i in np.flatnonzero(internal):
            assert not (internal[t.priority[i]] and internal[t.second[i]])


def test_leaf_budget():
    X, y = _data(11, 60, 4)
    rs = FallingRashomonSet(depth_budget=3, leaf_budget=3, rashomon_multiplier=0.3,
                            progress=False).fit(X, y)
    ref = gravitree_fit(X, y, depth=3, max_leaves=3, regularization=0.01, bound_value=0.3,
                        backend="reference")
    assert len(rs) == len(ref) > 0
    assert all(t.n_leaves <= 3 for t in rs)


def test_adder_and_bound_modes():
    X, y = _data(4, 150, 5)
    base = FallingRashomonSet(depth_budget=2, progress=False).fit(X, y)
    add = FallingRashomonSet(depth_budget=2, rashomon_adder=0.02, progress=False).fit(X, y)
    assert add.theta_ == pytest.approx(base.optimal_objective_ + 0.02)
    bound = FallingRashomonSet(depth_budget=2, rashomon_bound=add.theta_, progress=False).fit(X, y)
    assert len(bound) == len(add)
    with pytest.raises(ValueError, match="at most one"):
        FallingRashomonSet(rashomon_adder=0.1, rashomon_bound=0.3).fit(X, y)
    # the default multiplier is 0.05 when no rashomon_* parameter is given
    mult = FallingRashomonSet(depth_budget=2, rashomon_multiplier=0.05, progress=False).fit(X, y)
    assert base.theta_ == mult.theta_ == pytest.approx(1.05 * base.optimal_objective_)


@pytest.mark.parametrize("other", [{"rashomon_adder": 0.02}, {"rashomon_bound": 0.3}])
def test_multiplier_with_adder_or_bound_is_rejected(other):
    X, y = _data(4, 150, 5)
    est = FallingRashomonSet(depth_budget=2, rashomon_multiplier=0.1, progress=False, **other)
    (name,) = other
    with pytest.raises(ValueError, match=f"rashomon_multiplier and {name}"):
        est.fit(X, y)
    assert not hasattr(est, "n_trees_")


def test_max_trees_keeps_exact_count_and_lazy_access():
    X, y = _data(5, 300, 9)
    rs = FallingRashomonSet(depth_budget=3, regularization=0.002, rashomon_multiplier=0.2,
                            max_trees=10, progress=False).fit(X, y)
    assert len(rs) > 10
    assert rs.objectives_.shape == (10,)
    last = rs[len(rs) - 1]
    assert last.objective <= rs.theta_
    assert last.is_falling


def test_unconstrained_mode_contains_falling_set():
    X, y = _data(6, 200, 6)
    kw = dict(depth_budget=3, rashomon_bound=0.4, progress=False)
    fall = FallingRashomonSet(**kw).fit(X, y)
    free = FallingRashomonSet(falling=False, **kw).fit(X, y)
    assert len(free) >= len(fall) > 0
    free_strings = {t.canonical_string(oriented=False) for t in free}
    assert {t.canonical_string(oriented=False) for t in fall} <= free_strings


def test_incomplete_search_warns_or_raises():
    X, y = _data(7, 3000, 30)
    kw = dict(depth_budget=5, regularization=0.001, time_limit=1e-3, progress=False)
    with pytest.warns(IncompleteSearchWarning, match="time limit"):
        rs = FallingRashomonSet(**kw).fit(X, y)
    assert not rs.complete_
    with pytest.raises(IncompleteSearchError) as info:
        FallingTreeClassifier(on_incomplete="raise", **kw).fit(X, y)
    partial = info.value.partial
    assert not partial.complete_
    assert partial.tree_.is_falling
    quiet = FallingTreeClassifier(on_incomplete="ignore", **kw).fit(X, y)
    assert not quiet.complete_


def test_memory_limit_stops_with_a_valid_partial_set():
    X, y = _data(12, 3000, 30)
    est = FallingRashomonSet(depth_budget=4, regularization=0.001, rashomon_multiplier=0.3,
                             memory_limit=1.0, progress=False)
    with pytest.warns(IncompleteSearchWarning, match="memory limit"):
        est.fit(X, y)
    assert not est.complete_
    assert est.stats_["stop_reason"] == "memory_limit"
    assert len(est) >= 1
    for i in range(min(len(est), 5)):
        assert est[i].is_falling
        assert est[i].objective <= est.theta_


@pytest.mark.parametrize(
    ("est", "X", "y", "match"),
    [
        (FallingTreeClassifier(), [[0, 2], [1, 0]], [0, 1], "X must be binary"),
        (FallingTreeClassifier(), [[0, 1], [1, 0]], [0, 2], "y must hold labels"),
        (FallingTreeClassifier(depth_budget=0), [[0, 1], [1, 0]], [0, 1], "depth"),
        (FallingTreeClassifier(on_incomplete="x"), [[0, 1], [1, 0]], [0, 1], "on_incomplete"),
        (FallingTreeClassifier(n_threads=0), [[0, 1], [1, 0]], [0, 1], "n_threads"),
        (FallingRashomonSet(rashomon_multiplier=-1), [[0, 1], [1, 0]], [0, 1],
         "rashomon_multiplier"),
        (FallingRashomonSet(max_trees=0), [[0, 1], [1, 0]], [0, 1], "max_trees"),
    ],
)
def test_bad_input(est, X, y, match):
    with pytest.raises(ValueError, match=match):
        est.fit(X, y)


def test_negative_weights_and_nan_rejected():
    X, y = _data(8, 20, 3)
    with pytest.raises(ValueError, match="sample_weight must be non-negative"):
        FallingTreeClassifier().fit(X, y, sample_weight=-np.ones(20))
    Xf = X.astype(float)
    Xf[0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        FallingTreeClassifier().fit(Xf, y)


def test_unfitted_and_feature_count_errors():
    with pytest.raises(RuntimeError, match="not fitted"):
        FallingTreeClassifier().predict([[0, 1]])
    X, y = _data(9, 50, 4)
    clf = FallingTreeClassifier(depth_budget=2, progress=False).fit(X, y)
    with pytest.raises(ValueError, match="4"):
        clf.predict(np.zeros((3, 5), dtype=int))


def test_params_protocol_and_sklearn_clone():
    est = FallingRashomonSet(depth_budget=2, rashomon_adder=0.01)
    params = est.get_params()
    assert params["depth_budget"] == 2
    assert params["rashomon_adder"] == 0.01
    est.set_params(depth_budget=3)
    assert est.depth_budget == 3
    with pytest.raises(ValueError, match="Invalid parameter"):
        est.set_params(depth=3)
    base = pytest.importorskip("sklearn.base")
    twin = base.clone(est)
    assert twin.get_params() == est.get_params()
    assert twin is not est


def test_sklearn_cross_validation():
    pytest.importorskip("sklearn")
    from sklearn.model_selection import cross_val_score

    X, y = _data(13, 200, 5)
    est = FallingTreeClassifier(depth_budget=2, progress=False)
    acc = cross_val_score(est, X, y, cv=3)
    auc = cross_val_score(est, X, y, cv=3, scoring="roc_auc")
    assert acc.shape == auc.shape == (3,)
    assert np.all((acc > 0.5) & (auc > 0.5))


def test_fn_cost_moves_threshold():
    X, y = _data(10, 200, 5)
    clf = FallingTreeClassifier(depth_budget=2, fn_cost=3.0, progress=False).fit(X, y)
    assert clf.tree_.tau == pytest.approx(0.25)
    proba = clf.predict_proba(X)[:, 1]
    np.testing.assert_array_equal(clf.predict(X), (proba >= 0.25).astype(np.int64))


def test_to_rules_on_hand_built_tree():
    t = FallingTree.from_dict(dict(
        feature=[0, -1, 1, -1, -1], orient=[1, -1, 0, -1, -1], priority=[1, -1, 3, -1, -1],
        second=[2, -1, 4, -1, -1], risk=[0.5, 0.9, 0.3, 0.4, 0.1], objective=0.0))
    assert t.to_rules(["a", "b"]) == [
        "if a == 1 then risk = 0.900 (predict 1)",
        "else if a == 0 and b == 0 then risk = 0.400 (predict 0)",
        "else risk = 0.100 (predict 0)",
    ]
    X = np.array(list(itertools.product([0, 1], repeat=2)))
    np.testing.assert_array_equal(t.apply(X), [1, 2, 0, 0])
    np.testing.assert_array_equal(t.decision_path_length(X), [2, 2, 1, 1])
    with pytest.raises(ValueError, match="feature_names"):
        t.to_rules(["a"])


@pytest.mark.parametrize("module", [rml_fast.trees._tree, rml_fast.trees.binarize,
                                    rml_fast.trees.falling, rml_fast.kernels.gravitree,
                                    rml_fast.datasets.tabular])
def test_doctests(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
