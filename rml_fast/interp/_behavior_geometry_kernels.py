"""Numba kernels of the behavioural-geometry RSA: pair indices and one-pass Pearson on pairs."""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True)
def pair_from_linear(k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-major upper-triangle index ``k`` (0 <= k < n(n-1)/2) to the pair ``(i, j)``, i < j."""
    m = k.shape[0]
    ii = np.empty(m, dtype=np.int64)
    jj = np.empty(m, dtype=np.int64)
    for t in range(m):
        kk = k[t]
        # closed form for the row, then corrected for floating-point rounding
        i = int(n - 2 - math.floor(math.sqrt(-8.0 * kk + 4.0 * n * (n - 1) - 7.0) / 2.0 - 0.5))
        while i > 0 and i * (2 * n - i - 1) // 2 > kk:
            i -= 1
        while (i + 1) * (2 * n - i - 2) // 2 <= kk:
            i += 1
        ii[t] = i
        jj[t] = kk - i * (2 * n - i - 1) // 2 + i + 1
    return ii, jj


@numba.njit(cache=True)
def pearson_on_pairs(A: np.ndarray, B: np.ndarray, ii: np.ndarray, jj: np.ndarray) -> float:
    """Pearson r between ``A[ii, jj]`` and ``B[ii, jj]`` in one pass (shifted running moments)."""
    m = ii.shape[0]
    a0 = float(A[ii[0], jj[0]])
    b0 = float(B[ii[0], jj[0]])
    sa = sb = saa = sbb = sab = 0.0
    for t in range(m):
        a = float(A[ii[t], jj[t]]) - a0
        b = float(B[ii[t], jj[t]]) - b0
        sa += a
        sb += b
        saa += a * a
        sbb += b * b
        sab += a * b
    cov = sab - sa * sb / m
    va = saa - sa * sa / m
    vb = sbb - sb * sb / m
    if va <= 0.0 or vb <= 0.0:
        return math.nan
    return cov / math.sqrt(va * vb)


@numba.njit(cache=True, parallel=True)
def rowdot_on_pairs(X: np.ndarray, ii: np.ndarray, jj: np.ndarray) -> np.ndarray:
    """``<X[ii[t]], X[jj[t]]>`` for every pair, without forming the n x n matrix."""
    m = ii.shape[0]
    out = np.empty(m)
    d = X.shape[1]
    for t in numba.prange(m):
        s = 0.0
        i = ii[t]
        j = jj[t]
        for k in range(d):
            s += float(X[i, k]) * float(X[j, k])
        out[t] = s
    return out
