"""Numba kernels of :mod:`rml_fast.strategic.ambiguity` (private).

* :func:`best_threshold` -- exact O(n log n) sweep for the closed threshold ``t`` in
  ``[lo, hi]`` that maximises ``mean(1[s >= t] == y)``.
* :func:`project_polytope` -- exact Euclidean projection of each row onto
  ``{z : W z >= b}`` by enumerating active sets (small ``K``), with a KKT check.
* :func:`project_ball_region` -- projection onto ``{z : w0.z - rho ||z|| >= b0}`` by bisection on
  the KKT multiplier (the minimiser is ``(x + lam w0) (1 - lam rho / ||x + lam w0||)_+``).
"""

from __future__ import annotations

import numba
import numpy as np


def best_threshold(s, y, lo, hi):
    """Best closed threshold ``t in [lo, hi]`` for ``1[s >= t]`` against 0/1 labels ``y``.

    Returns ``(t, n_correct)``. The accepted set ``{s >= t}`` changes only at data values, so the
    candidates are ``lo`` and every data value in ``(lo, hi]`` (placed at the midpoint to the
    previous distinct value, clipped to ``[lo, hi]``) and ``hi``; ties keep the largest ``t``.
    NumPy sorts (O(n log n)); the scan over the sorted scores is compiled (O(n)).
    """
    s = np.ascontiguousarray(s, dtype=np.float64)
    order = np.argsort(s)
    return _best_threshold_sorted(s[order], np.ascontiguousarray(y, dtype=np.int64)[order],
                                  float(lo), float(hi))


@numba.njit(cache=True)
def _best_threshold_sorted(ss, yy, lo, hi):  # pragma: no cover - compiled
    n = ss.shape[0]
    n_pos = 0
    for i in range(n):
        n_pos += yy[i]
    # accepting everything from index j on: correct = (#neg before j) + (#pos from j on)
    # candidate: t = lo  -> j0 = first index with ss >= lo
    j = 0
    while j < n and ss[j] < lo:
        j += 1
    neg_before = 0
    pos_before = 0
    for i in range(j):
        if yy[i] == 1:
            pos_before += 1
        else:
            neg_before += 1
    best_correct = neg_before + (n_pos - pos_before)
    best_t = lo
    # walk over distinct values in (lo, hi]
    i = j
    while i < n:
        v = ss[i]
        if v > hi:
            break
        # candidate: accept from index i on (the first copy of the distinct value v)
        if v > lo and (i == 0 or ss[i - 1] < v):
            correct = neg_before + (n_pos - pos_before)
            if correct >= best_correct:
                prev = ss[i - 1] if i > 0 else v - 1.0
                t = 0.5 * (prev + v)
                if t < lo:
                    t = lo
                if t > v:
                    t = v
                best_correct = correct
                best_t = t
        # consume all copies of v
        while i < n and ss[i] == v:
            if yy[i] == 1:
                pos_before += 1
            else:
                neg_before += 1
            i += 1
    # candidate: reject everyone (a threshold above every score)
    if hi == np.inf and n > 0:
        correct = n - n_pos
        if correct >= best_correct:
            best_correct = correct
            best_t = ss[n - 1] + 1.0
    # candidate t = hi (accept from the first value >= hi)
    if hi < np.inf:
        k = 0
        nb = 0
        pb = 0
        while k < n and ss[k] < hi:
            if yy[k] == 1:
                pb += 1
            else:
                nb += 1
            k += 1
        correct = nb + (n_pos - pb)
        if correct >= best_correct:
            best_correct = correct
            best_t = hi
    return best_t, best_correct


@numba.njit(cache=True)
def _solve_small(A, rhs):  # pragma: no cover - compiled
    """Gaussian elimination with partial pivoting; returns (x, ok)."""
    m = A.shape[0]
    M = A.copy()
    x = rhs.copy()
    scale = 0.0
    for i in range(m):
        for j in range(m):
            scale = max(scale, abs(M[i, j]))
    if scale == 0.0:
        return x, False
    for c in range(m):
        p = c
        for r in range(c + 1, m):
            if abs(M[r, c]) > abs(M[p, c]):
                p = r
        if abs(M[p, c]) <= 1e-12 * scale:
            return x, False
        if p != c:
            for k in range(m):
                tmp = M[c, k]
                M[c, k] = M[p, k]
                M[p, k] = tmp
            tmp2 = x[c]
            x[c] = x[p]
            x[p] = tmp2
        for r in range(c + 1, m):
            f = M[r, c] / M[c, c]
            for k in range(c, m):
                M[r, k] -= f * M[c, k]
            x[r] -= f * x[c]
    for c in range(m - 1, -1, -1):
        acc = x[c]
        for k in range(c + 1, m):
            acc -= M[c, k] * x[k]
        x[c] = acc / M[c, c]
    return x, True


@numba.njit(cache=True)
def project_polytope(X, W, b):  # pragma: no cover - compiled
    """Projection of each row of ``X`` onto ``{z : W z >= b}`` by active-set enumeration.

    For each subset ``S`` (by increasing size, at most ``min(K, d)`` rows) the candidate is the
    projection onto ``{W_S z = b_S}``; it is the answer iff its multipliers are >= 0 and it is
    feasible (KKT of the strictly convex QP, so the answer is unique). Returns ``(Z, ok)``;
    ``ok[i]`` is False when no subset passes the check (degenerate or empty polytope).
    """
    n, d = X.shape
    K = W.shape[0]
    Z = X.copy()
    ok = np.zeros(n, dtype=np.bool_)
    G = W @ W.T
    wscale = np.empty(K)
    for k in range(K):
        wscale[k] = np.sqrt(G[k, k]) * (1.0 + abs(b[k]))
    max_size = min(K, d)
    idx = np.empty(K, dtype=np.int64)
    for i in range(n):
        x = X[i]
        r0 = W @ x - b
        feas = True
        for k in range(K):
            if r0[k] < 0.0:
                feas = False
                break
        if feas:
            ok[i] = True
            continue
        found = False
        for size in range(1, max_size + 1):
            if found:
                break
            # enumerate subsets of the given size via bitmasks
            for mask in range(1, 1 << K):
                m = 0
                for k in range(K):
                    if (mask >> k) & 1:
                        m += 1
                if m != size:
                    continue
                c = 0
                for k in range(K):
                    if (mask >> k) & 1:
                        idx[c] = k
                        c += 1
                A = np.empty((m, m))
                rhs = np.empty(m)
                for p in range(m):
                    rhs[p] = -r0[idx[p]]  # b_S - W_S x
                    for q in range(m):
                        A[p, q] = G[idx[p], idx[q]]
                lam, good = _solve_small(A, rhs)
                if not good:
                    continue
                neg = False
                for p in range(m):
                    if lam[p] < -1e-12:
                        neg = True
                        break
                if neg:
                    continue
                z = x.copy()
                for p in range(m):
                    for j in range(d):
                        z[j] += lam[p] * W[idx[p], j]
                viol = False
                for k in range(K):
                    v = 0.0
                    for j in range(d):
                        v += W[k, j] * z[j]
                    if v - b[k] < -1e-9 * wscale[k]:
                        viol = True
                        break
                if viol:
                    continue
                Z[i] = z
                ok[i] = True
                found = True
                break
    return Z, ok


@numba.njit(cache=True)
def _ball_point(x, w0, rho, lam):  # pragma: no cover - compiled
    d = x.shape[0]
    v = x + lam * w0
    nv = np.sqrt(np.sum(v * v))
    z = np.zeros(d)
    if nv > lam * rho:
        f = 1.0 - lam * rho / nv
        for j in range(d):
            z[j] = v[j] * f
    return z


@numba.njit(cache=True)
def _ball_g(z, w0, rho, b0):  # pragma: no cover - compiled
    return rho * np.sqrt(np.sum(z * z)) - np.sum(w0 * z) + b0


@numba.njit(cache=True)
def project_ball_region(X, w0, rho, b0):  # pragma: no cover - compiled
    """Projection of each row onto ``{z : w0.z - rho ||z|| >= b0}`` (convex, assumed non-empty).

    ``g(lam) = rho ||z(lam)|| - w0.z(lam) + b0`` is non-increasing in the multiplier ``lam``;
    bracket by doubling, then 200 bisection steps. Returns ``(Z, ok)``.
    """
    n, _d = X.shape
    Z = X.copy()
    ok = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        x = X[i].copy()
        if _ball_g(x, w0, rho, b0) <= 0.0:
            ok[i] = True
            continue
        hi = 1.0
        it = 0
        while _ball_g(_ball_point(x, w0, rho, hi), w0, rho, b0) > 0.0 and it < 200:
            hi *= 2.0
            it += 1
        if it >= 200:
            continue
        lo = 0.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if _ball_g(_ball_point(x, w0, rho, mid), w0, rho, b0) > 0.0:
                lo = mid
            else:
                hi = mid
        Z[i] = _ball_point(x, w0, rho, hi)
        ok[i] = True
    return Z, ok
