"""Robust human-AI complementarity (spec tabular_decisions.md §7).

Oracles: the closed-form pooling MSE against Monte-Carlo with bivariate-normal errors; the
moment/correlation estimator against the generator's known parameters (large n) and against
NumPy's corrcoef; the bootstrap against an explicit resampling loop and scipy.stats.bootstrap;
the exact robust weight against a brute-force grid and a cvxpy solve; the guarantee on a grid of
uncertainty boxes and on simulated data across rho in [-0.9, 0.9]; degenerate cases in closed
form; real predictions of two scikit-learn models on COMPAS; bad input.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rml_fast.decisions._complementarity_boot import bootstrap_counts, bootstrap_means
from rml_fast.decisions.complementarity import (
    STRATEGIES,
    RobustComplementarity,
    bootstrap_error_moments,
    compare_strategies,
    decide,
    error_moments,
    optimal_pooling_weight,
    pool,
    pooling_gain,
    pooling_mse,
    robust_improvement_interval,
    robust_pooling_weight,
    simulate_forecasts,
    worst_case_gain,
)

RHOS = [-0.9, -0.5, -0.2, 0.0, 0.3, 0.6, 0.9]


# --------------------------------------------------------------------------- the MSE model


@pytest.mark.parametrize("rho", [-0.8, 0.0, 0.7])
def test_pooling_mse_matches_monte_carlo(rho):
    """Closed-form MSE(w) vs the empirical MSE of the pool on 4e5 bivariate-normal errors."""
    s_h, s_a = 0.3, 0.45
    sim = simulate_forecasts(400_000, s_h, s_a, rho, rng=11)
    for w in (0.0, 0.2, 0.5, 0.8, 1.0, 1.3):
        emp = np.mean(((1 - w) * sim.h + w * sim.a - sim.y) ** 2)
        assert abs(emp - pooling_mse(w, s_h, s_a, rho)) < 0.01 * pooling_mse(1.0, s_h, s_a, 1.0)
        # with the sample moments plugged in, the identity is exact (uncentred moments)
        m = error_moments(sim.h, sim.a, sim.y)
        assert emp == pytest.approx(pooling_mse(w, m["s_h"], m["s_a"], m["rho"]), rel=1e-9)


def test_gain_is_human_mse_minus_pool_mse_and_broadcasts():
    w = np.linspace(0, 1, 11)[:, None]
    rho = np.array([-1.0, 0.0, 0.5])[None, :]
    g = pooling_gain(w, 0.3, 0.2, rho)
    assert g.shape == (11, 3)
    np.testing.assert_allclose(g, 0.09 - pooling_mse(w, 0.3, 0.2, rho), atol=1e-15)
    np.testing.assert_allclose(g[0], 0.0, atol=1e-15)  # w = 0 is the human


def test_optimal_weight_minimises_mse_on_a_fine_grid():
    rng = np.random.default_rng(0)
    grid = np.linspace(-1, 2, 30_001)
    for _ in range(50):
        s_h, s_a = rng.uniform(0.05, 0.6, 2)
        rho = rng.uniform(-1, 1)
        w = optimal_pooling_weight(s_h, s_a, rho, clip=False)
        assert pooling_mse(w, s_h, s_a, rho) <= pooling_mse(grid, s_h, s_a, rho).min() + 1e-12
        wc = optimal_pooling_weight(s_h, s_a, rho)
        g01 = grid[(grid >= 0) & (grid <= 1)]
        assert pooling_mse(wc, s_h, s_a, rho) <= pooling_mse(g01, s_h, s_a, rho).min() + 1e-12


def test_degenerate_cases_closed_form():
    # perfectly anti-correlated, equal errors: w = 1/2 and zero MSE
    assert optimal_pooling_weight(0.4, 0.4, -1.0) == 0.5
    assert pooling_mse(0.5, 0.4, 0.4, -1.0) == 0.0
    r = robust_pooling_weight(0.4, 0.4, -1.0)
    assert r.w == 0.5 and r.guaranteed_gain == pytest.approx(0.16)
    # independent errors: inverse-variance weights
    assert optimal_pooling_weight(0.2, 0.4, 0.0) == pytest.approx(0.04 / (0.04 + 0.16))
    # equal accuracies, any rho < 1: w = 1/2, gain s^2 (1 - rho) / 2
    for rho in (-0.5, 0.0, 0.8):
        r = robust_pooling_weight(0.3, 0.3, rho)
        assert r.w == pytest.approx(0.5)
        assert r.guaranteed_gain == pytest.approx(0.09 * (1 - rho) / 2)
    # perfectly correlated, equal errors: nothing to gain, keep the human
    r = robust_pooling_weight(0.3, 0.3, 1.0)
    assert r.w == 0.0 and r.guaranteed_gain == 0.0
    assert robust_improvement_interval(0.3, 0.3, 1.0) == (0.0, 0.0)
    # perfectly correlated, AI worse: still keep the human; AI better: w = s_h / (s_h - s_a) > 1
    assert robust_pooling_weight(0.3, 0.5, 1.0).w == 0.0
    assert robust_pooling_weight(0.3, 0.2, 1.0).w == 1.0
    # a perfect human
    assert robust_pooling_weight(0.0, (0.1, 0.3), (-0.5, 0.5)).w == 0.0


# --------------------------------------------------------------------------- estimation


@pytest.mark.parametrize("rho", RHOS)
def test_error_moments_recover_known_parameters(rho):
    """Consistency at large n: within 5 standard errors of the generator's values."""
    s_h, s_a, n = 0.3, 0.4, 200_000
    m = error_moments(*simulate_forecasts(n, s_h, s_a, rho, rng=3)[:3])
    assert abs(m["s_h"] - s_h) < 5 * s_h / np.sqrt(2 * n)
    assert abs(m["s_a"] - s_a) < 5 * s_a / np.sqrt(2 * n)
    assert abs(m["rho"] - rho) < 5 * (1 - rho**2) / np.sqrt(n) + 1e-3


@pytest.mark.parametrize("rho", [-0.7, 0.0, 0.5])
def test_noise_floor_recovers_latent_correlations(rho):
    """Errors relative to p*: the outcome moments add E p*(1-p*); noise_floor removes it."""
    sim = simulate_forecasts(300_000, 0.15, 0.2, rho, kind="latent", base_rate=0.4, rng=5)
    m = error_moments(sim.h, sim.a, sim.y, noise_floor=sim.noise_floor)
    assert m["s_h"] == pytest.approx(0.15, abs=0.01)
    assert m["s_a"] == pytest.approx(0.2, abs=0.01)
    assert m["rho"] == pytest.approx(rho, abs=0.04)
    raw = error_moments(sim.h, sim.a, sim.y)
    assert raw["rho"] > m["rho"]  # the shared outcome noise inflates the outcome correlation
    # gains do not depend on the floor
    w = np.linspace(0, 1, 5)
    np.testing.assert_allclose(pooling_gain(w, raw["s_h"], raw["s_a"], raw["rho"]),
                               pooling_gain(w, m["s_h"], m["s_a"], m["rho"]), atol=1e-12)
    # the true noise floor of the generator
    assert np.mean(sim.p_true * (1 - sim.p_true)) == pytest.approx(sim.noise_floor, rel=0.02)


def test_centered_moments_are_pearson_and_hand_computed():
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 500)
    h = np.clip(y + rng.normal(0.1, 0.3, 500), 0, 1)
    a = np.clip(y + rng.normal(-0.05, 0.25, 500), 0, 1)
    m = error_moments(h, a, y, centered=True)
    assert m["rho"] == pytest.approx(np.corrcoef(h - y, a - y)[0, 1], rel=1e-10)
    assert m["s_h"] == pytest.approx(np.std(h - y), rel=1e-10)
    u = error_moments(h, a, y)
    eh, ea = h - y, a - y
    assert u["cov"] == pytest.approx(np.mean(eh * ea))
    assert u["rho"] == pytest.approx(np.mean(eh * ea) / np.sqrt(np.mean(eh**2) * np.mean(ea**2)))
    assert u["bias_h"] == pytest.approx(eh.mean())


def test_probability_forecasts_have_nonnegative_outcome_error_correlation():
    """For forecasts in [0,1] of a 0/1 outcome the errors share their sign (module docstring)."""
    rng = np.random.default_rng(9)
    for _ in range(20):
        y = rng.integers(0, 2, 300)
        h, a = rng.random(300), rng.random(300)
        assert error_moments(h, a, y)["rho"] >= 0


def test_bootstrap_matches_an_explicit_resampling_loop():
    sim = simulate_forecasts(700, 0.3, 0.35, -0.3, rng=4)
    boot = bootstrap_error_moments(sim.h, sim.a, sim.y, n_boot=50, rng=123)
    gen = np.random.default_rng(123)
    idx = gen.integers(0, 700, size=(50, 700))  # one chunk: 50 * 700 < the chunk limit
    for b in (0, 17, 49):
        i = idx[b]
        ref = error_moments(sim.h[i], sim.a[i], sim.y[i])
        assert boot["rho"][b] == pytest.approx(ref["rho"], rel=1e-12)
        assert boot["s_a"][b] == pytest.approx(ref["s_a"], rel=1e-12)
    # the count form draws the same resamples
    counts = bootstrap_counts(700, 50, np.random.default_rng(123))
    np.testing.assert_array_equal(counts[17], np.bincount(idx[17], minlength=700))
    # chunking does not change the draws' statistics: chunked means == counts @ stats / n
    stats = np.stack([sim.h, sim.a])
    means = bootstrap_means(stats, 50, np.random.default_rng(123))
    np.testing.assert_allclose(means, counts @ stats.T / 700, rtol=1e-12)


def test_bootstrap_interval_agrees_with_scipy_bootstrap():
    """Percentile CI of the uncentred rho vs scipy.stats.bootstrap (the peer), MC tolerance."""
    from scipy.stats import bootstrap

    sim = simulate_forecasts(3000, 0.3, 0.4, 0.2, rng=8)
    eh, ea = sim.h - sim.y, sim.a - sim.y

    def stat(x, z, axis=-1):
        return np.mean(x * z, axis=axis) / np.sqrt(np.mean(x * x, axis=axis)
                                                    * np.mean(z * z, axis=axis))

    res = bootstrap((eh, ea), stat, paired=True, vectorized=True, n_resamples=2000,
                    method="percentile", confidence_level=0.9, rng=np.random.default_rng(0))
    boot = bootstrap_error_moments(sim.h, sim.a, sim.y, n_boot=2000, rng=1)
    lo, hi = np.quantile(boot["rho"], [0.05, 0.95])
    width = res.confidence_interval.high - res.confidence_interval.low
    assert abs(lo - res.confidence_interval.low) < 0.1 * width
    assert abs(hi - res.confidence_interval.high) < 0.1 * width
    # and the asymptotic normal-theory standard error (1 - rho^2) / sqrt(n)
    assert np.std(boot["rho"]) == pytest.approx((1 - 0.2**2) / np.sqrt(3000), rel=0.15)


# --------------------------------------------------------------------------- the robust weight


def _random_boxes(k, seed):
    rng = np.random.default_rng(seed)
    for _ in range(k):
        s_h = rng.uniform(0.05, 0.5)
        sa = np.sort(rng.uniform(0.05, 0.6, 2))
        rr = np.sort(rng.uniform(-1, 1, 2))
        yield s_h, tuple(sa), tuple(rr)


def test_exact_robust_weight_matches_grid_and_cvxpy():
    for s_h, sa, rr in _random_boxes(40, 1):
        ex = robust_pooling_weight(s_h, sa, rr)
        gr = robust_pooling_weight(s_h, sa, rr, method="grid", grid=np.linspace(0, 1, 20_001))
        assert ex.guaranteed_gain >= gr.guaranteed_gain - 1e-14
        assert ex.guaranteed_gain - gr.guaranteed_gain < 1e-7 * s_h**2 + 1e-12
    for s_h, sa, rr in _random_boxes(6, 2):
        ex = robust_pooling_weight(s_h, sa, rr)
        cv = robust_pooling_weight(s_h, sa, rr, method="cvxpy")
        assert abs(ex.guaranteed_gain - cv.guaranteed_gain) < 1e-6 * max(s_h**2, 1e-3)


def test_point_box_gives_the_classical_weight():
    for s_h, sa, rr in _random_boxes(30, 3):
        r = robust_pooling_weight(s_h, sa[0], rr[0])
        assert r.w == pytest.approx(optimal_pooling_weight(s_h, sa[0], rr[0]), abs=1e-12)


def test_guarantee_holds_on_a_dense_grid_of_each_box():
    """min over a 41 x 41 grid of U of G(w*) never falls below the guaranteed gain, and no
    weight on a grid does better in the worst case (max-min optimality)."""
    wgrid = np.linspace(0, 1, 401)
    for s_h, sa, rr in _random_boxes(40, 4):
        r = robust_pooling_weight(s_h, sa, rr)
        S, R = np.meshgrid(np.linspace(*sa, 41), np.linspace(*rr, 41))
        g = pooling_gain(r.w, s_h, S, R)
        assert g.min() >= r.guaranteed_gain - 1e-13
        assert g.min() == pytest.approx(r.guaranteed_gain, abs=1e-12)  # a vertex is on the grid
        assert r.guaranteed_gain >= 0
        worst_grid = np.min(pooling_gain(wgrid[:, None, None], s_h, S[None], R[None]), axis=(1, 2))
        assert worst_grid.max() <= r.guaranteed_gain + 1e-13


def test_negative_correlation_guarantees_improvement():
    """rho_hi <= 0 -> positive guaranteed gain, and the spec's sufficient interval
    (0, 2 s_h^2 / (s_h^2 + s_a_hi^2)) lies inside the exact improvement interval."""
    for s_h, sa, rr in _random_boxes(60, 5):
        rr = (min(rr[0], -abs(rr[1])), -abs(rr[1]))
        r = robust_pooling_weight(s_h, sa, rr)
        assert r.guaranteed_gain > 0 and r.w > 0
        _, hi = robust_improvement_interval(s_h, sa, rr)
        bound = min(1.0, 2 * s_h**2 / (s_h**2 + sa[1] ** 2))
        assert hi >= bound - 1e-12
        ws = np.linspace(0, 1, 201)[1:-1]
        inside = ws[ws < hi]
        assert (worst_case_gain(inside, s_h, sa, rr) > 0).all()
        if hi < 1:
            outside = ws[ws > hi + 1e-9]
            assert (worst_case_gain(outside, s_h, sa, rr) <= 1e-15).all()


def test_no_robust_improvement_when_rho_hi_times_s_a_hi_exceeds_s_h():
    tested = 0
    for s_h, sa, rr in _random_boxes(200, 6):
        rho_hi = s_h / sa[1] + 0.05
        if rho_hi > 1 or rho_hi < rr[0]:
            continue
        tested += 1
        r = robust_pooling_weight(s_h, sa, (rr[0], rho_hi))
        assert r.w == 0.0 and r.guaranteed_gain == 0.0
        assert robust_improvement_interval(s_h, sa, (rr[0], rho_hi)) == (0.0, 0.0)
    assert tested >= 10


@pytest.mark.parametrize("rho", RHOS)
def test_guarantee_on_simulated_correlated_errors(rho):
    """Across the stated range: fit on simulated data, then whenever the box covers the truth
    the true gain of the chosen weight is >= the guaranteed gain; out of sample on fresh data
    the empirical gain is >= the guaranteed gain minus Monte-Carlo error."""
    s_h, s_a = 0.3, 0.35
    covered = 0
    for rep in range(3):
        sim = simulate_forecasts(4000, s_h, s_a, rho, rng=100 + rep)
        model = RobustComplementarity(n_boot=300, random_state=rep).fit(
            np.column_stack([sim.h, sim.a]), sim.y)
        lo, hi = model.s_a_range_
        rlo, rhi = model.rho_range_
        if lo <= s_a <= hi and rlo <= rho <= rhi:
            covered += 1
            truth = pooling_gain(model.weight_, model.s_h_, s_a, rho)
            assert truth >= model.guaranteed_gain_ - 1e-12
        test = simulate_forecasts(200_000, s_h, s_a, rho, rng=900 + rep)
        gain = model.score(np.column_stack([test.h, test.a]), test.y)
        assert gain >= model.guaranteed_gain_ - 0.004
        if rho <= -0.2:
            assert model.guaranteed_gain_ > 0
        # PROPOSED: robust to the DM's own estimated s_h as well
        unsure = RobustComplementarity(n_boot=300, random_state=rep, human_uncertain=True).fit(
            np.column_stack([sim.h, sim.a]), sim.y)
        assert unsure.score(np.column_stack([test.h, test.a]), test.y) >= (
            unsure.guaranteed_gain_ - 0.004)
        assert unsure.guaranteed_gain_ <= model.guaranteed_gain_ + 1e-15
        if rho >= 0.9:
            assert model.weight_ == 0.0  # rho s_a > s_h: the AI cannot help robustly
    assert covered >= 2


def test_box_coverage_near_nominal():
    """The Bonferroni bootstrap box covers the true (s_a, rho) in >= 85% of 40 data sets
    (nominal 95%)."""
    hits = 0
    for rep in range(40):
        sim = simulate_forecasts(1500, 0.3, 0.4, -0.3, rng=rep)
        m = RobustComplementarity(n_boot=200, random_state=rep).fit(
            np.column_stack([sim.h, sim.a]), sim.y)
        hits += (m.s_a_range_[0] <= 0.4 <= m.s_a_range_[1]
                 and m.rho_range_[0] <= -0.3 <= m.rho_range_[1])
    assert hits >= 34


def test_fisher_box_close_to_bootstrap_box():
    sim = simulate_forecasts(5000, 0.3, 0.4, 0.1, rng=12)
    X = np.column_stack([sim.h, sim.a])
    b = RobustComplementarity(n_boot=1000, random_state=0).fit(X, sim.y)
    f = RobustComplementarity(uncertainty="fisher").fit(X, sim.y)
    wb, wf = np.diff(b.rho_range_)[0], np.diff(f.rho_range_)[0]
    assert wf == pytest.approx(wb, rel=0.25)
    assert f.rho_range_[0] < f.moments_["rho"] < f.rho_range_[1]
    assert f.s_a_range_[0] < f.moments_["s_a"] < f.s_a_range_[1]


# --------------------------------------------------------------------------- the estimator


def test_estimator_predict_score_and_strategies():
    sim = simulate_forecasts(3000, 0.3, 0.3, -0.4, rng=21)
    X = np.column_stack([sim.h, sim.a])
    X0 = X.copy()
    fits = {s: RobustComplementarity(strategy=s, n_boot=200, random_state=0).fit(X, sim.y)
            for s in STRATEGIES}
    np.testing.assert_array_equal(X, X0)  # not mutated
    assert fits["human"].weight_ == 0.0 and fits["ai"].weight_ == 1.0
    assert fits["average"].weight_ == 0.5
    m = error_moments(sim.h, sim.a, sim.y)
    assert fits["plugin"].weight_ == pytest.approx(optimal_pooling_weight(m["s_h"], m["s_a"],
                                                                          m["rho"]))
    rob = fits["robust"]
    assert rob.weight_ == pytest.approx(
        robust_pooling_weight(rob.s_h_, rob.s_a_range_, rob.rho_range_).w)
    # the robust weight has the largest worst-case gain of all strategies on the same box
    for s, f in fits.items():
        assert worst_case_gain(f.weight_, rob.s_h_, rob.s_a_range_, rob.rho_range_) <= (
            rob.guaranteed_gain_ + 1e-15), s
    np.testing.assert_allclose(rob.predict(X), (1 - rob.weight_) * sim.h + rob.weight_ * sim.a)
    from sklearn.metrics import brier_score_loss

    Xp = np.clip(X, 0, 1)
    gain = brier_score_loss(sim.y, Xp[:, 0]) - brier_score_loss(sim.y, rob.predict(Xp))
    assert rob.score(Xp, sim.y) == pytest.approx(gain, rel=1e-10)
    # reproducible, picklable
    again = RobustComplementarity(n_boot=200, random_state=0).fit(X, sim.y)
    assert again.rho_range_ == rob.rho_range_
    clone = pickle.loads(pickle.dumps(rob))
    np.testing.assert_array_equal(clone.predict(X), rob.predict(X))


def test_user_box_overrides_and_uncertainty_none():
    sim = simulate_forecasts(1000, 0.3, 0.3, 0.0, rng=22)
    X = np.column_stack([sim.h, sim.a])
    m = RobustComplementarity(s_a_range=(0.2, 0.5), rho_range=(-0.2, 0.1)).fit(X, sim.y)
    assert m.s_a_range_ == (0.2, 0.5) and m.rho_range_ == (-0.2, 0.1)
    assert m.weight_ == pytest.approx(robust_pooling_weight(m.s_h_, (0.2, 0.5), (-0.2, 0.1)).w)
    p = RobustComplementarity(uncertainty="none").fit(X, sim.y)
    q = RobustComplementarity(strategy="plugin", uncertainty="none").fit(X, sim.y)
    assert p.weight_ == pytest.approx(q.weight_, abs=1e-12)


def test_several_ai_columns_pick_the_complementary_one():
    rng = np.random.default_rng(7)
    n = 4000
    y = rng.integers(0, 2, n).astype(float)
    e = rng.normal(0, 0.3, n)
    h = y + e
    echo = y + 0.95 * e + rng.normal(0, 0.05, n)        # repeats the human's errors
    indep = y - 0.3 * e + rng.normal(0, 0.3, n)         # negatively correlated errors
    X = np.column_stack([h, echo, indep])
    m = RobustComplementarity(n_boot=200, random_state=0).fit(X, y)
    assert m.ai_index_ == 1
    assert m.guaranteed_gains_[1] > m.guaranteed_gains_[0]
    single = RobustComplementarity(n_boot=200, random_state=0).fit(X[:, [0, 2]], y)
    assert single.weight_ == pytest.approx(m.weight_)
    np.testing.assert_allclose(m.predict(X), single.predict(X[:, [0, 2]]))


def test_logit_space_scenario_max_min_against_brute_force():
    rng = np.random.default_rng(13)
    n = 1500
    p = rng.beta(2, 2, n)
    y = (rng.random(n) < p).astype(int)
    h = np.clip(p + rng.normal(0, 0.15, n), 0.01, 0.99)
    a = np.clip(p + rng.normal(0, 0.15, n), 0.01, 0.99)
    X = np.column_stack([h, a])
    full = RobustComplementarity(space="logit", strategy="plugin", uncertainty="none").fit(X, y)
    grid = np.linspace(0, 1, 201)
    gains = [np.mean((h - y) ** 2) - np.mean((pool(h, a, w, space="logit") - y) ** 2)
             for w in grid]
    assert full.weight_ == pytest.approx(grid[int(np.argmax(gains))])
    rob = RobustComplementarity(space="logit", n_boot=100, random_state=0).fit(X, y)
    counts = bootstrap_counts(n, 100, np.random.default_rng(
        np.random.default_rng(0).integers(0, 2**63 - 1)))
    L = np.stack([(h - y) ** 2 - (pool(h, a, w, space="logit") - y) ** 2 for w in grid], axis=1)
    worst = (counts @ L / n).min(axis=0)
    assert rob.weight_ == pytest.approx(grid[int(np.argmax(worst))])
    assert rob.guaranteed_gain_ == pytest.approx(worst.max(), rel=1e-10)
    assert rob.guaranteed_gain_ <= full.guaranteed_gain_ + 1e-15
    assert 0.2 < rob.weight_ < 0.8  # equally good, independent forecasters


def test_decide_is_the_bayes_action():
    rng = np.random.default_rng(1)
    U = rng.normal(size=(4, 2))
    p = rng.random(300)
    act = decide(p, U)
    eu = np.array([[(1 - q) * U[k, 0] + q * U[k, 1] for k in range(4)] for q in p])
    np.testing.assert_array_equal(act, eu.argmax(axis=1))


# --------------------------------------------------------------------------- real predictions


def _compas_forecasts():
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    from rml_fast.datasets import load_binarized

    X, y, _ = load_binarized("compas-binned")
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    train, fit, test = np.array_split(idx, 3)
    p = X.shape[1]
    half = p // 2
    # the "human": a logistic regression on the first half of the features; the "AI": a
    # gradient-boosted tree on all features
    human = LogisticRegression(max_iter=500).fit(X[train][:, :half], y[train])
    ai = HistGradientBoostingClassifier(max_iter=60, random_state=0).fit(X[train], y[train])

    def f(rows):
        return np.column_stack([human.predict_proba(X[rows][:, :half])[:, 1],
                                ai.predict_proba(X[rows])[:, 1]]), y[rows]

    return f(fit), f(test)


def test_real_predictions_on_compas():
    (Xf, yf), (Xt, yt) = _compas_forecasts()
    res = compare_strategies(Xf, yf, Xt, yt, n_boot=300, random_state=0,
                             utility=[[0.0, 0.0], [-1.0, 1.0]])
    m = error_moments(Xf[:, 0], Xf[:, 1], yf)
    assert m["rho"] >= 0  # probability forecasts of a 0/1 outcome (see module docstring)
    rob = res["robust"]
    assert rob["guaranteed_gain"] >= 0
    assert 0 <= rob["weight"] <= 1
    # out of sample the robust pool is never much worse than the human (the guarantee up to
    # sampling error), and it does at least as well as the worse of the two single forecasters
    assert rob["gain"] >= -0.003
    assert rob["brier"] <= max(res["human"]["brier"], res["ai"]["brier"]) + 1e-12
    for s in STRATEGIES:
        assert res[s]["guaranteed_gain"] <= rob["guaranteed_gain"] + 1e-15
        assert -1.0 <= res[s]["utility"] <= 1.0


# --------------------------------------------------------------------------- bad input


def test_bad_input_raises_clearly():
    h, a, y = np.array([0.2, 0.5, 0.9]), np.array([0.1, 0.6, 0.7]), np.array([0, 1, 1])
    with pytest.raises(ValueError, match="same shape"):
        error_moments(h, a[:2], y)
    with pytest.raises(ValueError, match="finite"):
        error_moments(np.array([0.2, np.nan, 0.9]), a, y)
    with pytest.raises(ValueError, match="at least 2"):
        error_moments(h[:1], a[:1], y[:1])
    with pytest.raises(ValueError, match="noise_floor"):
        error_moments(h, a, y, noise_floor=-0.1)
    with pytest.raises(ValueError, match="rho"):
        pooling_gain(0.5, 0.3, 0.3, 1.5)
    with pytest.raises(ValueError, match="s_h and s_a"):
        pooling_mse(0.5, -0.3, 0.3, 0.0)
    with pytest.raises(ValueError, match="lo <= hi"):
        robust_pooling_weight(0.3, (0.4, 0.2), (0.0, 0.1))
    with pytest.raises(ValueError, match=r"rho_range\[1\]"):
        robust_pooling_weight(0.3, (0.2, 0.4), (0.0, 1.1))
    with pytest.raises(ValueError, match=r"s_a_range\[0\]"):
        robust_pooling_weight(0.3, (-0.2, 0.4), 0.0)
    with pytest.raises(ValueError, match="method"):
        robust_pooling_weight(0.3, 0.3, 0.0, method="bisect")
    with pytest.raises(ValueError, match="grid"):
        robust_pooling_weight(0.3, 0.3, 0.0, method="grid", grid=[0.0, 1.5])
    with pytest.raises(TypeError, match="s_h"):
        robust_pooling_weight("0.3", 0.3, 0.0)
    with pytest.raises(ValueError, match="rho"):
        simulate_forecasts(10, 0.3, 0.3, -1.2)
    with pytest.raises(ValueError, match="kind"):
        simulate_forecasts(10, 0.3, 0.3, 0.0, kind="beta")
    with pytest.raises(ValueError, match="space='logit'"):
        pool([0.2, 1.3], [0.1, 0.2], 0.5, space="logit")
    with pytest.raises(ValueError, match="w must be"):
        pool([0.2], [0.1], 1.5)
    with pytest.raises(ValueError, match="n_actions, 2"):
        decide([0.2], [[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="probabilities"):
        decide([1.2], [[1.0, 2.0]])
    X = np.column_stack([h, a])
    for kw, pat in [({"strategy": "best"}, "strategy"), ({"uncertainty": "cp"}, "uncertainty"),
                    ({"space": "probit"}, "space"), ({"alpha": 1.5}, "alpha"),
                    ({"n_boot": 0}, "n_boot"), ({"rho_range": (0.5, 0.1)}, "rho_range")]:
        with pytest.raises(ValueError, match=pat):
            RobustComplementarity(**kw).fit(X, y)
    with pytest.raises(ValueError, match="1 feature"):
        RobustComplementarity().fit(h[:, None], y)
    with pytest.raises(ValueError, match="0/1 outcomes"):
        RobustComplementarity(space="logit").fit(X, [0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        RobustComplementarity(space="logit").fit(X + 1, y)
    with pytest.raises(ValueError, match="strategies"):
        compare_strategies(X, y, X, y, strategies=["oracle"])


# --------------------------------------------------------------------------- uncertain s_h (PROPOSED)


def test_uncertain_human_error_against_brute_force():
    """s_h a range: the worst case over a 3-D grid of the box equals the guaranteed gain (up
    to the grid), the golden-section weight matches a dense grid, and the improvement interval
    is where the worst case is positive."""
    rng = np.random.default_rng(31)
    for _ in range(12):
        sh = tuple(np.sort(rng.uniform(0.1, 0.5, 2)))
        sa = tuple(np.sort(rng.uniform(0.1, 0.5, 2)))
        rr = tuple(np.sort(rng.uniform(-1, 1, 2)))
        r = robust_pooling_weight(sh, sa, rr)
        g = robust_pooling_weight(sh, sa, rr, method="grid", grid=np.linspace(0, 1, 20_001))
        assert r.guaranteed_gain >= g.guaranteed_gain - 1e-12
        assert r.guaranteed_gain - g.guaranteed_gain < 1e-8
        S, A, R = np.meshgrid(np.linspace(*sh, 61), np.linspace(*sa, 5), np.linspace(*rr, 5))
        brute = pooling_gain(r.w, S, A, R).min()
        assert brute >= r.guaranteed_gain - 1e-13
        assert brute - r.guaranteed_gain < 1e-3 * sh[1] ** 2
        # robust to its own error too: never more than the known-s_h guarantee at either end
        for s in sh:
            assert r.guaranteed_gain <= robust_pooling_weight(s, sa, rr).guaranteed_gain + 1e-13
        _, hi = robust_improvement_interval(sh, sa, rr)
        ws = np.linspace(0, 1, 401)[1:]
        wc = worst_case_gain(ws, sh, sa, rr)
        assert (wc[ws < hi - 1e-9] > 0).all() and (wc[ws > hi + 1e-9] <= 1e-15).all()
    # a degenerate range is the point case
    p = robust_pooling_weight((0.3, 0.3), (0.2, 0.4), (-0.5, 0.1))
    q = robust_pooling_weight(0.3, (0.2, 0.4), (-0.5, 0.1))
    assert p == q
    with pytest.raises(ValueError, match="cvxpy"):
        robust_pooling_weight((0.2, 0.3), 0.3, 0.0, method="cvxpy")


def test_human_uncertain_estimator_is_more_conservative():
    sim = simulate_forecasts(800, 0.3, 0.35, -0.2, rng=41)
    X = np.column_stack([sim.h, sim.a])
    known = RobustComplementarity(n_boot=300, random_state=0).fit(X, sim.y)
    unsure = RobustComplementarity(n_boot=300, random_state=0, human_uncertain=True).fit(X, sim.y)
    lo, hi = unsure.s_h_range_
    assert lo < unsure.s_h_ < hi and known.s_h_range_ == (known.s_h_, known.s_h_)
    assert 0 < unsure.guaranteed_gain_ < known.guaranteed_gain_
    assert unsure.guaranteed_gain_ == pytest.approx(
        worst_case_gain(unsure.weight_, (lo, hi), unsure.s_a_range_, unsure.rho_range_))
    fisher = RobustComplementarity(uncertainty="fisher", human_uncertain=True).fit(X, sim.y)
    assert fisher.s_h_range_[0] < fisher.s_h_ < fisher.s_h_range_[1]
