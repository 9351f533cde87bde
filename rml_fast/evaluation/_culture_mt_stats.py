"""Correlation statistics and the vectorised bootstrap behind CULTURE-MT's meta-evaluation.

The bootstrap never materialises resampled arrays: a resample is a vector of integer counts
``w`` (how often each original point was drawn), and Kendall's tau_b and Spearman's rho of the
resampled data are computed from ``(x, y, w)`` directly, in O(m log m) per resample (a Fenwick
tree over the y ranks for tau_b; weighted average ranks for rho).  With ``w = 1`` they equal
``scipy.stats.kendalltau`` (variant "b") and ``scipy.stats.spearmanr``.
"""

from __future__ import annotations

import math

import numba
import numpy as np


def dense_ranks(v: np.ndarray) -> tuple[np.ndarray, int]:
    """Ranks 0..G-1 of ``v`` with ties sharing a rank; returns (ranks int64, G)."""
    uniq, inv = np.unique(v, return_inverse=True)
    return inv.astype(np.int64).ravel(), int(uniq.size)


@numba.njit(cache=True)
def _weighted_corr_batch(xr, gx, yr, gy, order, counts, seg):  # pragma: no cover - numba
    """tau_b and rho of points (xr, yr), given as dense ranks, with weights ``counts[b, seg]``.

    ``counts`` is (B, k) per cluster (item); ``seg`` (m,) maps each point to its cluster.

    ``order`` sorts the points by (x rank, y rank).  Returns two (B,) float64 arrays; NaN where
    a statistic is undefined (fewer than two distinct values on a side).
    """
    B = counts.shape[0]
    m = seg.size
    w = np.empty(m, np.int64)
    tau = np.empty(B)
    rho = np.empty(B)
    tree = np.zeros(gy + 1, np.int64)
    ygw = np.zeros(gy, np.int64)
    yrank_val = np.zeros(gy)
    for b in range(B):
        for i in range(m):
            w[i] = counts[b, seg[i]]
        tree[:] = 0
        ygw[:] = 0
        W = 0
        for i in range(m):
            W += w[i]
            ygw[yr[i]] += w[i]
        if W < 2:
            tau[b] = np.nan
            rho[b] = np.nan
            continue
        # y average ranks (1-based) of the resampled data
        c = 0
        n2 = 0
        for g in range(gy):
            yrank_val[g] = c + (ygw[g] + 1) / 2.0
            c += ygw[g]
            n2 += ygw[g] * (ygw[g] - 1) // 2
        inserted = 0
        S = 0
        n1 = 0
        cx = 0
        sw = 0.0
        sx = 0.0
        sy = 0.0
        sxx = 0.0
        syy = 0.0
        sxy = 0.0
        k = 0
        while k < m:
            start = k
            gxw = 0
            while k < m and xr[order[k]] == xr[order[start]]:
                gxw += w[order[k]]
                k += 1
            n1 += gxw * (gxw - 1) // 2
            xrank = cx + (gxw + 1) / 2.0
            cx += gxw
            for t in range(start, k):
                p = order[t]
                wp = w[p]
                if wp == 0:
                    continue
                y = yr[p]
                # number of inserted weight with y rank < y
                less = 0
                j = y
                while j > 0:
                    less += tree[j]
                    j -= j & (-j)
                leq = 0
                j = y + 1
                while j > 0:
                    leq += tree[j]
                    j -= j & (-j)
                S += wp * (less - (inserted - leq))
                yv = yrank_val[y]
                sw += wp
                sx += wp * xrank
                sy += wp * yv
                sxx += wp * xrank * xrank
                syy += wp * yv * yv
                sxy += wp * xrank * yv
            for t in range(start, k):
                p = order[t]
                wp = w[p]
                if wp == 0:
                    continue
                j = yr[p] + 1
                while j <= gy:
                    tree[j] += wp
                    j += j & (-j)
                inserted += wp
        n0 = W * (W - 1) // 2
        den = float(n0 - n1) * float(n0 - n2)
        tau[b] = S / math.sqrt(den) if den > 0 else np.nan
        vx = sxx - sx * sx / sw
        vy = syy - sy * sy / sw
        cov = sxy - sx * sy / sw
        rho[b] = cov / math.sqrt(vx * vy) if vx > 1e-12 * sw and vy > 1e-12 * sw else np.nan
    return tau, rho


def rank_correlations(
    x: np.ndarray, y: np.ndarray, counts: np.ndarray, seg: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Kendall tau_b and Spearman rho of (x, y) (m,), point i weighted by ``counts[b, seg[i]]``.

    ``counts`` is (B, k) (``seg`` defaults to ``arange(m)``, k = m); returns two (B,) arrays.
    """
    xr, gx = dense_ranks(x)
    yr, gy = dense_ranks(y)
    order = np.lexsort((yr, xr)).astype(np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    seg = np.arange(xr.size, dtype=np.int64) if seg is None else np.asarray(seg, dtype=np.int64)
    tau, rho = _weighted_corr_batch(xr, gx, yr, gy, order, counts, seg)
    return np.clip(tau, -1.0, 1.0), np.clip(rho, -1.0, 1.0)


def pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r of each row pair of (B, k) arrays; NaN where a row is constant."""
    xc = x - x.mean(axis=1, keepdims=True)
    yc = y - y.mean(axis=1, keepdims=True)
    num = (xc * yc).sum(axis=1)
    den2 = (xc * xc).sum(axis=1) * (yc * yc).sum(axis=1)
    scale = (np.abs(x).max(axis=1) + np.abs(y).max(axis=1) + 1.0) ** 4
    ok = den2 > 1e-24 * scale
    out = np.full(x.shape[0], np.nan)
    out[ok] = num[ok] / np.sqrt(den2[ok])
    return np.clip(out, -1.0, 1.0)


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho of each row pair of (B, k) arrays (average ranks, as scipy)."""
    from scipy.stats import rankdata

    return pearson_rows(rankdata(x, axis=1), rankdata(y, axis=1))


def pairwise_accuracy_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Fraction of column pairs (i < j) on which sign(x_i - x_j) == sign(y_i - y_j), per row."""
    k = x.shape[1]
    i, j = np.triu_indices(k, 1)
    if i.size == 0:
        return np.full(x.shape[0], np.nan)
    agree = np.sign(x[:, i] - x[:, j]) == np.sign(y[:, i] - y[:, j])
    return agree.mean(axis=1)


def bootstrap_counts(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n) int64 counts of n draws with replacement from range(n), one row per resample."""
    idx = rng.integers(0, n, size=(n_boot, n))
    flat = (idx + (np.arange(n_boot, dtype=np.int64) * n)[:, None]).ravel()
    return np.bincount(flat, minlength=n_boot * n).reshape(n_boot, n)


def percentile_ci(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval of the finite bootstrap replicates (NaN, NaN if there are none)."""
    fin = boot[np.isfinite(boot)]
    if fin.size == 0:
        return math.nan, math.nan
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(fin, [a, 1.0 - a])
    return float(lo), float(hi)
