"""Batched NUDFT kernels: native (C++) and Triton vs the float64 einsum reference, adjointness,
gradcheck, and finufft type 1/2 as an independent peer."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():  # run the Triton kernels in the CPU interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

from rml_fast.kernels.nudft import (
    FrequencyGrid,
    NUDFTPlan,
    nudft_type1,
    nudft_type1_reference,
    nudft_type2,
    nudft_type2_hermitian,
    nudft_type2_hermitian_reference,
)

GRIDS = {
    "1d": lambda: FrequencyGrid(1, 4.9, 0.1),
    "2d": lambda: FrequencyGrid(2, (1.2, 1.6), (0.3, 0.2)),
}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (the spec's rtol, relative to the output scale)."""
    return float((a - b).abs().max() / b.abs().max())


def _points(B: int, N: int, d: int, dtype=torch.float64, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(B, N, d, generator=g, dtype=torch.float64) * 6 - 3).to(dtype)


def _randn(*shape, dtype=torch.float64, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


# --- grid ---------------------------------------------------------------------------------------


def test_grid_layout_and_weights() -> None:
    g = FrequencyGrid(2, 4.8, 0.2)
    assert g.K == (24, 24)
    assert g.n_freq == 49 * 25 == 1225
    assert math.isclose(g.dV, 0.04)
    xi = g.xi
    assert xi.shape == (1225, 2)
    # row-major: last axis fastest, first axis symmetric, last axis one-sided
    assert torch.allclose(xi[0], torch.tensor([-4.8, 0.0], dtype=torch.float64))
    assert torch.allclose(xi[1], torch.tensor([-4.8, 0.2], dtype=torch.float64))
    assert torch.allclose(xi[-1], torch.tensor([4.8, 4.8], dtype=torch.float64))
    w = g.weights
    assert torch.equal(w == 0.5, xi[:, 1] == 0)
    assert int((w == 0.5).sum()) == 49
    assert g.period == (5.0, 5.0)
    with pytest.raises(AttributeError):
        g.dV = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        ((3, 1.0, 0.1), ValueError, "dim"),
        ((1, -1.0, 0.1), ValueError, "max_freq"),
        ((1, 1.0, 0.0), ValueError, "resolution"),
        ((1, 1.0, 2.0), ValueError, "resolution"),
        ((2, (1.0,), 0.1), ValueError, "max_freq"),
        ((1, "a", 0.1), TypeError, "max_freq"),
    ],
)
def test_grid_rejects_bad_input(args, exc, match) -> None:
    with pytest.raises(exc, match=match):
        FrequencyGrid(*args)


# --- native vs reference ---------------------------------------------------------------------


@pytest.mark.parametrize("gname", ["1d", "2d"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_type1_matches_reference(gname: str, dtype: torch.dtype) -> None:
    g = GRIDS[gname]()
    B, N, C = 3, 77, 37  # odd sizes: exercise the GEMM edges
    x = _points(B, N, g.dim)
    v = _randn(B, N, C)
    Z_ref, D_ref = nudft_type1_reference(x, v, g)
    Z, D = nudft_type1(x.to(dtype), v.to(dtype), g, backend="native")
    assert Z.shape == (B, g.n_freq, C)
    assert D is not None
    assert D.shape == (B, g.n_freq)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert _rel(Z.to(torch.complex128), Z_ref) < tol
    assert _rel(D.to(torch.complex128), D_ref) < tol
    # density = type 1 of a channel of ones
    Z1, _ = nudft_type1(x, torch.ones(B, N, 1, dtype=torch.float64), g, density=False)
    assert _rel(Z1[..., 0], D_ref) < 1e-12


def test_type1_closed_form_single_point() -> None:
    g = FrequencyGrid(1, 2.0, 0.5)
    x = torch.tensor([[[0.3]]], dtype=torch.float64)
    v = torch.tensor([[[2.0]]], dtype=torch.float64)
    Z, D = nudft_type1(x, v, g)
    k = torch.arange(5, dtype=torch.float64)
    expect = 2.0 * torch.exp(-2j * math.pi * 0.5 * k * 0.3)
    assert torch.allclose(Z[0, :, 0], expect, atol=1e-14)
    assert torch.allclose(D[0], expect / 2, atol=1e-14)


def test_type1_complex_values_and_positive_sign() -> None:
    g = GRIDS["2d"]()
    x = _points(2, 19, 2)
    v = torch.complex(_randn(2, 19, 4), _randn(2, 19, 4, seed=5))
    for sign in (-1, 1):
        Z, _ = nudft_type1(x, v, g, sign=sign, density=False)
        Zr, _ = nudft_type1_reference(x, v, g, sign=sign, density=False)
        assert _rel(Z, Zr) < 1e-12


@pytest.mark.parametrize("gname", ["1d", "2d"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_type2_matches_reference(gname: str, dtype: torch.dtype) -> None:
    g = GRIDS[gname]()
    B, M, n_out = 2, 45, 35
    x = _points(B, M, g.dim, seed=3)
    yh = torch.complex(_randn(B, g.n_freq, n_out), _randn(B, g.n_freq, n_out, seed=4))
    y_ref = nudft_type2_hermitian_reference(yh, x, g)
    cdt = torch.complex128 if dtype == torch.float64 else torch.complex64
    y = nudft_type2_hermitian(yh.to(cdt), x.to(dtype), g, backend="native")
    assert y.dtype == dtype
    assert y.shape == (B, M, n_out)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert _rel(y.double(), y_ref) < tol


def test_type2_hermitian_is_real_inverse_of_full_grid_sum() -> None:
    """The half-space sum equals dV * sum over the full grid of a Hermitian-extended spectrum."""
    g = FrequencyGrid(1, 1.5, 0.5)
    x = _points(1, 9, 1)
    yh = torch.complex(_randn(1, 4, 1), _randn(1, 4, 1, seed=2))
    k = torch.arange(-3, 4, dtype=torch.float64)
    full = torch.cat([yh[0, 1:, 0].flip(0).conj(), yh[0, :1, 0].real.to(yh.dtype), yh[0, 1:, 0]])
    brute = (full * torch.exp(2j * math.pi * 0.5 * k * x[0, :, :])).sum(-1) * g.dV
    y = nudft_type2_hermitian(yh, x, g)
    assert torch.allclose(brute.imag, torch.zeros(9, dtype=torch.float64), atol=1e-13)
    assert torch.allclose(y[0, :, 0], brute.real, atol=1e-13)


@pytest.mark.parametrize("gname", ["1d", "2d"])
def test_type1_type2_adjoint(gname: str) -> None:
    """<T1 v, G> = <v, T1^H G> with the real inner product on (re, im) planes."""
    g = GRIDS[gname]()
    B, N, C = 2, 31, 5
    x = _points(B, N, g.dim)
    v = _randn(B, N, C)
    G = torch.complex(_randn(B, g.n_freq, C, seed=7), _randn(B, g.n_freq, C, seed=8))
    Z, _ = nudft_type1(x, v, g, density=False)
    lhs = (Z.real * G.real + Z.imag * G.imag).sum()
    ones = torch.ones(g.n_freq, dtype=torch.float64)
    rhs = (v * nudft_type2(x, G, g, ones, sign=1)).sum()
    assert torch.allclose(lhs, rhs, rtol=1e-12)


# --- gradients ------------------------------------------------------------------------------------


@pytest.mark.parametrize("gname", ["1d", "2d"])
@pytest.mark.parametrize("density", [True, False])
def test_type1_gradcheck(gname: str, density: bool) -> None:
    g = FrequencyGrid(1, 1.0, 0.25) if gname == "1d" else FrequencyGrid(2, (0.6, 0.8), (0.3, 0.4))
    x = _points(2, 6, g.dim).requires_grad_()
    v = _randn(2, 6, 3).requires_grad_()

    def f(x, v):
        Z, D = nudft_type1(x, v, g, density=density, backend="native")
        out = (Z.real, Z.imag)
        return out + ((D.real, D.imag) if D is not None else ())

    assert torch.autograd.gradcheck(f, (x, v))


@pytest.mark.parametrize("gname", ["1d", "2d"])
def test_type2_gradcheck(gname: str) -> None:
    g = FrequencyGrid(1, 1.0, 0.25) if gname == "1d" else FrequencyGrid(2, (0.6, 0.8), (0.3, 0.4))
    x = _points(2, 5, g.dim).requires_grad_()
    yh = torch.complex(_randn(2, g.n_freq, 3), _randn(2, g.n_freq, 3, seed=3)).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda y, x: nudft_type2_hermitian(y, x, g, backend="native"), (yh, x)
    )


def test_values_only_gradients_skip_positions() -> None:
    g = GRIDS["1d"]()
    x = _points(2, 8, 1)
    v = _randn(2, 8, 3).requires_grad_()
    Z, D = nudft_type1(x, v, g)
    (Z.abs().sum() + D.abs().sum()).backward()
    assert v.grad is not None
    assert x.grad is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_native_gradients_match_reference_autograd(dtype: torch.dtype) -> None:
    g = GRIDS["2d"]()
    x0 = _points(2, 23, 2)
    v0 = _randn(2, 23, 6)
    xq0 = _points(2, 17, 2, seed=9)
    grads = {}
    for backend, dt in (("reference", torch.float64), ("native", dtype)):
        x = x0.to(dt).clone().requires_grad_()
        v = v0.to(dt).clone().requires_grad_()
        xq = xq0.to(dt).clone().requires_grad_()
        Z, D = nudft_type1(x, v, g, backend=backend)
        y = nudft_type2_hermitian(Z * D[..., None].conj().sin(), xq, g, backend=backend)
        (y**2).sum().backward()
        grads[backend] = (x.grad.double(), v.grad.double(), xq.grad.double())
    tol = 1e-10 if dtype == torch.float64 else 2e-4
    for a, b in zip(grads["native"], grads["reference"], strict=True):
        assert _rel(a, b) < tol


def test_plan_matches_functions() -> None:
    g = GRIDS["1d"]()
    xc, xq = _points(2, 13, 1), _points(2, 9, 1, seed=4)
    v = _randn(2, 13, 3)
    for backend in ("native", "reference"):
        plan = NUDFTPlan(g, xc, xq, backend=backend)
        Z, D = plan.type1(v)
        Zr, Dr = nudft_type1_reference(xc, v, g)
        assert _rel(Z, Zr) < 1e-12
        assert _rel(D, Dr) < 1e-12
        assert _rel(plan.type2(Z, "q"), nudft_type2_hermitian_reference(Zr, xq, g)) < 1e-12
        assert _rel(plan.type2(Z, "kv"), nudft_type2_hermitian_reference(Zr, xc, g)) < 1e-12


# --- validation -----------------------------------------------------------------------------------


def test_bad_inputs_raise() -> None:
    g = GRIDS["1d"]()
    x, v = _points(2, 5, 1), _randn(2, 5, 3)
    with pytest.raises(TypeError, match="x"):
        nudft_type1(x.numpy(), v, g)
    with pytest.raises(ValueError, match="x"):
        nudft_type1(_points(2, 5, 2), v, g)
    with pytest.raises(ValueError, match="v"):
        nudft_type1(x, _randn(2, 4, 3), g)
    with pytest.raises(TypeError, match="precision"):
        nudft_type1(x, v.float(), g)
    with pytest.raises(TypeError, match="dtype"):
        nudft_type1(x.half(), v.half(), g)
    with pytest.raises(TypeError, match="grid"):
        nudft_type1(x, v, "grid")
    with pytest.raises(ValueError, match="backend"):
        nudft_type1(x, v, g, backend="cuda")
    with pytest.raises(ValueError, match="sign"):
        nudft_type1(x, v, g, sign=2)
    with pytest.raises(ValueError, match=r"^yhat"):  # the argument's own name (issue 25)
        nudft_type2_hermitian(torch.zeros(2, 7, 1, dtype=torch.complex128), x, g)
    # the native binding re-checks its buffers
    from rml_fast._native import _C

    with pytest.raises(ValueError, match="out_re"):
        _C.nudft.type1(
            x.numpy(), v.numpy(), [49], [0.1], -1, np.zeros((2, 49, 3)), np.zeros((2, 50, 3))
        )
    with pytest.raises(TypeError, match="dtype"):
        _C.nudft.type1(
            x.numpy(),
            v.float().numpy(),
            [49],
            [0.1],
            -1,
            np.zeros((2, 50, 3)),
            np.zeros((2, 50, 3)),
        )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("backend", ["native", "nufft", "reference", "auto"])
def test_non_finite_inputs_raise(bad: float, backend: str) -> None:
    g = GRIDS["1d"]()
    x, v = _points(2, 5, 1), _randn(2, 5, 3)
    xb, vb = x.clone(), v.clone()
    xb[1, 3, 0], vb[0, 2, 1] = bad, bad
    for args, name in [((xb, v), "x"), ((x, vb), "v"), ((x, vb.to(torch.complex128)), "v")]:
        with pytest.raises(ValueError, match=rf"^{name} must be finite.*index \("):
            nudft_type1(*args, g, backend=backend)
    coeffs = _randn(2, g.n_freq, 1).to(torch.complex128)
    cb = coeffs.clone()
    cb[1, 4, 0] = bad
    with pytest.raises(ValueError, match=r"^x must be finite"):
        nudft_type2_hermitian(coeffs, xb, g, backend=backend)
    with pytest.raises(ValueError, match=r"^yhat must be finite"):
        nudft_type2_hermitian(cb, x, g, backend=backend)
    w = torch.ones(g.n_freq, dtype=torch.float64)
    w[7] = bad
    with pytest.raises(ValueError, match=r"^weights must be finite"):
        nudft_type2(x, coeffs, g, w, backend=backend)
    with pytest.raises(ValueError, match=r"^x_kv must be finite"):
        NUDFTPlan(g, xb, x, backend=backend)
    with pytest.raises(ValueError, match=r"^x_q must be finite"):
        NUDFTPlan(g, x, xb, backend=backend)


def test_finite_check_has_no_false_positive_on_overflowing_sum() -> None:
    # float32 values whose sum overflows to inf are still finite and accepted
    g = GRIDS["1d"]()
    x = _points(1, 4, 1, dtype=torch.float32)
    v = torch.full((1, 4, 1), 3e38, dtype=torch.float32)
    Z, _ = nudft_type1(x, v, g, backend="reference")
    assert Z.shape == (1, g.n_freq, 1)


# --- finufft as an independent peer ------------------------------------------------------------------


def _wrap(t: np.ndarray) -> np.ndarray:
    return np.mod(t + np.pi, 2 * np.pi) - np.pi


def test_type1_type2_vs_finufft_1d() -> None:
    finufft = pytest.importorskip("finufft")
    g = FrequencyGrid(1, 4.9, 0.1)
    K = g.K[0]
    B, N, C = 2, 40, 3
    x = _points(B, N, 1)
    v = _randn(B, N, C)
    Z, D = nudft_type1(x, v, g)
    yh = torch.complex(_randn(B, g.n_freq, C), _randn(B, g.n_freq, C, seed=2))
    y = nudft_type2_hermitian(yh, x, g)
    for b in range(B):
        pts = _wrap(2 * np.pi * g.resolution[0] * x[b, :, 0].numpy())
        c = np.ascontiguousarray(v[b].numpy().T).astype(np.complex128)
        f = finufft.nufft1d1(pts, c, n_modes=2 * K + 1, isign=-1, eps=1e-12)
        np.testing.assert_allclose(Z[b].numpy().T, f[:, K:], atol=1e-9)
        fd = finufft.nufft1d1(
            pts, np.ones(N, np.complex128), n_modes=2 * K + 1, isign=-1, eps=1e-12
        )
        np.testing.assert_allclose(D[b].numpy(), fd[K:], atol=1e-9)
        # Hermitian extension of the half spectrum, then a full type 2
        half = yh[b].numpy().T  # (C, K+1)
        full = np.concatenate([np.conj(half[:, :0:-1]), half[:, :1].real + 0j, half[:, 1:]], axis=1)
        yy = finufft.nufft1d2(pts, np.ascontiguousarray(full), isign=1, eps=1e-12)
        np.testing.assert_allclose(y[b].numpy().T, g.dV * yy.real, atol=1e-9)


def test_type1_vs_finufft_2d() -> None:
    finufft = pytest.importorskip("finufft")
    g = FrequencyGrid(2, (1.2, 1.6), (0.3, 0.2))
    K0, K1 = g.K
    x = _points(1, 50, 2)
    v = _randn(1, 50, 2)
    Z, _ = nudft_type1(x, v, g, density=False)
    p0 = _wrap(2 * np.pi * g.resolution[0] * x[0, :, 0].numpy())
    p1 = _wrap(2 * np.pi * g.resolution[1] * x[0, :, 1].numpy())
    c = np.ascontiguousarray(v[0].numpy().T).astype(np.complex128)
    f = finufft.nufft2d1(p0, p1, c, n_modes=(2 * K0 + 1, 2 * K1 + 1), isign=-1, eps=1e-12)
    ours = Z[0].numpy().T.reshape(2, 2 * K0 + 1, K1 + 1)
    np.testing.assert_allclose(ours, f[:, :, K1:], atol=1e-9)


# --- Triton (interpreter on CPU) -----------------------------------------------------------------------


def _triton_ready() -> bool:
    if torch.cuda.is_available():
        return True
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@pytest.mark.parametrize("gname", ["1d", "2d"])
def test_triton_matches_reference(gname: str) -> None:
    pytest.importorskip("triton")
    if not _triton_ready():
        pytest.skip("needs CUDA or TRITON_INTERPRET=1")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = FrequencyGrid(1, 1.9, 0.1) if gname == "1d" else FrequencyGrid(2, (0.6, 0.8), (0.3, 0.2))
    B, N, C, M = 2, 21, 5, 11
    x = _points(B, N, g.dim)
    xq = _points(B, M, g.dim, seed=6)
    v = _randn(B, N, C)
    Z_ref, D_ref = nudft_type1_reference(x, v, g)
    Z, D = nudft_type1(x.float().to(device), v.float().to(device), g, backend="triton")
    assert _rel(Z.cpu().to(torch.complex128), Z_ref) < 1e-5
    assert _rel(D.cpu().to(torch.complex128), D_ref) < 1e-5
    y_ref = nudft_type2_hermitian_reference(Z_ref, xq, g)
    y = nudft_type2_hermitian(
        Z_ref.to(torch.complex64).to(device), xq.float().to(device), g, backend="triton"
    )
    assert _rel(y.cpu().double(), y_ref) < 1e-5
    # backward through the Triton pair equals the reference gradient
    vv = v.float().to(device).requires_grad_()
    Zt, _ = nudft_type1(x.float().to(device), vv, g, backend="triton")
    nudft_type2_hermitian(Zt, xq.float().to(device), g, backend="triton").square().sum().backward()
    vr = v.clone().requires_grad_()
    Zr, _ = nudft_type1_reference(x, vr, g)
    nudft_type2_hermitian_reference(Zr, xq, g).square().sum().backward()
    assert _rel(vv.grad.cpu().double(), vr.grad) < 1e-4
