"""Numba kernels of the interventional attribution games (coalitions are bitmasks).

Bit ``i`` of a coalition index ``T`` is set when player ``i`` belongs to ``T``. The Moebius
(Harsanyi) transform itself is :func:`rml_fast.fairness.compatibility.moebius_transform`; the
kernels here turn dividends ``a(T)`` into first- and second-order indices,

    index(S) = sum_{T >= S} w(|T|) a(T),

with a weight per coalition size (``size_weights``), plus the Faith-Shap closed form and the
weighted R^2 of the order-2 surrogate. Every kernel has a plain-Python twin in the tests.
"""

from __future__ import annotations

import math

import numba
import numpy as np

#: pairwise indices computed from the dividends with a size weight
PAIR_INDICES = ("SII", "BII", "STII", "Moebius")
SINGLE_INDICES = ("SV", "BV", "Moebius")


def size_weights(index: str, n: int) -> np.ndarray:
    """Weight ``w(t)``, ``t = 0..n``, with ``index(S) = sum_{T >= S} w(|T|) a(T)``.

    Pairwise: SII ``1/(t-1)``, BII ``2^-(t-2)``, STII ``1/C(t,2)``, Moebius ``[t == 2]``;
    singletons: SV ``1/t``, BV ``2^-(t-1)``, Moebius ``[t == 1]``.
    """
    t = np.arange(max(n, 2) + 1, dtype=np.float64)  # at least sizes 0..2
    w = np.zeros(t.size)
    if index == "SII":
        w[2:] = 1.0 / (t[2:] - 1.0)
    elif index == "BII":
        w[2:] = 2.0 ** -(t[2:] - 2.0)
    elif index == "STII":
        w[2:] = 2.0 / (t[2:] * (t[2:] - 1.0))
    elif index == "Moebius2":
        w[2] = 1.0
    elif index == "SV":
        w[1:] = 1.0 / t[1:]
    elif index == "BV":
        w[1:] = 2.0 ** -(t[1:] - 1.0)
    elif index == "Moebius1":
        w[1] = 1.0
    else:  # pragma: no cover - callers validate
        raise ValueError(index)
    return w


@numba.njit(cache=True)
def _singles(a: np.ndarray, n: int, w: np.ndarray) -> np.ndarray:  # pragma: no cover - jit
    """``out_i = sum_{T containing i} w(|T|) a(T)``; O(n 2^n)."""
    out = np.zeros(n)
    for t in range(1, a.shape[0]):
        size = 0
        x = t
        while x:
            x &= x - 1
            size += 1
        share = w[size] * a[t]
        if share == 0.0:
            continue
        for i in range(n):
            if (t >> i) & 1:
                out[i] += share
    return out


@numba.njit(cache=True)
def _pairs(a: np.ndarray, n: int, w: np.ndarray) -> np.ndarray:  # pragma: no cover - jit
    """Symmetric ``out_ij = sum_{T >= {i,j}} w(|T|) a(T)`` (zero diagonal); O(n^2 2^n / 4)."""
    out = np.zeros((n, n))
    members = np.empty(n, dtype=np.int64)
    for t in range(3, a.shape[0]):
        size = 0
        for i in range(n):
            if (t >> i) & 1:
                members[size] = i
                size += 1
        if size < 2:
            continue
        share = w[size] * a[t]
        if share == 0.0:
            continue
        for p in range(size):
            ip = members[p]
            for q in range(p + 1, size):
                out[ip, members[q]] += share
    for i in range(n):
        for j in range(i + 1, n):
            out[j, i] = out[i, j]
    return out


def faith_shap_weights(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Order-2 Faith-Shap corrections per coalition size (Tsai et al. 2023, Thm. 19).

    ``FSII(S) = a(S) + (-1)^(2-|S|) |S|/(2+|S|) C(2,|S|) sum_{T > S, |T| > 2}
    C(|T|-1, 2) / C(|T|+1, 2+|S|) a(T)``; returns the size weights for ``|S| = 1`` (signed) and
    ``|S| = 2``, each of length ``n + 1`` and zero for ``|T| <= 2``.
    """
    w1 = np.zeros(n + 1)
    w2 = np.zeros(n + 1)
    for t in range(3, n + 1):
        c = math.comb(t - 1, 2)
        w1[t] = -(1.0 / 3.0) * 2.0 * c / math.comb(t + 1, 3)
        w2[t] = 0.5 * c / math.comb(t + 1, 4)
    return w1, w2


@numba.njit(cache=True)
def _lmpi_r2(v: np.ndarray, n: int, b0: float, b1: np.ndarray, b2: np.ndarray,
             mu: np.ndarray) -> float:  # pragma: no cover - jit
    """Weighted R^2 of ``b0 + sum_{i in S} b1_i + sum_{i<j in S} b2_ij`` over S != empty, N."""
    full = v.shape[0] - 1
    members = np.empty(n, dtype=np.int64)
    sw = 0.0
    swy = 0.0
    for s in range(1, full):
        size = 0
        x = s
        while x:
            x &= x - 1
            size += 1
        sw += mu[size]
        swy += mu[size] * v[s]
    mean = swy / sw if sw > 0 else 0.0
    ss_res = 0.0
    ss_tot = 0.0
    for s in range(1, full):
        size = 0
        for i in range(n):
            if (s >> i) & 1:
                members[size] = i
                size += 1
        pred = b0
        for p in range(size):
            pred += b1[members[p]]
            for q in range(p + 1, size):
                pred += b2[members[p], members[q]]
        r = v[s] - pred
        ss_res += mu[size] * r * r
        d = v[s] - mean
        ss_tot += mu[size] * d * d
    if ss_tot <= 0.0:
        return 1.0 if ss_res <= 1e-24 else 0.0
    return 1.0 - ss_res / ss_tot


@numba.njit(cache=True)
def _masks_to_bits(keep: np.ndarray) -> np.ndarray:  # pragma: no cover - jit
    """Boolean coalition rows ``(B, n)`` -> int64 bitmasks ``(B,)`` (n <= 62)."""
    out = np.zeros(keep.shape[0], dtype=np.int64)
    for b in range(keep.shape[0]):
        x = 0
        for i in range(keep.shape[1]):
            if keep[b, i]:
                x |= 1 << i
        out[b] = x
    return out


def bits_to_masks(bits: np.ndarray, n: int) -> np.ndarray:
    """int64 bitmasks ``(B,)`` -> boolean coalition rows ``(B, n)``."""
    return ((np.asarray(bits, dtype=np.int64)[:, None] >> np.arange(n)) & 1).astype(bool)


def shapley_kernel_weights(n: int) -> np.ndarray:
    """Shapley kernel ``mu(s) = (n-1) / (C(n,s) s (n-s))`` for ``s = 0..n`` (inf at 0 and n)."""
    mu = np.full(n + 1, np.inf)
    for s in range(1, n):
        mu[s] = (n - 1) / (math.comb(n, s) * s * (n - s))
    return mu


def singles(a: np.ndarray, n: int, w: np.ndarray) -> np.ndarray:
    """Public-in-package wrapper of the numba first-order kernel."""
    return _singles(np.ascontiguousarray(a, dtype=np.float64), n, w)


def pairs(a: np.ndarray, n: int, w: np.ndarray) -> np.ndarray:
    """Public-in-package wrapper of the numba pairwise kernel."""
    return _pairs(np.ascontiguousarray(a, dtype=np.float64), n, w)


def lmpi_r2(v: np.ndarray, n: int, b0: float, b1: np.ndarray, b2: np.ndarray) -> float:
    """Shapley-kernel-weighted R^2 of the order-2 surrogate on a full value table."""
    mu = shapley_kernel_weights(n)
    mu[0] = mu[n] = 0.0
    return float(_lmpi_r2(np.ascontiguousarray(v, dtype=np.float64), n, float(b0),
                          np.ascontiguousarray(b1, dtype=np.float64),
                          np.ascontiguousarray(b2, dtype=np.float64), mu))


def masks_to_bits(keep: np.ndarray) -> np.ndarray:
    """Boolean coalitions ``(B, n)`` -> int64 bitmasks."""
    return _masks_to_bits(np.ascontiguousarray(keep, dtype=np.bool_))
