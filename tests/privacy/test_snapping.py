"""Floating-point-safe release of SGGMechanism.randomize (snapping, Mironov CCS 2012).

Checks: the least-significant-bit attacks of the privacy audit (Gaussian and Laplace,
float64 and float32) are detected without snapping and vanish with the default; the
release is exactly ``g (rnd(x/g) + rnd(X/g))`` (a shift of a law that does not depend on x),
a multiple of g, equal across NumPy/torch and float32/float64; the accounting is the exact
mechanism's at the rounded query's sensitivity (closed forms: Balle-Wang, Laplace; brute
force for the sensitivity bound); bad granularities and inputs raise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from rml_fast.privacy import SGGMechanism
from rml_fast.privacy._snapping import (
    auto_granularity,
    effective_sensitivity,
    round_half_up,
)
from rml_fast.privacy.auditing import empirical_delta

N = 200_000


def _lsb_event(y: np.ndarray) -> np.ndarray:
    """+inf on {y in (-1, -0.5), last mantissa bit set}, -inf elsewhere (Mironov 2012)."""
    bits = np.ascontiguousarray(y).view(np.int64 if y.dtype == np.float64 else np.int32)
    return np.where((y > -1) & (y < -0.5) & ((bits & 1) == 1), np.inf, -np.inf)


def _lsb_delta(mech: SGGMechanism, dtype=np.float64) -> tuple[float, float]:
    """(gap of P(last bit set | y in (-1, -0.5)), lower confidence bound on delta(5) on S)
    for x = 0 against x' = 1."""
    y0 = mech.randomize(np.zeros((N, 1), dtype=dtype), rng=1)[:, 0]
    y1 = mech.randomize(np.ones((N, 1), dtype=dtype), rng=2)[:, 0]
    s0, s1 = _lsb_event(y0), _lsb_event(y1)
    est = empirical_delta(s0, s1, [5.0])
    in0, in1 = (y0 > -1) & (y0 < -0.5), (y1 > -1) & (y1 < -0.5)
    gap = np.mean(s0[in0] > 0) - np.mean(s1[in1] > 0)
    return float(gap), float(est.lower[0])


def _balle_wang(eps, std, sens):
    eps = np.asarray(eps, dtype=np.float64)
    a, b = sens / (2 * std), std / sens
    return norm.cdf(a - eps * b) - np.exp(eps) * norm.cdf(-a - eps * b)


MECHS = {
    "gaussian": lambda gran: SGGMechanism.gaussian(1, std=1.0, granularity=gran),
    "laplace": lambda gran: SGGMechanism(1, 1.0, k=1.0, p=1.0, granularity=gran),
}


@pytest.mark.parametrize("name", sorted(MECHS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lsb_attack_detected_without_snapping_and_closed_with_it(name, dtype):
    claimed = float(MECHS[name]("auto").delta_for_epsilon(5.0))
    # granularity=None (the old release fl(x + X)): the audit detects a delta far above
    # the claim (~0.07 for the Gaussian, ~0.06 for Laplace in float64): the test has power.
    gap_raw, lower_raw = _lsb_delta(MECHS[name](None), dtype)
    assert lower_raw > 0.03 > claimed
    assert gap_raw > 0.4  # the last bit is set half the time for x = 0, never for x' = 1
    # Default snapping: inside (-1, -0.5) the last bit is as likely set under both inputs
    # (float64: never, the grid 2**-30 leaves it 0; float32: ~half the time for both, the
    # rounding of a multiple of 2**-30 to float32), so the lower confidence bound stays at
    # or below the claim (tolerance 0: the bound is <= 0 unless the frequencies differ).
    gap, lower = _lsb_delta(MECHS[name]("auto"), dtype)
    assert lower <= claimed
    assert abs(gap) < 0.025  # float32: ~4 sd of the two conditional frequencies


def test_laplace_float_loss_above_epsilon_disappears():
    """Laplace b = 1 is pure 1-DP: {L > 1} is empty for reals, not for fl(x + X)."""
    raw = SGGMechanism(1, 1.0, k=1.0, p=1.0, granularity=None)
    snapped = SGGMechanism(1, 1.0, k=1.0, p=1.0)
    y_raw = raw.randomize(np.zeros((N, 1)), rng=3)
    y_snap = snapped.randomize(np.zeros((N, 1)), rng=3)
    assert np.mean(raw.privacy_loss(y_raw) > 1.0) > 0.03  # the audit's ~0.033
    assert np.max(snapped.privacy_loss(y_snap)) <= 1.0  # exact on the grid
    assert snapped.accounting_sensitivity == 1.0  # Delta = 1 is a multiple of g
    assert snapped.delta_for_epsilon(1.0 + 1e-3) <= 1e-12


def test_same_seed_outputs_are_an_exact_shift():
    """The snapped release is g K + g R with R independent of x: same seed -> exact shift."""
    m = SGGMechanism.gaussian(1, std=1.0)
    z = np.zeros((N, 1))
    y0, y1 = m.randomize(z, rng=9), m.randomize(z + 1.0, rng=9)
    np.testing.assert_array_equal(y1 - y0, 1.0)
    raw = SGGMechanism.gaussian(1, std=1.0, granularity=None)
    r0, r1 = raw.randomize(z, rng=9), raw.randomize(z + 1.0, rng=9)
    assert np.any(r1 - r0 != 1.0)  # the unsnapped release is not a shift


def test_release_is_the_grid_sum_and_a_multiple_of_g():
    rng = np.random.default_rng(0)
    dim = 4
    m = SGGMechanism.l2(dim, sigma=0.3, sensitivity=2.0)
    g = m.grid
    assert g == 2.0**-30  # largest power of two <= 2 * 2**-30 / sqrt(4)
    x = rng.normal(size=(500, dim)) * 10.0 ** rng.integers(-8, 6, size=(500, dim))
    x[:5] = np.round(x[:5])
    x_before = x.copy()
    y = m.randomize(x, rng=5)
    np.testing.assert_array_equal(x, x_before)  # not modified
    noise = m.sample(500, rng=5)
    expected = np.floor(x / g + 0.5) * g + np.floor(noise / g + 0.5) * g
    np.testing.assert_array_equal(y, expected)
    q = y / g
    np.testing.assert_array_equal(q, np.round(q))
    # The change against the raw release is at most g (the two roundings).
    assert np.max(np.abs(y - (x + noise))) <= g + 2 * np.spacing(np.abs(x + noise).max())
    single = m.randomize(np.zeros(dim), rng=5)
    assert single.shape == (dim,)
    np.testing.assert_array_equal(single, expected[0] - np.floor(x[0] / g + 0.5) * g)


def test_round_half_up_is_exact():
    t = np.array([0.49999999999999994, 0.5, -0.5, -0.5000000000000001, 2.5, -2.5, 1e17, -3.2])
    np.testing.assert_array_equal(round_half_up(t.copy()), [0.0, 1.0, 0.0, -1.0, 3.0, -2.0, 1e17, -3.0])
    # rnd(t + n) = rnd(t) + n: what makes the release a post-processing of g K + X.
    rng = np.random.default_rng(1)
    u = rng.normal(size=10_000) * 100
    n = rng.integers(-2**40, 2**40, size=u.size).astype(np.float64)
    u = np.round(u * 2**8) / 2**8  # t and t + n both exact
    np.testing.assert_array_equal(round_half_up(u + n), round_half_up(u.copy()) + n)


def test_float32_and_torch_agree_with_float64():
    torch = pytest.importorskip("torch")
    m = SGGMechanism.gaussian(3, std=0.5, sensitivity=0.25)
    g = m.grid
    x64 = np.random.default_rng(2).normal(size=(300, 3)) * 5
    x32 = x64.astype(np.float32)
    y32 = m.randomize(x32, rng=11)
    y64 = m.randomize(x32.astype(np.float64), rng=11)
    assert y32.dtype == np.float32
    np.testing.assert_array_equal(y32, y64.astype(np.float32))
    np.testing.assert_array_equal(y32.astype(np.float64) / g, np.round(y32.astype(np.float64) / g))
    # torch (CPU): the same noise stream and exact grid arithmetic -> the same numbers.
    t64 = m.randomize(torch.from_numpy(x64), rng=11)
    t32 = m.randomize(torch.from_numpy(x32), rng=11)
    assert t64.dtype == torch.float64 and t32.dtype == torch.float32
    np.testing.assert_array_equal(t64.numpy(), m.randomize(x64, rng=11))
    np.testing.assert_array_equal(t32.numpy(), y32)
    # granularity=None is the former release x + X, bit for bit.
    raw = SGGMechanism.gaussian(3, std=0.5, sensitivity=0.25, granularity=None)
    np.testing.assert_array_equal(raw.randomize(x64, rng=11), x64 + raw.sample(300, rng=11))


def test_accounting_is_the_exact_mechanism_at_the_rounded_sensitivity():
    # dim >= 2: Delta + g sqrt(dim); Balle-Wang closed form at that sensitivity.
    std, sens, dim, h = 1.0, 0.7, 3, 1e-4
    m = SGGMechanism.gaussian(dim, std, sensitivity=sens)
    g = m.grid
    assert m.accounting_sensitivity == sens + g * math.sqrt(dim)
    assert m.accounting_sensitivity <= sens * (1 + 2.0**-30)
    eps = np.array([0.1, 0.5, 1.0, 2.0])
    twin = SGGMechanism.gaussian(dim, std, sensitivity=m.accounting_sensitivity, granularity=None)
    np.testing.assert_array_equal(m.delta_for_epsilon(eps), twin.delta_for_epsilon(eps))
    got = m.pld(h).get_delta_for_epsilon(eps)
    exact = _balle_wang(eps, std, m.accounting_sensitivity)
    assert np.all(got >= exact - 1e-12)
    assert np.all(got <= _balle_wang(eps - h, std, m.accounting_sensitivity) + 1e-12)
    # A coarse explicit grid is charged honestly.
    coarse = SGGMechanism.gaussian(dim, std, sensitivity=sens, granularity=2.0**-4)
    assert coarse.accounting_sensitivity == sens + 2.0**-4 * math.sqrt(dim)
    assert coarse.epsilon_for_delta(1e-5) > m.epsilon_for_delta(1e-5)
    # Calibration meets the target at the accounting sensitivity (closed form).
    cal = SGGMechanism.calibrate(dim, 1.0, 1e-5, sensitivity=sens)
    s = cal.sigma / math.sqrt(2)
    assert _balle_wang(1.0, s, cal.accounting_sensitivity) <= 1e-5
    assert _balle_wang(1.0, s * (1 - 1e-5), cal.accounting_sensitivity) > 1e-5


def test_one_dimensional_laplace_accounting_with_a_coarse_grid():
    # Delta = 0.3, g = 0.25: |K - K'| <= ceil(0.3 / 0.25) = 2 cells -> sensitivity 0.5
    # (< Delta + g = 0.55); the Laplace closed form at 0.5.
    b, h = 1.0, 1e-4
    m = SGGMechanism(1, b, k=1.0, p=1.0, sensitivity=0.3, granularity=0.25)
    assert m.accounting_sensitivity == 0.5
    eps = np.array([0.0, 0.2, 0.45])
    a = 0.5 / b
    exact = np.where(a > eps, 1 - np.exp(np.minimum(eps - a, 0) / 2), 0.0)
    got = m.pld(h).get_delta_for_epsilon(eps)
    assert np.all(got >= exact - 1e-12)
    assert np.all(got <= 1 - np.exp(np.minimum(eps - h - a, 0) / 2) + 1e-12)
    assert m.delta_for_epsilon(0.5 + 2 * h) <= 1e-12  # pure 0.5-DP


@pytest.mark.parametrize("dim", [1, 2, 5])
def test_sensitivity_bound_by_brute_force(dim):
    """max ||g K - g K'|| over random pairs with ||x - x'|| <= Delta stays <= the bound."""
    rng = np.random.default_rng(dim)
    g, sens = 0.25, 0.3
    bound = effective_sensitivity(sens, g, dim)
    x = rng.uniform(-3, 3, size=(200_000, dim))
    d = rng.normal(size=x.shape)
    d *= (sens * rng.uniform(0.9, 1.0, size=(x.shape[0], 1))) / np.linalg.norm(d, axis=1, keepdims=True)
    if dim > 1:  # the spread-out worst case too
        d[:1000] = sens / math.sqrt(dim) * np.sign(rng.normal(size=(1000, dim)))
    k0 = round_half_up(x / g)
    k1 = round_half_up((x + d) / g)
    dist = g * np.linalg.norm(k1 - k0, axis=1)
    assert dist.max() <= bound + 1e-12
    assert dist.max() > sens  # rounding does increase it: the correction is needed
    if dim == 1:
        assert dist.max() == bound  # attained: g ceil(Delta / g)


def test_auto_granularity_rules():
    assert auto_granularity(1.0, 1, 1.0) == 2.0**-30
    assert auto_granularity(1.0, 100, 1.0) == 2.0**-34  # / sqrt(100) = /10 -> 2**-34
    assert auto_granularity(1.0, 1, 2.0**20) == 2.0**-20  # the float64-fidelity floor
    m = SGGMechanism.gaussian(1, std=1.0)
    assert m.grid == 2.0**-30 and m.accounting_sensitivity == 1.0
    assert SGGMechanism.gaussian(1, std=1.0, granularity=None).grid is None
    assert SGGMechanism.gaussian(2, std=1.0, granularity=None).accounting_sensitivity == 1.0


def test_bad_granularity_and_inputs_raise():
    for bad in (0.3, 0.0, -0.5, 3.0, float("inf"), "fine"):
        with pytest.raises(ValueError, match="granularity"):
            SGGMechanism.gaussian(1, std=1.0, granularity=bad)
    for bad in (True, [0.5]):
        with pytest.raises(TypeError, match="granularity"):
            SGGMechanism.gaussian(1, std=1.0, granularity=bad)
    with pytest.raises(ValueError, match="granularity"):  # below the noise's float64 ulp
        SGGMechanism.gaussian(1, std=1.0, granularity=2.0**-60)
    with pytest.raises(ValueError, match="granularity"):
        SGGMechanism.calibrate(2, 1.0, 1e-5, granularity=0.3)
    m = SGGMechanism.gaussian(2, std=1.0)
    x = np.array([[1e300, 0.0]])
    with pytest.raises(ValueError, match=r"\bx\b"):
        m.randomize(x, rng=0)
    assert x[0, 0] == 1e300
    assert np.isfinite(SGGMechanism.gaussian(2, 1.0, granularity=None).randomize(x, rng=0)).all()
