"""The NUFFT path of the nudft family (spreading + FFT + deconvolution) against the float64
einsum reference, its exact adjointness, gradients, and the automatic choice of path."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.fft
import torch

from rml_fast._native import _C
from rml_fast.kernels._nufft import nufft_type1, nufft_type2, prefer_nufft, setup_for
from rml_fast.kernels.nudft import (
    FrequencyGrid,
    nudft_type1,
    nudft_type1_reference,
    nudft_type2,
    nudft_type2_hermitian,
    nudft_type2_reference,
)
from rml_fast.neural_processes.sfconv import SetFourierConv

GRIDS = {
    "1d": lambda: FrequencyGrid(1, 4.9, 0.1),
    "2d": lambda: FrequencyGrid(2, (1.2, 1.6), (0.3, 0.2)),
    "2d-images": lambda: FrequencyGrid(2, 4.8, 0.2),
}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().abs().max() / b.detach().abs().max())


def _data(B, N, C, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, N, d, generator=g, dtype=torch.float64) * 6 - 3
    v = torch.randn(B, N, C, generator=g, dtype=torch.float64)
    return x, v


@pytest.mark.parametrize("gname", list(GRIDS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sign", [-1, 1])
def test_type1_matches_reference(gname, dtype, sign) -> None:
    g = GRIDS[gname]()
    x, v = _data(3, 57, 5, g.dim)
    Z_ref, D_ref = nudft_type1_reference(x, v, g, sign=sign)
    Z, D = nudft_type1(x.to(dtype), v.to(dtype), g, sign=sign, backend="nufft")
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert _rel(Z.to(torch.complex128), Z_ref) < tol
    assert _rel(D.to(torch.complex128), D_ref) < tol


@pytest.mark.parametrize("gname", list(GRIDS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sign", [-1, 1])
def test_type2_matches_reference(gname, dtype, sign) -> None:
    g = GRIDS[gname]()
    x, _ = _data(2, 41, 1, g.dim, seed=3)
    gen = torch.Generator().manual_seed(4)
    c = torch.randn(2, g.n_freq, 6, generator=gen, dtype=torch.complex128)
    w = torch.rand(g.n_freq, generator=gen, dtype=torch.float64) + 0.5
    y_ref = nudft_type2_reference(x, c, g, w, sign=sign)
    y = nudft_type2(
        x.to(dtype), c.to(dtype.to_complex()), g, w.to(dtype), sign=sign, backend="nufft"
    )
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert _rel(y.double(), y_ref) < tol


@pytest.mark.parametrize("gname", ["1d", "2d"])
def test_nufft_pair_is_exactly_adjoint(gname) -> None:
    """<T1 v, G> = <v, T2 G> to round-off for the approximate operators themselves (so the
    autograd backward, which uses the other transform, is exact for the NUFFT path)."""
    g = GRIDS[gname]()
    x, v = _data(2, 33, 4, g.dim)
    gen = torch.Generator().manual_seed(5)
    Gre, Gim = torch.randn(2, 2, g.n_freq, 4, generator=gen, dtype=torch.float64)
    for s in (-1, 1):
        re, im, _, _ = nufft_type1(x, v, g, s, False)
        lhs = (re * Gre + im * Gim).sum()
        rhs = (v * nufft_type2(x, Gre, Gim, torch.ones(g.n_freq, dtype=torch.float64), g, -s)).sum()
        assert torch.allclose(lhs, rhs, rtol=1e-13)


@pytest.mark.parametrize("gname", ["1d", "2d"])
def test_gradcheck(gname) -> None:
    g = GRIDS[gname]()
    x, v = _data(2, 7, 3, g.dim)
    x.requires_grad_()
    v.requires_grad_()

    def t1(x, v):
        Z, D = nudft_type1(x, v, g, backend="nufft")
        return Z.real, Z.imag, D.real, D.imag

    assert torch.autograd.gradcheck(t1, (x, v))
    gen = torch.Generator().manual_seed(6)
    yh = torch.randn(2, g.n_freq, 2, generator=gen, dtype=torch.complex128).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda y, x: nudft_type2_hermitian(y, x, g, backend="nufft"), (yh, x)
    )


def test_layer_nufft_matches_reference_float32() -> None:
    torch.manual_seed(0)
    x, _ = _data(2, 300, 1, 1)
    xq, _ = _data(2, 70, 1, 1, seed=1)
    z = torch.randn(2, 300, 16, dtype=torch.float64)
    ref = SetFourierConv(1, 16, 8, 4.9, 0.1, groups=2, backend="reference").double()
    fast = SetFourierConv(1, 16, 8, 4.9, 0.1, groups=2, backend="nufft")
    fast.load_state_dict(ref.state_dict())
    y_ref = ref(z, xq, x)
    zf = z.float().requires_grad_()
    y = fast(zf, xq.float(), x.float())
    assert _rel(y.double(), y_ref) < 1e-5
    z64 = z.clone().requires_grad_()
    ref(z64, xq, x).square().sum().backward()
    y.square().sum().backward()
    assert _rel(zf.grad.double(), z64.grad) < 1e-4


def test_auto_takes_nufft_only_for_large_transforms() -> None:
    g = GRIDS["1d"]()
    assert not prefer_nufft(g, 16, 128, torch.float32)
    assert prefer_nufft(g, 50, 128, torch.float32)
    assert not prefer_nufft(g, 40, 128, torch.float64)
    assert prefer_nufft(g, 100, 128, torch.float64)
    assert prefer_nufft(g, 500, 128, torch.float32)
    assert prefer_nufft(g, 5000, 128, torch.float32)
    g2 = GRIDS["2d-images"]()
    assert not prefer_nufft(g2, 256, 256, torch.float32)
    assert prefer_nufft(g2, 1024, 256, torch.float32)
    x, v = _data(1, 4000, 2, 1)
    x, v = x.float(), v.float()
    auto = nudft_type1(x, v, g)[0]
    assert torch.equal(auto, nudft_type1(x, v, g, backend="nufft")[0])
    assert not torch.equal(auto, nudft_type1(x, v, g, backend="native")[0])
    small = nudft_type1(x[:, :16], v[:, :16], g)[0]
    assert torch.equal(small, nudft_type1(x[:, :16], v[:, :16], g, backend="native")[0])


def test_fine_grid_setup() -> None:
    st = setup_for(GRIDS["2d-images"](), torch.float32)
    assert st.nf == (80, 80) and st.w == 9  # 1.5 x (2K + 1) = 73.5 -> next 2,3,5-smooth even
    st1 = setup_for(GRIDS["1d"](), torch.float32)
    assert st1.nf == (200,) and st1.w == 7  # 2 x (2K + 1) = 198 -> 200
    assert setup_for(GRIDS["1d"](), torch.float64).w == 16


def test_nufft_rejects_cuda_only_use() -> None:
    g = GRIDS["1d"]()
    with pytest.raises(ValueError, match="backend must be"):
        nudft_type1(torch.zeros(1, 2, 1), torch.zeros(1, 2, 1), g, backend="fft")
    with pytest.raises(ValueError, match="backend must be"):
        SetFourierConv(1, 2, 2, 1.0, 0.5, backend="fft")


# --- the 1-D building blocks: channel-plane FFT, gather spreading, fused transforms ---------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 8, 12, 15, 25, 36, 50, 75, 100, 128, 243])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sign", [-1, 1])
def test_row_fft_matches_numpy(n, dtype, sign) -> None:
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, 7)) + 1j * rng.standard_normal((n, 7))
    re, im = a.real.astype(dtype), a.imag.astype(dtype)
    _C.nudft.row_fft(re, im, sign)
    ref = np.fft.fft(a, axis=0) if sign < 0 else np.fft.ifft(a, axis=0) * n
    tol = 1e-13 if dtype == np.float64 else 3e-6
    assert np.abs(re + 1j * im - ref).max() / np.abs(ref).max() < tol


@pytest.mark.parametrize("n", [0, 7, 14, 22])
def test_row_fft_rejects_lengths_with_other_factors(n) -> None:
    re = np.zeros((n, 3))
    with pytest.raises(ValueError, match="RowFFT"):
        _C.nudft.row_fft(re, re.copy(), -1)


def _spread_brute(x: np.ndarray, v: np.ndarray, nf: int, dxi: float, w: int, beta: float):
    """g[j] = sum_n v_n phi((j - u_n) / (w / 2)) over the w nodes j0..j0+w-1 nearest
    u_n = frac(dxi x_n) nf (periodic), phi(z) = exp(beta (sqrt(1 - z^2) - 1))."""
    g = np.zeros((nf, v.shape[1]))
    for xn, vn in zip(x, v, strict=True):
        t = dxi * xn
        u = (t - np.floor(t)) * nf
        j0 = int(np.ceil(u - w / 2))
        for j in range(j0, j0 + w):
            z = (j - u) / (w / 2)
            g[j % nf] += np.exp(beta * (np.sqrt(max(1 - z * z, 0.0)) - 1)) * vn
    return g


@pytest.mark.parametrize("N", [0, 1, 40, 300])
def test_gather_spreading_matches_brute_force(N) -> None:
    """The 1-D spreading (gather form: points counting-sorted by first node, each grid row
    summed once) against the direct definition, density channel included (float64: exact
    kernel)."""
    st = setup_for(GRIDS["1d"](), torch.float64)
    rng = np.random.default_rng(N)
    x = rng.uniform(-3, 3, (2, N, 1))
    v = rng.standard_normal((2, N, 3))
    g = np.zeros((2, st.nf[0], 4))
    _C.nudft.spread(x, v, list(st.nf), list(st.dxi), st.w, st.beta, True, g, st.poly)
    for b in range(2):
        vb = np.concatenate([v[b], np.ones((N, 1))], axis=1)
        ref = _spread_brute(x[b, :, 0], vb, st.nf[0], st.dxi[0], st.w, st.beta)
        assert np.abs(g[b] - ref).max() <= 1e-13 * max(1.0, np.abs(ref).max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("density", [True, False])
def test_fused_1d_transforms_equal_the_unfused_pipeline(dtype, density) -> None:
    """nufft1_1d = modes_out(rfft(spread)) and nufft2_1d = interp(irfft(modes_in)) (scipy's
    FFTs): the packed real FFT on channel planes and its pre/post-processing."""
    st = setup_for(GRIDS["1d"](), dtype)
    npd = np.float64 if dtype == torch.float64 else np.float32
    rng = np.random.default_rng(1)
    B, N, C, K = 3, 37, 5, st.K[0]
    F = K + 1
    x = rng.uniform(-3, 3, (B, N, 1)).astype(npd)
    v = rng.standard_normal((B, N, C)).astype(npd)
    scale = rng.uniform(0.5, 2.0, F)
    dens = [np.zeros((B, F), npd), np.zeros((B, F), npd)] if density else [None, None]
    re, im = np.zeros((B, F, C), npd), np.zeros((B, F, C), npd)
    args = (list(st.nf), list(st.dxi), st.w, st.beta)
    _C.nudft.nufft1_1d(x, v, *args, st.poly, K, scale, 1, re, im, *dens)
    g = np.zeros((B, st.nf[0], C + int(density)), npd)
    _C.nudft.spread(x, v, *args, density, g, st.poly)
    S = np.ascontiguousarray(scipy.fft.rfft(g, axis=1))
    re2, im2 = np.zeros_like(re), np.zeros_like(im)
    dens2 = [np.zeros((B, F), npd), np.zeros((B, F), npd)] if density else [None, None]
    _C.nudft.modes_out(S, [K], scale, 1, re2, im2, *dens2)
    tol = 1e-13 if dtype == torch.float64 else 2e-6
    top = np.abs(re2).max()
    assert np.abs(re - re2).max() < tol * top and np.abs(im - im2).max() < tol * top
    if density:
        for a, b in zip(dens, dens2, strict=True):
            assert np.abs(a - b).max() < tol * np.abs(dens2[0]).max()

    M, Co = 29, 6
    xq = rng.uniform(-3, 3, (B, M, 1)).astype(npd)
    re = rng.standard_normal((B, F, Co)).astype(npd)
    im = rng.standard_normal((B, F, Co)).astype(npd)
    y = np.zeros((B, M, Co), npd)
    _C.nudft.nufft2_1d(xq, re, im, *args, st.poly, K, scale, -1, y)
    X = np.empty((B, F, Co), np.complex128 if dtype == torch.float64 else np.complex64)
    _C.nudft.modes_in(re, im, [K], scale, -1, X)
    gq = np.ascontiguousarray(scipy.fft.irfft(X, n=st.nf[0], axis=1), dtype=npd)
    y2 = np.zeros_like(y)
    _C.nudft.interp(xq, gq, *args, y2, st.poly)
    assert np.abs(y - y2).max() < tol * np.abs(y2).max()


def test_fused_1d_rejects_bad_grids() -> None:
    st = setup_for(GRIDS["1d"](), torch.float64)
    x, v = np.zeros((1, 2, 1)), np.zeros((1, 2, 1))
    re, im = np.zeros((1, 1, 1)), np.zeros((1, 1, 1))
    with pytest.raises(ValueError, match="nf must be even"):
        _C.nudft.nufft1_1d(x, v, [201], [0.1], st.w, st.beta, None, 0, np.ones(1), 1, re, im)
    big = np.zeros((1, 101, 1))
    with pytest.raises(ValueError, match="K must be in"):
        _C.nudft.nufft1_1d(
            x, v, [200], [0.1], st.w, st.beta, None, 100, np.ones(101), 1, big, big.copy()
        )


def test_2d_type1_chunks_on_threads_equal_serial() -> None:
    """On the image grid one batch element fills a chunk, and with several torch threads the
    chunks run on a thread pool (own grid buffer each): same result as one thread, bit for bit."""
    g = GRIDS["2d-images"]()
    x, v = _data(5, 300, 3, 2, seed=3)
    x, v = x.float(), v.float()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        serial = nufft_type1(x, v, g, -1, True)
        torch.set_num_threads(3)
        pooled = nufft_type1(x, v, g, -1, True)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(serial, pooled, strict=True):
        assert torch.equal(a, b)
    ref = nudft_type1_reference(x.double(), v.double(), g, density=True)
    assert _rel(torch.complex(pooled[0], pooled[1]).to(ref[0].dtype), ref[0]) < 1e-5
