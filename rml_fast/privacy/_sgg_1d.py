"""Privacy-loss CDF of one-dimensional SGG members (``dim = 1``), for every shape ``k``.

``X = R U`` with ``U = +-1`` equiprobable and ``R`` generalized-gamma, so
``f(x) = f_R(|x|) / 2 ~ |x|^{k-1} exp(-(|x|/sigma)^p)``; for neighbours at distance
``Delta`` the loss is ``L(x) = phi(|x - Delta|) - phi(|x|)``, ``phi(s) = (s/sigma)^p -
(k - 1) ln s``. On each of ``x < 0``, ``0 < x < Delta`` and ``x > Delta`` the loss is a
smooth function of one variable; ``{L <= l}`` is a union of intervals whose ends are found
by bisection on monotone pieces, and each interval's mass is an incomplete-gamma difference.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from scipy import special

__all__ = ["loss_cdf_1d"]

_TAU_MIN = -700.0  # the pieces are parametrised by tau with e^tau down to e^-700
_GRID = 4001
_BISECT = 64


def _loss_cdf_1d_laplace_family(ell: np.ndarray, sigma: float, p: float, sens: float) -> np.ndarray:
    """P(L <= l) for dim = 1, k = 1: X symmetric with |X| ~ GenGamma, L = (|x-D|^p - |x|^p)/sigma^p.

    Three monotone pieces: x <= 0, 0 < x < D, x >= D; each level set is an interval found
    by bisection, whose mass comes from the regularized incomplete gamma function.
    """
    a = 1.0 / p
    top = (sens / sigma) ** p
    r_max = sigma * float(special.gammainccinv(a, 1e-300)) ** (1.0 / p) + 2 * sens

    def c_r(r: np.ndarray) -> np.ndarray:  # P(|X| <= r)
        return special.gammainc(a, (np.maximum(r, 0.0) / sigma) ** p)

    def s_r(r: np.ndarray) -> np.ndarray:  # P(|X| > r)
        return special.gammaincc(a, (np.maximum(r, 0.0) / sigma) ** p)

    def bisect(fn: Any, lo: float, hi: float, increasing: bool) -> np.ndarray:
        # threshold t in [lo, hi] with fn(t) = ell for a monotone fn
        a_ = np.full(ell.shape, lo)
        b_ = np.full(ell.shape, hi)
        for _ in range(200):
            mid = 0.5 * (a_ + b_)
            above = fn(mid) > ell
            if increasing:
                b_, a_ = np.where(above, mid, b_), np.where(above, a_, mid)
            else:
                a_, b_ = np.where(above, mid, a_), np.where(above, b_, mid)
        return 0.5 * (a_ + b_)

    out = np.zeros(ell.shape)
    # Piece A: x = -r <= 0, L = g(r) = ((r + D)^p - r^p)/sigma^p.
    g = lambda r: ((r + sens) ** p - r**p) / sigma**p  # noqa: E731
    if p > 1:
        r_star = bisect(g, 0.0, r_max, increasing=True)
        out += np.where(ell >= top, 0.5 * c_r(r_star), 0.0)
    elif p < 1:
        r_star = bisect(g, 0.0, r_max, increasing=False)
        out += np.where(ell >= top, 0.5, np.where(ell > 0, 0.5 * s_r(r_star), 0.0))
    else:
        out += np.where(ell >= top, 0.5, 0.0)
    # Piece B: 0 < x < D, L = ((D - x)^p - x^p)/sigma^p decreasing from top to -top.
    gb = lambda x: ((sens - x) ** p - x**p) / sigma**p  # noqa: E731
    x_star = bisect(gb, 0.0, sens, increasing=False)
    mass_b = 0.5 * (c_r(np.full(ell.shape, sens)) - c_r(x_star))
    out += np.where(ell >= top, 0.5 * c_r(np.array(sens)), np.where(ell > -top, mass_b, 0.0))
    # Piece C: x >= D, L = ((x - D)^p - x^p)/sigma^p.
    gc = lambda x: ((x - sens) ** p - x**p) / sigma**p  # noqa: E731
    tail_c = 0.5 * s_r(np.array(sens))
    if p > 1:  # decreasing from -top to -inf: set is x >= x*
        x_star = bisect(gc, sens, r_max, increasing=False)
        out += np.where(ell >= -top, tail_c, 0.5 * s_r(x_star))
    elif p < 1:  # increasing from -top to 0: set is [D, x*]
        x_star = bisect(gc, sens, r_max, increasing=True)
        out += np.where(ell >= 0, tail_c, np.where(ell >= -top, 0.5 * (s_r(np.array(sens)) - s_r(x_star)), 0.0))
    else:
        out += np.where(ell >= -top, tail_c, 0.0)
    return np.clip(out, 0.0, 1.0)




def loss_cdf_1d(ell: np.ndarray, sigma: float, k: float, p: float, sens: float) -> np.ndarray:
    """P(L <= l) at each l for the one-dimensional member SGG(sigma, k, p).

    ``k = 1`` uses the closed three-piece form (``_loss_cdf_1d_laplace_family``); other
    shapes the general monotone-piece inversion (:func:`_loss_cdf_1d_general`).
    """
    if k == 1.0:
        return _loss_cdf_1d_laplace_family(ell, sigma, p, sens)
    return _loss_cdf_1d_general(ell, sigma, k, p, sens)


def _radius_mass(x1: np.ndarray, x2: np.ndarray, sigma: float, a: float, p: float) -> np.ndarray:
    """P(x1 <= R <= x2) for R = sigma G^{1/p}, G ~ Gamma(a), without cancellation in either tail."""
    g1, g2 = (np.maximum(x1, 0.0) / sigma) ** p, (np.maximum(x2, 0.0) / sigma) ** p
    lower = special.gammainc(a, g2) - special.gammainc(a, g1)
    upper = special.gammaincc(a, g1) - special.gammaincc(a, g2)
    return np.maximum(np.where(g1 > a, upper, lower), 0.0)


def _loss_cdf_1d_general(
    ell: np.ndarray, sigma: float, k: float, p: float, sens: float
) -> np.ndarray:
    """P(L <= l) for dim = 1 and any k > 0 (pieces x < 0, 0 < x < Delta, x > Delta).

    Each piece is parametrised by tau: x = -e^tau (A), x = Delta / (1 + e^-tau) (B, which
    keeps both x and Delta - x accurate), x = Delta + e^tau (C). The loss along tau is
    tabulated on a grid, cut into monotone runs at its local extrema (refined by golden
    section), and on each run ``{L <= l}`` is one sub-interval whose end is found by
    bisection in tau for all l at once. The radius mass below e^-700 and above the
    (1 - 1e-300)-quantile is left out, which lowers the CDF (a pessimistic direction).
    """
    ell = np.asarray(ell, dtype=np.float64)
    a = k / p
    c = k - 1.0
    log_sigma = math.log(sigma)
    r_max = sigma * float(special.gammainccinv(a, 1e-300)) ** (1.0 / p) + 2.0 * sens
    tau_max = math.log(r_max)

    def phi_log(log_s: Any) -> Any:  # phi(s) from ln s
        return np.exp(p * (log_s - log_sigma)) - c * log_s

    def log1pexp(t: Any) -> Any:
        return np.logaddexp(0.0, t)

    ld = math.log(sens)
    # piece -> (loss(tau), x-range of tau (as |x| interval ends), tau range)
    pieces = [
        # A: x = -s, s = e^tau: L = phi(s + D) - phi(s); |x| = s.
        (lambda t: phi_log(np.logaddexp(t, ld)) - phi_log(t),
         lambda t: np.exp(t), (_TAU_MIN, tau_max)),
        # B: x = D / (1 + e^-tau), D - x = D / (1 + e^tau): L = phi(D - x) - phi(x).
        (lambda t: phi_log(ld - log1pexp(t)) - phi_log(ld - log1pexp(-t)),
         lambda t: sens / (1.0 + np.exp(-t)), (_TAU_MIN, -_TAU_MIN)),
        # C: x = D + s, s = e^tau: L = phi(s) - phi(D + s); |x| = D + s.
        (lambda t: phi_log(t) - phi_log(np.logaddexp(t, ld)),
         lambda t: sens + np.exp(t), (_TAU_MIN, tau_max)),
    ]
    out = np.zeros(ell.shape)
    for loss, x_of, (t_lo, t_hi) in pieces:
        for ta, tb in _monotone_runs(loss, t_lo, t_hi):
            ga, gb = float(loss(np.array(ta))), float(loss(np.array(tb)))
            increasing = gb >= ga
            # the end of {L <= l} inside [ta, tb]: bisection on tau for every l at once
            lo = np.full(ell.shape, ta)
            hi = np.full(ell.shape, tb)
            for _ in range(_BISECT):
                mid = 0.5 * (lo + hi)
                below = loss(mid) <= ell
                if increasing:
                    lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
                else:
                    lo, hi = np.where(below, lo, mid), np.where(below, mid, hi)
            xa, xb = x_of(np.array(ta)), x_of(np.array(tb))
            if increasing:  # {L <= l} = [ta, t*]: t* = lo (the last point known to satisfy)
                t_end = np.where(ell >= gb, tb, lo)
                mass = _radius_mass(np.full(ell.shape, xa), x_of(t_end), sigma, a, p)
                mass = np.where(ell < ga, 0.0, mass)
            else:  # {L <= l} = [t*, tb]: t* = hi
                t_start = np.where(ell >= ga, ta, hi)
                mass = _radius_mass(x_of(t_start), np.full(ell.shape, xb), sigma, a, p)
                mass = np.where(ell < gb, 0.0, mass)
            out += 0.5 * mass
    return np.clip(out, 0.0, 1.0)


def _monotone_runs(loss: Any, t_lo: float, t_hi: float) -> list[tuple[float, float]]:
    """Split [t_lo, t_hi] at the local extrema of loss (grid scan, golden-section refinement)."""
    t = np.linspace(t_lo, t_hi, _GRID)
    g = loss(t)
    d = np.sign(np.diff(g))
    cuts = [t_lo]
    for i in np.flatnonzero(d[:-1] * d[1:] < 0):
        lo, hi = float(t[i]), float(t[i + 2])
        maximum = d[i] > 0
        gr = (math.sqrt(5.0) - 1.0) / 2.0
        for _ in range(80):
            x1, x2 = hi - gr * (hi - lo), lo + gr * (hi - lo)
            f1, f2 = float(loss(np.array(x1))), float(loss(np.array(x2)))
            if (f1 > f2) == maximum:
                hi = x2
            else:
                lo = x1
        cuts.append(0.5 * (lo + hi))
    cuts.append(t_hi)
    return list(itertools.pairwise(cuts))
