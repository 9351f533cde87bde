"""Triton Lasso kernels and batched FISTA, under TRITON_INTERPRET=1 on the CPU (tiny sizes)."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from rml_fast.kernels.lasso import lasso_path, lasso_path_reference  # noqa: E402

DTYPES = [torch.float64, torch.float32]
ATOL = {torch.float64: 1e-12, torch.float32: 1e-5}


@pytest.fixture(scope="module")
def tl_lasso():
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs CUDA or TRITON_INTERPRET=1")
    from rml_fast.kernels.triton import lasso

    return lasso


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtr_gemm_absmax_matches_torch(tl_lasso, dtype):
    g = torch.Generator().manual_seed(0)
    D = torch.randn(37, 45, generator=g, dtype=dtype)
    R = torch.randn(37, 3, generator=g, dtype=dtype)
    C, amax = tl_lasso.dtr_gemm_absmax(D, R, 0.25)
    ref = 0.25 * D.T @ R
    torch.testing.assert_close(C, ref, atol=ATOL[dtype], rtol=1e-6)
    torch.testing.assert_close(amax, ref.abs().amax(0), atol=ATOL[dtype], rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_soft_threshold_update_matches_torch(tl_lasso, dtype):
    g = torch.Generator().manual_seed(1)
    m, B = 41, 3
    Z, C, W = (torch.randn(m, B, generator=g, dtype=dtype) for _ in range(3))
    keep = (torch.rand(m, B, generator=g) > 0.2).to(torch.int8)
    lam = torch.tensor([0.1, 0.5, 1.0], dtype=dtype)
    beta = torch.tensor([0.0, 0.3, 0.9], dtype=dtype)
    active = torch.tensor([1, 1, 0], dtype=torch.int8)
    Wn, Zn = tl_lasso.soft_threshold_update(Z, C, W, keep, lam, beta, active, 0.5)
    u = Z + 0.5 * C
    ref_w = torch.sign(u) * torch.clamp(u.abs() - 0.5 * lam, min=0) * keep
    ref_z = ref_w + beta * (ref_w - W)
    ref_w[:, 2], ref_z[:, 2] = W[:, 2], W[:, 2]  # frozen problem
    torch.testing.assert_close(Wn, ref_w, atol=ATOL[dtype], rtol=1e-6)
    torch.testing.assert_close(Zn, ref_z, atol=ATOL[dtype], rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fista_orthonormal_closed_form(tl_lasso, dtype):
    rng = np.random.default_rng(2)
    n = 16
    Q = np.linalg.qr(rng.standard_normal((n, n)))[0]
    Y = rng.standard_normal((n, 2))
    lams = np.array([0.05, 0.02])
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    res = tl_lasso.fista_path(torch.from_numpy(Q).to(dtype), torch.from_numpy(Y).to(dtype), lams,
                              tol=tol, max_iter=40, check_every=2)
    assert np.all(res.n_epochs <= 6)  # one proximal step is exact for an orthonormal design
    assert res.coefs.shape == (2, 2, n)
    Zt = (Q.T @ Y).T
    for ell, lam in enumerate(lams):
        expect = np.sign(Zt) * np.maximum(np.abs(Zt) - n * lam, 0)
        np.testing.assert_allclose(res.coefs[ell].double().numpy(), expect, atol=1e-5)
    assert np.all(res.gaps >= 0)
    assert np.all(res.gaps <= tol * (Y**2).sum(0) / (2 * n))


def test_lasso_path_dispatches_torch_to_triton(tl_lasso):
    rng = np.random.default_rng(5)
    Q = np.linalg.qr(rng.standard_normal((8, 8)))[0]
    y = rng.standard_normal(8)
    res = lasso_path(torch.from_numpy(Q), torch.from_numpy(y), [0.05], backend="triton",
                     tol=1e-10, max_epochs=4)
    assert isinstance(res.coefs, torch.Tensor)
    z = Q.T @ y
    np.testing.assert_allclose(res.coefs[0].numpy(), np.sign(z) * np.maximum(np.abs(z) - 0.4, 0),
                               atol=1e-10)


def test_fista_input_errors(tl_lasso):
    D = torch.zeros(4, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match="non-increasing"):
        tl_lasso.fista_path(D, torch.ones(4, dtype=torch.float64), [0.1, 0.2])
    with pytest.raises(TypeError, match="same dtype"):
        tl_lasso.fista_path(D, torch.ones(4, dtype=torch.float32), [0.1])
    with pytest.raises(ValueError, match="finite"):
        tl_lasso.fista_path(D, torch.full((4,), float("nan"), dtype=torch.float64), [0.1])


@pytest.mark.slow
def test_fista_matches_native_with_screening(tl_lasso):
    rng = np.random.default_rng(3)
    n, m, B = 12, 20, 2
    D = rng.standard_normal((n, m))
    D /= np.linalg.norm(D, axis=0)
    Y = D[:, :3] @ rng.standard_normal((3, B)) + 0.01 * rng.standard_normal((n, B))
    lam = float(np.abs(D.T @ Y).max()) / n / 4
    ref = lasso_path(D, Y, [lam], tol=1e-12)
    res = tl_lasso.fista_path(torch.from_numpy(D), torch.from_numpy(Y), [lam], tol=1e-8,
                              max_iter=3000, check_every=20)
    assert np.all(res.gaps <= 1e-8 * (Y**2).sum(0) / (2 * n) + 1e-15)
    np.testing.assert_allclose(res.coefs[0].numpy(), ref.coefs[0], atol=1e-3)


def _small_problem(n, m, B, seed):
    rng = np.random.default_rng(seed)
    D = rng.standard_normal((n, m))
    D /= np.linalg.norm(D, axis=0)
    W = np.zeros((m, B))
    for b in range(B):
        W[rng.choice(m, 3, replace=False), b] = rng.choice([-1.0, 1.0], 3) * (1 + rng.random(3))
    Y = D @ W + 0.01 * rng.standard_normal((n, B))
    return D, Y


@pytest.mark.parametrize("dtype", DTYPES)
def test_fista_path_matches_reference_several_rhs(tl_lasso, dtype, monkeypatch):
    """Several right-hand sides on a warm-started path, float32 and float64, against the NumPy
    reference; spies on the kernels show that screening compacted D and that restarts fired."""
    n, m, B = 24, 40, 3
    D, Y = _small_problem(n, m, B, seed=11)
    lmax = np.abs(D.T @ Y).max() / n
    lams = lmax * np.array([0.5, 0.3])
    ref = lasso_path_reference(D, Y, lams, tol=1e-13)
    widths, betas = [], []
    gemm, update = tl_lasso.dtr_gemm_absmax, tl_lasso.soft_threshold_update

    def gemm_spy(Dc, R, scale=1.0):
        widths.append(Dc.shape[1])
        return gemm(Dc, R, scale)

    def update_spy(Z, C, W, keep, lam, beta, active, step):
        betas.append(beta.double().numpy().copy())
        return update(Z, C, W, keep, lam, beta, active, step)

    monkeypatch.setattr(tl_lasso, "dtr_gemm_absmax", gemm_spy)
    monkeypatch.setattr(tl_lasso, "soft_threshold_update", update_spy)
    tol = 1e-10 if dtype == torch.float64 else 1e-6
    res = tl_lasso.fista_path(torch.from_numpy(D).to(dtype), torch.from_numpy(Y).to(dtype), lams,
                              tol=tol, max_iter=2000, check_every=10)
    assert res.coefs.shape == (2, B, m) and res.coefs.dtype == dtype
    ynorm = (Y**2).sum(0) / (2 * n)
    assert np.all(res.gaps >= 0)
    assert np.all(res.gaps <= tol * ynorm * (1 + 1e-6))
    atol = 1e-5 if dtype == torch.float64 else 2e-3
    np.testing.assert_allclose(res.coefs.double().numpy(), ref.coefs, atol=atol)
    for ell in range(2):  # same support where the reference is clearly nonzero
        big = np.abs(ref.coefs[ell]) > 10 * atol
        assert np.all(res.coefs[ell].double().numpy()[big] != 0)
    assert min(widths) < m  # gap-safe screening compacted D to the surviving columns
    # each penalty starts with zero momentum; more zeros than penalties are adaptive restarts
    n_zero = (np.array(betas) == 0).sum(axis=0)
    assert n_zero.max() > len(lams)
    assert np.all(res.n_epochs < 2000)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fista_screening_off_same_solution(tl_lasso, dtype):
    n, m, B = 16, 28, 2
    D, Y = _small_problem(n, m, B, seed=12)
    lam = np.abs(D.T @ Y).max() / n / 3
    Dt, Yt = torch.from_numpy(D).to(dtype), torch.from_numpy(Y).to(dtype)
    tol = 1e-10 if dtype == torch.float64 else 1e-6
    on = tl_lasso.fista_path(Dt, Yt, [lam], tol=tol, max_iter=2000, screening=True)
    off = tl_lasso.fista_path(Dt, Yt, [lam], tol=tol, max_iter=2000, screening=False)
    ref = lasso_path_reference(D, Y, [lam], tol=1e-13)
    atol = 1e-5 if dtype == torch.float64 else 2e-3
    np.testing.assert_allclose(on.coefs[0].double().numpy(), ref.coefs[0], atol=atol)
    np.testing.assert_allclose(off.coefs[0].double().numpy(), ref.coefs[0], atol=atol)
