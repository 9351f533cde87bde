"""Numba kernels of the graded response model (E-step, per-item Newton M-step, EAP scores).

Internal layout: ``codes`` (P, J) int16 response patterns in the per-item recoded categories
0..K_j-1 (-1 = missing), ``counts`` (P,) float64 multiplicities of the patterns, ``kj`` (J,)
the number of categories of each item, ``a`` (J,) slopes and ``d`` (J, Kmax-1) decreasing
intercepts (only the first K_j-1 used), ``theta`` (Q,) quadrature nodes, ``logw`` (Q,) log
quadrature weights (normalised). Probabilities follow Samejima's GRM:
P*_k = sigma(a theta + d_k), P_k = P*_k - P*_{k+1}, P*_0 = 1, P*_{K_j} = 0.
"""

from __future__ import annotations

import math

import numba
import numpy as np

_TINY = 1e-300


@numba.njit(cache=True, inline="always", error_model="numpy")
def _sigmoid(z):
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@numba.njit(cache=True, inline="always", error_model="numpy")
def _cat_prob(a, d, k, kj, t):
    """P(y = k | theta = t) of one item, computed without cancellation."""
    # upper = P*_k (1 for k = 0), lower = P*_{k+1} (0 for k = kj - 1)
    if kj <= 1:  # an item with a single observed category: P = 1
        return 1.0
    if k == 0:
        zl = a * t + d[0]
        return _sigmoid(-zl)
    if k == kj - 1:
        return _sigmoid(a * t + d[k - 1])
    zu = a * t + d[k - 1]
    zl = a * t + d[k]
    if zl > 0.0:  # both near 1: use the complements
        return _sigmoid(-zl) - _sigmoid(-zu)
    return _sigmoid(zu) - _sigmoid(zl)


@numba.njit(cache=True, parallel=True, error_model="numpy")
def log_prob_table(a, d, kj, theta):
    """log P_jk(theta_q), shape (J, Kmax, Q); unused categories get -inf."""
    J = a.shape[0]
    Q = theta.shape[0]
    kmax = d.shape[1] + 1
    out = np.full((J, kmax, Q), -np.inf)
    for j in numba.prange(J):
        for k in range(kj[j]):
            for q in range(Q):
                p = _cat_prob(a[j], d[j], k, kj[j], theta[q])
                out[j, k, q] = math.log(max(p, _TINY))
    return out


@numba.njit(cache=True, parallel=True, error_model="numpy")
def estep(codes, counts, logp, logw, n_chunks):
    """Expected counts n_jkq = sum_i w_i r_iq 1[y_ij = k] and the marginal log-likelihood.

    Returns ``(nexp (J, Kmax, Q), loglik)``; the posterior r_iq is formed in log space.
    """
    P, J = codes.shape
    kmax = logp.shape[1]
    Q = logp.shape[2]
    buf = np.zeros((n_chunks, J, kmax, Q))
    ll = np.zeros(n_chunks)
    step = (P + n_chunks - 1) // n_chunks
    for c in numba.prange(n_chunks):
        row = np.empty(Q)
        lo = c * step
        hi = min(P, lo + step)
        for p in range(lo, hi):
            for q in range(Q):
                row[q] = logw[q]
            for j in range(J):
                y = codes[p, j]
                if y >= 0:
                    for q in range(Q):
                        row[q] += logp[j, y, q]
            m = row[0]
            for q in range(1, Q):
                if row[q] > m:
                    m = row[q]
            s = 0.0
            for q in range(Q):
                row[q] = math.exp(row[q] - m)
                s += row[q]
            ll[c] += counts[p] * (m + math.log(s))
            scale = counts[p] / s
            for q in range(Q):
                row[q] *= scale
            for j in range(J):
                y = codes[p, j]
                if y >= 0:
                    for q in range(Q):
                        buf[c, j, y, q] += row[q]
    nexp = np.zeros((J, kmax, Q))
    for c in range(n_chunks):
        nexp += buf[c]
    return nexp, ll.sum()


@numba.njit(cache=True, parallel=True, error_model="numpy")
def eap_scores(codes, logp, logw, theta):
    """EAP mean and posterior SD of theta for every pattern, shapes (P,), (P,)."""
    P, J = codes.shape
    Q = logp.shape[2]
    mean = np.empty(P)
    sd = np.empty(P)
    for p in numba.prange(P):
        row = np.empty(Q)
        for q in range(Q):
            row[q] = logw[q]
        for j in range(J):
            y = codes[p, j]
            if y >= 0:
                for q in range(Q):
                    row[q] += logp[j, y, q]
        m = row[0]
        for q in range(1, Q):
            if row[q] > m:
                m = row[q]
        s = 0.0
        m1 = 0.0
        for q in range(Q):
            e = math.exp(row[q] - m)
            s += e
            m1 += e * theta[q]
        m1 /= s
        m2 = 0.0
        for q in range(Q):
            e = math.exp(row[q] - m)
            m2 += e * (theta[q] - m1) ** 2
        mean[p] = m1
        sd[p] = math.sqrt(m2 / s)
    return mean, sd


@numba.njit(cache=True, error_model="numpy")
def item_objective(a, d, kj, n, theta, prior):
    """Expected complete-data log-likelihood of one item with its gradient and Hessian.

    Parameters are x = (a, d_1..d_m), m = kj - 1. ``n`` (Kmax, Q) expected counts.
    ``prior`` = (use, mu_log_a, sd_log_a, mu_d, sd_d): log a ~ N, d ~ N when use > 0.
    Returns (f, g (m+1,), H (m+1, m+1), fisher (m+1, m+1)) where ``fisher`` is the
    (positive semi-definite) expected information, a fallback when -H is not positive definite.
    """
    m = kj - 1
    npar = m + 1
    Q = theta.shape[0]
    f = 0.0
    g = np.zeros(npar)
    H = np.zeros((npar, npar))
    F = np.zeros((npar, npar))
    s = np.empty(m + 2)   # P*_0..P*_kj
    w = np.empty(m + 2)   # s(1-s)
    v = np.empty(m + 2)   # w(1-2s)
    idx = np.empty(3, dtype=np.int64)   # parameters P_k depends on: a, d_k, d_{k+1}
    dp = np.empty(3)                    # their first derivatives
    dd = np.empty(3)                    # second derivatives d2P/dx_i^2 (i = 1, 2)
    ad = np.empty(3)                    # mixed d2P/(da dx_i)
    for q in range(Q):
        t = theta[q]
        tot = 0.0
        for k in range(kj):
            tot += n[k, q]
        if tot <= 0.0:
            continue
        s[0] = 1.0
        w[0] = 0.0
        v[0] = 0.0
        s[kj] = 0.0
        w[kj] = 0.0
        v[kj] = 0.0
        for k in range(1, kj):
            sk = _sigmoid(a * t + d[k - 1])
            s[k] = sk
            w[k] = sk * (1.0 - sk)
            v[k] = w[k] * (1.0 - 2.0 * sk)
        for k in range(kj):
            pk = max(_cat_prob(a, d, k, kj, t), _TINY)
            nk = n[k, q]
            # P_k = s_k - s_{k+1}: depends on a, d_k (param k, k >= 1), d_{k+1} (param k+1)
            cnt = 1
            idx[0] = 0
            dp[0] = t * (w[k] - w[k + 1])
            daa = t * t * (v[k] - v[k + 1])
            if k >= 1:
                idx[cnt] = k
                dp[cnt] = w[k]
                dd[cnt] = v[k]
                ad[cnt] = t * v[k]
                cnt += 1
            if k + 1 <= m:
                idx[cnt] = k + 1
                dp[cnt] = -w[k + 1]
                dd[cnt] = -v[k + 1]
                ad[cnt] = -t * v[k + 1]
                cnt += 1
            f += nk * math.log(pk)
            inv = 1.0 / pk
            for i in range(cnt):
                gi = dp[i] * inv
                g[idx[i]] += nk * gi
                for r in range(cnt):
                    gr = dp[r] * inv
                    H[idx[i], idx[r]] -= nk * gi * gr
                    F[idx[i], idx[r]] += tot * gi * dp[r]
            H[0, 0] += nk * daa * inv
            for i in range(1, cnt):
                H[idx[i], idx[i]] += nk * dd[i] * inv
                H[0, idx[i]] += nk * ad[i] * inv
                H[idx[i], 0] += nk * ad[i] * inv
    if prior[0] > 0.0:
        mu_la, sd_la, mu_d, sd_d = prior[1], prior[2], prior[3], prior[4]
        if a <= 0.0:
            f = -np.inf
        else:
            la = math.log(a)
            z = (la - mu_la) / sd_la
            f += -la - 0.5 * z * z
            g[0] += -1.0 / a - (la - mu_la) / (sd_la * sd_la * a)
            H[0, 0] += 1.0 / (a * a) - (1.0 - (la - mu_la)) / (sd_la * sd_la * a * a)
            F[0, 0] += 1.0 / (sd_la * sd_la * a * a)
        for k in range(m):
            f += -0.5 * ((d[k] - mu_d) / sd_d) ** 2
            g[k + 1] += -(d[k] - mu_d) / (sd_d * sd_d)
            H[k + 1, k + 1] += -1.0 / (sd_d * sd_d)
            F[k + 1, k + 1] += 1.0 / (sd_d * sd_d)
    return f, g, H, F


@numba.njit(cache=True, error_model="numpy")
def _item_value(a, d, kj, n, theta, prior):
    """Objective only (for the step-halving line search)."""
    Q = theta.shape[0]
    f = 0.0
    for q in range(Q):
        for k in range(kj):
            nk = n[k, q]
            if nk != 0.0:
                f += nk * math.log(max(_cat_prob(a, d, k, kj, theta[q]), _TINY))
    if prior[0] > 0.0:
        if a <= 0.0:
            return -np.inf
        la = math.log(a)
        z = (la - prior[1]) / prior[2]
        f += -la - 0.5 * z * z
        for k in range(kj - 1):
            f += -0.5 * ((d[k] - prior[3]) / prior[4]) ** 2
    return f


@numba.njit(cache=True, error_model="numpy")
def _cholesky_solve(A, b):
    """Solve A x = b for symmetric positive definite A; returns (x, ok)."""
    n = A.shape[0]
    L = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            s = A[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            if i == j:
                if s <= 1e-12 * max(1.0, abs(A[i, i])):
                    return b * 0.0, False
                L[i, i] = math.sqrt(s)
            else:
                L[i, j] = s / L[j, j]
    y = np.empty(n)
    for i in range(n):
        s = b[i]
        for k in range(i):
            s -= L[i, k] * y[k]
        y[i] = s / L[i, i]
    x = np.empty(n)
    for i in range(n - 1, -1, -1):
        s = y[i]
        for k in range(i + 1, n):
            s -= L[k, i] * x[k]
        x[i] = s / L[i, i]
    return x, True


@numba.njit(cache=True, error_model="numpy")
def _newton_item(a, d, kj, n, theta, prior, max_newton, tol):
    """Maximise one item's expected log-likelihood by damped Newton; returns (a, d, iters)."""
    m = kj - 1
    dnew = d.copy()
    an = a
    n_done = 0
    for _ in range(max_newton):
        n_done += 1
        f, g, H, F = item_objective(a, d, kj, n, theta, prior)
        negH = -H
        step, ok = _cholesky_solve(negH, g)
        if not ok:
            for i in range(m + 1):
                F[i, i] += 1e-8 + 1e-6 * F[i, i]
            step, ok = _cholesky_solve(F, g)
            if not ok:
                break
        smax = 0.0
        for i in range(m + 1):
            smax = max(smax, abs(step[i]))
        if smax < 1e-5:  # inside Newton's quadratic region: take the step, no line search
            ordered = True
            for k in range(1, m):
                if not d[k] + step[k + 1] < d[k - 1] + step[k]:
                    ordered = False
            if ordered:
                a = a + step[0]
                for k in range(m):
                    d[k] += step[k + 1]
                break
        lam = 1.0
        improved = False
        for _ in range(40):
            an = a + lam * step[0]
            valid = True
            for k in range(m):
                dnew[k] = d[k] + lam * step[k + 1]
                if k > 0 and not dnew[k] < dnew[k - 1]:
                    valid = False
            if valid:
                fn = _item_value(an, dnew, kj, n, theta, prior)
                if fn >= f - 1e-12 * abs(f):
                    improved = True
                    break
            lam *= 0.5
        if not improved:
            break
        mx = abs(an - a)
        for k in range(m):
            mx = max(mx, abs(dnew[k] - d[k]))
        a = an
        for k in range(m):
            d[k] = dnew[k]
        if mx < tol:
            break
    return a, n_done


@numba.njit(cache=True, parallel=True, error_model="numpy")
def mstep(a, d, kj, nexp, theta, prior, max_newton, tol):
    """Per-item Newton M-steps in parallel; updates ``a`` and ``d`` in place."""
    J = a.shape[0]
    for j in numba.prange(J):
        if kj[j] < 2:
            continue
        dj = d[j, : kj[j] - 1].copy()
        aj, _ = _newton_item(a[j], dj, kj[j], nexp[j], theta, prior, max_newton, tol)
        a[j] = aj
        for k in range(kj[j] - 1):
            d[j, k] = dj[k]


@numba.njit(cache=True, parallel=True, error_model="numpy")
def item_gradients(a, d, kj, nexp, theta, prior, out):
    """Gradient of every item's expected log-likelihood, written into ``out`` (J, Kmax)."""
    J = a.shape[0]
    for j in numba.prange(J):
        if kj[j] < 2:
            continue
        dj = d[j, : kj[j] - 1].copy()
        _, g, _, _ = item_objective(a[j], dj, kj[j], nexp[j], theta, prior)
        for i in range(kj[j]):
            out[j, i] = g[i]


@numba.njit(cache=True, parallel=True, error_model="numpy")
def pattern_loglik(codes, logp, logw):
    """Marginal log-likelihood log sum_q w_q prod_j P(y_pj | theta_q) of every pattern, (P,)."""
    P, J = codes.shape
    Q = logp.shape[2]
    out = np.empty(P)
    for p in numba.prange(P):
        row = np.empty(Q)
        for q in range(Q):
            row[q] = logw[q]
        for j in range(J):
            y = codes[p, j]
            if y >= 0:
                for q in range(Q):
                    row[q] += logp[j, y, q]
        m = row[0]
        for q in range(1, Q):
            if row[q] > m:
                m = row[q]
        s = 0.0
        for q in range(Q):
            s += math.exp(row[q] - m)
        out[p] = m + math.log(s)
    return out
