from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from rml_fast.privacy import PrivacyLossDistribution, SGGMechanism, optimal_sgg

EPS = np.array([0.0, 0.3, 1.0, 2.0])


def gaussian_delta(eps, std, sens=1.0):
    eps = np.asarray(eps, dtype=np.float64)
    a, b = sens / (2 * std), std / sens
    return norm.cdf(a - eps * b) - np.exp(eps) * norm.cdf(-a - eps * b)


def test_members_and_mse():
    g = SGGMechanism.gaussian(4, std=1.5)
    assert (g.dim, g.k, g.p) == (4, 4.0, 2.0)
    assert g.sigma == pytest.approx(math.sqrt(2) * 1.5)
    assert g.is_gaussian
    assert g.mse() == pytest.approx(4 * 1.5**2)
    l2 = SGGMechanism.l2(3, sigma=0.7)
    assert l2.mse() == pytest.approx(3 * 4 * 0.7**2)  # T (T+1) sigma^2
    m = SGGMechanism(2, 1.0, 3.0, 1.5)
    assert m.mse() == pytest.approx(math.gamma(5 / 1.5) / math.gamma(3 / 1.5))
    with pytest.raises(Exception, match=r"cannot assign|frozen"):
        g.sigma = 2.0  # type: ignore[misc]


@pytest.mark.parametrize("dim", [1, 2, 3, 5, 20])
def test_gaussian_member_quadrature_matches_balle_wang_for_every_dim(dim):
    h, std = 1e-3, 1.2
    pld = SGGMechanism.gaussian(dim, std).pld(h, method="quadrature")
    got = pld.get_delta_for_epsilon(EPS)
    exact = gaussian_delta(EPS, std)
    # Pessimistic, and within the rounding bound (plus quadrature error ~1e-9).
    assert np.all(got >= exact - 2e-9)
    assert np.all(got <= gaussian_delta(EPS - h, std) + 2e-9)


def test_composition_of_sgg_gaussian_member_equals_scaled_gaussian():
    h, std, n = 1e-3, 4.0, 50
    composed = SGGMechanism.gaussian(3, std).pld(h, method="quadrature").self_compose(n)
    eff = std / math.sqrt(n)
    got = composed.get_delta_for_epsilon(EPS)
    assert np.all(got >= gaussian_delta(EPS, eff) - 1e-8)
    assert np.all(got <= gaussian_delta(EPS - n * h, eff) + 1e-8)


@pytest.mark.parametrize("b", [0.5, 2.0])
def test_laplace_member_closed_form(b):
    h = 1e-4
    mech = SGGMechanism(1, b, 1.0, 1.0)
    got = mech.pld(h).get_delta_for_epsilon(EPS)
    a = 1 / b
    exact = np.where(a > EPS, 1 - np.exp(np.minimum(EPS - a, 0) / 2), 0.0)
    assert np.all(got >= exact - 2e-14)
    shifted = np.where(a > EPS - h, 1 - np.exp(np.minimum(EPS - h - a, 0) / 2), 0.0)
    assert np.all(got <= shifted + 1e-12)
    lap = PrivacyLossDistribution.from_laplace(b, h=h).get_delta_for_epsilon(EPS)
    np.testing.assert_allclose(got, lap, atol=1e-12)


@pytest.mark.parametrize(("dim", "p"), [(1, 1.0), (1, 0.6), (2, 1.0), (3, 0.7), (6, 0.5)])
def test_pure_dp_for_p_at_most_one(dim, p):
    sigma, h = 1.3, 1e-4
    eps0 = (1 / sigma) ** p
    pld = SGGMechanism(dim, sigma, None, p).pld(h)
    # delta = 0 beyond eps0 (up to one bucket of rounding and the truncated tails).
    assert pld.get_delta_for_epsilon(eps0 + h) <= 1e-13
    assert pld.get_delta_for_epsilon(0.0) > 1e-3  # not trivially private


@pytest.mark.parametrize(("dim", "k", "p", "sigma"), [(3, 3.0, 1.5, 1.2), (2, 2.0, 1.0, 0.8), (3, 4.0, 1.5, 1.5)])
def test_monte_carlo_privacy_loss(dim, k, p, sigma):
    mech = SGGMechanism(dim, sigma, k, p)
    x = mech.sample(1_000_000, rng=2024)
    loss = mech.privacy_loss(x)
    h = 1e-3
    pld = mech.pld(h)
    for eps in (0.2, 0.6):
        vals = np.maximum(1 - np.exp(eps - loss), 0.0)
        mc, se = vals.mean(), vals.std() / math.sqrt(vals.size)
        ours = pld.get_delta_for_epsilon(eps)
        upper = pld.get_delta_for_epsilon(eps + h)  # removes the rounding-up bias
        assert ours + 4 * se >= mc
        assert upper - 4 * se <= mc


def test_privacy_loss_of_gaussian_member_is_linear():
    mech = SGGMechanism.gaussian(4, std=0.9)
    x = np.random.default_rng(0).normal(size=(100, 4))
    expected = (1 - 2 * x[:, 0]) / mech.sigma**2
    np.testing.assert_allclose(mech.privacy_loss(x), expected, rtol=1e-12, atol=1e-12)


def test_randomize_numpy_and_torch():
    mech = SGGMechanism.l2(3, sigma=0.5)
    x = np.ones((4, 3))
    y = mech.randomize(x, rng=5)
    assert y.shape == x.shape
    assert y.dtype == np.float64
    assert np.all(x == 1.0)
    np.testing.assert_array_equal(y, mech.randomize(x, rng=5))
    y32 = mech.randomize(x.astype(np.float32), rng=5)
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, y, rtol=1e-6, atol=1e-6)
    single = mech.randomize(np.zeros(3), rng=1)
    assert single.shape == (3,)
    torch = pytest.importorskip("torch")
    t = torch.ones(4, 3, dtype=torch.float64)
    yt = mech.randomize(t, rng=5)
    assert isinstance(yt, torch.Tensor)
    assert yt.dtype == torch.float64
    np.testing.assert_allclose(yt.numpy(), y, rtol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        mech.randomize(np.ones((2, 4)))
    with pytest.raises(ValueError, match="finite"):
        mech.randomize(np.array([1.0, np.nan, 0.0]))


def test_calibrate_gaussian_is_analytic():
    mech = SGGMechanism.calibrate(5, 1.0, 1e-5)
    std = mech.sigma / math.sqrt(2)
    assert gaussian_delta(1.0, std) <= 1e-5
    assert gaussian_delta(1.0, std * (1 - 1e-5)) > 1e-5
    # N compositions of the Gaussian = one Gaussian with std / sqrt(N).
    mech_n = SGGMechanism.calibrate(5, 1.0, 1e-5, num_compositions=16)
    assert mech_n.sigma == pytest.approx(4 * mech.sigma, rel=1e-5)


@pytest.mark.parametrize(("dim", "n"), [(2, 1), (3, 10)])
def test_calibrate_l2_is_tight(dim, n):
    h = 1e-3
    mech = SGGMechanism.calibrate(dim, 1.0, 1e-5, p=1.0, num_compositions=n, value_discretization_interval=h, rtol=1e-5)
    assert mech.p == 1.0
    assert mech.k == dim
    assert mech.delta_for_epsilon(1.0, n, h) <= 1e-5
    looser = SGGMechanism.l2(dim, mech.sigma * (1 - 1e-3))
    assert looser.delta_for_epsilon(1.0, n, h) > 1e-5
    assert mech.epsilon_for_delta(1e-5, n, h) <= 1.0 + 1e-9


def test_optimal_sgg_beats_or_matches_gaussian_and_l2():
    best, table = optimal_sgg(1, 1.0, 1e-5, p_grid=(1.0, 1.5, 2.0), refine=False, value_discretization_interval=1e-3, rtol=1e-4)
    assert best.mse() == pytest.approx(table["mse"].min())
    assert best.mse() <= float(table["gaussian_mse"]) * (1 + 1e-6)
    assert best.mse() <= float(table["l2_mse"]) * (1 + 1e-6)
    assert set(table) >= {"k", "p", "sigma", "mse"}
    assert table["p"].shape == table["mse"].shape == (3,)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"dim": 0, "epsilon": 1.0, "delta": 1e-5}, ValueError, "dim"),
        ({"dim": 2, "epsilon": 0.0, "delta": 1e-5}, ValueError, "epsilon"),
        ({"dim": 2, "epsilon": -1.0, "delta": 1e-5}, ValueError, "epsilon"),
        ({"dim": 2, "epsilon": 1.0, "delta": 0.0}, ValueError, "delta"),
        ({"dim": 2, "epsilon": 1.0, "delta": 1.0}, ValueError, "delta"),
        ({"dim": 2, "epsilon": float("nan"), "delta": 1e-5}, ValueError, "epsilon"),
        ({"dim": 2, "epsilon": 1.0, "delta": 1e-5, "num_compositions": 0}, ValueError, "num_compositions"),
        ({"dim": 2, "epsilon": 1.0, "delta": 1e-5, "sensitivity": -1.0}, ValueError, "sensitivity"),
        ({"dim": 2, "epsilon": 1.0, "delta": 1e-16, "p": 1.0}, ValueError, "delta"),
    ],
)
def test_calibrate_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        SGGMechanism.calibrate(**kwargs)


def test_constructor_bad_input():
    with pytest.raises(ValueError, match="sigma"):
        SGGMechanism(2, 0.0)
    with pytest.raises(ValueError, match="sigma"):
        SGGMechanism(2, float("inf"))
    with pytest.raises(ValueError, match="dim"):
        SGGMechanism(0, 1.0)
    with pytest.raises(TypeError, match="dim"):
        SGGMechanism(2.5, 1.0)
    with pytest.raises(ValueError, match="k"):
        SGGMechanism(1, 1.0, 0.0)
    with pytest.raises(ValueError, match="p"):
        SGGMechanism(2, 1.0, None, -1.0)
    mech = SGGMechanism(2, 1.0)
    with pytest.raises(ValueError, match="delta"):
        mech.epsilon_for_delta(0.0)
    with pytest.raises(ValueError, match="num_compositions"):
        mech.delta_for_epsilon(1.0, num_compositions=0)


def test_subsampled_sgg_gaussian_member_matches_subsampled_gaussian():
    h, q = 1e-3, 0.05
    ours = SGGMechanism.gaussian(3, 1.0).pld(h, sampling_prob=q, method="quadrature")
    ref = PrivacyLossDistribution.from_gaussian(1.0, h=h, sampling_prob=q)
    assert len(ours.pmfs) == 2
    eps = np.array([0.02, 0.1, 0.3, 0.6])
    np.testing.assert_allclose(ours.get_delta_for_epsilon(eps), ref.get_delta_for_epsilon(eps), rtol=1e-7, atol=1e-13)
    # An l2 member, subsampled and composed through the accountant, is finite and monotone.
    from rml_fast.privacy import PLDAccountant

    acc = PLDAccountant(h=1e-3).compose(SGGMechanism.l2(2, 1.5).pld(1e-3, sampling_prob=0.1), count=50)
    e1, e2 = acc.get_epsilon(1e-3), acc.get_epsilon(1e-6)
    assert 0 < e1 < e2 < math.inf


# --- dim = 1 with a general shape k ------------------------------------------------------


@pytest.mark.parametrize("p", [0.7, 1.5, 2.0])
def test_1d_general_inversion_matches_closed_form_at_k1(p):
    from rml_fast.privacy._sgg_1d import _loss_cdf_1d_general, _loss_cdf_1d_laplace_family

    ell = np.linspace(-3.0, 3.0, 25)
    np.testing.assert_allclose(
        _loss_cdf_1d_general(ell, 1.3, 1.0, p, 1.0), _loss_cdf_1d_laplace_family(ell, 1.3, p, 1.0),
        atol=1e-12,
    )


@pytest.mark.parametrize(("k", "p"), [(2.0, 1.5), (0.5, 2.0), (3.0, 1.0), (1.5, 0.8)])
def test_1d_general_k_loss_cdf_matches_monte_carlo(k, p):
    mech = SGGMechanism(1, 1.7, k=k, p=p)
    x = mech.sample(300_000, rng=3)
    loss = mech.privacy_loss(x)
    ell = np.array([-2.0, -0.5, 0.0, 0.3, 1.0, 2.5])
    emp = (loss[:, None] <= ell[None, :]).mean(axis=0)
    got = mech._cdf_fn(None)(ell)
    se = np.sqrt(got * (1 - got) / loss.size)
    assert np.all(np.abs(emp - got) < 4 * se + 1e-12)


def test_1d_general_k_calibration_is_private_by_monte_carlo():
    mech = SGGMechanism.calibrate(1, 1.0, 1e-3, k=2.0, p=1.5, value_discretization_interval=1e-3)
    assert mech.delta_for_epsilon(1.0, value_discretization_interval=1e-3) <= 1e-3
    # the pessimistic delta is an upper bound of the Monte-Carlo hockey-stick value
    x = mech.sample(1_000_000, rng=7)
    d = np.maximum(1.0 - np.exp(1.0 - mech.privacy_loss(x)), 0.0)
    assert d.mean() - 4 * d.std() / math.sqrt(d.size) <= 1e-3
    # a zero of the density at the origin needs more noise than the k = 1 member
    assert mech.mse() > SGGMechanism.calibrate(1, 1.0, 1e-3, p=1.5, value_discretization_interval=1e-3).mse()
