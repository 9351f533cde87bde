"""ASR-ICL recourse: validity by re-query, constraints, exact query counts, closed-form optima.

Oracles
-------
* every returned counterfactual is re-queried on the model (alone, outside the search) and
  predicts the target; immutable features are unchanged, monotone ones moved the allowed way,
  ranged ones are in range, integer ones integral; a not-found row is NaN, never a point;
* the query count is exact: the model is wrapped in a counting callable and its row / call
  counts equal ``n_queries.sum()`` / ``n_calls``; ``n_queries <= max_queries``;
* logistic model, l1/MAD cost: the cost is within 10% of the linear program's optimum
  (``scipy.optimize.linprog`` on ``min sum |z|  s.t.  (w*scale).z >= -(w.x+b)`` and the
  constraint box) and never below it, with one changed feature; l2 cost: within 10% of
  ``-(w.x+b)/||w*scale||``;
* DiCE (``dice_ml``, method "random") on the same model and instances: validity at least
  DiCE's with fewer queries.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

from rml_fast.decisions.icl_predictor import AttentionICL
from rml_fast.decisions.recourse import (
    AdaptiveSubspaceRecourse,
    as_predict_proba,
    asr_recourse,
    validity_under,
)

BC_COLS = [0, 1, 4, 6, 8, 9]  # mean radius, texture, smoothness, concavity, symmetry, fractal dim.


class Counting:
    """A model wrapper that counts the rows and calls that reach ``predict_proba``."""

    def __init__(self, model):
        self.model, self.rows, self.calls = model, 0, 0
        self.classes_ = model.classes_

    def predict_proba(self, X):
        self.rows += len(X)
        self.calls += 1
        return self.model.predict_proba(X)


@pytest.fixture(scope="module")
def bc():
    X, y = load_breast_cancer(return_X_y=True)
    X = X[:, BC_COLS]
    clf = LogisticRegression(max_iter=5000).fit(X, y)
    return X, y, clf


@pytest.fixture(scope="module")
def wine_rf():
    X, y = load_wine(return_X_y=True)
    X = X[:, [0, 1, 6, 9, 12]]  # alcohol, malic acid, flavanoids, colour intensity, proline
    return X, y, RandomForestClassifier(30, random_state=0).fit(X, y)


def _lp_optimum(w, b, x, scale, zlo, zhi, m=0.0):
    """min sum|z| s.t. (w*scale).z >= m - (w.x+b), zlo <= z <= zhi (z = zp - zn, zp, zn >= 0)."""
    v = w * scale
    d = len(x)
    bounds = [(0, max(h, 0.0)) for h in zhi] + [(0, max(-lo, 0.0)) for lo in zlo]
    res = linprog(np.ones(2 * d), A_ub=-np.concatenate([v, -v])[None], b_ub=[x @ w + b - m],
                  bounds=bounds, method="highs")
    assert res.success
    return res.fun


def _check_constraints(res, X, est):
    ok = res.found
    assert np.isnan(res.x_cf[~ok]).all()
    assert np.isfinite(res.x_cf[ok]).all()
    dx = res.x_cf[ok] - X[ok]
    assert np.all(dx[:, est.immutable_] == 0)
    for j, m in (est.monotone or {}).items():
        assert np.all(dx[:, j] >= 0) if m == "increase" else np.all(dx[:, j] <= 0)
    assert np.all(res.x_cf[ok] >= est.lower_) and np.all(res.x_cf[ok] <= est.upper_)
    xi = res.x_cf[ok][:, est.integer_]
    assert np.array_equal(xi, np.round(xi))


@pytest.mark.parametrize("constrained", [False, True])
def test_l1_cost_matches_linear_program_on_logistic_model(bc, constrained):
    X, _, clf = bc
    w, b = clf.coef_[0], clf.intercept_[0]
    neg = X[clf.decision_function(X) < 0][:12]
    kw = ({"immutable": [0], "monotone": {1: "decrease"}, "bounds": {2: (None, 0.12)}}
          if constrained else {})
    est = AdaptiveSubspaceRecourse(clf, random_state=0, progress=False, **kw).fit(X)
    res = est.generate(neg, target=1)
    assert res.found.all()
    assert np.array_equal(clf.predict(res.x_cf), np.ones(len(neg)))  # independent re-query
    _check_constraints(res, neg, est)
    opt = np.array([_lp_optimum(w, b, x, est.scale_, est._space(x, 0).zlo, est._space(x, 0).zhi)
                    for x in neg])
    assert np.all(res.cost >= opt * (1 - 1e-6))  # nothing valid is cheaper than the optimum
    assert np.all(res.cost <= 1.10 * opt)
    assert np.all(res.n_changed == 1)  # the l1 optimum moves the single best feature


def test_l2_cost_matches_closed_form_on_logistic_model(bc):
    X, _, clf = bc
    w, b = clf.coef_[0], clf.intercept_[0]
    neg = X[clf.decision_function(X) < 0][:12]
    est = AdaptiveSubspaceRecourse(clf, cost="l2", subspace_dim=len(BC_COLS), random_state=1,
                                   progress=False).fit(X)
    res = est.generate(neg, target=1)
    assert res.found.all() and np.array_equal(clf.predict(res.x_cf), np.ones(len(neg)))
    opt = -(neg @ w + b) / np.linalg.norm(w * est.scale_)
    assert np.all(res.cost >= opt * (1 - 1e-6))
    assert np.all(res.cost <= 1.10 * opt)


def test_query_count_is_exact_and_budget_respected(bc):
    X, _, clf = bc
    neg = X[clf.decision_function(X) < 0][:20]
    for budget in (200, 12):
        model = Counting(clf)
        res = AdaptiveSubspaceRecourse(model, max_queries=budget, random_state=0,
                                       progress=False).fit(X).generate(neg, target=1)
        assert model.rows == res.n_queries.sum()
        assert model.calls == res.n_calls
        assert np.all(res.n_queries <= budget) and np.all(res.n_queries >= 1)
        if budget == 12:  # too few queries for the far instances: explicit not-found rows
            assert (res.status == "budget_exhausted").any()
        assert np.array_equal(res.found, np.isin(res.status, ["found", "already_valid"]))
        assert np.isnan(res.x_cf[~res.found]).all()
        if res.found.any():
            assert np.all(clf.predict(res.x_cf[res.found]) == 1)


def test_multiclass_random_forest_with_all_constraint_kinds(wine_rf):
    X, _, rf = wine_rf
    pred = rf.predict(X)
    Xq = X[pred == 0][:10]
    est = AdaptiveSubspaceRecourse(
        rf, immutable=[0], monotone={1: "increase"}, bounds={4: (300.0, 1200.0)}, integer=[4],
        max_queries=300, random_state=0, progress=False).fit(X)
    for target in (1, 2):
        res = est.generate(Xq, target=target)
        assert res.validity >= 0.8
        assert np.all(rf.predict(res.x_cf[res.found]) == target)
        _check_constraints(res, Xq, est)
        assert np.all(res.target == target) and np.all(res.original_class == 0)
    res = est.generate(Xq)  # target=None: any class but the current one
    assert np.all(rf.predict(res.x_cf[res.found]) != 0) and res.validity >= 0.8


def test_label_only_callable_and_already_valid():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 4))

    def f(Z):  # hard labels only
        return (Z[:, 0] - Z[:, 1] > 1.0).astype(np.int64)

    est = AdaptiveSubspaceRecourse(f, n_classes=2, random_state=0, progress=False).fit(X)
    res = est.generate(X[:8], target=1)
    already = f(X[:8]) == 1
    assert np.all(res.status[already] == "already_valid")
    assert np.all(res.cost[already] == 0) and np.all(res.n_queries[already] == 1)
    assert res.found.all() and np.all(f(res.x_cf) == 1)
    np.testing.assert_array_equal(res.x_cf[already], X[:8][already])


def test_attention_icl_predictor(bc):
    X, y, _ = bc
    rng = np.random.default_rng(0)
    idx = rng.choice(len(X), 60, replace=False)
    icl = AttentionICL(X[idx], y[idx], temperature=2.0)
    model = Counting(icl)
    Xq = X[icl.predict(X) == 0][:10]
    res = asr_recourse(model, Xq, target=1, X_ref=X, random_state=0, progress=False,
                       immutable=[1])
    assert res.validity >= 0.9
    assert np.all(icl.predict(res.x_cf[res.found]) == 1)
    assert model.rows == res.n_queries.sum()
    assert np.all(res.x_cf[res.found][:, 1] == Xq[res.found][:, 1])


def test_same_seed_same_result_and_input_untouched(wine_rf):
    X, _, rf = wine_rf
    Xq = X[rf.predict(X) == 1][:6].copy()
    before = Xq.copy()
    a = AdaptiveSubspaceRecourse(rf, random_state=3, progress=False).fit(X).generate(Xq, 0)
    b = AdaptiveSubspaceRecourse(rf, random_state=3, progress=False).fit(X).generate(Xq, 0)
    np.testing.assert_array_equal(a.x_cf, b.x_cf)
    np.testing.assert_array_equal(a.n_queries, b.n_queries)
    np.testing.assert_array_equal(Xq, before)


def test_unreachable_class_returns_explicit_not_found():
    X = np.random.default_rng(0).standard_normal((50, 3))

    def f(Z):  # class 2 is never predicted
        p = np.column_stack([1 / (1 + np.exp(Z[:, 0])), 1 / (1 + np.exp(-Z[:, 0])),
                             np.zeros(len(Z))])
        return p

    res = AdaptiveSubspaceRecourse(f, max_queries=60, random_state=0,
                                   progress=False).fit(X).generate(X[:4], target=2)
    assert not res.found.any() and np.all(res.status == "budget_exhausted")
    assert np.isnan(res.x_cf).all() and np.isnan(res.cost).all()
    assert np.all(res.n_queries <= 60)


def test_all_immutable_returns_no_actionable_features(bc):
    X, _, clf = bc
    neg = X[clf.decision_function(X) < 0][:3]
    res = AdaptiveSubspaceRecourse(clf, immutable=range(len(BC_COLS)), progress=False
                                   ).fit(X).generate(neg, target=1)
    assert np.all(res.status == "no_actionable_features") and np.isnan(res.x_cf).all()
    assert np.all(res.n_queries == 1)


def test_bad_input_raises_clear_errors(bc):
    X, _, clf = bc
    neg = X[clf.decision_function(X) < 0][:2]
    est = AdaptiveSubspaceRecourse(clf, progress=False).fit(X)
    with pytest.raises(ValueError, match="target"):
        est.generate(neg, target=5)  # not a class of the model
    with pytest.raises(ValueError, match="features"):
        est.generate(neg[:, :3], target=1)
    # an immutable feature outside its allowed range would have to change
    est = AdaptiveSubspaceRecourse(clf, immutable=[0], bounds={0: (100.0, 200.0)},
                                   progress=False).fit(X)
    with pytest.raises(ValueError, match="immutable feature 0"):
        est.generate(neg, target=1)
    with pytest.raises(ValueError, match="lower > upper"):
        AdaptiveSubspaceRecourse(clf, bounds={1: (5.0, 1.0)}).fit(X)
    with pytest.raises(ValueError, match="immutable"):
        AdaptiveSubspaceRecourse(clf, immutable=[10]).fit(X)
    with pytest.raises(ValueError, match="monotone"):
        AdaptiveSubspaceRecourse(clf, monotone={0: "up"}).fit(X)
    with pytest.raises(ValueError, match="both immutable and monotone"):
        AdaptiveSubspaceRecourse(clf, immutable=[0], monotone={0: "increase"}).fit(X)
    with pytest.raises(ValueError, match="max_queries"):
        AdaptiveSubspaceRecourse(clf, max_queries=0).fit(X)
    with pytest.raises(ValueError, match="cost"):
        AdaptiveSubspaceRecourse(clf, cost="l3").fit(X)
    with pytest.raises(TypeError, match="predictor is None"):
        AdaptiveSubspaceRecourse().fit(X).generate(neg, 1)
    with pytest.raises(ValueError, match="finite"):
        est.generate(np.full((1, len(BC_COLS)), np.nan), 1)
    with pytest.raises(ValueError, match="shape"):
        as_predict_proba(lambda Z: np.zeros((len(Z) + 1, 2)))(neg)


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning",
                            "ignore::DeprecationWarning")
def test_fewer_queries_and_no_lower_validity_than_dice(bc):
    dice_ml = pytest.importorskip("dice_ml")
    import pandas as pd

    X, y, clf = bc
    names = [f"f{j}" for j in range(X.shape[1])]
    model = Counting(clf)
    df = pd.DataFrame(X, columns=names).assign(y=y)
    data = dice_ml.Data(dataframe=df, continuous_features=names, outcome_name="y")

    class Frame:  # DiCE passes DataFrames
        classes_ = clf.classes_

        def predict_proba(self, D):
            return model.predict_proba(np.asarray(D, dtype=np.float64))

    dice = dice_ml.Dice(data, dice_ml.Model(model=Frame(), backend="sklearn"), method="random")
    neg = X[clf.decision_function(X) < 0][:2]
    valid = 0
    for x in neg:
        out = dice.generate_counterfactuals(pd.DataFrame(x[None], columns=names), total_CFs=1,
                                            desired_class=1, verbose=False, random_seed=0)
        cf = out.cf_examples_list[0].final_cfs_df
        if cf is not None and len(cf):
            valid += int(clf.predict(cf[names].to_numpy(np.float64))[0] == 1)
    dice_rows = model.rows
    model.rows = 0
    res = AdaptiveSubspaceRecourse(model, random_state=0, progress=False).fit(X).generate(neg, 1)
    assert res.found.sum() >= valid
    assert model.rows == res.n_queries.sum()
    assert 5 * model.rows <= dice_rows, (model.rows, dice_rows)


def test_verify_requeries_and_rejects_points_that_stop_being_valid(bc):
    X, _, clf = bc
    neg = X[clf.decision_function(X) < 0][:8]
    model = Counting(clf)
    est = AdaptiveSubspaceRecourse(model, verify=True, max_queries=60, random_state=0,
                                   progress=False).fit(X)
    res = est.generate(neg, target=1)
    assert res.found.all() and model.rows == res.n_queries.sum()
    assert np.all(res.n_queries <= 60)

    class Drifting:  # answers honestly during the search, then always says class 0
        classes_ = clf.classes_
        calls = 0

        def predict_proba(self, Z):
            Drifting.calls += 1
            P = clf.predict_proba(Z)
            return P if Drifting.calls < res.n_calls else np.tile([1.0, 0.0], (len(Z), 1))

    res2 = AdaptiveSubspaceRecourse(Drifting(), verify=True, max_queries=60, random_state=0,
                                    progress=False).fit(X).generate(neg, target=1)
    assert np.all(res2.status == "failed_verification") and not res2.valid.any()
    assert np.isnan(res2.x_cf).all()
    with pytest.raises(ValueError, match="verify"):
        AdaptiveSubspaceRecourse(clf, verify=True, max_queries=1).fit(X)


def test_validity_under_resampled_contexts(bc):
    X, y, _ = bc
    rng = np.random.default_rng(1)
    ctxs = [rng.choice(len(X), 60, replace=False) for _ in range(4)]
    iccls = [AttentionICL(X[c], y[c], temperature=2.0) for c in ctxs]
    Xq = X[iccls[0].predict(X) == 0][:8]
    res = asr_recourse(iccls[0], Xq, target=1, X_ref=X, random_state=0, progress=False)
    V = validity_under(iccls, res)
    assert V.shape == (4, 8)
    np.testing.assert_array_equal(V[0], res.found)  # the original context: all valid
    for k in range(4):  # brute force: the same re-query by hand
        np.testing.assert_array_equal(V[k][res.found], iccls[k].predict(res.x_cf[res.found]) == 1)
    with pytest.raises(TypeError, match="RecourseResult"):
        validity_under(iccls, None)


def test_min_margin_gives_the_closed_form_robust_recourse(bc):
    X, _, clf = bc
    w, b = clf.coef_[0], clf.intercept_[0]
    neg = X[clf.decision_function(X) < 0][:10]
    est = AdaptiveSubspaceRecourse(clf, min_margin=1.5, random_state=0, progress=False).fit(X)
    res = est.generate(neg, target=1)
    assert res.found.all()
    # for a logistic model log p1 - log p0 = w.x + b: every point clears the margin
    assert np.all(clf.decision_function(res.x_cf) >= 1.5 - 1e-9)
    opt = np.array([_lp_optimum(w, b, x, est.scale_, est._space(x, 0).zlo, est._space(x, 0).zhi,
                                m=1.5) for x in neg])
    assert np.all(res.cost >= opt * (1 - 1e-6)) and np.all(res.cost <= 1.10 * opt)
