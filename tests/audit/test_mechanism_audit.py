"""Mechanism audits (issue 25 §3a): each native sampler, drawn through its public path on
neighbouring inputs, matches the PLD accountant's delta(eps) and loss law within simultaneous
confidence bounds, and the same test at the same sample size flags a sampler whose scale is
20% too small."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rml_fast.privacy import SGGMechanism
from rml_fast.privacy.auditing import (
    audit_mechanism,
    clopper_pearson,
    empirical_delta,
    philox_gaussian_sampler,
)

N = 200_000  # draws per neighbouring input, the same for the correct and the wrong sampler
GAUSS_EPS = np.linspace(0.25, 3.0, 12)
# pure eps0 = 1 mechanisms: grid below and above eps0, avoiding the loss atom at exactly 1
PURE_EPS = np.r_[np.linspace(0.05, 0.95, 10), 1.1, 1.5]


def _gauss(dim: int, std: float):
    return SGGMechanism.gaussian(dim, std).randomize


CASES = {
    # name: (claimed mechanism, sampler factory (scale -> sampler or None = native), grid)
    "gaussian-1d": (SGGMechanism.gaussian(1, 1.0), lambda s: _gauss(1, s), GAUSS_EPS),
    "gaussian-5d": (SGGMechanism.gaussian(5, 1.0), lambda s: _gauss(5, s), GAUSS_EPS),
    "gaussian-philox-dpsgd-noise": (
        SGGMechanism.gaussian(4, 1.0), philox_gaussian_sampler, GAUSS_EPS),
    "laplace": (SGGMechanism(1, 1.0, k=1.0, p=1.0),
                lambda s: SGGMechanism(1, s, k=1.0, p=1.0).randomize, PURE_EPS),
    "l2-3d": (SGGMechanism.l2(3, 1.0), lambda s: SGGMechanism.l2(3, s).randomize, PURE_EPS),
}


def _scale(mech: SGGMechanism) -> float:
    return mech.sigma / math.sqrt(2.0) if mech.p == 2.0 else mech.sigma


@pytest.mark.parametrize("name", list(CASES))
def test_native_sampler_matches_accountant(name):
    mech, factory, eps = CASES[name]
    sampler = factory(_scale(mech)) if "philox" in name else None  # None: mech.randomize
    res = audit_mechanism(mech, eps, n_samples=N, sampler=sampler, rng=11, h=1e-3)
    assert not res.violation
    assert res.consistent and res.pld_consistent
    assert np.all(res.lower <= res.claimed_delta) and np.all(res.claimed_delta <= res.upper + 1e-3)
    # the estimate is close, not just inside a loose band: the intervals are ~1e-2 wide
    assert np.max(np.abs(res.empirical_delta - res.claimed_delta)) < 0.01
    assert np.max(res.upper - res.lower) < 0.05


@pytest.mark.parametrize("name", list(CASES))
def test_scale_20_percent_too_small_is_flagged(name):
    mech, factory, eps = CASES[name]
    res = audit_mechanism(mech, eps, n_samples=N, sampler=factory(0.8 * _scale(mech)), rng=11,
                          h=1e-3)
    assert res.violation and not res.consistent
    assert res.max_excess > 0.02  # a wide margin: the lower bound is far above the claim


@pytest.mark.parametrize("name", ["gaussian-1d", "laplace"])
def test_too_much_noise_is_inconsistent_but_no_violation(name):
    mech, factory, eps = CASES[name]
    res = audit_mechanism(mech, eps, n_samples=N, sampler=factory(1.2 * _scale(mech)), rng=3,
                          h=1e-3)
    assert not res.violation
    assert not res.consistent and not res.pld_consistent


def test_empirical_delta_gaussian_closed_form():
    # N(0,1) vs N(1,1): L(y) = 1/2 - y, delta(eps) = Phi(1/2 - eps) - e^eps Phi(-1/2 - eps)
    rng = np.random.default_rng(5)
    y0, y1 = rng.normal(0.0, 1.0, 400_000), rng.normal(1.0, 1.0, 400_000)
    eps = np.array([2.0, 0.0, 0.5, 1.0])
    est = empirical_delta(0.5 - y0, 0.5 - y1, eps, confidence=0.99)
    exact = stats.norm.cdf(0.5 - eps) - np.exp(eps) * stats.norm.cdf(-0.5 - eps)
    assert np.all(est.lower <= exact) and np.all(exact <= est.upper)
    assert np.allclose(est.estimate, exact, atol=5e-3)
    assert np.array_equal(est.epsilons, eps)  # the caller's order is kept


def test_clopper_pearson_matches_scipy():
    for k, n, conf in [(0, 10, 0.95), (3, 10, 0.95), (10, 10, 0.9), (517, 1000, 0.999),
                       (1, 200_000, 0.99)]:
        lo, hi = clopper_pearson(k, n, conf)
        ci = stats.binomtest(k, n).proportion_ci(conf, method="exact")
        assert float(lo) == pytest.approx(ci.low, rel=1e-4, abs=1e-15)  # scipy root-finds
        assert float(hi) == pytest.approx(ci.high, rel=1e-4, abs=1e-15)
        a = 1.0 - conf  # the defining equations, exactly: P(X >= k | lo) = P(X <= k | hi) = a/2
        if k > 0:
            assert stats.binom.sf(k - 1, n, float(lo)) == pytest.approx(a / 2, rel=1e-8)
        if k < n:
            assert stats.binom.cdf(k, n, float(hi)) == pytest.approx(a / 2, rel=1e-8)


def test_inputs_not_mutated_and_bad_inputs():
    sp = np.array([0.1, 2.0, -1.0])
    sq = np.array([0.3, -0.2])
    before = (sp.copy(), sq.copy())
    empirical_delta(sp, sq, [0.0, 1.0])
    assert np.array_equal(sp, before[0]) and np.array_equal(sq, before[1])
    with pytest.raises(ValueError, match="scores_p"):
        empirical_delta(np.array([np.nan]), sq, [0.0])
    with pytest.raises(ValueError, match="epsilons"):
        empirical_delta(sp, sq, [])
    with pytest.raises(ValueError, match="confidence"):
        empirical_delta(sp, sq, [0.0], confidence=1.0)
    with pytest.raises(ValueError, match="k must"):
        clopper_pearson(11, 10)
    mech = SGGMechanism.gaussian(1, 1.0)
    with pytest.raises(TypeError, match="mechanism"):
        audit_mechanism(object(), [1.0])
    with pytest.raises(ValueError, match="n_samples"):
        audit_mechanism(mech, [1.0], n_samples=0)
    with pytest.raises(TypeError, match="sampler"):
        audit_mechanism(mech, [1.0], sampler=3)
    with pytest.raises(ValueError, match="sampler returned shape"):
        audit_mechanism(mech, [1.0], n_samples=10, sampler=lambda x, s: x[:, :0])
    with pytest.raises(ValueError, match="non-finite"):
        audit_mechanism(mech, [1.0], n_samples=10, sampler=lambda x, s: x + np.nan)
    with pytest.raises(ValueError, match="std"):
        philox_gaussian_sampler(0.0)


def test_audit_is_reproducible_from_the_seed():
    mech = SGGMechanism.gaussian(2, 1.0)
    a = audit_mechanism(mech, [0.5, 1.0], n_samples=20_000, rng=7, batch_size=5_000)
    b = audit_mechanism(mech, [0.5, 1.0], n_samples=20_000, rng=7, batch_size=5_000)
    assert np.array_equal(a.empirical_delta, b.empirical_delta)
    assert np.array_equal(a.pld_empirical_cdf, b.pld_empirical_cdf)
