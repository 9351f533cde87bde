"""Numba kernels of :mod:`rml_fast.evaluation.valueflow` (private).

* :func:`pl_mm_wins` / :func:`pl_mm_denominators`: the two sums of Hunter's (2004) MM step for
  Plackett-Luce rankings stored flat (``items`` with ``offsets``, CSR style).
* :func:`solve_single_item_rows`: the anchor evaluator's per-response 1-D problem (bisection on
  the score ``g(u)``, gradient-ascent fallback) and the window-guard statistics, for a batch of
  responses at once.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def pl_mm_wins(items, offsets, n_items):  # pragma: no cover - numba
    """Number of stages each item wins (every position but the last of each ranking)."""
    w = np.zeros(n_items, dtype=np.float64)
    for r in range(offsets.shape[0] - 1):
        a, b = offsets[r], offsets[r + 1]
        for t in range(a, b - 1):
            w[items[t]] += 1.0
    return w


@njit(cache=True)
def pl_mm_denominators(items, offsets, gamma, n_items):  # pragma: no cover - numba
    """``c_i = sum over stages s with i in R_s of 1 / sum_{j in R_s} gamma_j``.

    ``gamma`` should be scaled so that its largest entry is 1 (the caller undoes the scale).
    """
    c = np.zeros(n_items, dtype=np.float64)
    max_k = 0
    for r in range(offsets.shape[0] - 1):
        max_k = max(max_k, offsets[r + 1] - offsets[r])
    suffix = np.empty(max_k + 1, dtype=np.float64)
    for r in range(offsets.shape[0] - 1):
        a, b = offsets[r], offsets[r + 1]
        k = b - a
        if k < 2:
            continue
        suffix[k] = 0.0
        for t in range(k - 1, -1, -1):
            suffix[t] = suffix[t + 1] + gamma[items[a + t]]
        acc = 0.0
        for t in range(k):
            if t < k - 1:  # stage t exists (the last item alone is not a choice)
                acc += 1.0 / suffix[t]
            c[items[a + t]] += acc
    return c


@njit(cache=True)
def _g_value(u, terms, n_terms, n_windows, lam, lo, hi):  # pragma: no cover - numba
    eu = math.exp(min(max(u, lo), hi))
    g = float(n_windows) - lam * u
    for t in range(n_terms):
        g -= eu / (eu + terms[t])
    return g


@njit(cache=True)
def solve_single_item_rows(orders, utils, lam, lo, hi, tol, max_bisect, gd_lr,
                           gd_iters):  # pragma: no cover - numba
    """Per row b: utility of local item 0 given the other items' fixed utilities.

    ``orders`` (n, M, K) int64, window w of row b valid when ``orders[b, w, 0] >= 0``;
    ``utils`` (n, M, K) float64, the fixed utility of local item j >= 1 (column 0 unused).
    Returns ``u`` (n,), ``status`` (n,) (0 no window, 1 bisection, 2 gradient ascent),
    ``wins``, ``losses`` (n,) counts against anchors, ``wmin``, ``wmax`` (n,) the smallest and
    largest anchor utility met.
    """
    n, m, k = orders.shape
    u_out = np.full(n, np.nan)
    status = np.zeros(n, dtype=np.int8)
    wins = np.zeros(n, dtype=np.int64)
    losses = np.zeros(n, dtype=np.int64)
    wmin = np.full(n, np.inf)
    wmax = np.full(n, -np.inf)
    terms = np.empty(m * k, dtype=np.float64)
    ea = np.empty(k, dtype=np.float64)
    for b in range(n):
        n_terms = 0
        n_windows = 0
        for w in range(m):
            if orders[b, w, 0] < 0:
                continue
            n_windows += 1
            pos_r = 0
            for j in range(k):
                item = orders[b, w, j]
                if item == 0:
                    pos_r = j
                    ea[j] = 0.0
                else:
                    x = utils[b, w, item]
                    ea[j] = math.exp(min(max(x, lo), hi))
                    wmin[b] = min(wmin[b], x)
                    wmax[b] = max(wmax[b], x)
            wins[b] += k - 1 - pos_r
            losses[b] += pos_r
            # anchor mass of R_j = order[j:] for the stages j <= pos_r that contain the response
            s = 0.0
            for j in range(k - 1, -1, -1):
                s += ea[j]
                if j <= pos_r:
                    terms[n_terms] = s
                    n_terms += 1
        if n_windows == 0:
            continue
        a, bb = lo, hi
        g_a = _g_value(a, terms, n_terms, n_windows, lam, lo, hi)
        g_b = _g_value(bb, terms, n_terms, n_windows, lam, lo, hi)
        root = np.nan
        if g_a == 0.0:
            root = a
        elif g_b == 0.0:
            root = bb
        elif g_a * g_b < 0.0:
            found = False
            for _ in range(max_bisect):
                mid = 0.5 * (a + bb)
                g_mid = _g_value(mid, terms, n_terms, n_windows, lam, lo, hi)
                if abs(g_mid) < tol or (bb - a) < tol:
                    root = mid
                    found = True
                    break
                if g_a * g_mid > 0.0:
                    a, g_a = mid, g_mid
                else:
                    bb = mid
            if not found:
                root = 0.5 * (a + bb)
        if root == root:  # not NaN: bisection succeeded
            status[b] = 1
        else:
            u = 0.0
            for _ in range(gd_iters):
                prev = u
                u = min(max(u + gd_lr * _g_value(u, terms, n_terms, n_windows, lam, lo, hi),
                            lo), hi)
                if abs(u - prev) < tol:
                    break
            root = u
            status[b] = 2
        u_out[b] = min(max(root, lo), hi)
    return u_out, status, wins, losses, wmin, wmax


@njit(cache=True)
def pl_lsr_triplets(items, offsets, gamma):  # pragma: no cover - numba
    """Transition rates of the LSR Markov chain: for each stage, loser -> winner at 1 / D_s.

    Returns ``(losers, winners, rates)``, one entry per (stage, loser) pair, duplicates to be
    summed by the caller.
    """
    n_trip = 0
    for r in range(offsets.shape[0] - 1):
        k = offsets[r + 1] - offsets[r]
        n_trip += k * (k - 1) // 2
    losers = np.empty(n_trip, dtype=np.int64)
    winners = np.empty(n_trip, dtype=np.int64)
    rates = np.empty(n_trip, dtype=np.float64)
    p = 0
    for r in range(offsets.shape[0] - 1):
        a, b = offsets[r], offsets[r + 1]
        s = 0.0
        for t in range(a, b):
            s += gamma[items[t]]
        for t in range(a, b - 1):
            val = 1.0 / s
            for q in range(t + 1, b):
                losers[p] = items[q]
                winners[p] = items[t]
                rates[p] = val
                p += 1
            s -= gamma[items[t]]
    return losers, winners, rates


@njit(cache=True)
def pl_loglik(items, offsets, theta):  # pragma: no cover - numba
    """Plackett-Luce log-likelihood of the rankings at log-utilities ``theta``."""
    total = 0.0
    for r in range(offsets.shape[0] - 1):
        a, b = offsets[r], offsets[r + 1]
        m = -np.inf
        for t in range(a, b):
            m = max(m, theta[items[t]])
        s = 0.0
        for t in range(a, b):
            s += math.exp(theta[items[t]] - m)
        for t in range(a, b - 1):
            total += theta[items[t]] - m - math.log(s)
            s -= math.exp(theta[items[t]] - m)
            if s <= 0.0:  # round-off: recompute the remaining mass
                s = 0.0
                for q in range(t + 1, b):
                    s += math.exp(theta[items[q]] - m)
    return total


@njit(cache=True)
def pl_loglik_gamma(items, offsets, theta, gamma, shift):  # pragma: no cover - numba
    """As :func:`pl_loglik` with ``gamma = exp(theta - shift)`` precomputed (fast path)."""
    total = 0.0
    for r in range(offsets.shape[0] - 1):
        a, b = offsets[r], offsets[r + 1]
        s = 0.0
        for t in range(a, b):
            s += gamma[items[t]]
        for t in range(a, b - 1):
            if s <= 0.0:
                return -np.inf
            total += theta[items[t]] - shift - math.log(s)
            s -= gamma[items[t]]
    return total


@njit(cache=True)
def mm_newton(w, logc, alpha, t_prev):  # pragma: no cover - numba
    """Per item: argmax_t  w t - exp(logc + t) - alpha t^2 (alpha > 0), Newton from the right.

    The derivative is concave and decreasing, so Newton started right of the root decreases
    monotonically to it: start at ``t_prev`` if it lies right of the root, else at
    max(log(w / c), 0), which always does.
    """
    n = w.shape[0]
    out = np.empty(n)
    for i in range(n):
        t = t_prev[i]
        if not (w[i] - math.exp(logc[i] + t) - 2.0 * alpha * t <= 0.0):
            t = 0.0
            if w[i] > 0.0:
                t = max(math.log(w[i]) - logc[i], 0.0)
        for _ in range(200):
            ect = math.exp(logc[i] + t)
            step = (w[i] - ect - 2.0 * alpha * t) / (ect + 2.0 * alpha)
            t += step
            if abs(step) <= 1e-14 * (1.0 + abs(t)):
                break
        out[i] = t
    return out
