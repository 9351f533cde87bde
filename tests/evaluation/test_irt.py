"""Graded response model and judge diagnostics (rml_fast.evaluation.irt).

Oracles: R mirt's published Science estimates, girth (run here), a plain NumPy/SciPy reference
fit of the marginal likelihood, simulation recovery, closed forms and invariants.
"""

from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest
from scipy import stats

from rml_fast.datasets import load_science
from rml_fast.evaluation.irt import (
    GradedResponseModel,
    _reference_fit,
    _reference_loglik,
    diagnose_judge,
    judge_alignment,
    judge_consistency,
    krippendorff_alpha,
)

# mirt, tests/testthat/test-02-mirtTwo.R (github philchalmers/mirt), test 'poly':
# mirt(Science, 1) graded coefficients (a1, d1, d2, d3 per item), asserted there with
# tolerance = 1e-2, and the Louis-information standard errors of
# mirt(Science, 1, SE=TRUE, SE.type='Louis') (asserted there with tolerance 1e-4).
MIRT_SCIENCE = np.array([
    [1.041, 4.864, 2.64, -1.466],
    [1.226, 2.924, 0.901, -2.266],
    [2.296, 5.238, 2.216, -1.965],
    [1.095, 3.348, 0.992, -1.688],
])
MIRT_SCIENCE_LOUIS_SE = np.array([
    [0.1883, 0.49058, 0.22257, 0.15863],
    [0.1818, 0.23925, 0.14289, 0.20304],
    [0.48523, 0.73208, 0.35808, 0.32343],
    [0.1833, 0.27648, 0.14048, 0.16859],
])
# mirt's reference page for logLik (docs/reference/logLik-method.md): logLik(mirt(Science, 1))
MIRT_SCIENCE_LOGLIK = -1608.87


@pytest.fixture(scope="module")
def science():
    Y, _ = load_science()
    return Y, GradedResponseModel(se=True).fit(Y)


def _simulate(N, J, K, seed, a_range=(0.8, 2.5)):
    rng = np.random.default_rng(seed)
    a = rng.uniform(*a_range, J)
    b = np.sort(rng.standard_normal((J, K - 1)), axis=1) + 0.15 * np.arange(K - 1)
    truth = GradedResponseModel.from_params(a, -a[:, None] * b)
    theta = rng.standard_normal(N)
    return truth.simulate(theta, rng=seed + 1), a, b, theta


# --------------------------------------------------------------------------- published numbers


def test_science_coefficients_match_mirt(science):
    """a, d on the Science data equal mirt's within its own test tolerance (1e-2)."""
    _, m = science
    ours = np.column_stack([m.a_, m.d_])
    np.testing.assert_allclose(ours, MIRT_SCIENCE, rtol=1e-2, atol=1e-2)
    assert m.converged_


def test_science_loglik_matches_mirt(science):
    _, m = science
    assert abs(m.loglik_ - MIRT_SCIENCE_LOGLIK) < 0.01


def test_science_standard_errors_match_mirt_louis(science):
    """Our numerical-Hessian SEs are the observed-information SEs mirt calls 'Louis'."""
    _, m = science
    ours = np.column_stack([m.se_["a"], m.se_["d"]])
    np.testing.assert_allclose(ours, MIRT_SCIENCE_LOUIS_SE, rtol=2e-2)


def test_science_eap_matches_mirt_interior_patterns(science):
    """EAP of the sorted unique patterns 2, 3, 4, 6 as mirt's fscores (same test file).

    (The extreme patterns 1 and 5 are left out: that mirt version integrated over
    [-4, 4], which moves only the EAP of extreme patterns.)
    """
    Y, m = science
    U = np.unique(Y, axis=0)
    th, _ = m.theta(U)
    mirt = np.array([-1.4189304, -0.7155405, -0.4452374, -1.2481305])
    np.testing.assert_allclose(th[[1, 2, 3, 5]], mirt, atol=2e-3)


# --------------------------------------------------------------------------- reference fit


def test_em_matches_direct_lbfgs_reference(science):
    """EM's optimum = L-BFGS on the marginal likelihood (NumPy reference), same quadrature."""
    Y, m = science
    a, d, ll = _reference_fit((Y - 1).astype(float))
    assert m.loglik_ >= ll - 1e-4
    assert abs(m.loglik_ - ll) < 1e-3
    np.testing.assert_allclose(m.a_, a, atol=5e-3)
    np.testing.assert_allclose(m.d_, d, atol=1e-2)


def test_score_function_zero_at_the_fit(science):
    """Finite-difference gradient of the reference marginal log-lik vanishes at our estimates."""
    Y, m = science
    Yc = (Y - 1).astype(float)
    x = np.column_stack([m.a_, m.d_])
    g = np.zeros_like(x)
    h = 1e-5
    for idx in np.ndindex(*x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = (_reference_loglik(xp[:, 0], xp[:, 1:], Yc)
                  - _reference_loglik(xm[:, 0], xm[:, 1:], Yc)) / (2 * h)
    assert np.abs(g).max() < 0.05, g


def test_standard_errors_equal_reference_hessian(science):
    """se_ = sqrt diag of the inverse negative Hessian of the reference marginal log-lik."""
    Y, m = science
    Yc = (Y - 1).astype(float)
    x = np.column_stack([m.a_, m.d_]).ravel()

    def f(v):
        v = v.reshape(4, 4)
        return _reference_loglik(v[:, 0], v[:, 1:], Yc)

    p = x.size
    H = np.empty((p, p))
    h = 1e-3
    for i in range(p):
        for j in range(i, p):
            e_i, e_j = np.eye(p)[i] * h, np.eye(p)[j] * h
            H[i, j] = H[j, i] = (f(x + e_i + e_j) - f(x + e_i - e_j) - f(x - e_i + e_j)
                                 + f(x - e_i - e_j)) / (4 * h * h)
    se = np.sqrt(np.diag(np.linalg.inv(-H))).reshape(4, 4)
    ours = np.column_stack([m.se_["a"], m.se_["d"]])
    np.testing.assert_allclose(ours, se, rtol=1e-2)
    # delta method for b = -d / a
    assert np.all(np.isfinite(m.se_["b"])) and np.all(m.se_["b"] > 0)


def test_missing_responses_are_skipped():
    """With NaNs, loglik_ equals the reference marginal log-lik over observed cells only."""
    Y, _ = load_science()
    Y = Y.astype(float)
    rng = np.random.default_rng(3)
    Y[rng.random(Y.shape) < 0.1] = np.nan
    m = GradedResponseModel().fit(Y)
    assert abs(m.loglik_ - _reference_loglik(m.a_, m.d_, Y - 1)) < 1e-6
    _, _, ll = _reference_fit(Y - 1)
    assert abs(m.loglik_ - ll) < 1e-3


# --------------------------------------------------------------------------- peers and simulation


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_matches_girth_grm_mml_on_simulated_data():
    girth = pytest.importorskip("girth")
    Y, _, _, _ = _simulate(1500, 5, 4, seed=11)
    m = GradedResponseModel().fit(Y)
    res = girth.grm_mml((Y + 1).T)       # items x persons, categories from 1
    assert np.abs(res["Discrimination"] - m.a_).max() < 0.05
    assert np.abs(res["Difficulty"] - m.b_).max() < 0.05
    # ours maximises the same marginal likelihood at least as well
    ag, bg = res["Discrimination"], res["Difficulty"]
    assert m.loglik_ >= _reference_loglik(ag, -ag[:, None] * bg, Y.astype(float)) - 1e-6


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_two_categories_reduce_to_2pl_girth():
    girth = pytest.importorskip("girth")
    Y, _, _, _ = _simulate(2000, 6, 2, seed=5)
    m = GradedResponseModel().fit(Y)
    res = girth.twopl_mml(Y.T)
    assert np.abs(res["Discrimination"] - m.a_).max() < 0.05
    assert np.abs(res["Difficulty"] - m.b_[:, 0]).max() < 0.05


def test_simulation_recovery():
    """N=5000, J=10, K=5, a ~ U(0.8, 2.5), ordered b: the spec's recovery oracle."""
    Y, a, b, theta = _simulate(5000, 10, 5, seed=2)
    m = GradedResponseModel().fit(Y)
    assert np.corrcoef(m.a_, a)[0, 1] > 0.95
    assert np.sqrt(np.mean((m.b_ - b) ** 2)) < 0.15
    th, psd = m.theta()
    r = np.corrcoef(th, theta)[0, 1]
    expected = np.sqrt(1 - np.mean(psd**2))   # corr(E[theta|y], theta)^2 = 1 - E var(theta|y)
    assert abs(r - expected) < 0.02


def test_squarem_and_plain_em_reach_the_same_optimum():
    Y, _, _, _ = _simulate(1000, 6, 4, seed=9)
    m1 = GradedResponseModel(tol=1e-6).fit(Y)
    m2 = GradedResponseModel(tol=1e-6, accelerate=None, max_iter=5000).fit(Y)
    assert m1.n_iter_ < m2.n_iter_
    assert abs(m1.loglik_ - m2.loglik_) < 1e-4
    np.testing.assert_allclose(m1.a_, m2.a_, atol=2e-3)


# --------------------------------------------------------------------------- invariants


def test_category_probs_sum_to_one_and_information_closed_form():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 3, 4)
    d = np.sort(rng.normal(0, 2, (4, 5)), axis=1)[:, ::-1]
    m = GradedResponseModel.from_params(a, d)
    t = np.linspace(-5, 5, 41)
    P = m.category_probs(t)
    assert P.shape == (41, 4, 6)
    assert np.all(P >= 0)
    np.testing.assert_allclose(P.sum(axis=2), 1.0, atol=1e-12)
    # information = derivative of the expected score's variance form: sum_k P'^2 / P
    h = 1e-5
    dP = (m.category_probs(t + h) - m.category_probs(t - h)) / (2 * h)
    np.testing.assert_allclose(m.item_information(t), (dP**2 / P).sum(axis=2), rtol=1e-5)
    # K = 2: the 2PL information a^2 p (1 - p)
    m2 = GradedResponseModel.from_params(a, d[:, :1])
    p = 1 / (1 + np.exp(-(a[None] * t[:, None] + d[None, :, 0])))
    np.testing.assert_allclose(m2.item_information(t), a**2 * p * (1 - p), rtol=1e-10)


def test_permuting_persons_leaves_items_unchanged():
    Y, _, _, _ = _simulate(800, 5, 4, seed=4)
    perm = np.random.default_rng(1).permutation(len(Y))
    m1 = GradedResponseModel().fit(Y)
    m2 = GradedResponseModel().fit(Y[perm])
    np.testing.assert_allclose(m1.a_, m2.a_, atol=1e-8)
    np.testing.assert_allclose(m1.d_, m2.d_, atol=1e-8)
    np.testing.assert_allclose(m1.theta()[0][perm], m2.theta()[0], atol=1e-8)


def test_eap_monotone_in_sum_score_single_item():
    m = GradedResponseModel.from_params([1.7], [[2.0, 0.5, -0.3, -2.0]])
    th, psd = m.theta(np.arange(5.0)[:, None])
    assert np.all(np.diff(th) > 0)
    assert np.all(psd > 0) and np.all(psd < 1)


def test_simulate_reproducible_and_follows_probs():
    m = GradedResponseModel.from_params([1.2, 0.7], [[1.0, -1.0], [0.3, -0.2]], base=1)
    Y1 = m.simulate(np.zeros(20000), rng=7)
    np.testing.assert_array_equal(Y1, m.simulate(np.zeros(20000), rng=7))
    freq = np.stack([np.equal(Y1, c).mean(axis=0) for c in (1, 2, 3)], axis=1)
    np.testing.assert_allclose(freq, m.category_probs([0.0])[0], atol=0.015)


def test_unused_category_gets_zero_probability():
    """An item that never uses a middle category: its threshold duplicates the next one."""
    Y, _ = load_science()
    Y = Y.copy()
    Y[Y[:, 0] == 2, 0] = 3        # item 0 never answers 2
    m = GradedResponseModel().fit(Y)
    assert m.d_[0, 0] == m.d_[0, 1]
    np.testing.assert_allclose(m.category_probs([0.0, 1.0])[:, 0, 1], 0.0)
    bad = Y[:1].astype(float)
    bad[0, 0] = 2
    with pytest.raises(ValueError, match="never used"):
        m.theta(bad)


def test_map_priors_shrink_and_exist_where_mle_does_not():
    """Two items, few persons: the MLE slope runs off (warning); MAP with priors is finite."""
    from rml_fast.exceptions import ConvergenceWarning

    Y = np.array([[0, 0], [0, 0], [1, 1], [1, 1], [2, 2], [2, 2], [0, 1], [2, 1]])
    with pytest.warns(ConvergenceWarning, match="Heywood"):
        GradedResponseModel().fit(Y)
    m = GradedResponseModel(method="map").fit(Y)
    assert m.converged_ and np.all(np.isfinite(m.a_)) and np.all(m.a_ < 10)


def test_check_estimator_map():
    """The full scikit-learn check suite on the MAP variant (whose optimum always exists)."""
    from sklearn.exceptions import SkipTestWarning
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkipTestWarning)
        res = check_estimator(GradedResponseModel(method="map"), on_fail=None)
    failed = [r["check_name"] for r in res if r["status"] == "failed"]
    assert not failed, failed


# --------------------------------------------------------------------------- bad input


def test_bad_input_raises_clearly():
    with pytest.raises(ValueError, match="Y: every item shows a single category"):
        GradedResponseModel().fit(np.ones((10, 3)))
    Y = np.array([[1, 2, np.nan], [2, 1, np.nan], [1, 1, np.nan]])
    with pytest.raises(ValueError, match="item 2"):
        GradedResponseModel().fit(Y)
    with pytest.raises(ValueError, match="integer category codes"):
        GradedResponseModel().fit(np.array([[1.5, 2.0], [1.0, 2.0]]))
    with pytest.raises(ValueError, match="Negative values"):
        GradedResponseModel().fit(np.array([[-1, 2], [1, 2]]))
    with pytest.raises(ValueError, match="inf"):
        GradedResponseModel().fit(np.array([[np.inf, 2], [1, 2]]))
    with pytest.raises(ValueError, match="2-d"):
        GradedResponseModel().fit(np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="method"):
        GradedResponseModel(method="gibbs").fit(np.array([[1, 2], [2, 1]]))
    Y = np.array([[1.0, 2.0], [2.0, 1.0]])
    before = Y.copy()
    GradedResponseModel(method="map").fit(Y)
    np.testing.assert_array_equal(Y, before)


def test_judge_returning_nan_raises():
    def judge(prompt, text):
        return float("nan") if "bad" in text else 3.0

    with pytest.raises(ValueError, match="sample 1, prompt variant 0"):
        diagnose_judge(judge, ["ok", "bad", "ok"], ["p1", "p2"])


# --------------------------------------------------------------------------- classical metrics


def _alpha_bruteforce(R, metric):
    """Krippendorff alpha from all pairable value pairs (no coincidence matrix)."""
    units = [r[~np.isnan(r)] for r in R]
    units = [u for u in units if u.size >= 2]
    allv = np.concatenate(units)
    n = allv.size
    Do = sum(sum(metric(u[i], u[j], allv) for i in range(len(u)) for j in range(len(u)) if i != j)
             / (len(u) - 1) for u in units) / n
    De = sum(metric(allv[i], allv[j], allv) for i in range(n) for j in range(n) if i != j) / (
        n * (n - 1))
    return 1 - Do / De


def _ordinal(c, k, allv):
    lo, hi = min(c, k), max(c, k)
    vals, counts = np.unique(allv, return_counts=True)
    n = dict(zip(vals, counts, strict=True))
    between = sum(n[v] for v in vals if lo <= v <= hi)
    return (between - (n[c] + n[k]) / 2) ** 2


def test_krippendorff_alpha_matches_pairwise_definition():
    rng = np.random.default_rng(0)
    R = rng.integers(1, 6, size=(25, 4)).astype(float)
    R[:, 1] = np.clip(R[:, 0] + rng.integers(-1, 2, 25), 1, 5)
    R[rng.random(R.shape) < 0.15] = np.nan
    assert abs(krippendorff_alpha(R) - _alpha_bruteforce(R, _ordinal)) < 1e-12
    interval = _alpha_bruteforce(R, lambda c, k, _: (c - k) ** 2)
    assert abs(krippendorff_alpha(R, level="interval") - interval) < 1e-12
    nominal = _alpha_bruteforce(R, lambda c, k, _: float(c != k))
    assert abs(krippendorff_alpha(R, level="nominal") - nominal) < 1e-12


# --------------------------------------------------------------------------- judge diagnosis


def _stand_in_scores(N, shifts, slopes, seed, K=5):
    """Deterministic stand-in judges: score_v = GRM item with known slope and threshold shift."""
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(N)
    base_b = np.array([-1.5, -0.5, 0.5, 1.5])
    a = np.asarray(slopes, float)
    b = base_b[None, :] + np.asarray(shifts, float)[:, None]
    model = GradedResponseModel.from_params(a, -a[:, None] * b, base=1)
    return model.simulate(theta, rng=seed + 1), theta


def test_judge_consistency_detects_drift_and_dispersion():
    same, _ = _stand_in_scores(3000, [0, 0, 0], [2, 2, 2], seed=1)
    drift, _ = _stand_in_scores(3000, [-0.6, 0, 0.6], [2, 2, 2], seed=1)
    disp, _ = _stand_in_scores(3000, [0, 0, 0], [0.7, 2, 3.5], seed=1)
    r_same, r_drift, r_disp = (judge_consistency(s) for s in (same, drift, disp))
    assert r_same.threshold_drift < 0.15 and r_same.cv_a < 0.15
    # M2 ~ sd of the shifts (0.49)
    assert abs(r_drift.threshold_drift - np.std([-0.6, 0, 0.6])) < 0.1
    # M1 ~ CV of the true slopes (0.57)
    assert abs(r_disp.cv_a - np.std([0.7, 2, 3.5]) / np.mean([0.7, 2, 3.5])) < 0.12
    assert np.all(r_same.theta_stability > 0.7)
    assert 0 < r_same.reliability < 1


def test_judge_alignment_recovers_severity_offset():
    Y, _ = _stand_in_scores(3000, [0.5, 0.5, 0, 0], [2, 2, 2, 2], seed=3)
    rep = judge_alignment(Y[:, :2], Y[:, 2:])
    assert abs(rep.severity_offset - 0.5) < 0.12      # judge stricter by 0.5 on theta scale
    assert abs(rep.discrimination_ratio - 1) < 0.2
    assert rep.spearman_theta > 0.6
    mj, mh = Y[:, :2].mean(axis=1), Y[:, 2:].mean(axis=1)
    assert abs(rep.pearson - stats.pearsonr(mj, mh).statistic) < 1e-12
    assert -1 <= rep.qwk <= 1 and 0 < rep.krippendorff_alpha < 1 and 0 < rep.mcdonald_omega < 1


def test_diagnose_judge_end_to_end():
    """A deterministic stand-in judge with a known, variant-specific threshold shift."""
    rng = np.random.default_rng(0)
    quality = rng.standard_normal(400)
    samples = [f"sample-{i}" for i in range(400)]
    q_of = dict(zip(samples, quality, strict=True))
    shifts = {"strict": 0.8, "neutral": 0.0, "lenient": -0.8}

    def judge(prompt, text):
        noise = zlib.crc32(f"{prompt}|{text}".encode()) % 1000 / 1000 - 0.5   # deterministic
        return int(np.clip(np.round(3 + 1.2 * q_of[text] - shifts[prompt] + noise), 1, 5))

    human = np.clip(np.round(3 + 1.2 * quality + rng.uniform(-0.5, 0.5, 400)), 1, 5)
    out = diagnose_judge(judge, samples, list(shifts), human_scores=human)
    assert out["scores"].shape == (400, 3)
    b = out["consistency"].b
    assert np.all(b[0, 1:3] > b[1, 1:3]) and np.all(b[1, 1:3] > b[2, 1:3])  # strict > lenient
    assert out["alignment"].spearman_theta > 0.8


# --------------------------------------------------------------------------- MAP, dtypes, options


def test_map_equals_direct_posterior_mode_on_science():
    """method='map' maximises log-lik + log prior (log a ~ N(0, 0.5^2) as a density of a,
    d ~ N(0, 3^2)); compared with L-BFGS on that objective with the reference log-lik."""
    from scipy.optimize import minimize

    Y, _ = load_science()
    Yc = (Y - 1).astype(float)
    m = GradedResponseModel(method="map").fit(Y)

    def unpack(x):
        x = x.reshape(4, 4)
        a = np.exp(x[:, 0])
        d = np.concatenate([x[:, 1:2], x[:, 1:2] - np.cumsum(np.exp(x[:, 2:]), axis=1)], axis=1)
        return a, d

    def neg_post(x):
        a, d = unpack(x)
        la = np.log(a)
        prior = np.sum(-la - 0.5 * (la / 0.5) ** 2) + np.sum(-0.5 * (d / 3.0) ** 2)
        return -(_reference_loglik(a, d, Yc) + prior)

    x0 = np.tile([0.0, 2.0, 0.5, 0.5], 4)
    res = minimize(neg_post, x0, method="L-BFGS-B", options={"gtol": 1e-9, "ftol": 1e-15,
                                                             "maxiter": 5000})
    a, d = unpack(res.x)
    np.testing.assert_allclose(m.a_, a, atol=5e-3)
    np.testing.assert_allclose(m.d_, d, atol=1e-2)
    assert m.a_[2] < GradedResponseModel().fit(Y).a_[2] - 0.1   # the steepest slope shrinks


def test_codes_dtypes_and_n_categories():
    """0-based and 1-based codes, int/float32/float64 input give the same fit; n_categories
    adds a never-used top category with probability 0."""
    Y, _ = load_science()
    m1 = GradedResponseModel().fit(Y)
    for Z in (Y - 1, Y.astype(np.float32), (Y - 1).astype(np.float64)):
        m2 = GradedResponseModel().fit(Z)
        np.testing.assert_allclose(m2.a_, m1.a_, atol=1e-10)
        np.testing.assert_allclose(m2.d_, m1.d_, atol=1e-10)
    m5 = GradedResponseModel(n_categories=5).fit(Y)
    assert m5.categories_.tolist() == [1, 2, 3, 4, 5]
    assert np.all(m5.d_[:, -1] == -np.inf)
    np.testing.assert_allclose(m5.a_, m1.a_, atol=1e-10)
    np.testing.assert_allclose(m5.category_probs([0.0])[0, :, 4], 0.0)
    with pytest.raises(ValueError, match="n_categories"):
        GradedResponseModel(n_categories=3).fit(Y)


def test_person_without_responses_gets_the_prior():
    Y, _ = load_science()
    m = GradedResponseModel().fit(Y)
    th, psd = m.theta(np.full((1, 4), np.nan))
    assert abs(th[0]) < 1e-9 and abs(psd[0] - 1) < 1e-3
    with pytest.raises(ValueError, match="expecting 4 features"):
        m.theta(Y[:, :3])


def test_constant_item_changes_nothing():
    """An item with a single observed category has P = 1: the other items' fit is unchanged."""
    Y, _ = load_science()
    m = GradedResponseModel().fit(Y)
    m_c = GradedResponseModel().fit(np.column_stack([Y, np.full(len(Y), 2)]))
    np.testing.assert_allclose(m_c.a_[:4], m.a_, atol=1e-10)
    assert m_c.a_[4] == 0 and abs(m_c.loglik_ - m.loglik_) < 1e-8
    np.testing.assert_allclose(m_c.category_probs([0.0])[0, 4], [0, 1, 0, 0])


def test_alignment_with_one_judge_and_one_human_uses_map():
    """Two items often have no finite MLE; the diagnosis then fits the MAP model (no warning)."""
    Y, _ = load_science()
    rep = judge_alignment(Y[:, 2], Y[:, 1])
    assert rep.model.method == "map"
    assert np.isfinite(rep.severity_offset) and -1 <= rep.spearman_theta <= 1
