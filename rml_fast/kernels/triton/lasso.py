"""Batched Lasso paths on the GPU: FISTA with adaptive restarts and gap-safe screening.

B problems ``min_w 1/(2n)||y_b - D w||^2 + lam ||w||_1`` share the design ``D`` (n, m), so
every iteration is one GEMM ``D Z`` (cuBLAS through torch) and one fused Triton GEMM
``C = D^T R / n`` with per-column ``max |C|`` (the dual scaling), followed by a fused
soft-threshold + momentum update. Every ``check_every`` iterations the duality gap of each
problem is computed in float64 (the same dual point as the CPU solver; see :func:`_gap64`),
converged problems are frozen, and gap-safe sphere screening zeroes certified-zero
coefficients of the problems still running; once fewer than half of the columns survive for
every problem, ``D`` is compacted to the surviving columns. A float32 solve iterates in float32
but is stopped, screened and reported by float64 gaps: a float32 gap near its rounding floor
can come out 0, and screening with a zero radius drops features of the support.

Kernels (pointers, sizes, strides, then ``tl.constexpr`` meta-parameters):

- ``_dtr_gemm_absmax_kernel``: ``C[j, b] = scale * sum_i D[i, j] R[i, b]`` and the partial
  column maxima ``P[pid_m, b] = max_j |C[j, b]|`` over the block (accumulation in the dtype of
  ``R``: fp32, or fp64 with fp32 ``D`` tiles widened; IEEE products, no TF32).
- ``_soft_threshold_update_kernel``: ``W' = S(Z + step C, step lam) * keep``,
  ``Z' = W' + beta_b (W' - W)``; frozen problems keep ``W' = Z' = W``.

References
----------
Beck & Teboulle, "A fast iterative shrinkage-thresholding algorithm", SIAM J. Imaging Sci.
2009. O'Donoghue & Candès, "Adaptive restart for accelerated gradient schemes", FoCM 2015
(arXiv:1204.3982). Fercoq, Gramfort, Salmon, ICML 2015 (arXiv:1505.03410).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

_BLOCK_M = 32
_BLOCK_B = 16
_BLOCK_K = 32


@triton.jit
def _dtr_gemm_absmax_kernel(
    D_ptr, R_ptr, C_ptr, P_ptr, n, m, B,
    stride_dn, stride_dm, stride_rn, stride_rb, stride_cm, stride_cb, stride_pm,
    scale,
    BLOCK_M: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_b = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_b = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    acc = tl.zeros((BLOCK_M, BLOCK_B), dtype=C_ptr.dtype.element_ty)
    for k0 in range(0, n, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        d = tl.load(
            D_ptr + offs_k[:, None] * stride_dn + offs_m[None, :] * stride_dm,
            mask=(offs_k[:, None] < n) & (offs_m[None, :] < m), other=0.0,
        ).to(R_ptr.dtype.element_ty)
        r = tl.load(
            R_ptr + offs_k[:, None] * stride_rn + offs_b[None, :] * stride_rb,
            mask=(offs_k[:, None] < n) & (offs_b[None, :] < B), other=0.0,
        )
        acc += tl.dot(tl.trans(d), r, input_precision="ieee")
    acc = acc * scale
    inside = (offs_m[:, None] < m) & (offs_b[None, :] < B)
    tl.store(C_ptr + offs_m[:, None] * stride_cm + offs_b[None, :] * stride_cb, acc, mask=inside)
    colmax = tl.max(tl.where(inside, tl.abs(acc), 0.0), axis=0)
    tl.store(P_ptr + pid_m * stride_pm + offs_b, colmax, mask=offs_b < B)


@triton.jit
def _soft_threshold_update_kernel(
    Z_ptr, C_ptr, W_ptr, Wn_ptr, Zn_ptr, keep_ptr, lam_ptr, beta_ptr, active_ptr, m, B, step,
    BLOCK_M: tl.constexpr, BLOCK_B: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    inside = (offs_m[:, None] < m) & (offs_b[None, :] < B)
    idx = offs_m[:, None] * B + offs_b[None, :]
    z = tl.load(Z_ptr + idx, mask=inside, other=0.0)
    c = tl.load(C_ptr + idx, mask=inside, other=0.0)
    w = tl.load(W_ptr + idx, mask=inside, other=0.0)
    keep = tl.load(keep_ptr + idx, mask=inside, other=0)
    lam = tl.load(lam_ptr + offs_b, mask=offs_b < B, other=0.0)
    beta = tl.load(beta_ptr + offs_b, mask=offs_b < B, other=0.0)
    active = tl.load(active_ptr + offs_b, mask=offs_b < B, other=0)
    u = z + step * c
    thr = step * lam[None, :]
    shrunk = tl.where(u > thr, u - thr, tl.where(u < -thr, u + thr, 0.0))
    wn = tl.where(keep != 0, shrunk, 0.0)
    zn = wn + beta[None, :] * (wn - w)
    on = active[None, :] != 0
    tl.store(Wn_ptr + idx, tl.where(on, wn, w), mask=inside)
    tl.store(Zn_ptr + idx, tl.where(on, zn, w), mask=inside)


def dtr_gemm_absmax(D: torch.Tensor, R: torch.Tensor, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``C = scale * D^T R`` of shape (m, B) and ``max_j |C[j, b]|`` of shape (B,).

    ``C`` has the dtype of ``R``: a float32 ``D`` with a float64 ``R`` is widened tile by tile
    and accumulated in float64 (the certified duality gap); otherwise the dtypes match.
    """
    n, m = D.shape
    B = R.shape[1]
    C = torch.empty((m, B), dtype=R.dtype, device=D.device)
    n_mb = triton.cdiv(m, _BLOCK_M)
    P = torch.empty((n_mb, B), dtype=R.dtype, device=D.device)
    grid = (n_mb, triton.cdiv(B, _BLOCK_B))
    _dtr_gemm_absmax_kernel[grid](
        D, R, C, P, n, m, B, D.stride(0), D.stride(1), R.stride(0), R.stride(1), C.stride(0),
        C.stride(1), P.stride(0), scale, BLOCK_M=_BLOCK_M, BLOCK_B=_BLOCK_B, BLOCK_K=_BLOCK_K,
    )
    return C, P.amax(dim=0)


def soft_threshold_update(Z, C, W, keep, lam, beta, active, step):
    """Fused proximal-gradient + momentum step; returns ``(W_new, Z_next)`` of shape (m, B)."""
    m, B = Z.shape
    Wn = torch.empty_like(Z)
    Zn = torch.empty_like(Z)
    grid = (triton.cdiv(m, _BLOCK_M), triton.cdiv(B, _BLOCK_B))
    _soft_threshold_update_kernel[grid](
        Z, C, W, Wn, Zn, keep, lam, beta, active, m, B, step, BLOCK_M=_BLOCK_M, BLOCK_B=_BLOCK_B,
    )
    return Wn, Zn


def _residual64(D: torch.Tensor, Y64: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``Y - D W`` in float64 over the rows of ``W`` (m, B) that hold a nonzero.

    The products of float32 entries are exact in float64, so this is the residual of the
    coefficients as stored, to float64 rounding, whatever the dtype of ``D``.
    """
    rows = torch.nonzero(W.ne(0).any(dim=1)).flatten()
    if rows.numel() == 0:
        return Y64.clone()
    return Y64 - D[:, rows].double() @ W[rows].double()


def _gap64(D, Y64, W, lam64, n):
    """Duality gap (float64) of ``W`` (m, B) on the columns of ``D``; also ``D^T R`` and the
    dual scaling ``s = max(n lam, ||D^T R||_inf)`` (both float64, shape (m, B) and (B,))."""
    R = _residual64(D, Y64, W)
    C, amax = dtr_gemm_absmax(D, R, 1.0)
    s = torch.clamp(amax, min=n * lam64)
    rr = (R * R).sum(0)
    primal = rr / (2 * n) + lam64 * W.double().abs().sum(0)
    dual = lam64 * (R * Y64).sum(0) / s - n * lam64 * lam64 * rr / (2 * s * s)
    return torch.clamp(primal - dual, min=0.0), C, s


# Relative slack of the gap-safe test: the correlations and the gap are float64 values of the
# stored iterate, exact to ~1e-15; the slack keeps rounding from ever dropping a feature of
# the support (|x_j^T theta*| = 1 there).
_SCREEN_SLACK = 1e-9


def fista_path(
    D: torch.Tensor,
    Y: torch.Tensor,
    lambdas: Any,
    *,
    tol: float = 1e-6,
    max_iter: int = 10_000,
    screening: bool = True,
    check_every: int = 10,
) -> Any:
    """Lasso path for a batch of right-hand sides by FISTA (see the module docstring).

    The iterations run in the dtype of ``D``; every duality gap (the stopping rule, the
    screening radius and the reported ``gaps``) is computed in float64 from the stored
    coefficients, so a float32 solve is certified, not estimated. Gap-safe screening acts
    only on problems that are still running (a converged problem is never altered), and the
    gap of each returned solution is recomputed over all ``m`` columns of ``D``: if the
    screened problem met the tolerance but the full one does not, the solver resumes on all
    columns with the iterations it has left.

    Parameters
    ----------
    D : torch.Tensor of shape (n, m), float32 or float64, CUDA (or CPU under TRITON_INTERPRET=1)
    Y : torch.Tensor of shape (n,) or (n, B), dtype and device of ``D``
    lambdas : array-like of shape (L,)
        Strictly positive, non-increasing.
    tol : float
        Stop a problem when its gap is at most ``tol * ||y_b||^2 / (2n)``.
    max_iter : int
        FISTA iterations per penalty.
    screening : bool
        Gap-safe sphere screening.
    check_every : int
        Iterations between gap evaluations.

    Returns
    -------
    result : rml_fast.kernels.lasso.LassoPath
        ``coefs`` torch (L, B, m) (or (L, m)); ``gaps`` (float64, over all columns),
        ``n_epochs`` (iterations) and ``converged`` (``gaps <= tol ||y_b||^2 / (2n)``) NumPy.
    """
    from rml_fast.kernels.lasso import LassoPath

    if not isinstance(D, torch.Tensor) or not isinstance(Y, torch.Tensor):
        raise TypeError("D and Y must be torch tensors on the triton backend")
    if D.dtype not in (torch.float32, torch.float64) or Y.dtype != D.dtype:
        raise TypeError(f"D must be float32/float64 and Y of the same dtype, got {D.dtype}, {Y.dtype}")
    if D.ndim != 2 or Y.ndim not in (1, 2) or Y.shape[0] != D.shape[0] or Y.device != D.device:
        raise ValueError(f"D (n, m) and Y (n,) or (n, B) on one device expected, got {tuple(D.shape)}, {tuple(Y.shape)}")
    if not (torch.isfinite(D).all() and torch.isfinite(Y).all()):
        raise ValueError("D and Y must be finite")
    lam_np = np.atleast_1d(np.asarray(lambdas, dtype=np.float64))
    if lam_np.ndim != 1 or lam_np.size == 0 or (lam_np <= 0).any() or not np.isfinite(lam_np).all():
        raise ValueError("lambdas must be a non-empty 1-D array of strictly positive values")
    if (np.diff(lam_np) > 0).any():
        raise ValueError("lambdas must be non-increasing (a path runs from large to small)")
    if tol < 0 or max_iter < 0:
        raise ValueError("tol and max_iter must be non-negative")
    if int(check_every) < 1:
        raise ValueError(f"check_every must be a positive integer, got {check_every!r}")
    one_d = Y.ndim == 1
    Y2 = (Y[:, None] if one_d else Y).contiguous()
    D = D.contiguous()
    n, m = D.shape
    B = Y2.shape[1]
    dev, dt = D.device, D.dtype
    Y64 = Y2.double()
    sigma = torch.linalg.svdvals(D.double())[0].item()
    step = float(n / (sigma**2 * 1.0001)) if sigma > 0 else 1.0
    norms = D.double().norm(dim=0)
    tol_abs = tol * (Y64 * Y64).sum(0) / (2 * n)
    W = torch.zeros((m, B), dtype=dt, device=dev)
    coefs = torch.zeros((lam_np.size, B, m), dtype=dt, device=dev)
    gaps = np.zeros((lam_np.size, B))
    iters = np.zeros((lam_np.size, B), dtype=np.int64)
    for ell, lam_f in enumerate(lam_np):
        W, gap, it_count = _solve_penalty(
            D, Y2, Y64, W, float(lam_f), norms, tol_abs, step, max_iter, screening,
            int(check_every),
        )
        coefs[ell] = W.T
        gaps[ell] = gap.cpu().numpy()
        iters[ell] = it_count.cpu().numpy()
    converged = gaps <= tol_abs.cpu().numpy()[None, :]
    if one_d:
        return LassoPath(coefs[:, 0], gaps[:, 0], iters[:, 0], lam_np, None, converged[:, 0])
    return LassoPath(coefs, gaps, iters, lam_np, None, converged)


def _solve_penalty(D, Y2, Y64, W, lam_f, norms, tol_abs, step, max_iter, screening, check_every):
    """One penalty of the path from the warm start ``W`` (m, B); returns the solution, its
    float64 gap over all columns of ``D`` and the iterations each problem ran."""
    n, m = D.shape
    B = Y2.shape[1]
    dev, dt = D.device, D.dtype
    lam = torch.full((B,), lam_f, dtype=dt, device=dev)
    lam64 = torch.full((B,), lam_f, dtype=torch.float64, device=dev)
    it_count = torch.zeros(B, dtype=torch.int64, device=dev)
    W = W.clone()
    used = 0
    while True:
        cols = torch.arange(m, device=dev)
        Dc, Wc, normc = D, W, norms
        keep = torch.ones((m, B), dtype=torch.int8, device=dev)
        Z = Wc.clone()
        t = torch.ones(B, dtype=torch.float64, device=dev)
        gap = torch.full((B,), float("inf"), dtype=torch.float64, device=dev)
        active = torch.ones(B, dtype=torch.bool, device=dev)
        for it in range(used, max_iter + 1):
            if (it - used) % check_every == 0 or it == max_iter:
                new_gap, C, s = _gap64(Dc, Y64, Wc, lam64, n)
                gap = torch.where(active, new_gap, gap)  # a frozen problem keeps its gap
                active = gap > tol_abs
                if not bool(active.any()) or it == max_iter:
                    used = it
                    break
                if screening:
                    rho = torch.sqrt(2 * gap / (n * lam64 * lam64))
                    score = C.abs() / s[None, :] + normc[:, None] * rho[None, :]
                    drop = (score < 1 - _SCREEN_SLACK) & active[None, :]
                    keep = keep * (~drop).to(torch.int8)
                    Wc = Wc * keep
                    Z = Z * keep
                    alive = keep.any(dim=1)
                    if int(alive.sum()) < 0.5 * Dc.shape[1]:
                        idx = torch.nonzero(alive).flatten()
                        cols, Dc, normc = cols[idx], Dc[:, idx].contiguous(), normc[idx]
                        Wc, Z, keep = Wc[idx].contiguous(), Z[idx].contiguous(), keep[idx].contiguous()
            R = Y2 - Dc @ Z
            C, _ = dtr_gemm_absmax(Dc, R, 1.0 / n)
            t_new = (1 + torch.sqrt(1 + 4 * t * t)) / 2
            beta = ((t - 1) / t_new).to(dt)
            act8 = active.to(torch.int8)
            Wn, Zn = soft_threshold_update(Z, C, Wc, keep, lam, beta, act8, step)
            restart = ((Z.double() - Wn.double()) * (Wn.double() - Wc.double())).sum(0) > 0
            if bool(restart.any()):
                Zn[:, restart] = Wn[:, restart]
                t_new = torch.where(restart, torch.ones_like(t_new), t_new)
            t = t_new
            it_count += active.to(torch.int64)
            Wc, Z = Wn, Zn
        W = torch.zeros((m, B), dtype=dt, device=dev)
        W[cols] = Wc
        if Dc.shape[1] == m:  # gaps already over all columns (zeroed ones included)
            full_gap = gap
        else:
            full_gap, _, _ = _gap64(D, Y64, W, lam64, n)
        if used >= max_iter or not bool((full_gap > tol_abs).any()):
            return W, full_gap, it_count
        # The screened problem met the tolerance but the full one did not: resume on all
        # columns (only the problems above the tolerance move).


__all__ = ["dtr_gemm_absmax", "fista_path", "soft_threshold_update"]
