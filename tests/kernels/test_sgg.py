from __future__ import annotations

import math
import os

import numpy as np
import pytest
from scipy import stats

os.environ.setdefault("TRITON_INTERPRET", "1")

from rml_fast.kernels import sgg as K

CASES = [(1, 1.0, 0.5), (2, 2.0, 1.0), (3, 3.0, 2.0), (5, 2.5, 0.7), (7, 9.0, 1.5), (33, 33.0, 1.0)]


@pytest.mark.parametrize(("dim", "k", "p"), CASES)
def test_native_sampler_matches_reference(dim, k, p):
    a = K.sgg_sample(3000, dim, 1.3, k, p, seed=11, offset=5)
    b = K.sgg_sample_reference(3000, dim, 1.3, k, p, seed=11, offset=5)
    assert a.shape == (3000, dim)
    assert a.dtype == np.float64
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())


def test_sampler_is_counter_based():
    full = K.sgg_sample(20_000, 4, 1.0, 4.0, 1.5, seed=3)  # large: the OpenMP path
    head = K.sgg_sample(7, 4, 1.0, 4.0, 1.5, seed=3)  # small: serial path
    np.testing.assert_array_equal(full[:7], head)
    stride = K.counters_per_row(4)
    tail = K.sgg_sample(5, 4, 1.0, 4.0, 1.5, seed=3, offset=100 * stride)
    np.testing.assert_array_equal(full[100:105], tail)
    other = K.sgg_sample(7, 4, 1.0, 4.0, 1.5, seed=4)
    assert not np.allclose(other, head)
    f32 = K.sgg_sample(7, 4, 1.0, 4.0, 1.5, seed=3, dtype=np.float32)
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, head, rtol=1e-6)


@pytest.mark.parametrize(("dim", "k", "p"), CASES)
def test_radius_law_and_second_moment(dim, k, p):
    sigma = 1.7
    x = K.sgg_sample(40_000, dim, sigma, k, p, seed=123)
    r = np.linalg.norm(x, axis=1)
    ks = stats.kstest(r, stats.gengamma(a=k / p, c=p, scale=sigma).cdf)
    assert ks.pvalue > 1e-3
    # E||X||^2 = sigma^2 Gamma((k+2)/p) / Gamma(k/p), checked within 5 standard errors.
    m2 = sigma**2 * math.exp(math.lgamma((k + 2) / p) - math.lgamma(k / p))
    se = (r**2).std() / math.sqrt(r.size)
    assert abs((r**2).mean() - m2) < 5 * se


@pytest.mark.parametrize("dim", [2, 3, 10])
def test_directions_are_uniform(dim):
    x = K.sgg_sample(50_000, dim, 1.0, float(dim), 1.0, seed=9)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    n = u.shape[0]
    assert np.all(np.abs(u.mean(axis=0)) < 5 / math.sqrt(n * dim))
    cov = u.T @ u / n
    np.testing.assert_allclose(cov, np.eye(dim) / dim, atol=6 / math.sqrt(n) / dim * 2)
    # The first coordinate's law: (1 + u1)/2 ~ Beta((dim-1)/2, (dim-1)/2).
    a = (dim - 1) / 2
    assert stats.kstest((1 + u[:, 0]) / 2, stats.beta(a, a).cdf).pvalue > 1e-3


def test_small_shape_uses_the_boost():
    # k/p = 0.25 < 1 exercises G = G_{a+1} U^{1/a}.
    x = K.sgg_sample(40_000, 1, 1.0, 1.0, 4.0, seed=2)
    assert stats.kstest(np.abs(x[:, 0]), stats.gengamma(a=0.25, c=4.0).cdf).pvalue > 1e-3


def test_sampler_bad_input():
    with pytest.raises(ValueError, match="dim"):
        K.sgg_sample(3, 0, 1.0, 1.0, 1.0, seed=0)
    with pytest.raises(ValueError, match="sigma"):
        K.sgg_sample(3, 2, -1.0, 1.0, 1.0, seed=0)
    with pytest.raises(ValueError, match="p"):
        K.sgg_sample(3, 2, 1.0, 1.0, float("inf"), seed=0)
    with pytest.raises(ValueError, match="seed"):
        K.sgg_sample(3, 2, 1.0, 1.0, 1.0, seed=-1)
    with pytest.raises(TypeError, match="dtype"):
        K.sgg_sample(3, 2, 1.0, 1.0, 1.0, seed=0, dtype=np.int32)
    from rml_fast._native import _C

    with pytest.raises(ValueError, match="n \\* dim"):
        _C.sgg.sample(np.empty(5), 2, 3, 1.0, 3.0, 2.0, 0, 0)


# --- loss CDF --------------------------------------------------------------------------

LOSS_CASES = [
    (2, 2.0, 2.0, 1.0),
    (3, 1.5, 3.0, 1.5),
    (3, 0.5, 3.0, 0.5),
    (4, 2.0, 2.5, 1.5),  # k < dim: pole at the origin
    (4, 2.0, 6.0, 1.5),  # k > dim: zero at the origin, two roots
    (12, 3.0, 12.0, 2.0),
]


@pytest.mark.parametrize(("dim", "sigma", "k", "p"), LOSS_CASES)
def test_loss_cdf_native_matches_scipy_reference(dim, sigma, k, p):
    ell = np.linspace(-1.2, 1.2, 5)
    native = K.sgg_loss_cdf(ell, dim, sigma, k, p)
    ref = K.sgg_loss_cdf(ell, dim, sigma, k, p, backend="reference")
    np.testing.assert_allclose(native, ref, atol=5e-9)
    assert np.all(np.diff(native) >= 0)


@pytest.mark.parametrize("dim", [2, 3, 4, 7, 30, 200])
def test_loss_cdf_gaussian_member_is_normal(dim):
    # SGG(sqrt(2) s, dim, 2) has L ~ N(mu, 2 mu), mu = 1/(2 s^2), for every dim.
    s = 1.3
    mu = 1 / (2 * s * s)
    ell = np.linspace(mu - 8 * math.sqrt(2 * mu), mu + 8 * math.sqrt(2 * mu), 101)
    got = K.sgg_loss_cdf(ell, dim, math.sqrt(2) * s, float(dim), 2.0)
    np.testing.assert_allclose(got, stats.norm.cdf((ell - mu) / math.sqrt(2 * mu)), atol=2e-9)


def test_loss_cdf_matches_monte_carlo():
    dim, sigma, k, p = 3, 1.2, 4.0, 1.5
    x = K.sgg_sample(200_000, dim, sigma, k, p, seed=77)
    xs = x.copy()
    xs[:, 0] -= 1.0

    def phi(s):
        return (s / sigma) ** p - (k - dim) * np.log(s)

    loss = phi(np.linalg.norm(xs, axis=1)) - phi(np.linalg.norm(x, axis=1))
    ell = np.array([-1.0, -0.3, 0.0, 0.4, 1.0])
    emp = (loss[:, None] <= ell[None, :]).mean(axis=0)
    got = K.sgg_loss_cdf(ell, dim, sigma, k, p)
    se = np.sqrt(got * (1 - got) / loss.size)
    assert np.all(np.abs(emp - got) < 4 * se + 1e-12)


def test_loss_cdf_bad_input():
    with pytest.raises(ValueError, match="dim"):
        K.sgg_loss_cdf(np.zeros(2), 1, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="losses"):
        K.sgg_loss_cdf(np.array([0.0, np.nan]), 2, 1.0, 2.0, 1.0)
    with pytest.raises(ValueError, match="sensitivity"):
        K.sgg_loss_cdf(np.zeros(2), 2, 1.0, 2.0, 1.0, sensitivity=0.0)


def test_angle_table_is_the_beta_cdf():
    h, dh = K.angle_cdf_table(5)
    theta = np.linspace(0, math.pi, h.size)
    np.testing.assert_allclose(h, stats.beta(2, 2).cdf(np.sin(theta / 2) ** 2), atol=1e-14)
    np.testing.assert_allclose(np.gradient(h, theta)[1:-1], dh[1:-1], rtol=1e-4, atol=1e-8)


# --- Triton ----------------------------------------------------------------------------


@pytest.mark.parametrize(("dim", "k", "p"), [(1, 1.0, 0.5), (3, 3.0, 2.0), (5, 2.5, 0.7), (33, 33.0, 1.0)])
def test_triton_sampler_matches_native_for_the_same_seed(dim, k, p):
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    from rml_fast.kernels._dispatch import triton_interpreting

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not triton_interpreting():
        pytest.skip("needs CUDA or TRITON_INTERPRET=1")
    seed, offset = 2**40 + 7, 3
    got = K.sgg_sample(200, dim, 1.3, k, p, seed=seed, offset=offset, device=device, backend="triton")
    want = K.sgg_sample(200, dim, 1.3, k, p, seed=seed, offset=offset)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-11, atol=1e-11)
    got32 = K.sgg_sample(
        200, dim, 1.3, k, p, seed=seed, offset=offset, device=device, backend="triton", dtype=torch.float32
    )
    assert got32.dtype == torch.float32
    np.testing.assert_allclose(got32.cpu().numpy(), want, rtol=1e-5, atol=1e-5)


# --- PLD read-out ----------------------------------------------------------------------


def test_pld_delta_readout_native_matches_reference():
    rng = np.random.default_rng(0)
    pmf = rng.random(5000)
    pmf /= pmf.sum() * 1.0001
    eps = np.concatenate([np.linspace(-3, 3, 101), [-100.0, 100.0]])
    a = K.pld_delta_for_epsilon(pmf, -2500, 1e-3, 1e-4, eps)
    b = K.pld_delta_for_epsilon(pmf, -2500, 1e-3, 1e-4, eps, backend="reference")
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    # Brute force from the definition.
    losses = (-2500 + np.arange(pmf.size)) * 1e-3
    brute = [float(np.sum(pmf * np.maximum(1 - np.exp(e - losses), 0.0))) + 1e-4 for e in eps]
    np.testing.assert_allclose(a, brute, rtol=1e-10, atol=1e-13)
    from rml_fast._native import _C

    with pytest.raises(ValueError, match="inf_mass"):
        _C.sgg.pld_delta_for_eps(np.empty(1), np.zeros(1), pmf, 0, 1e-3, 2.0)


def test_pld_epsilon_readout_native_matches_reference():
    rng = np.random.default_rng(1)
    pmf = rng.random(3000) * np.exp(-np.linspace(0, 20, 3000))
    pmf /= pmf.sum() * 1.00001
    deltas = np.array([0.9, 0.3, 1e-2, 1e-4, 1e-6, 1e-9, 5e-6, 1e-6 * 0.5])
    a = K.pld_epsilon_for_delta(pmf, -500, 1e-3, 1e-6, deltas)
    b = K.pld_epsilon_for_delta(pmf, -500, 1e-3, 1e-6, deltas, backend="reference")
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    assert np.isinf(a[deltas < 1e-6]).all()
    finite = np.isfinite(a)
    back = K.pld_delta_for_epsilon(pmf, -500, 1e-3, 1e-6, a[finite])
    assert np.all(back <= deltas[finite] * (1 + 1e-9))


# --- native FFT ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 4, 6, 10, 12, 20, 64, 96, 160, 1024, 3 * 2**11, 5 * 2**12, 2**15])
def test_native_real_fft_matches_numpy(n):
    from rml_fast._native import _C

    rng = np.random.default_rng(n)
    for nx in {1, max(1, n // 3), n - 1, n}:
        x = rng.standard_normal(nx)
        re, im = np.empty(n // 2 + 1), np.empty(n // 2 + 1)
        _C.sgg.fft_rfft(re, im, x, n)
        want = np.fft.rfft(x, n)
        scale = np.abs(want).max()
        np.testing.assert_allclose(re, want.real, atol=1e-14 * scale)
        np.testing.assert_allclose(im, want.imag, atol=1e-14 * scale)
        back = np.empty(n)
        _C.sgg.fft_irfft(back, re, im)
        np.testing.assert_allclose(back[:nx], x, atol=1e-14 * np.abs(x).max())
        np.testing.assert_allclose(back[nx:], 0.0, atol=1e-14 * np.abs(x).max())


def test_native_fft_folds_long_input_modulo_n():
    from rml_fast._native import _C

    x = np.random.default_rng(0).random(1000)
    re, im = np.empty(129), np.empty(129)
    _C.sgg.fft_rfft(re, im, x, 256)
    folded = np.bincount(np.arange(1000) % 256, weights=x)
    np.testing.assert_allclose(re + 1j * im, np.fft.rfft(folded), atol=1e-12)


@pytest.mark.parametrize(("na", "nb"), [(1, 1), (1, 100), (7, 300), (65, 70), (3000, 5000), (20000, 33)])
def test_pld_convolve_is_linear_convolution(na, nb):
    rng = np.random.default_rng(na + nb)
    a, b = rng.random(na), rng.random(nb)
    got = K.pld_convolve(a, b)
    assert got.shape == (na + nb - 1,)
    np.testing.assert_allclose(got, np.convolve(a, b), atol=1e-13 * max(1.0, np.convolve(a, b).max()))
    np.testing.assert_allclose(got, K.pld_convolve(a, b, backend="reference"), atol=1e-12)


@pytest.mark.parametrize(("size", "shift", "n"), [(4096, 5, 37), (6144, -77, 3), (20480, 1234, 1000), (40960, 0, 2), (20, 3, 5)])
def test_pld_self_convolve_matches_numpy_fft(size, shift, n):
    rng = np.random.default_rng(size)
    p = rng.random(7000) * np.exp(-np.linspace(0, 30, 7000))
    p /= p.sum()
    got = K.pld_self_convolve(p, n, size, shift)
    want = K.pld_self_convolve(p, n, size, shift, backend="reference")
    np.testing.assert_allclose(got, want, atol=1e-14)
    assert abs(got.sum() - 1.0) < 1e-12  # total mass is kept by the circular transform


def test_pld_self_convolve_small_case_by_brute_force():
    p = np.array([0.2, 0.5, 0.3])
    want = np.convolve(np.convolve(p, p), p)  # support 7 < size: no folding
    got = K.pld_self_convolve(p, 3, 8, 0)
    np.testing.assert_allclose(got[:7], want, atol=1e-15)
    np.testing.assert_allclose(got[7], 0.0, atol=1e-15)
    np.testing.assert_allclose(K.pld_self_convolve(p, 3, 8, 2), np.roll(got, -2), atol=1e-15)


def test_fft_good_size_and_bad_input():
    from rml_fast._native import _C

    for n in (1, 2, 3, 7, 11, 100, 1000, 262833, 10**6):
        g = K.fft_good_size(n)
        assert g >= n and g % 2 == 0 and g == _C.sgg.fft_good_size(n)
        assert K._is_good(g)
    assert K.fft_good_size(262833) == 5 * 2**16
    with pytest.raises(ValueError, match="size"):
        K.pld_self_convolve(np.ones(3) / 3, 2, 30)
    with pytest.raises(ValueError, match="pmf"):
        K.pld_self_convolve(np.zeros(0), 2, 8)
    with pytest.raises(ValueError, match="n"):
        K.pld_self_convolve(np.ones(3) / 3, 0, 8)
    with pytest.raises(ValueError, match="a and b"):
        K.pld_convolve(np.zeros(0), np.ones(2))
    with pytest.raises(ValueError, match="n must be an even"):
        _C.sgg.fft_rfft(np.empty(8), np.empty(8), np.ones(3), 14)
    with pytest.raises(ValueError, match="out must hold"):
        _C.sgg.pld_convolve(np.empty(3), np.ones(2), np.ones(3))
