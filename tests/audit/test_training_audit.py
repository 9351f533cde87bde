"""One-run training audits (issue 25 §3b; Steinke, Nasr & Jagielski, arXiv 2305.08846).

The bound is checked against closed forms and a direct transcription of Theorem 3.1, its
coverage by simulation, and the full audit of DP-SGD and DP-C4 on breast cancer with 1000
white-box Dirac canaries: the empirical epsilon stays below the claimed one, and a broken
variant (per-sample clipping skipped, implemented here by patching the optimizer's clip
factors to 1; the library is untouched) is caught.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special, stats
from sklearn.datasets import load_breast_cancer

from rml_fast.privacy import dp_c4
from rml_fast.privacy.auditing import (
    audit_canary_scores,
    audit_dp_training,
    one_run_epsilon_lower_bound,
    one_run_p_value,
)

DELTA = 1e-6
SETTINGS = dict(num_canaries=1000, canary_scale=30.0, sample_rate=0.1, steps=100, lr=0.5,
                target_epsilon=2.0, target_delta=DELTA)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data():
    X, y = load_breast_cancer(return_X_y=True)
    return (X - X.mean(0)) / X.std(0), y.astype(np.float64)


@pytest.fixture(scope="module")
def sigma():
    return dp_c4.calibrate_noise_multiplier(2.0, DELTA, 0.1, 100)


# --- the bound -------------------------------------------------------------------------------


def _theorem_3_1(v, r, m, eps, delta):
    """Direct transcription: f(v) + 2 m delta max_i (f(v - i) - f(v)) / i."""
    p = math.exp(eps) / (1.0 + math.exp(eps))

    def f(x):
        return stats.binom.sf(x - 1, r, p)  # P[Binomial(r, p) >= x]

    alpha = max((f(v - i) - f(v)) / i for i in range(1, v + 1)) if v > 0 else 0.0
    return min(1.0, f(v) + 2 * m * delta * alpha)


@pytest.mark.parametrize(("v", "r", "m", "eps", "delta"), [
    (10, 10, 100, 0.0, 0.0), (60, 100, 1000, 0.5, 1e-5), (95, 100, 1000, 2.0, 1e-6),
    (400, 400, 1000, 4.0, 1e-5), (0, 20, 40, 1.0, 1e-3), (7, 30, 30, 0.1, 0.01),
])
def test_p_value_matches_theorem(v, r, m, eps, delta):
    assert one_run_p_value(v, r, m, eps, delta) == pytest.approx(
        _theorem_3_1(v, r, m, eps, delta), rel=1e-9, abs=1e-300)


def test_p_value_closed_forms():
    assert one_run_p_value(20, 20, 50, 0.0, 0.0) == pytest.approx(2.0**-20, rel=1e-12)
    # all correct, delta = 0: the bound is logit(beta^(1/r))
    for r in (10, 100, 1000):
        b = 0.05 ** (1.0 / r)
        assert one_run_epsilon_lower_bound(r, r, 1000, 0.0) == pytest.approx(
            special.logit(b), abs=2e-6)
    assert one_run_epsilon_lower_bound(5, 10, 10, 1e-6) == 0.0  # chance level: no bound


def test_lower_bound_is_the_supremum():
    v, r, m, d = 180, 200, 1000, 1e-5
    lb = one_run_epsilon_lower_bound(v, r, m, d, confidence=0.95)
    assert one_run_p_value(v, r, m, lb, d) <= 0.05 < one_run_p_value(v, r, m, lb + 1e-4, d)
    # more delta or less confidence: monotone
    assert one_run_epsilon_lower_bound(v, r, m, 1e-3) < lb
    assert one_run_epsilon_lower_bound(v, r, m, d, confidence=0.8) > lb


def test_coverage_by_simulation():
    """Randomized response per canary is exactly eps0-DP; Gaussian scores are mu-GDP.
    Over 200 independent audits the bound exceeds the true epsilon in at most ~5%."""
    rng = np.random.default_rng(2024)
    eps0, mu, m, trials = 1.0, 1.0, 1000, 200
    # (eps, delta) of mu-GDP: delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
    eps_gdp = float(next(e for e in np.arange(0.0, 10.0, 1e-3) if stats.norm.cdf(-e / mu + mu / 2)
                         - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2) <= DELTA))
    over_rr = over_g = 0
    for _ in range(trials):
        inc = rng.random(m) < 0.5
        keep = rng.random(m) < math.exp(eps0) / (1 + math.exp(eps0))
        rr = np.where(keep, inc, ~inc).astype(float)
        over_rr += audit_canary_scores(rr, inc, 0.0).epsilon_lower_bound > eps0
        g = mu * inc + rng.normal(size=m)
        over_g += audit_canary_scores(g, inc, DELTA).epsilon_lower_bound > eps_gdp
    assert over_rr <= 0.1 * trials and over_g <= 0.1 * trials


def test_canary_scores_bad_inputs():
    s = np.arange(10.0)
    inc = s > 4
    with pytest.raises(ValueError, match="included"):
        audit_canary_scores(s, inc.astype(int), 1e-6)
    with pytest.raises(ValueError, match="guess_counts"):
        audit_canary_scores(s, inc, 1e-6, guess_counts=[6])
    with pytest.raises(ValueError, match="num_correct"):
        one_run_p_value(11, 10, 100, 1.0, 0.0)
    with pytest.raises(ValueError, match="num_guesses"):
        one_run_epsilon_lower_bound(1, 101, 100, 0.0)
    with pytest.raises(ValueError, match="delta"):
        one_run_p_value(1, 10, 100, 1.0, 1.0)


# --- training audits -------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["dpsgd", "dpc4"])
def test_training_audit_below_claim_and_broken_clipping_caught(data, sigma, algorithm,
                                                                monkeypatch):
    X, y = data
    ok = audit_dp_training(X, y, algorithm=algorithm, noise_multiplier=sigma, rng=0, **SETTINGS)
    assert ok.claimed_epsilon == pytest.approx(2.0, abs=1e-2)
    assert ok.epsilon_lower_bound < ok.claimed_epsilon - 1.0  # observed ~0.3-0.5 vs 2
    assert ok.train_accuracy > 0.85  # the real part still learns
    # broken: per-sample clipping skipped (clip factors forced to 1), noise unchanged
    monkeypatch.setattr(dp_c4, "clip_factors", lambda norms, c: torch.ones_like(norms))
    bad = audit_dp_training(X, y, algorithm=algorithm, noise_multiplier=sigma, rng=0, **SETTINGS)
    assert bad.claimed_epsilon == pytest.approx(ok.claimed_epsilon)  # what the bug would claim
    assert bad.epsilon_lower_bound > bad.claimed_epsilon + 1.5  # observed ~4.4 vs 2


def test_noise_halved_bound_stays_sound(data, sigma):
    """Halved noise: actual epsilon ~5.4 at claimed 2. The one-run bound (capped by m) is
    not strong enough to exceed 2 here; it must still stay below the actual epsilon."""
    X, y = data
    res = audit_dp_training(X, y, noise_multiplier=sigma / 2, rng=1, **SETTINGS)
    actual = dp_c4.privacy_spent(sigma / 2, 0.1, 100, DELTA)
    assert res.claimed_epsilon == pytest.approx(actual)
    assert actual > 4.0 and res.epsilon_lower_bound < actual


def test_training_audit_reproducible_and_bad_inputs(data):
    X, y = data
    kw = dict(num_canaries=100, steps=10, noise_multiplier=1.0, rng=3)
    a, b = audit_dp_training(X, y, **kw), audit_dp_training(X, y, **kw)
    assert np.array_equal(a.scores, b.scores) and np.array_equal(a.included, b.included)
    X0 = X.copy()
    with pytest.raises(ValueError, match="binary"):
        audit_dp_training(X, y + 1, **kw)
    with pytest.raises(ValueError, match="optimizer_kwargs"):
        audit_dp_training(X, y, optimizer_kwargs={"lr": 1.0}, **kw)
    with pytest.raises(ValueError, match="algorithm"):
        audit_dp_training(X, y, algorithm="sgd", **kw)
    with pytest.raises(ValueError, match="y must have shape"):
        audit_dp_training(X, y[:-1], **kw)
    assert np.array_equal(X, X0)
