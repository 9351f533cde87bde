"""Triton kernels for the batched half-space NUDFTs (imported lazily, only when used).

Shapes and formulas (``theta = 2 pi xi_f . x``, ``s = sign``):

* ``type1``: ``re + i im [b, f, c] = sum_n v[b, n, c] e^{s i theta(x[b, n], f)}`` and the
  density ``sum_n e^{s i theta}``; one program per ``(b, f tile, c tile)``, loop over point
  tiles, phases generated in registers, fp32 accumulators, ``tl.dot`` in IEEE fp32.
* ``type2``: ``y[b, m, o] = sum_f w_f (re cos theta - s im sin theta)``; one program per
  ``(b, m tile, o tile)``, loop over frequency tiles.

Phases are range-reduced in cycles twice (per axis ``t = frac(dxi x)``, then
``frac(sum_i k_i t_i)``) before ``sin``/``cos``, so the fp32 error is that of the product
``k t``, not of ``2 pi xi x``. No ``(B, N, F)`` tensor is ever written. float32 only (a
float64 input raises rather than being downcast).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl

__all__ = [
    "type1",
    "type2",
]

_TWO_PI = 2 * math.pi


@triton.jit
def _reduced_cycles(x_ptr, row, offs, mask, kf0, kf1, dxi0, dxi1, D: tl.constexpr):
    """cyc[f, n] = frac(sum_i k_i frac(dxi_i x_i)) for a tile (rows = frequencies)."""
    x0 = tl.load(x_ptr + (row + offs) * D, mask=mask, other=0.0)
    t0 = x0 * dxi0
    t0 = t0 - tl.floor(t0 + 0.5)
    cyc = kf0[:, None] * t0[None, :]
    if D == 2:
        x1 = tl.load(x_ptr + (row + offs) * D + 1, mask=mask, other=0.0)
        t1 = x1 * dxi1
        t1 = t1 - tl.floor(t1 + 0.5)
        cyc += kf1[:, None] * t1[None, :]
    return cyc - tl.floor(cyc + 0.5)


@triton.jit
def _type1_kernel(
    x_ptr, v_ptr, k_ptr, re_ptr, im_ptr, dre_ptr, dim_ptr,
    N, C, F, dxi0, dxi1, sign,
    D: tl.constexpr, DENSITY: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    pf = tl.program_id(1)
    pc = tl.program_id(2)
    offs_f = pf * BLOCK_F + tl.arange(0, BLOCK_F)
    offs_c = pc * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_f = offs_f < F
    mask_c = offs_c < C
    kf0 = tl.load(k_ptr + offs_f * D, mask=mask_f, other=0).to(tl.float32)
    kf1 = kf0
    if D == 2:
        kf1 = tl.load(k_ptr + offs_f * D + 1, mask=mask_f, other=0).to(tl.float32)
    acc_re = tl.zeros((BLOCK_F, BLOCK_C), dtype=tl.float32)
    acc_im = tl.zeros((BLOCK_F, BLOCK_C), dtype=tl.float32)
    d_re = tl.zeros((BLOCK_F,), dtype=tl.float32)
    d_im = tl.zeros((BLOCK_F,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < N
        cyc = _reduced_cycles(x_ptr, b * N, offs_n, mask_n, kf0, kf1, dxi0, dxi1, D)
        ang = 6.283185307179586 * cyc
        keep = mask_n[None, :].to(tl.float32)
        cs = tl.cos(ang) * keep
        sn = sign * tl.sin(ang) * keep
        v = tl.load(
            v_ptr + (b * N + offs_n[:, None]) * C + offs_c[None, :],
            mask=mask_n[:, None] & mask_c[None, :],
            other=0.0,
        )
        acc_re += tl.dot(cs, v, input_precision="ieee")
        acc_im += tl.dot(sn, v, input_precision="ieee")
        if DENSITY:
            d_re += tl.sum(cs, axis=1)
            d_im += tl.sum(sn, axis=1)
    out = (b * F + offs_f[:, None]) * C + offs_c[None, :]
    m2 = mask_f[:, None] & mask_c[None, :]
    tl.store(re_ptr + out, acc_re, mask=m2)
    tl.store(im_ptr + out, acc_im, mask=m2)
    if DENSITY:  # noqa: SIM102 - constexpr branch, then a runtime one
        if pc == 0:
            tl.store(dre_ptr + b * F + offs_f, d_re, mask=mask_f)
            tl.store(dim_ptr + b * F + offs_f, d_im, mask=mask_f)


@triton.jit
def _type2_kernel(
    x_ptr, re_ptr, im_ptr, w_ptr, k_ptr, y_ptr,
    M, n_out, F, dxi0, dxi1, sign,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_O: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    pm = tl.program_id(1)
    po = tl.program_id(2)
    offs_m = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_o = po * BLOCK_O + tl.arange(0, BLOCK_O)
    mask_m = offs_m < M
    mask_o = offs_o < n_out
    acc = tl.zeros((BLOCK_M, BLOCK_O), dtype=tl.float32)
    for f0 in range(0, F, BLOCK_F):
        offs_f = f0 + tl.arange(0, BLOCK_F)
        mask_f = offs_f < F
        kf0 = tl.load(k_ptr + offs_f * D, mask=mask_f, other=0).to(tl.float32)
        kf1 = kf0
        if D == 2:
            kf1 = tl.load(k_ptr + offs_f * D + 1, mask=mask_f, other=0).to(tl.float32)
        w = tl.load(w_ptr + offs_f, mask=mask_f, other=0.0)
        cyc = _reduced_cycles(x_ptr, b * M, offs_m, mask_m, kf0, kf1, dxi0, dxi1, D)  # (F, M)
        ang = 6.283185307179586 * cyc
        a_c = tl.trans(tl.cos(ang) * w[:, None])  # (M, F)
        a_s = tl.trans(tl.sin(ang) * (-sign * w)[:, None])
        src = (b * F + offs_f[:, None]) * n_out + offs_o[None, :]
        m2 = mask_f[:, None] & mask_o[None, :]
        re = tl.load(re_ptr + src, mask=m2, other=0.0)
        im = tl.load(im_ptr + src, mask=m2, other=0.0)
        acc += tl.dot(a_c, re, input_precision="ieee")
        acc += tl.dot(a_s, im, input_precision="ieee")
    dst = (b * M + offs_m[:, None]) * n_out + offs_o[None, :]
    tl.store(y_ptr + dst, acc, mask=mask_m[:, None] & mask_o[None, :])


def _check_f32(*ts: torch.Tensor) -> None:
    for t in ts:
        if t.dtype != torch.float32:
            raise TypeError(
                f"the triton NUDFT backend computes in float32, got {t.dtype}; "
                "use backend='native' (CPU) or 'reference' for float64"
            )


def _kidx(grid: Any, device: torch.device) -> torch.Tensor:
    k = torch.round(grid.xi_as(torch.zeros((), dtype=torch.float64)) / torch.tensor(grid.resolution, dtype=torch.float64))
    return k.to(torch.int32).contiguous().to(device)


def _block(n: int, lo: int = 16, hi: int = 64) -> int:
    return max(lo, min(hi, triton.next_power_of_2(max(n, 1))))


def type1(x: torch.Tensor, v: torch.Tensor, grid: Any, sign: int, density: bool):
    """``(re, im, dre, dim)`` of the type-1 transform (see module docstring)."""
    _check_f32(x, v)
    x, v = x.contiguous(), v.contiguous()
    B, N, C = v.shape
    F = grid.n_freq
    re = torch.empty(B, F, C, dtype=x.dtype, device=x.device)
    im = torch.empty_like(re)
    dre = torch.empty(B, F, dtype=x.dtype, device=x.device) if density else re
    dim = torch.empty_like(dre) if density else im
    BF, BC, BN = _block(F), _block(C), _block(N, hi=32)
    d = grid.dim
    res = grid.resolution
    grid_fn = (B, triton.cdiv(F, BF), triton.cdiv(max(C, 1), BC))
    _type1_kernel[grid_fn](
        x, v, _kidx(grid, x.device), re, im, dre, dim,
        N, C, F, float(res[0]), float(res[-1]), float(sign),
        D=d, DENSITY=bool(density), BLOCK_N=BN, BLOCK_F=BF, BLOCK_C=BC,
    )  # fmt: skip
    return re, im, (dre if density else None), (dim if density else None)


def type2(x: torch.Tensor, re: torch.Tensor, im: torch.Tensor, w: torch.Tensor, grid: Any, sign: int) -> torch.Tensor:
    """``y = sum_f w_f Re((re + i im) e^{sign i theta})`` (see module docstring)."""
    _check_f32(x, re, im, w)
    x, re, im, w = x.contiguous(), re.contiguous(), im.contiguous(), w.contiguous()
    B, M, _ = x.shape
    O = re.shape[-1]  # noqa: E741
    F = grid.n_freq
    y = torch.empty(B, M, O, dtype=x.dtype, device=x.device)
    BM, BO, BF = _block(M), _block(O), _block(F, hi=32)
    res = grid.resolution
    grid_fn = (B, triton.cdiv(M, BM), triton.cdiv(O, BO))
    _type2_kernel[grid_fn](
        x, re, im, w, _kidx(grid, x.device), y,
        M, O, F, float(res[0]), float(res[-1]), float(sign),
        D=grid.dim, BLOCK_M=BM, BLOCK_F=BF, BLOCK_O=BO,
    )  # fmt: skip
    return y
