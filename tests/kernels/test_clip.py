"""Clipping kernels: native (C++) and Triton (interpreter on CPU) vs the torch reference."""

from __future__ import annotations

import pytest
import torch

from rml_fast.kernels import clip as k
from rml_fast.kernels._dispatch import triton_available, triton_interpreting
from rml_fast.kernels.random import normal_reference

SHAPES = [(3, 1, 5, 4), (4, 7, 9, 3), (2, 37, 33, 17), (1, 2, 1, 1)]
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def _backends() -> list[str]:
    out = ["native"]
    if triton_available() and (torch.cuda.is_available() or triton_interpreting()):
        out.append("triton")
    return out


def _tol(dtype: torch.dtype, backend: str) -> float:
    return 2e-5 if backend == "triton" else TOL[dtype]


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_ghost_norm_sq_matches_reference(shape: tuple[int, ...], dtype: torch.dtype,
                                         backend: str) -> None:
    B, S, d, p = shape
    gen = torch.Generator().manual_seed(sum(shape))
    A = torch.randn(B, S, d, generator=gen, dtype=dtype)
    D = torch.randn(B, S, p, generator=gen, dtype=dtype)
    ref = k.ghost_norm_sq_reference(A, D)
    # the reference itself against instantiated per-sample gradients
    G = torch.einsum("bsp,bsd->bpd", D.double(), A.double())
    torch.testing.assert_close(ref, G.square().sum((1, 2)), rtol=1e-12, atol=1e-12)
    got = k.ghost_norm_sq(A, D, backend=backend)
    assert got.dtype == torch.float64 and got.shape == (B,)
    torch.testing.assert_close(got, ref, rtol=_tol(dtype, backend), atol=_tol(dtype, backend))


@pytest.mark.parametrize("max_scratch", [1, 50, 1 << 20])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [*SHAPES, (5, 64, 48, 80)])
def test_ghost_norm_sq_blas_matches_reference(shape: tuple[int, ...], dtype: torch.dtype,
                                              max_scratch: int) -> None:
    """Torch-BLAS Grams (input precision, chunked over samples) vs float64 instantiation;
    max_scratch=1 and 50 force one sample per chunk and ragged chunks."""
    B, S, d, p = shape
    gen = torch.Generator().manual_seed(sum(shape) + 1)
    A = torch.randn(B, S, d, generator=gen, dtype=dtype)
    D = torch.randn(B, S, p, generator=gen, dtype=dtype)
    G = torch.einsum("bsp,bsd->bpd", D.double(), A.double())
    got = k.ghost_norm_sq_blas(A, D, max_scratch=max_scratch)
    assert got.dtype == torch.float64 and got.shape == (B,)
    torch.testing.assert_close(got, G.square().sum((1, 2)), rtol=TOL[dtype], atol=TOL[dtype])
    # the cross term <D_i^T A_i, D2_i^T A2_i> with a different row count
    A2 = torch.randn(B, 3, d, generator=gen, dtype=dtype)
    D2 = torch.randn(B, 3, p, generator=gen, dtype=dtype)
    G2 = torch.einsum("bsp,bsd->bpd", D2.double(), A2.double())
    cross = k.ghost_norm_sq_blas(A, D, A2, D2, max_scratch=max_scratch)
    torch.testing.assert_close(cross, (G * G2).sum((1, 2)), rtol=TOL[dtype] * 10,
                               atol=TOL[dtype] * 10 * float(G.abs().max() * G2.abs().max()))


def test_ghost_norm_sq_blas_rejects_bad_input() -> None:
    A, D = torch.randn(2, 3, 4), torch.randn(2, 3, 5)
    with pytest.raises(ValueError, match="A2 and D2"):
        k.ghost_norm_sq_blas(A, D, A2=A)
    with pytest.raises(ValueError, match="D must"):
        k.ghost_norm_sq_blas(A, D.double())
    with pytest.raises(ValueError, match="max_scratch"):
        k.ghost_norm_sq_blas(A, D, max_scratch=0)
    with pytest.raises(TypeError, match="A must"):
        k.ghost_norm_sq_blas(A.int(), D)


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("S2", [1, 5, 40])
def test_ghost_cross_matches_explicit_inner_product(S2: int, dtype: torch.dtype,
                                                   backend: str) -> None:
    gen = torch.Generator().manual_seed(S2)
    B, S, d, p = 3, 6, 11, 7
    A, D = torch.randn(B, S, d, generator=gen, dtype=dtype), torch.randn(B, S, p, generator=gen, dtype=dtype)
    A2, D2 = torch.randn(B, S2, d, generator=gen, dtype=dtype), torch.randn(B, S2, p, generator=gen, dtype=dtype)
    G = torch.einsum("bsp,bsd->bpd", D.double(), A.double())
    G2 = torch.einsum("bsp,bsd->bpd", D2.double(), A2.double())
    expected = (G * G2).sum((1, 2))
    torch.testing.assert_close(k.ghost_norm_sq_reference(A, D, A2, D2), expected)
    got = k.ghost_norm_sq(A, D, A2, D2, backend=backend)
    torch.testing.assert_close(got, expected, rtol=_tol(dtype, backend), atol=_tol(dtype, backend) * 10)


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("B", "S", "d", "p"), [(3, 1, 5, 4), (4, 7, 33, 40), (2, 3, 70, 9)])
@pytest.mark.parametrize("noise_std", [0.0, 0.7])
def test_scaled_outer_accumulate_matches_reference(B: int, S: int, d: int, p: int,
                                                   dtype: torch.dtype, noise_std: float,
                                                   backend: str) -> None:
    gen = torch.Generator().manual_seed(B * S + d)
    A = torch.randn(B * S, d, generator=gen, dtype=dtype)
    D = torch.randn(B * S, p, generator=gen, dtype=dtype)
    w = torch.rand(B, generator=gen, dtype=dtype)
    expected = torch.einsum("b,bsp,bsd->pd", w.double(), D.double().reshape(B, S, p),
                            A.double().reshape(B, S, d))
    z = torch.from_numpy(normal_reference(p * d, 9, 1000)).double().reshape(p, d)
    expected = expected + noise_std * z
    ref = k.scaled_outer_accumulate_reference(A, D, w, S, noise_std=noise_std, seed=9, offset=1000)
    got = k.scaled_outer_accumulate(A, D, w, S, noise_std=noise_std, seed=9, offset=1000,
                                    backend=backend)
    assert got.dtype == dtype and got.shape == (p, d)
    tol = _tol(dtype, backend) * 10
    torch.testing.assert_close(ref.double(), expected, rtol=tol, atol=tol)
    torch.testing.assert_close(got.double(), expected, rtol=tol, atol=tol)


def test_native_accumulate_without_blas_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in loop (no BLAS pointer) gives the same sums."""
    monkeypatch.setattr(k, "_blas_gemm", lambda dtype: 0)
    A, D = torch.randn(12, 5, dtype=torch.float64), torch.randn(12, 3, dtype=torch.float64)
    w = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64)
    got = k.scaled_outer_accumulate(A, D, w, 3, backend="native", noise_std=0.1, seed=1)
    ref = k.scaled_outer_accumulate_reference(A, D, w, 3, noise_std=0.1, seed=1)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


def test_bad_inputs_raise() -> None:
    A, D = torch.randn(2, 3, 4), torch.randn(2, 3, 5)
    with pytest.raises(TypeError, match="A must be a torch"):
        k.ghost_norm_sq(A.numpy(), D)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="float32 or float64"):
        k.ghost_norm_sq(A.half(), D)
    with pytest.raises(ValueError, match="D must have"):
        k.ghost_norm_sq(A, D[:, :2])
    with pytest.raises(ValueError, match="together"):
        k.ghost_norm_sq(A, D, A2=A)
    with pytest.raises(ValueError, match="3 dimensions"):
        k.ghost_norm_sq(A[0], D)
    with pytest.raises(ValueError, match="w must have"):
        k.scaled_outer_accumulate(A.reshape(6, 4), D.reshape(6, 5), torch.ones(4), 3)
    with pytest.raises(ValueError, match="noise_std"):
        k.scaled_outer_accumulate(A.reshape(6, 4), D.reshape(6, 5), torch.ones(2), 3, noise_std=-1.0)
    with pytest.raises(ValueError, match="seq_len"):
        k.scaled_outer_accumulate(A.reshape(6, 4), D.reshape(6, 5), torch.ones(2), 0)


def test_native_ghost_loops_and_blas_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the row threshold the BLAS-Gram path runs; with no BLAS pointer, the loops."""
    monkeypatch.setattr(k, "_GHOST_BLAS_MIN_ROWS", 16)
    gen = torch.Generator().manual_seed(0)
    A, D = torch.randn(3, 40, 21, generator=gen), torch.randn(3, 40, 13, generator=gen)
    A2, D2 = torch.randn(3, 17, 21, generator=gen), torch.randn(3, 17, 13, generator=gen)
    blas = (k.ghost_norm_sq(A, D, backend="native"), k.ghost_norm_sq(A, D, A2, D2, backend="native"))
    monkeypatch.setattr(k, "_blas_gemm", lambda dtype: 0)
    loops = (k.ghost_norm_sq(A, D, backend="native"), k.ghost_norm_sq(A, D, A2, D2, backend="native"))
    ref = (k.ghost_norm_sq_reference(A, D), k.ghost_norm_sq_reference(A, D, A2, D2))
    for b, lo, r in zip(blas, loops, ref, strict=True):
        torch.testing.assert_close(lo, r, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(b, r, rtol=1e-5, atol=1e-4)
