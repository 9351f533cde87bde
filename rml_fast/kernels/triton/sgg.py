"""Triton SGG sampler: the same Philox stream layout as the C++ kernel (see kernels.sgg).

One program handles ``BLOCK_R`` rows of ``out`` (n, dim); the normals, the Marsaglia-Tsang
attempts and the boost uniform of row ``i`` come from ``tl.randint4x(seed, offset + i*S + c)``
exactly as in ``csrc/sgg/sgg.cpp``; arithmetic is float64, so the output equals the C++
output up to the rounding of ``log``/``cos``/``sin`` and the order of the norm's sum.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

__all__ = [
    "MAX_DIM",
    "sample",
]

MAX_DIM = 16384


@triton.jit
def _u32(w):
    return (w.to(tl.float64) + 0.5) * 2.3283064365386963e-10


@triton.jit
def _u53(a, b):
    hi = (a >> 5).to(tl.float64)
    lo = (b >> 6).to(tl.float64)
    return (hi * 67108864.0 + lo + 0.5) * 1.1102230246251565e-16


@triton.jit(do_not_specialize=["n", "dim", "stride_row", "counters", "nq", "seed", "offset"])
def _sgg_kernel(
    out_ptr,
    params_ptr,
    n,
    dim,
    stride_row,
    counters,
    nq,
    seed,
    offset,
    BOOST: tl.constexpr,
    ATTEMPTS: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    log_sigma = tl.load(params_ptr + 0)
    p = tl.load(params_ptr + 1)
    a = tl.load(params_ptr + 2)
    d = tl.load(params_ptr + 3)
    c = tl.load(params_ptr + 4)
    log_d = tl.load(params_ptr + 5)

    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    rmask = rows < n
    cmask = cols < dim
    base = offset + rows * counters

    # Normals: counter base + j // 4; words (0,1) for j % 4 in {0,1}, (2,3) otherwise;
    # Box-Muller cos for even j, sin for odd j.
    ctr = base[:, None] + (cols // 4).to(tl.int64)[None, :]
    w0, w1, w2, w3 = tl.randint4x(seed, ctr)
    q = cols % 4
    upper = (q >= 2)[None, :]
    ua = _u32(tl.where(upper, w2, w0))
    ub = _u32(tl.where(upper, w3, w1))
    rad = tl.sqrt(-2.0 * tl.log(ua))
    th = 6.283185307179586476925286766559 * ub
    z = tl.where((q % 2 == 0)[None, :], rad * tl.cos(th), rad * tl.sin(th))
    z = tl.where(cmask[None, :], z, 0.0)
    ss = tl.sum(z * z, axis=1)

    # Gamma(a') by Marsaglia-Tsang with ATTEMPTS fixed counters (first accepted attempt).
    first = base + nq
    log_g = tl.zeros([BLOCK_R], dtype=tl.float64) + log_d
    done = rows < 0
    for t in tl.static_range(ATTEMPTS):
        v0, v1, v2, v3 = tl.randint4x(seed, first + 1 + t)
        x = tl.sqrt(-2.0 * tl.log(_u32(v0))) * tl.cos(6.283185307179586476925286766559 * _u32(v1))
        vb = 1.0 + c * x
        valid = vb > 0.0
        vv = tl.where(valid, vb, 1.0)
        v = vv * vv * vv
        log_v = tl.log(v)
        u = _u53(v2, v3)
        accept = valid & (tl.log(u) < 0.5 * x * x + d - d * v + d * log_v)
        log_g = tl.where((~done) & valid, log_d + log_v, log_g)
        done = done | accept
    if BOOST:
        b0, b1, _b2, _b3 = tl.randint4x(seed, first)
        log_g = log_g + tl.log(_u53(b0, b1)) / a

    radius = tl.exp(log_sigma + log_g / p)
    scale = radius / tl.sqrt(ss)
    vals = z * scale[:, None]
    ptrs = out_ptr + rows[:, None] * stride_row + cols[None, :]
    tl.store(ptrs, vals.to(out_ptr.dtype.element_ty), mask=rmask[:, None] & cmask[None, :])


def sample(out: torch.Tensor, sigma: float, k: float, p: float, seed: int, offset: int) -> torch.Tensor:
    """Fill ``out`` (n, dim), float32/float64, contiguous, in place with SGG(sigma, k, p) noise."""
    n, dim = out.shape
    if dim > MAX_DIM:
        raise ValueError(f"the Triton SGG sampler supports dim <= {MAX_DIM}, got {dim}")
    if n == 0:
        return out
    a = k / p
    boost = a < 1.0
    shape = a + 1.0 if boost else a
    d = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    params = torch.tensor(
        [math.log(sigma), p, a, d, c, math.log(d)], dtype=torch.float64, device=out.device
    )
    nq = (dim + 3) // 4
    counters = nq + 1 + 16
    block_d = triton.next_power_of_2(dim)
    block_r = max(1, min(64, 4096 // block_d))
    grid = (triton.cdiv(n, block_r),)
    _sgg_kernel[grid](
        out, params, n, dim, out.stride(0), counters, nq, seed, offset,
        BOOST=boost, ATTEMPTS=16, BLOCK_R=block_r, BLOCK_D=block_d,
    )
    return out
