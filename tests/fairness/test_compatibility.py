"""Fairness-metric compatibility games (rml_fast.fairness.compatibility; spec §3, PROPOSED).

Oracles: closed-form games (additive, unanimity), the Moebius/zeta inverse pair, the plain-Python
butterfly and the O(3^d) definition, shapiq's exact Moebius transform, the Shapley axioms, the
metrics against fairlearn and scikit-learn, the CLT coverage of the sampled Shapley error bars,
and invariants on COMPAS.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score

from rml_fast.fairness import compatibility as mc
from rml_fast.fairness._compatibility_kernels import (
    moebius_definition,
    moebius_reference,
    shapley_reference,
)
from rml_fast.fairness._compatibility_metrics import evaluate_metrics


def _table_game(values: np.ndarray):
    """A game given by its value table (M, 2**d), callable on boolean masks (B, d)."""
    values = np.atleast_2d(values)

    def game(masks):
        idx = np.asarray(masks, dtype=np.int64) @ (1 << np.arange(masks.shape[1]))
        return values[:, idx]

    return game


def _bool_masks(d):
    s = np.arange(1 << d)
    return ((s[:, None] >> np.arange(d)) & 1).astype(bool)


# --- closed-form games --------------------------------------------------------------------------


def test_additive_game_has_only_singleton_dividends():
    d = 7
    w = np.random.default_rng(0).normal(size=d)
    v = _bool_masks(d) @ w
    a = mc.moebius_transform(v)
    singles = 1 << np.arange(d)
    np.testing.assert_allclose(a[singles], w, atol=1e-12)
    others = np.setdiff1d(np.arange(1 << d), singles)
    np.testing.assert_allclose(a[others], 0.0, atol=1e-12)


@pytest.mark.parametrize("t0", [0b1, 0b10110, 0b11111])
def test_unanimity_game_has_one_dividend(t0):
    d = 5
    s = np.arange(1 << d)
    v = ((s & t0) == t0).astype(float)
    a = mc.moebius_transform(v)
    expected = np.zeros(1 << d)
    expected[t0] = 1.0
    np.testing.assert_allclose(a, expected, atol=1e-12)


@pytest.mark.parametrize("d", [0, 1, 3, 9])
def test_inverse_moebius_inverts(d):
    v = np.random.default_rng(d).normal(size=(3, 2, 1 << d))
    np.testing.assert_allclose(mc.inverse_moebius(mc.moebius_transform(v)), v, atol=1e-10)
    w = v.copy()
    out = mc.moebius_transform(w, inplace=True)
    assert out is w
    np.testing.assert_allclose(mc.inverse_moebius(w), v, atol=1e-10)


@pytest.mark.parametrize("d", [1, 2, 5, 8])
def test_numba_kernel_equals_python_references(d):
    v = np.random.default_rng(10 + d).normal(size=(2, 1 << d))
    a = mc.moebius_transform(v)
    for r in range(2):
        np.testing.assert_allclose(a[r], moebius_reference(v[r], d), atol=1e-10)
        np.testing.assert_allclose(a[r], moebius_definition(v[r], d), atol=1e-10)
        np.testing.assert_allclose(mc.shapley_from_moebius(a[r]), shapley_reference(a[r], d),
                                   atol=1e-10)
    np.testing.assert_allclose(mc.moebius_transform_reference(v), a, atol=1e-10)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_dividends_equal_shapiq_exact():
    shapiq = pytest.importorskip("shapiq")
    d = 6
    v = np.random.default_rng(3).normal(size=1 << d)
    game = _table_game(v)
    iv = shapiq.ExactComputer(lambda C: game(C)[0], n_players=d)("Moebius")
    a = mc.moebius_transform(v)
    for t in range(1 << d):
        members = tuple(i for i in range(d) if (t >> i) & 1)
        assert iv[members] == pytest.approx(a[t], abs=1e-10)
    sv = shapiq.ExactComputer(lambda C: game(C)[0], n_players=d)("SV")
    phi = mc.shapley_from_moebius(a)
    for i in range(d):
        assert sv[(i,)] == pytest.approx(phi[i], abs=1e-10)


# --- Shapley axioms -----------------------------------------------------------------------------


def test_shapley_efficiency_symmetry_null_player():
    d = 5  # players 0 and 1 symmetric, player 4 null
    rng = np.random.default_rng(4)
    table = rng.normal(size=(3, 4))  # (#{0,1} in S, bits 2..3 of S)
    s = np.arange(1 << d)
    v = table[(s & 1) + ((s >> 1) & 1), (s >> 2) & 3]
    phi = mc.shapley_from_moebius(mc.moebius_transform(v), d)
    assert phi.sum() == pytest.approx(v[-1] - v[0], abs=1e-12)
    assert phi[0] == pytest.approx(phi[1], abs=1e-12)
    assert phi[4] == pytest.approx(0.0, abs=1e-12)
    assert abs(phi[2]) > 1e-3  # not vacuous


# --- compatibility and attribution --------------------------------------------------------------


def test_compatibility_self_and_negation():
    v = np.random.default_rng(5).normal(size=(2, 1 << 5))
    values = np.vstack([v, -v[:1]])
    vec = mc.interaction_vectors(values)
    C = mc.compatibility_matrix(vec)
    np.testing.assert_allclose(np.diag(C), 1.0, atol=1e-12)
    assert C[0, 2] == pytest.approx(-1.0, abs=1e-12)
    np.testing.assert_allclose(C, C.T, atol=1e-14)
    assert -1.0 < C[0, 1] < 1.0
    # zero vector: undefined compatibility
    C0 = mc.compatibility_matrix(np.vstack([vec, np.zeros(vec.shape[1])]))
    assert np.isnan(C0[3]).all() and np.isnan(C0[:, 3]).all()


def test_attribution_sums_to_compatibility():
    d, k = 6, 3
    v = np.random.default_rng(6).normal(size=(2, 1 << d))
    vec = mc.interaction_vectors(v, max_order=k)
    T = mc.interaction_coalitions(d, k)
    assert vec.shape == (2, sum(len(T[np.array([bin(t).count("1") for t in T]) == r])
                                for r in range(1, k + 1)))
    C = mc.compatibility_matrix(vec)[0, 1]
    shares = mc.coalition_attribution(vec, 0, 1, top=len(T), coalitions=T)
    assert sum(c for _, c in shares) == pytest.approx(C, abs=1e-12)
    assert all(len(t) <= k for t, _ in shares)
    conflicts = mc.coalition_attribution(vec, 0, 1, top=5, coalitions=T, kind="conflict")
    assert all(c < 0 for _, c in conflicts)
    assert [c for _, c in conflicts] == sorted(c for _, c in conflicts)
    totals = mc.attribution_by_order(vec, 0, 1, coalitions=T)
    assert totals.shape == (k,) and totals.sum() == pytest.approx(C, abs=1e-12)
    # the full-order vector needs no coalitions argument; entry T <-> its players
    full = mc.interaction_vectors(v)
    a = mc.moebius_transform(v)
    (t_best, c_best), = mc.coalition_attribution(full, 0, 1, top=1)
    mask = sum(1 << i for i in t_best)
    norm = np.linalg.norm(full, axis=1)
    assert c_best == pytest.approx(a[0, mask] * a[1, mask] / norm.prod(), abs=1e-12)


def test_low_order_dividends_match_full_transform():
    d, k = 9, 2
    v = np.random.default_rng(7).normal(size=(2, 1 << d))
    a, T = mc.low_order_dividends(_table_game(v), d, max_order=k)
    np.testing.assert_allclose(a, mc.interaction_vectors(v, max_order=k), atol=1e-10)
    np.testing.assert_array_equal(T, mc.interaction_coalitions(d, k))


# --- sampled Shapley ----------------------------------------------------------------------------


def test_sampled_shapley_efficiency_and_coverage():
    d, n_perm, runs = 6, 40, 300
    v = np.random.default_rng(8).normal(size=(1, 1 << d))
    phi = mc.shapley_from_moebius(mc.moebius_transform(v))[0]
    game = _table_game(v)
    covered = np.zeros((runs, d), dtype=bool)
    for seed in range(runs):
        est = mc.sampled_shapley(game, d, n_perm, rng=seed, progress=False)
        assert est.values.sum() == pytest.approx(v[0, -1] - v[0, 0], abs=1e-10)
        covered[seed] = np.abs(est.values[0] - phi) <= 1.96 * est.stderr[0]
    # runs are independent: per player, the coverage count is Binomial(300, ~0.95);
    # 99.9% band of Binomial(300, 0.95) is about [271, 296]
    for i in range(d):
        assert 268 <= covered[:, i].sum() <= 298, (i, covered[:, i].sum())
    assert 0.93 <= covered.mean() <= 0.97
    # reproducible from the seed
    e1 = mc.sampled_shapley(game, d, 8, rng=1, progress=False)
    e2 = mc.sampled_shapley(game, d, 8, rng=1, progress=False, batch=3)
    np.testing.assert_allclose(e1.values, e2.values, atol=1e-12)


# --- metrics ------------------------------------------------------------------------------------


def test_metrics_match_fairlearn_and_sklearn():
    fl = pytest.importorskip("fairlearn.metrics")
    rng = np.random.default_rng(9)
    n = 500
    y = (rng.random(n) < 0.4).astype(np.int64)
    groups = rng.integers(0, 3, size=n)
    prob = np.clip(rng.random((4, n)) * 0.6 + 0.5 * y * rng.random(n), 0, 1)
    names = ["accuracy", "demographic_parity", "equalized_odds", "equal_opportunity",
             "predictive_parity", "calibration"]
    out = evaluate_metrics(prob, y, groups, names)
    for b in range(4):
        yhat = (prob[b] >= 0.5).astype(int)
        assert out[0, b] == pytest.approx(accuracy_score(y, yhat), abs=1e-12)
        assert out[1, b] == pytest.approx(
            -fl.demographic_parity_difference(y, yhat, sensitive_features=groups), abs=1e-12)
        assert out[2, b] == pytest.approx(
            -fl.equalized_odds_difference(y, yhat, sensitive_features=groups), abs=1e-12)
        assert out[3, b] == pytest.approx(
            -fl.equal_opportunity_difference(y, yhat, sensitive_features=groups), abs=1e-12)
        ppv = [y[(groups == g) & (yhat == 1)].mean() for g in range(3)]
        assert out[4, b] == pytest.approx(-(max(ppv) - min(ppv)), abs=1e-12)
        gap = [prob[b][groups == g].mean() - y[groups == g].mean() for g in range(3)]
        assert out[5, b] == pytest.approx(-(max(gap) - min(gap)), abs=1e-12)


def test_callable_metric_equals_builtin():
    rng = np.random.default_rng(10)
    X = rng.normal(size=(120, 3))
    a = rng.integers(0, 2, size=120)
    y = (X[:, 0] + rng.normal(size=120) > 0).astype(int)
    model = LogisticRegression().fit(X, y)

    def my_accuracy(y_true, y_pred, y_prob, groups):
        return float(np.mean(y_true == y_pred))

    V = mc.coalition_values(model, X, y, a, ["accuracy", my_accuracy], n_background=8,
                            random_state=0, progress=False)
    np.testing.assert_allclose(V[0], V[1], atol=1e-12)


# --- masking modes on a model -------------------------------------------------------------------


def _toy(n=300, seed=11):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    a = (rng.random(n) < 0.5).astype(int)
    X[:, 2] += a  # a proxy of the group
    y = (X[:, 0] + X[:, 2] + 0.5 * rng.normal(size=n) > 0.5).astype(int)
    return X, y, a


@pytest.mark.parametrize("masking", ["interventional", "baseline", "retrain"])
def test_masking_modes_endpoints(masking):
    X, y, a = _toy()
    model = LogisticRegression().fit(X, y)
    names = ["accuracy", "demographic_parity"]
    V = mc.coalition_values(model, X, y, a, names, masking=masking, n_background=16,
                            random_state=0, progress=False)
    yhat = model.predict(X)
    # full coalition: the unmasked model (retrain refits on all columns: the same model)
    assert V[0, -1] == pytest.approx(accuracy_score(y, yhat), abs=1e-2 if masking == "retrain"
                                     else 1e-12)
    # empty coalition: a prediction that ignores x, hence no demographic disparity
    assert V[1, 0] == 0.0
    # feature 0 carries signal: accuracy with {0} beats the empty coalition
    assert V[0, 0b001] > V[0, 0] + 0.05


def test_interventional_average_over_background():
    X, y, a = _toy(n=60)
    model = LogisticRegression().fit(X, y)
    bg = X[:5]
    game = mc.metric_game(model, X, y, a, ["calibration"], background=bg, progress=False,
                          chunk_rows=7)  # tiny chunks exercise the row split
    scores = game.scores(np.array([[True, False, True]]))
    z = np.repeat(X, 5, axis=0)
    z[:, 1] = np.tile(bg[:, 1], 60)
    expected = model.predict_proba(z)[:, 1].reshape(60, 5).mean(axis=1)
    np.testing.assert_allclose(scores[0], expected, atol=1e-12)


def test_sampled_and_low_order_on_a_metric_game():
    X, y, a = _toy()
    model = LogisticRegression().fit(X, y)
    game = mc.metric_game(model, X, y, a, ["accuracy", "demographic_parity"], n_background=8,
                          random_state=0, progress=False)
    V = game(_bool_masks(3))
    a_full = mc.moebius_transform(V)
    phi = mc.shapley_from_moebius(a_full)
    est = mc.sampled_shapley(game, 3, n_permutations=200, rng=0, progress=False)
    assert np.all(np.abs(est.values - phi) <= 4.5 * est.stderr + 1e-12)
    assert est.stderr.max() > 0
    low, T = mc.low_order_dividends(game, 3, max_order=2)
    np.testing.assert_allclose(low, a_full[:, T], atol=1e-12)


def test_players_group_features():
    X, y, a = _toy()
    model = LogisticRegression().fit(X, y)
    V2 = mc.coalition_values(model, X, y, a, ["accuracy"], players=[[0, 1], [2]],
                             masking="baseline", background=X, progress=False)
    V3 = mc.coalition_values(model, X, y, a, ["accuracy"], masking="baseline", background=X,
                             progress=False)
    # coalition {player 0} = features {0, 1} = bitmask 0b011 of the per-feature game
    assert V2[0, 0b01] == V3[0, 0b011]
    assert V2[0, 0b11] == V3[0, 0b111]


@pytest.mark.parametrize("masking", ["interventional", "baseline"])
def test_tabulated_scores_equal_direct_model_calls(masking):
    from rml_fast.datasets import load_binarized

    X, y, _ = load_binarized("compas-binned")
    X, y = X[:300].astype(float), y[:300]
    a = X[:, 0].astype(int)
    model = LogisticRegression(max_iter=500).fit(X, y)
    players = [[0], [1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11]]
    kw = {"players": players, "masking": masking, "n_background": 8, "random_state": 1,
          "progress": False}
    fast = mc.metric_game(model, X, y, a, tabulate=True, **kw)
    slow = mc.metric_game(model, X, y, a, tabulate=False, **kw)
    assert fast.tabulated and not slow.tabulated
    masks = _bool_masks(4)
    np.testing.assert_allclose(fast.scores(masks), slow.scores(masks), rtol=0, atol=1e-12)
    np.testing.assert_allclose(fast(masks), slow(masks), rtol=0, atol=1e-9)
    # continuous features: the grid is too large
    Xc = np.random.default_rng(0).normal(size=(50, 3))
    yc = (Xc[:, 0] > 0).astype(int)
    with pytest.raises(ValueError, match="tabulate=True"):
        mc.metric_game(LogisticRegression().fit(Xc, yc), Xc, yc, Xc[:, 1] > 0, tabulate=True,
                       max_table=1000, progress=False)
    assert not mc.metric_game(LogisticRegression().fit(Xc, yc), Xc, yc, Xc[:, 1] > 0,
                              progress=False).tabulated


# --- real data ----------------------------------------------------------------------------------


def test_compas_compatibility_invariants():
    fl = pytest.importorskip("fairlearn.metrics")
    from rml_fast.datasets import load_binarized

    X, y, names = load_binarized("compas-binned")
    X, y = X[:2000].astype(float), y[:2000]
    a = X[:, names.index("sex:Female")].astype(int)
    groups_of = {"sex": [0], "age": [1, 2, 3, 4], "juvenile": [5, 6, 7],
                 "priors": [8, 9, 10, 11]}
    players = list(groups_of.values())
    model = LogisticRegression(max_iter=500).fit(X, y)
    est = mc.MetricCompatibility(model, metrics=["accuracy", "demographic_parity",
                                                 "equalized_odds", "calibration"],
                                 players=players, n_background=32, prefit=True,
                                 random_state=0).fit(X, y, sensitive_features=a)
    V, C, phi = est.values_, est.compatibility_, est.shapley_
    yhat = model.predict(X)
    # v(N) is the unmasked model's metric (scikit-learn / fairlearn)
    assert V[0, -1] == pytest.approx(accuracy_score(y, yhat), abs=1e-12)
    assert V[1, -1] == pytest.approx(-fl.demographic_parity_difference(
        y, yhat, sensitive_features=a), abs=1e-12)
    assert V[2, -1] == pytest.approx(-fl.equalized_odds_difference(
        y, yhat, sensitive_features=a), abs=1e-12)
    assert V[1, 0] == 0.0  # fully masked: constant predictions
    np.testing.assert_allclose(phi.sum(axis=1), V[:, -1] - V[:, 0], atol=1e-12)
    np.testing.assert_allclose(np.diag(C), 1.0, atol=1e-12)
    np.testing.assert_allclose(C, C.T, atol=1e-14)
    assert np.all(np.abs(C) <= 1.0)
    # priors is the most useful player for accuracy on COMPAS
    assert int(np.argmax(phi[0])) == 3
    # on COMPAS accuracy and -|DP| conflict (C ~ -0.74), -|DP| and -|EO| agree (C ~ 0.97)
    assert C[0, 1] < -0.3
    assert C[1, 2] > 0.7
    shares = est.attributions(0, 1, top=15)
    assert sum(c for _, c in shares) == pytest.approx(C[0, 1], abs=1e-12)


def test_estimator_large_d_uses_low_orders():
    rng = np.random.default_rng(12)
    X = rng.normal(size=(80, 18))
    a = rng.integers(0, 2, size=80)
    y = (X[:, 0] + a > 0.5).astype(int)
    est = mc.MetricCompatibility(metrics=["accuracy", "demographic_parity"], max_order=2,
                                 n_background=4, random_state=0).fit(X, y, a)
    assert est.shapley_ is None and est.values_ is None
    assert est.interaction_vectors_.shape == (2, 18 + 18 * 17 // 2)
    with pytest.raises(ValueError, match="max_order"):
        mc.MetricCompatibility(n_background=4).fit(X, y, a)


# --- bad input ----------------------------------------------------------------------------------


def test_bad_input_errors():
    X, y, a = _toy(n=50)
    model = LogisticRegression().fit(X, y)
    X_before = X.copy()
    with pytest.raises(ValueError, match="sensitive must hold at least two groups"):
        mc.coalition_values(model, X, y, np.zeros(50), progress=False)
    with pytest.raises(ValueError, match="unknown metric 'fairness'"):
        mc.coalition_values(model, X, y, a, ["fairness"], progress=False)
    with pytest.raises(ValueError, match="masking must be one of"):
        mc.coalition_values(model, X, y, a, masking="zero", progress=False)
    with pytest.raises(ValueError, match="exactly two labels"):
        mc.coalition_values(model, X, np.arange(50) % 3, a, progress=False)
    with pytest.raises(ValueError, match=r"players\[1\]"):
        mc.coalition_values(model, X, y, a, players=[[0], [5]], progress=False)
    with pytest.raises(ValueError, match="d <= 16"):
        mc.coalition_values(model, np.zeros((5, 17)), np.arange(5) % 2, np.arange(5) % 2)
    with pytest.raises(ValueError, match="2\\*\\*d"):
        mc.moebius_transform(np.ones(6))
    with pytest.raises(ValueError, match="inplace=True"):
        mc.moebius_transform([0.0, 1.0], inplace=True)
    with pytest.raises(ValueError, match="coalitions must be given"):
        mc.coalition_attribution(np.ones((2, 4)), 0, 1)
    with pytest.raises(ValueError, match="n_permutations"):
        mc.sampled_shapley(_table_game(np.ones(4)), 2, n_permutations=1)
    with pytest.raises(TypeError, match="game must be callable"):
        mc.low_order_dividends(np.ones(4), 2)
    np.testing.assert_array_equal(X, X_before)
