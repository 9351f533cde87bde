"""Dual solvers of the entropy-regularised fair Bayes problem (private; see ``multiclass``).

Constraint structure used throughout: every constraint ``c`` is ``phi_c(x) = e_{j(c)} r_{m(c)}(x)``
with a real *feature* matrix ``R`` of shape ``(n, M)`` and a boolean ``mask`` of shape ``(K, M)``
naming the active ``(j, m)`` pairs. The multipliers are a ``(K, M)`` matrix ``Lam`` (zero off the
mask), so that ``(Phi(x_i) lambda)_k = (R_i @ Lam.T)_k`` and every dual evaluation is one
``(n, M) x (M, K)`` product plus a row-wise log-sum-exp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numba
import numpy as np
from scipy.optimize import minimize


@dataclass
class DualResult:
    lam: np.ndarray                    # (K, M)
    n_iter: int
    converged: bool
    history: list[float] = field(default_factory=list)   # dual objective per accepted iterate


@numba.njit(cache=True, nogil=True, fastmath=True)
def _softmax_nb(eta, R, lam, tau, out):  # pragma: no cover - compiled
    n, K = eta.shape
    M = R.shape[1]
    for i in range(n):
        zmax = -np.inf
        for k in range(K):
            acc = eta[i, k]
            for m in range(M):
                acc -= R[i, m] * lam[k, m]
            acc /= tau
            out[i, k] = acc
            if acc > zmax:
                zmax = acc
        s = 0.0
        for k in range(K):
            e = np.exp(out[i, k] - zmax)
            out[i, k] = e
            s += e
        for k in range(K):
            out[i, k] /= s


@numba.njit(cache=True, nogil=True, fastmath=True)
def _smooth_nb(eta, R, w, lam, tau, want_grad, grad):  # pragma: no cover - compiled
    n, K = eta.shape
    M = R.shape[1]
    z = np.empty(K)
    val = 0.0
    if want_grad:
        grad[:, :] = 0.0
    for i in range(n):
        zmax = -np.inf
        for k in range(K):
            acc = eta[i, k]
            for m in range(M):
                acc -= R[i, m] * lam[k, m]
            acc /= tau
            z[k] = acc
            if acc > zmax:
                zmax = acc
        s = 0.0
        for k in range(K):
            z[k] = np.exp(z[k] - zmax)
            s += z[k]
        val += w[i] * (np.log(s) + zmax)
        if want_grad:
            for k in range(K):
                hk = w[i] * z[k] / s
                for m in range(M):
                    grad[k, m] -= hk * R[i, m]
    return tau * val


def softmax_scores(eta: np.ndarray, R: np.ndarray, lam: np.ndarray, tau: float) -> np.ndarray:
    """``softmax((eta - R @ lam.T) / tau)`` row-wise, shape ``(n, K)``."""
    out = np.empty(eta.shape, dtype=np.float64)
    _softmax_nb(np.ascontiguousarray(eta, dtype=np.float64),
                np.ascontiguousarray(R, dtype=np.float64),
                np.ascontiguousarray(lam, dtype=np.float64), float(tau), out)
    return out


def _smooth(eta, R, w, lam, tau, grad=True):
    """``tau * sum_i w_i lse((eta_i - R_i lam^T)/tau)`` and its gradient in ``lam`` (K, M)."""
    g = np.empty(lam.shape)
    val = _smooth_nb(eta, R, w, np.ascontiguousarray(lam), float(tau), grad, g)
    return val, (g if grad else None)


def _soft(x, t):
    return np.sign(x) * np.maximum(np.abs(x) - t, 0.0)


def _prep(eta, R, w):
    return (np.ascontiguousarray(eta, dtype=np.float64), np.ascontiguousarray(R, dtype=np.float64),
            np.ascontiguousarray(w, dtype=np.float64))


def fista_dual(eta, R, w, mask, tau, xi, *, lam0=None, max_iter=2000, tol=1e-6) -> DualResult:
    """Monotone FISTA with function-value restart and backtracking on the dual.

    ``D(Lam) = tau sum_i w_i lse((eta_i - R_i Lam^T)/tau) + xi ||Lam||_1`` over ``Lam`` supported on
    ``mask``. The accepted iterates' objective is non-increasing (a step that would increase it
    is rejected and the momentum restarted). Stops when the proximal-gradient mapping
    ``L (y - prox(y - grad/L))`` -- the KKT residual, in disparity units -- is below ``tol``
    in the max-norm.
    """
    eta, R, w = _prep(eta, R, w)
    K, M = mask.shape
    maskf = mask.astype(float)
    x = np.zeros((K, M)) if lam0 is None else lam0 * maskf
    fx, _ = _smooth(eta, R, w, x, tau, grad=False)
    Fx = fx + xi * np.abs(x).sum()
    L = max(float(w @ (R * R).sum(axis=1)) / tau, 1e-12)   # mean-curvature start, backtracked
    y, t = x.copy(), 1.0
    history = [Fx]
    converged = False
    it = 0
    while it < max_iter:
        it += 1
        fy, gy = _smooth(eta, R, w, y, tau)
        gy *= maskf
        while True:
            z = _soft(y - gy / L, xi / L) * maskf
            d = z - y
            fz, _ = _smooth(eta, R, w, z, tau, grad=False)
            if fz <= fy + float((gy * d).sum()) + 0.5 * L * float((d * d).sum()) + 1e-15 * abs(fy):
                break
            L *= 2.0
        residual = L * float(np.abs(d).max())
        Fz = fz + xi * np.abs(z).sum()
        if Fz <= Fx:
            t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            y = z + ((t - 1.0) / t_new) * (z - x)
            x, Fx, t = z, Fz, t_new
            history.append(Fx)
        else:                                  # restart: momentum off, retry from x
            y, t = x.copy(), 1.0
        if residual < tol:
            converged = True
            break
        L *= 0.9                               # let the step grow again
    return DualResult(x, it, converged, history)


def lbfgs_dual(eta, R, w, mask, tau, xi, *, lam0=None, max_iter=2000, tol=1e-6) -> DualResult:
    """The same dual by L-BFGS-B on the split ``Lam = P - N`` with ``P, N >= 0``."""
    eta, R, w = _prep(eta, R, w)
    idx = np.flatnonzero(mask.ravel())
    C = idx.size
    K, M = mask.shape
    history: list[float] = []

    def unpack(v):
        lam = np.zeros(K * M)
        lam[idx] = v[:C] - v[C:]
        return lam.reshape(K, M)

    def fun(v):
        f, g = _smooth(eta, R, w, unpack(v), tau)
        g = g.ravel()[idx]
        return f + xi * v.sum(), np.concatenate([g + xi, -g + xi])

    if lam0 is None:
        v0 = np.zeros(2 * C)
    else:
        l0 = lam0.ravel()[idx]
        v0 = np.concatenate([np.maximum(l0, 0), np.maximum(-l0, 0)])
    res = minimize(fun, v0, jac=True, method="L-BFGS-B", bounds=[(0, None)] * (2 * C),
                   callback=lambda v: history.append(fun(v)[0]),
                   options={"maxiter": max_iter, "gtol": tol * 1e-2, "ftol": 1e-15,
                            "maxcor": 20})
    lam = unpack(res.x)
    _, g = _smooth(eta, R, w, lam, tau)        # g = -E[Phi^T h]: the constraint values, negated
    kkt = float(np.abs(lam - _soft(lam - g, xi) * mask).max())   # unit-step prox-grad mapping
    return DualResult(lam, int(res.nit), bool(kkt <= tol), history)
