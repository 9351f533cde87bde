from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.stats import norm

from rml_fast.privacy import PLDAccountant, PrivacyLossDistribution

EPS = np.array([0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0])


def gaussian_delta(eps, std, sens=1.0):
    """Balle & Wang (2018), Theorem 8."""
    eps = np.asarray(eps, dtype=np.float64)
    a, b = sens / (2 * std), std / sens
    return norm.cdf(a - eps * b) - np.exp(eps) * norm.cdf(-a - eps * b)


@pytest.mark.parametrize("estimator", ["bucket", "connect_dots"])
@pytest.mark.parametrize("std", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("h", [1e-3, 1e-4])
def test_gaussian_matches_balle_wang_and_is_pessimistic(std, h, estimator):
    pld = PrivacyLossDistribution.from_gaussian(std, h=h, estimator=estimator)
    ours = pld.get_delta_for_epsilon(EPS)
    exact = gaussian_delta(EPS, std)
    # Rounding each loss up by < h: exact(eps) <= ours <= exact(eps - h) (+ tail mass),
    # up to floating-point round-off (~1e-14).
    assert np.all(ours >= exact - 2e-14)
    assert np.all(ours <= gaussian_delta(EPS - h, std) + 2e-14)
    # Off-lattice epsilons: connect-the-dots is the chord, still above the exact curve.
    mid = EPS + 0.37 * h
    assert np.all(pld.get_delta_for_epsilon(mid) >= gaussian_delta(mid, std) - 2e-14)


def test_invariants_and_immutability():
    pld = PrivacyLossDistribution.from_gaussian(2.0, h=1e-3)
    total = pld.pmf.sum() + pld.infinity_mass
    assert total == pytest.approx(1.0, abs=1e-12)
    assert float((pld.pmf * np.exp(-pld.losses)).sum()) <= 1.0 + 1e-10
    with pytest.raises(ValueError, match="read-only"):
        pld.pmf[0] = 1.0
    assert pld.lower_loss == pytest.approx(pld.losses[0])
    assert abs(pld.lower_loss / pld.h - round(pld.lower_loss / pld.h)) < 1e-9


@pytest.mark.parametrize("estimator", ["bucket", "connect_dots"])
@pytest.mark.parametrize("b", [0.5, 1.0, 4.0])
def test_laplace_closed_form(b, estimator):
    h = 1e-4
    pld = PrivacyLossDistribution.from_laplace(b, h=h, estimator=estimator)
    a = 1.0 / b
    exact = np.where(a > EPS, 1 - np.exp(np.minimum(EPS - a, 0) / 2), 0.0)
    ours = pld.get_delta_for_epsilon(EPS)
    assert np.all(ours >= exact - 2e-14)
    assert np.all(ours <= np.where(EPS - h < a, 1 - np.exp(np.minimum(EPS - h - a, 0) / 2), 0) + 1e-15)


@pytest.mark.parametrize("estimator", ["bucket", "connect_dots"])
@pytest.mark.parametrize("method", ["fft_power", "squaring"])
@pytest.mark.parametrize(("std", "n"), [(10.0, 100), (30.0, 1000)])
def test_self_composition_equals_scaled_gaussian(method, std, n, estimator):
    h = 1e-4
    base = PrivacyLossDistribution.from_gaussian(std, h=h, estimator=estimator)
    composed = base.self_compose(n, method=method)
    eff = std / math.sqrt(n)
    ours = composed.get_delta_for_epsilon(EPS)
    exact = gaussian_delta(EPS, eff)
    # Each of the n roundings moves a loss up by < h: exact(eps) <= ours <= exact(eps - n h).
    assert np.all(ours >= exact - 1e-12)
    assert np.all(ours <= gaussian_delta(EPS - n * h, eff) + 1e-12)
    # And in practice the bias is about half of that.
    assert np.all(ours <= gaussian_delta(EPS - 0.6 * n * h, eff) + 1e-12)


def test_fft_power_and_squaring_agree():
    base = PrivacyLossDistribution.from_gaussian(5.0, h=1e-3, sampling_prob=0.1)
    a = base.self_compose(300, method="fft_power")
    b = base.self_compose(300, method="squaring")
    deltas = np.array([1e-3, 1e-6, 1e-9])
    np.testing.assert_allclose(a.get_epsilon_for_delta(deltas), b.get_epsilon_for_delta(deltas), rtol=5e-5)


def test_compose_two_gaussians():
    h = 1e-4
    a = PrivacyLossDistribution.from_gaussian(1.5, h=h)
    b = PrivacyLossDistribution.from_gaussian(2.5, h=h)
    eff = 1 / math.sqrt(1 / 1.5**2 + 1 / 2.5**2)
    ours = a.compose(b).get_delta_for_epsilon(EPS)
    assert np.all(ours >= gaussian_delta(EPS, eff) - 1e-14)
    assert np.all(ours <= gaussian_delta(EPS - 2 * h, eff) + 1e-14)


def test_epsilon_for_delta_inverts_delta():
    pld = PrivacyLossDistribution.from_gaussian(1.0, h=1e-4).self_compose(10)
    deltas = np.array([0.3, 1e-2, 1e-5, 1e-9])
    eps = pld.get_epsilon_for_delta(deltas)
    assert np.all(np.diff(eps) > 0)
    back = pld.get_delta_for_epsilon(eps)
    np.testing.assert_allclose(back, deltas, rtol=1e-9)
    # A slightly smaller epsilon violates the target.
    assert np.all(pld.get_delta_for_epsilon(eps - 1e-6) > deltas)
    assert pld.get_epsilon_for_delta(1.0) == 0.0
    # Scalars in, scalars out.
    assert isinstance(pld.get_epsilon_for_delta(1e-5), float)


def test_infinity_mass_gives_infinite_epsilon():
    f = np.array([0.2, 0.5, 0.9])
    pld = PrivacyLossDistribution.from_cdf(f, lower_loss=-0.1, h=0.1)
    assert pld.infinity_mass == pytest.approx(0.1)
    assert pld.get_epsilon_for_delta(0.05) == math.inf
    assert pld.get_delta_for_epsilon(100.0) == pytest.approx(0.1)
    np.testing.assert_allclose(pld.pmf, [0.2, 0.3, 0.4])


def test_from_cdf_rejects_bad_input():
    with pytest.raises(ValueError, match="non-decreasing"):
        PrivacyLossDistribution.from_cdf(np.array([0.5, 0.2]), 0.0, 0.1)
    with pytest.raises(ValueError, match="integer multiple"):
        PrivacyLossDistribution.from_cdf(np.array([0.5, 1.0]), 0.05, 0.1)
    with pytest.raises(ValueError, match="not pessimistic"):
        PrivacyLossDistribution.from_cdf(np.array([0.5, 0.8]), 0.0, 0.1, infinity_mass=0.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"std": 0.0}, "std"),
        ({"std": -1.0}, "std"),
        ({"std": float("nan")}, "std"),
        ({"std": 1.0, "sensitivity": 0.0}, "sensitivity"),
        ({"std": 1.0, "h": 0.0}, "h"),
        ({"std": 1.0, "sampling_prob": 0.0}, "sampling_prob"),
        ({"std": 1.0, "sampling_prob": 1.5}, "sampling_prob"),
        ({"std": 1.0, "relation": "replace"}, "relation"),
    ],
)
def test_bad_gaussian_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PrivacyLossDistribution.from_gaussian(**kwargs)


def test_bad_readout_and_composition_arguments():
    pld = PrivacyLossDistribution.from_gaussian(1.0, h=1e-3)
    with pytest.raises(ValueError, match="num_compositions"):
        pld.self_compose(0)
    with pytest.raises(TypeError, match="num_compositions"):
        pld.self_compose(2.5)
    with pytest.raises(ValueError, match="delta"):
        pld.get_epsilon_for_delta(1.5)
    with pytest.raises(ValueError, match="epsilon"):
        pld.get_delta_for_epsilon(float("nan"))
    with pytest.raises(ValueError, match="h="):
        pld.compose(PrivacyLossDistribution.from_gaussian(1.0, h=1e-4))
    with pytest.raises(TypeError, match="other"):
        pld.compose(3)


def test_discrete_subsample_is_pessimistic_and_close_to_exact():
    h = 1e-4
    q = 0.05
    exact = PrivacyLossDistribution.from_gaussian(1.0, h=h, sampling_prob=q)
    disc = PrivacyLossDistribution.from_gaussian(1.0, h=h).subsample(q)
    assert len(exact.pmfs) == len(disc.pmfs) == 2
    eps = np.array([0.0, 0.05, 0.1, 0.2, 0.4])
    d_exact, d_disc = exact.get_delta_for_epsilon(eps), disc.get_delta_for_epsilon(eps)
    assert np.all(d_disc >= d_exact - 1e-14)
    np.testing.assert_allclose(d_disc, d_exact, rtol=0.05, atol=1e-9)
    # Remove direction closed form: delta'(eps) = q delta(ln(1 + (e^eps - 1)/q)).
    remove = PrivacyLossDistribution.from_gaussian(1.0, h=h, sampling_prob=q, relation="remove")
    target = q * gaussian_delta(np.log1p(np.expm1(eps) / q), 1.0)
    got = remove.get_delta_for_epsilon(eps)
    assert np.all(got >= target - 1e-15)
    np.testing.assert_allclose(got, target, rtol=2e-3)


def test_accountant_composes_heterogeneous_events():
    h = 1e-4
    acc = PLDAccountant(h=h).compose_gaussian(3.0, count=4).compose_gaussian(2.0)
    eff = 1 / math.sqrt(4 / 9 + 1 / 4)
    eps = acc.get_epsilon(1e-5)
    # Exact epsilon for the equivalent single Gaussian, by bisection on Balle-Wang.
    lo, hi = 0.0, 50.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gaussian_delta(mid, eff) > 1e-5 else (lo, mid)
    assert hi - 1e-9 <= eps <= hi + 5 * h
    assert acc.get_delta(eps) <= 1e-5 * (1 + 1e-9)
    with pytest.raises(ValueError, match="count"):
        acc.compose_gaussian(1.0, count=0)
    with pytest.raises(ValueError, match="no mechanism"):
        PLDAccountant().get_epsilon(1e-5)
    with pytest.raises(ValueError, match="delta"):
        acc.get_epsilon(0.0)


def test_accountant_dp_sgd_run_matches_direct_composition():
    # the accountant shares its tail budget between the 500 steps (1e-15 / 500 each)
    acc = PLDAccountant(h=1e-3).compose_gaussian(1.1, count=500, sampling_prob=0.02)
    direct = PrivacyLossDistribution.from_gaussian(
        1.1, h=1e-3, sampling_prob=0.02, tail_mass_truncation=1e-15 / 500
    ).self_compose(500)
    assert acc.get_epsilon(1e-6) == pytest.approx(direct.get_epsilon_for_delta(1e-6), rel=1e-12)


def test_accountant_shares_the_tail_budget_between_steps():
    """30,000 subsampled steps at delta = 1e-11: with a 1e-15 tail per step the mass at +inf
    (~3e-11) exceeded delta and epsilon was inf, where dp-accounting is finite."""
    dpl = _dp_pld()
    acc = PLDAccountant(h=1e-3).compose_gaussian(1.0, count=30_000, sampling_prob=0.01)
    assert acc.get_delta(1e9) < 1e-11
    eps = acc.get_epsilon(1e-11)
    theirs = dpl.from_gaussian_mechanism(
        1.0, value_discretization_interval=1e-3, sampling_prob=0.01
    ).self_compose(30_000).get_epsilon_for_delta(1e-11)
    assert math.isfinite(eps) and eps == pytest.approx(theirs, rel=0.03)
    per_step = PrivacyLossDistribution.from_gaussian(1.0, h=1e-3, sampling_prob=0.01)
    assert per_step.self_compose(30_000).get_epsilon_for_delta(1e-11) == math.inf


# --- peers ---------------------------------------------------------------------------


def _dp_pld():
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as dpl

    return dpl


@pytest.mark.parametrize("n", [1, 1000])
def test_gaussian_vs_dp_accounting(n):
    dpl = _dp_pld()
    std = 1.0 if n == 1 else 20.0
    ours = PrivacyLossDistribution.from_gaussian(std, h=1e-4, estimator="bucket").self_compose(n)
    theirs = dpl.from_gaussian_mechanism(std, use_connect_dots=False).self_compose(n)
    for delta in (1e-5, 1e-7):
        e_o, e_t = ours.get_epsilon_for_delta(delta), theirs.get_epsilon_for_delta(delta)
        assert e_o == pytest.approx(e_t, rel=1e-5)
    assert ours.get_delta_for_epsilon(1.0) == pytest.approx(theirs.get_delta_for_epsilon(1.0), rel=1e-6)


@pytest.mark.parametrize("n", [1, 1000])
def test_laplace_vs_dp_accounting(n):
    dpl = _dp_pld()
    b = 2.0 if n == 1 else 100.0
    ours = PrivacyLossDistribution.from_laplace(b, h=1e-4, estimator="bucket").self_compose(n)
    theirs = dpl.from_laplace_mechanism(b, use_connect_dots=False).self_compose(n)
    for delta in (1e-3, 1e-6):
        e_o, e_t = ours.get_epsilon_for_delta(delta), theirs.get_epsilon_for_delta(delta)
        assert e_o == pytest.approx(e_t, rel=1e-5)


@pytest.mark.parametrize("q", [1.0, 0.01])
def test_connect_dots_vs_dp_accounting_default(q):
    dpl = _dp_pld()
    std = 20.0 if q == 1.0 else 1.0
    ours = PrivacyLossDistribution.from_gaussian(std, h=1e-4, sampling_prob=q).self_compose(1000)
    theirs = dpl.from_gaussian_mechanism(std, sampling_prob=q).self_compose(1000)  # connect-dots
    for delta, rel in ((1e-5, 1e-5), (1e-8, 1e-3)):
        assert ours.get_epsilon_for_delta(delta) == pytest.approx(theirs.get_epsilon_for_delta(delta), rel=rel)


def test_subsampled_gaussian_vs_dp_accounting():
    dpl = _dp_pld()
    ours = PrivacyLossDistribution.from_gaussian(
        1.0, h=1e-4, sampling_prob=0.01, estimator="bucket"
    ).self_compose(1000)
    theirs = dpl.from_gaussian_mechanism(
        1.0, sampling_prob=0.01, use_connect_dots=False
    ).self_compose(1000)
    for delta in (1e-5, 1e-8):
        e_o, e_t = ours.get_epsilon_for_delta(delta), theirs.get_epsilon_for_delta(delta)
        assert e_o == pytest.approx(e_t, rel=1e-3)
        assert e_o == pytest.approx(e_t, rel=1e-5)


@pytest.mark.filterwarnings("ignore")
def test_subsampled_gaussian_vs_prv_accountant():
    pytest.importorskip("prv_accountant")
    from prv_accountant import PRVAccountant
    from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism

    n, h = 1000, 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prv = PoissonSubsampledGaussianMechanism(sampling_probability=0.01, noise_multiplier=1.0)
        acc = PRVAccountant(prvs=[prv], max_self_compositions=[n], eps_error=0.01, delta_error=1e-10)
        lower, _, upper = acc.compute_epsilon(delta=1e-5, num_self_compositions=[n])
    ours = PrivacyLossDistribution.from_gaussian(1.0, h=1e-4, sampling_prob=0.01).self_compose(n)
    eps = ours.get_epsilon_for_delta(1e-5)
    # Ours (connect-the-dots) is an upper bound inside PRV's error bars.
    assert lower <= eps <= upper
    coarse = PrivacyLossDistribution.from_gaussian(
        1.0, h=h, sampling_prob=0.01, estimator="bucket"
    ).self_compose(n)
    assert lower <= coarse.get_epsilon_for_delta(1e-5) <= upper + n * h


@pytest.mark.parametrize("method", ["fft_power", "squaring"])
def test_native_fft_path_equals_numpy_fft_path(monkeypatch, method):
    # The composition runs on our C++ FFT; swapping in the numpy.fft twins must give the
    # same PLD up to round-off (same windows, same truncation, same read-outs).
    from rml_fast.kernels import sgg as K
    from rml_fast.privacy import _pld_compose

    pld = PrivacyLossDistribution.from_gaussian(2.0, h=1e-3, sampling_prob=0.1)
    other = PrivacyLossDistribution.from_laplace(3.0, h=1e-3)
    native = pld.self_compose(300, method=method).compose(other)
    monkeypatch.setattr(_pld_compose, "pld_convolve", lambda a, b: K.pld_convolve(a, b, backend="reference"))
    monkeypatch.setattr(
        _pld_compose, "pld_self_convolve",
        lambda p, n, size, shift: K.pld_self_convolve(p, n, size, shift, backend="reference"),
    )
    ref = pld.self_compose(300, method=method).compose(other)
    for a, b in zip(native.pmfs, ref.pmfs, strict=True):
        # Round-off (~1e-17 per bucket) may move the 1e-15 tail-truncation points by some
        # buckets (hundreds where the true tail is below the round-off floor); the mass outside
        # the common support is at that floor, and on it the masses agree to round-off.
        lo, hi = max(a.lower_index, b.lower_index), min(a.lower_index + a.pmf.size, b.lower_index + b.pmf.size)
        assert hi - lo > 0.8 * max(a.pmf.size, b.pmf.size)
        for x in (a, b):
            outside = x.pmf[: lo - x.lower_index].sum() + x.pmf[hi - x.lower_index :].sum()
            assert outside < 1e-13
        np.testing.assert_allclose(
            a.pmf[lo - a.lower_index : hi - a.lower_index], b.pmf[lo - b.lower_index : hi - b.lower_index], atol=1e-15
        )
        # clamped round-off goes to +inf: ~1e-17 per bucket of ~1.5e4 buckets per convolution
        assert abs(a.infinity_mass - b.infinity_mass) < 1e-13
    eps = np.linspace(0.0, 6.0, 13)
    np.testing.assert_allclose(native.get_delta_for_epsilon(eps), ref.get_delta_for_epsilon(eps), atol=1e-13)
    np.testing.assert_allclose(
        native.get_epsilon_for_delta(np.array([1e-3, 1e-6])), ref.get_epsilon_for_delta(np.array([1e-3, 1e-6])),
        rtol=1e-9,
    )
