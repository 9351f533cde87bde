"""Triton clipping kernels: ghost norms / cross-Grams and the row-scaled accumulate.

Shapes and formulas are those of :mod:`rml_fast.kernels.clip`. Tiles of ``A_i A2_i^T`` and
``D_i D2_i^T`` are formed on the fly with ``tl.dot`` in float32 and Hadamard-reduced, never
stored; one program per (sample, row tile, column tile), partial sums combined with
atomics. The accumulate runs one program per (p tile, d tile) over all rows with the
per-sample weight applied to the ``D`` tile before the dot (the fused prologue), and adds
``noise_std * tl.randn(seed, offset + j * d + k)``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = [
    "ghost_norm_sq",
    "scaled_outer_accumulate",
]

_BS = 16  # rows (positions) per Gram tile
_BK = 32  # feature chunk


@triton.jit
def _ghost_kernel(a_ptr, d_ptr, a2_ptr, d2_ptr, out_ptr, S, S2, DA, DP,
                  BS: tl.constexpr, BK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    s0 = tl.program_id(1) * BS
    t0 = tl.program_id(2) * BS
    rs = s0 + tl.arange(0, BS)
    rt = t0 + tl.arange(0, BS)
    ks = tl.arange(0, BK)
    ga = tl.zeros((BS, BS), dtype=tl.float32)
    for k0 in range(0, DA, BK):
        kk = k0 + ks
        x = tl.load(a_ptr + b * S * DA + rs[:, None] * DA + kk[None, :],
                    mask=(rs[:, None] < S) & (kk[None, :] < DA), other=0.0).to(tl.float32)
        y = tl.load(a2_ptr + b * S2 * DA + rt[:, None] * DA + kk[None, :],
                    mask=(rt[:, None] < S2) & (kk[None, :] < DA), other=0.0).to(tl.float32)
        ga += tl.dot(x, tl.trans(y))
    gd = tl.zeros((BS, BS), dtype=tl.float32)
    for k0 in range(0, DP, BK):
        kk = k0 + ks
        x = tl.load(d_ptr + b * S * DP + rs[:, None] * DP + kk[None, :],
                    mask=(rs[:, None] < S) & (kk[None, :] < DP), other=0.0).to(tl.float32)
        y = tl.load(d2_ptr + b * S2 * DP + rt[:, None] * DP + kk[None, :],
                    mask=(rt[:, None] < S2) & (kk[None, :] < DP), other=0.0).to(tl.float32)
        gd += tl.dot(x, tl.trans(y))
    tl.atomic_add(out_ptr + b, tl.sum(ga * gd))


def ghost_norm_sq(A: torch.Tensor, D: torch.Tensor, A2: torch.Tensor | None,
                  D2: torch.Tensor | None) -> torch.Tensor:
    """``out[i] = <D_i^T A_i, D2_i^T A2_i>_F`` (A2, D2 default to A, D); (B,) float64."""
    A, D = A.detach().contiguous(), D.detach().contiguous()
    A2 = A if A2 is None else A2.detach().contiguous()
    D2 = D if D2 is None else D2.detach().contiguous()
    B, S, DA = A.shape
    S2, DP = A2.shape[1], D.shape[2]
    out = torch.zeros(B, dtype=torch.float32, device=A.device)
    if B == 0:
        return out.double()
    grid = (B, triton.cdiv(S, _BS), triton.cdiv(S2, _BS))
    _ghost_kernel[grid](A, D, A2, D2, out, S, S2, DA, DP, BS=_BS, BK=_BK)
    return out.double()


@triton.jit(do_not_specialize=["seed", "offset"])
def _accumulate_kernel(a_ptr, d_ptr, w_ptr, out_ptr, N, DA, DP, S, noise_std, seed, offset,
                       BP: tl.constexpr, BD: tl.constexpr, BR: tl.constexpr,
                       NOISE: tl.constexpr):
    rj = tl.program_id(0) * BP + tl.arange(0, BP)
    rk = tl.program_id(1) * BD + tl.arange(0, BD)
    acc = tl.zeros((BP, BD), dtype=tl.float32)
    for r0 in range(0, N, BR):
        rr = r0 + tl.arange(0, BR)
        rmask = rr < N
        wr = tl.load(w_ptr + rr // S, mask=rmask, other=0.0).to(tl.float32)
        dt = tl.load(d_ptr + rr[:, None].to(tl.int64) * DP + rj[None, :],
                     mask=rmask[:, None] & (rj[None, :] < DP), other=0.0).to(tl.float32)
        at = tl.load(a_ptr + rr[:, None].to(tl.int64) * DA + rk[None, :],
                     mask=rmask[:, None] & (rk[None, :] < DA), other=0.0).to(tl.float32)
        acc += tl.dot(tl.trans(dt * wr[:, None]), at)
    idx = rj[:, None].to(tl.int64) * DA + rk[None, :]
    if NOISE:
        acc += noise_std * tl.randn(seed, offset + idx)
    mask = (rj[:, None] < DP) & (rk[None, :] < DA)
    tl.store(out_ptr + idx, acc.to(out_ptr.dtype.element_ty), mask=mask)


def scaled_outer_accumulate(A: torch.Tensor, D: torch.Tensor, w: torch.Tensor, S: int,
                            noise_std: float, seed: int, offset: int) -> torch.Tensor:
    """``out (p, d) = sum_r w[r // S] D[r]^T A[r] + noise_std * randn(seed, offset + idx)``."""
    A, D, w = A.detach().contiguous(), D.detach().contiguous(), w.detach().contiguous()
    N, DA = A.shape
    DP = D.shape[1]
    out = torch.empty(DP, DA, dtype=A.dtype, device=A.device)
    BP, BD, BR = 32, 32, 32
    grid = (triton.cdiv(DP, BP), triton.cdiv(DA, BD))
    _accumulate_kernel[grid](A, D, w, out, N, DA, DP, S, float(noise_std), seed, offset,
                             BP=BP, BD=BD, BR=BR, NOISE=noise_std > 0.0)
    return out
