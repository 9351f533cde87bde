"""Pessimistic discretisation of privacy-loss laws given by their CDFs.

Bucketing (round the loss up to the lattice) and connect-the-dots (Doroshenko et al.,
arXiv 2207.04380), for symmetric pairs, Poisson-subsampled pairs (add / remove) and the
Gaussian and Laplace loss laws. Part of :mod:`rml_fast.privacy.pld`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special

from rml_fast.privacy._pld_lattice import _Pmf, _readonly, _trim

_MAX_BUCKETS = 50_000_000


class BucketLimitError(ValueError):
    """The privacy-loss range needs more than ``_MAX_BUCKETS`` lattice buckets."""

CdfFn = Callable[[np.ndarray], np.ndarray]
PairFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def _find_bound(fn: CdfFn, target: float, increasing: bool, start: float) -> float:
    """Tail bound of a monotone loss CDF (or survival function) ``fn``.

    increasing (a CDF): a point x with fn(x) <= target, as large as resolution allows;
    decreasing (a survival function): a point x with fn(x) <= target, as small as resolution
    allows. The bracket is grown geometrically, then narrowed by vectorised multisection
    (64 points per round), so a call costs a handful of vectorised evaluations.
    """
    sign = -1.0 if increasing else 1.0  # direction in which fn falls below target

    def ok(x: np.ndarray) -> np.ndarray:
        return np.asarray(fn(x)) <= target

    # Grow the bracket: outer end satisfies ok, inner end does not (or is the start).
    steps = start + sign * np.geomspace(1e-3, 1e8, 45)
    okv = ok(steps)
    if not okv.any():
        raise ValueError("could not bracket the tail of the privacy loss")
    j = int(np.argmax(okv))
    outer = float(steps[j])
    inner = start if j == 0 else float(steps[j - 1])
    if j == 0 and bool(ok(np.array([start]))[0]):
        # start already in the tail: walk inwards until it is not
        back = start - sign * np.geomspace(1e-3, 1e8, 45)
        okb = ok(back)
        if okb.all():
            return float(back[-1])
        jb = int(np.argmin(okb))
        inner, outer = float(back[jb]), (start if jb == 0 else float(back[jb - 1]))
    for _ in range(3):
        pts = np.linspace(inner, outer, 65)
        okp = ok(pts)
        k = int(np.argmax(okp))  # first point (from inner) that satisfies
        outer = float(pts[k])
        inner = float(pts[max(k - 1, 0)])
        if abs(outer - inner) < 1e-9 * max(1.0, abs(outer)):
            break
    return outer


def _pmf_from_cdf(
    cdf: CdfFn,
    sf: CdfFn | None,
    h: float,
    tail: float,
    center: float = 0.0,
    bounds: tuple[float, float] | None = None,
    upper_tail: float | None = None,
    sf_q: CdfFn | None = None,
    estimator: str = "bucket",
    sf_pair: PairFn | None = None,
    bound_cdf: CdfFn | None = None,
    delta_fn: CdfFn | None = None,
) -> _Pmf:
    """Pessimistic bucketing of a loss law given by its CDF (and optionally survival fn).

    ``upper_tail`` (default ``tail``) is the mass allowed above the top bucket; it must be
    above the absolute accuracy of ``sf`` (e.g. ~1e-15 for a quadrature CDF).
    ``sf_pair(grid)``, if given, returns ``(sf(grid), sf_q(grid))`` in one pass (for
    connect-the-dots). ``bound_cdf``, if given, is a cheaper approximation of ``cdf`` used
    only to place the truncation bounds: any bounds are pessimistic (mass below the lowest
    bucket moves up onto it; the mass above the top bucket, computed with the accurate
    ``sf``, goes to +inf), so an approximate locator changes tightness, never validity.
    ``delta_fn(grid)``, if given, is the hockey-stick curve ``delta(eps)`` evaluated stably
    (no ``e^eps * sf_q`` overflow at large losses); connect-the-dots then uses it.
    """
    sf_fn: CdfFn = sf if sf is not None else (lambda x: 1.0 - cdf(x))
    if bounds is None:
        loc_cdf = cdf if bound_cdf is None else bound_cdf
        loc_sf = sf_fn if bound_cdf is None else (lambda x: 1.0 - bound_cdf(x))
        lo = _find_bound(loc_cdf, tail, increasing=True, start=center)
        hi = _find_bound(loc_sf, tail if upper_tail is None else upper_tail, increasing=False, start=center)
    else:
        lo, hi = bounds
    i_lo = math.floor(lo / h)
    i_hi = max(math.ceil(hi / h), i_lo + 1)
    if i_hi - i_lo + 1 > _MAX_BUCKETS:
        raise BucketLimitError(
            f"the privacy-loss range [{lo:.4g}, {hi:.4g}] needs {i_hi - i_lo + 1} buckets of "
            f"width {h:g}: use a larger value_discretization_interval"
        )
    grid = np.arange(i_lo, i_hi + 1, dtype=np.float64) * h
    if estimator == "connect_dots" and delta_fn is not None:
        return _connect_dots_delta(np.asarray(delta_fn(grid), dtype=np.float64), grid, i_lo, h)
    if estimator == "connect_dots" and sf_pair is not None:
        sp, sq = sf_pair(grid)
        return _connect_dots(lambda _: sp, lambda _: sq, grid, i_lo, h)
    if estimator == "connect_dots" and sf_q is not None:
        return _connect_dots(sf_fn, sf_q, grid, i_lo, h)
    f = np.clip(cdf(grid), 0.0, 1.0)
    pmf = np.diff(f, prepend=0.0)
    if sf is not None:
        s = np.clip(sf(grid), 0.0, 1.0)
        upper = f > 0.5  # use survival differences in the upper half: no cancellation
        ds = -np.diff(s, prepend=1.0)
        pmf = np.where(upper, ds, pmf)
        inf_mass = float(s[-1])
    else:
        inf_mass = float(max(1.0 - f[-1], 0.0))
    np.maximum(pmf, 0.0, out=pmf)
    p, lower = _trim(pmf, i_lo)
    return _Pmf(_readonly(p), lower, h, inf_mass)


def _connect_dots(sf_p: CdfFn, sf_q: CdfFn, grid: np.ndarray, i_lo: int, h: float) -> _Pmf:
    """Connect-the-dots PLD (Doroshenko et al., arXiv 2207.04380) from the survival functions.

    ``delta(eps_i) = P_A(L > eps_i) - e^{eps_i} P_B(L > eps_i)``. Where ``e^{eps_i}`` or the
    product overflows (losses beyond ~709 nats), the upper bound ``P_A(L > eps_i)`` is used
    instead (dropping a non-negative term): connect-the-dots through upper bounds of the
    curve still dominates it (see :func:`_connect_dots_delta`).
    """
    p = np.asarray(sf_p(grid), dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        prod = np.exp(grid) * np.asarray(sf_q(grid), dtype=np.float64)
        delta = np.where(np.isfinite(prod), p - prod, p)
    return _connect_dots_delta(delta, grid, i_lo, h)


def _connect_dots_delta(delta: np.ndarray, grid: np.ndarray, i_lo: int, h: float) -> _Pmf:
    """Connect-the-dots PLD from ``delta(eps_i)`` (or upper bounds of it) on the grid.

    In ``x = e^eps`` the hockey-stick curve ``D(x) = E_P[(1 - x e^{-L})_+]`` is convex and
    decreasing with ``D(0) = 1``; its piecewise-linear interpolation through
    ``(0, 1), (x_i, delta(eps_i))`` and constant ``delta(eps_max)`` beyond lies above it, and
    is exactly the curve of the discrete PLD with ``p_i e^{-eps_i}`` = the slope change at
    ``x_i`` and ``p_inf = delta(eps_max)``. So the result dominates the mechanism (a
    pessimistic estimate) while rounding far less than bucketing. Values above the exact
    curve keep this true (each chord through higher points lies higher).

    Computed without any ``e^{eps_i}`` (which overflows past ~709 nats): with the slopes
    ``T_j`` of the chords on ``[x_{j-1}, x_j]`` scaled as ``M_j = T_j x_j (1 - e^{-h})``,
    ``M_j = delta_{j-1} - delta_j`` (``M_0 = (1 - delta_0)(1 - e^{-h})``) and
    ``p_i = (M_i - e^{-h} M_{i+1}) / (1 - e^{-h})``.
    """
    delta = np.nan_to_num(np.asarray(delta, dtype=np.float64), nan=1.0)
    delta = np.clip(delta, -np.expm1(np.minimum(grid, 0.0)), 1.0)
    delta = np.maximum(delta, 0.0)
    n = grid.size
    one_minus = -math.expm1(-h)  # 1 - e^{-h}
    m = np.empty(n + 1)
    m[0] = (1.0 - delta[0]) * one_minus
    m[1:-1] = delta[:-1] - delta[1:]
    m[-1] = 0.0
    np.maximum(m, 0.0, out=m)
    # D is anchored at the top (D = p_inf beyond eps_max), so D(x_j) = p_inf + sum_{i>j} T_i dx_i.
    # Round-off (or quadrature noise) can make the T_j non-monotone; raising each T_j to the
    # maximum of those to its right restores convexity and only raises D (pessimistic). In the
    # scaled slopes: M_j <- max_{k>=j} M_k e^{-(k-j) h}, done in log space (no overflow).
    # The local condition M_j >= e^{-h} M_{j+1} everywhere implies the global one.
    if (m[:-1] < math.exp(-h) * m[1:]).any():
        k = np.arange(n + 1, dtype=np.float64) * h
        with np.errstate(divide="ignore"):
            w = np.log(m) - k
        wmax = np.maximum.accumulate(w[::-1])[::-1]
        raise_ = wmax > w
        m = np.where(raise_, np.exp(wmax + k), m)
    pmf = np.maximum((m[:-1] - math.exp(-h) * m[1:]) / one_minus, 0.0)
    p, lower = _trim(pmf, i_lo)
    return _Pmf(_readonly(p), lower, h, float(delta[-1]))


@dataclass(frozen=True)
class _LossModel:
    """CDFs of L = ln dA/dB under A and under B (right-continuous ``cdf``, strict ``sf``)."""

    cdf_a: CdfFn
    sf_a: CdfFn
    cdf_b: CdfFn
    sf_b: CdfFn
    center: float = 0.0
    sf_pair: PairFn | None = None  # grid -> (P_A(L > l), P_B(L > l)) in one pass
    bound_cdf: CdfFn | None = None  # cheap cdf_a to place the truncation bounds
    # Hockey-stick curves eps -> H_{e^eps}(A || B) and H_{e^eps}(B || A), evaluated stably for
    # every real eps (closed forms, no e^eps * tiny products); None: use the survival functions.
    delta_ab: CdfFn | None = None
    delta_ba: CdfFn | None = None


def _symmetric_model(
    cdf_a: CdfFn,
    sf_a: CdfFn,
    center: float = 0.0,
    *,
    continuous: bool = False,
    h: float | None = None,
    bound_cdf: CdfFn | None = None,
) -> _LossModel:
    """Model of a pair swapped by a reflection: L under B has the law of -L under A.

    With ``continuous=True`` (L under A has no atoms, so ``P_A(L < -x) = P_A(L <= -x)``) and
    the lattice step ``h``, connect-the-dots needs ``cdf_a`` only once on the union of the
    grid and its mirror image (``sf_pair``) instead of twice.
    """
    sf_pair = None
    if continuous and h is not None:
        step = float(h)

        def sf_pair(grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            idx = np.rint(grid / step).astype(np.int64)
            lo, hi = int(min(idx[0], -idx[-1])), int(max(idx[-1], -idx[0]))
            f = np.asarray(cdf_a(np.arange(lo, hi + 1, dtype=np.float64) * step))
            return 1.0 - f[idx - lo], f[-idx - lo]

    return _LossModel(
        cdf_a=cdf_a,
        sf_a=sf_a,
        cdf_b=lambda x: sf_a(-x),  # P_A(L > -x) <= P_B(L <= x): pessimistic
        sf_b=lambda x: cdf_a(np.nextafter(-np.asarray(x, dtype=np.float64), -np.inf)),  # P_A(L < -x)
        center=center,
        sf_pair=sf_pair,
        bound_cdf=bound_cdf,
    )


def _directions(
    model: _LossModel,
    h: float,
    q: float,
    relation: str,
    tail: float,
    upper_tail: float | None = None,
    estimator: str = "bucket",
) -> tuple[_Pmf, ...]:
    kw: dict[str, Any] = {"upper_tail": upper_tail, "estimator": estimator}
    if q == 1.0:
        return (
            _pmf_from_cdf(
                model.cdf_a, model.sf_a, h, tail, model.center, sf_q=model.sf_b,
                sf_pair=model.sf_pair, bound_cdf=model.bound_cdf, delta_fn=model.delta_ab, **kw,
            ),
        )
    logq = math.log(q)
    out = []
    delta_r = delta_ad = None
    if model.delta_ab is not None and model.delta_ba is not None:
        delta_r = _subsampled_remove_delta(model.delta_ab, q)
        delta_ad = _subsampled_add_delta(model.delta_ba, q)
    if relation in ("add_or_remove", "remove"):
        # Remove: pair (qA + (1-q)B, B); L' = ln(q e^L + 1 - q) = y  <=>  L = g(y).
        def g(y: np.ndarray) -> np.ndarray:
            return _log_expm1_plus(y, q) - logq

        floor = math.log1p(-q)

        def cdf_r(y: np.ndarray) -> np.ndarray:
            x = g(y)
            val = q * model.cdf_a(x) + (1 - q) * model.cdf_b(x)
            return np.where(y > floor, np.nan_to_num(val, nan=0.0), 0.0)

        def sf_r(y: np.ndarray) -> np.ndarray:
            x = g(y)
            val = q * model.sf_a(x) + (1 - q) * model.sf_b(x)
            return np.where(y > floor, np.nan_to_num(val, nan=1.0), 1.0)

        def sfq_r(y: np.ndarray) -> np.ndarray:  # P_B(L' > y)
            return np.where(y > floor, np.nan_to_num(model.sf_b(g(y)), nan=1.0), 1.0)

        out.append(
            _pmf_from_cdf(cdf_r, sf_r, h, tail, center=0.0, sf_q=sfq_r, delta_fn=delta_r, **kw)
        )
    if relation in ("add_or_remove", "add"):
        # Add: pair (B, qA + (1-q)B); L' = -ln(q e^L + 1 - q) = y  <=>  L = k(y).
        def k(y: np.ndarray) -> np.ndarray:
            return _log_expm1_plus(-np.asarray(y, dtype=np.float64), q) - logq

        ceil_ = -math.log1p(-q)

        def cdf_ad(y: np.ndarray) -> np.ndarray:
            x = k(y)
            return np.where(y < ceil_, np.nan_to_num(model.sf_b(x), nan=1.0), 1.0)

        def sf_ad(y: np.ndarray) -> np.ndarray:
            x = k(y)
            return np.where(y < ceil_, np.nan_to_num(model.cdf_b(x), nan=0.0), 0.0)

        def sfq_ad(y: np.ndarray) -> np.ndarray:  # P_{qA+(1-q)B}(L' > y)
            x = k(y)
            val = q * model.cdf_a(x) + (1 - q) * model.cdf_b(x)
            return np.where(y < ceil_, np.nan_to_num(val, nan=0.0), 0.0)

        out.append(
            _pmf_from_cdf(cdf_ad, sf_ad, h, tail, center=0.0, sf_q=sfq_ad, delta_fn=delta_ad, **kw)
        )
    return tuple(out)


def _log_expm1_plus(y: np.ndarray, q: float) -> np.ndarray:
    """``ln(e^y - 1 + q)`` without overflow (``-inf`` where ``e^y <= 1 - q``, NaN for NaN)."""
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        small = np.log(np.expm1(np.minimum(y, 1.0)) + q)
        big = y + np.log1p(-(1.0 - q) * np.exp(-np.maximum(y, 1.0)))
    return np.where(y > 1.0, big, small)


def _subsampled_remove_delta(delta_ab: CdfFn, q: float) -> CdfFn:
    """Hockey stick of the remove pair ``(qA + (1-q)B, B)`` from that of ``(A, B)``.

    ``H_{e^eps}(qA + (1-q)B || B) = q H_{e^eps'}(A || B)``, ``e^eps' = 1 + (e^eps - 1)/q``,
    and ``1 - e^eps`` where ``e^eps <= 1 - q`` (the whole space is the worst event).
    """
    log1mq = math.log1p(-q)
    logq = math.log(q)

    def fn(eps: np.ndarray) -> np.ndarray:
        eps = np.asarray(eps, dtype=np.float64)
        inner = _log_expm1_plus(eps, q) - logq  # eps'
        with np.errstate(invalid="ignore"):
            val = q * np.asarray(delta_ab(np.where(eps > log1mq, inner, 0.0)))
        return np.where(eps > log1mq, val, -np.expm1(np.minimum(eps, 0.0)))

    return fn


def _subsampled_add_delta(delta_ba: CdfFn, q: float) -> CdfFn:
    """Hockey stick of the add pair ``(B, qA + (1-q)B)`` from that of ``(B, A)``.

    With ``c = 1 - (1-q) e^eps``: 0 where ``c <= 0``, else ``c H_{e^eps''}(B || A)`` with
    ``e^eps'' = q e^eps / c``.
    """
    log1mq = math.log1p(-q)
    logq = math.log(q)

    def fn(eps: np.ndarray) -> np.ndarray:
        eps = np.asarray(eps, dtype=np.float64)
        ok = eps + log1mq < 0.0
        x = np.where(ok, eps + log1mq, -1.0)
        c = -np.expm1(x)
        inner = eps + logq - np.log(c)
        val = c * np.asarray(delta_ba(np.where(ok, inner, 0.0)))
        return np.where(ok, val, 0.0)

    return fn


def _gaussian_hockey(eps: np.ndarray, mu: float) -> np.ndarray:
    """Hockey stick ``delta(eps)`` of ``L ~ N(mu, 2 mu)`` (the Gaussian mechanism with
    ``mu = (sensitivity/std)^2 / 2``; Balle & Wang 2018), for every real ``eps``.

    ``delta = Phi(-u) - e^eps Phi(-v)``, ``u = (eps - mu)/s``, ``v = (eps + mu)/s``,
    ``s = sqrt(2 mu)``. Since ``e^eps e^{-v^2/2} = e^{-u^2/2}``, for ``u >= 0`` it equals
    ``e^{-u^2/2} (erfcx(u/sqrt2) - erfcx(v/sqrt2)) / 2`` (no exponential overflow and no
    cancellation between tiny exponentials; accurate up to ``eps ~ 1e300``); for ``u < 0``
    ``Phi(-u) >= 1/2`` and the second term is taken through ``log_ndtr``.
    """
    eps = np.asarray(eps, dtype=np.float64)
    flat = eps.ravel()
    s = math.sqrt(2.0 * mu)
    r2 = math.sqrt(2.0)
    out = np.empty_like(flat)
    pos = flat >= mu
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        e = flat[pos]
        u, v = (e - mu) / s, (e + mu) / s
        out[pos] = 0.5 * np.exp(-0.5 * u * u) * (special.erfcx(u / r2) - special.erfcx(v / r2))
        neg = ~pos
        e = flat[neg]
        u, v = (e - mu) / s, (e + mu) / s
        # e^eps Phi(-v): plainly where neither factor leaves the float range, else through
        # eps + ln Phi(-v) <= ln Phi(-u) <= 0 (no overflow)
        plain = (e <= 700.0) & (v <= 30.0)
        second = np.empty_like(e)
        second[plain] = np.exp(e[plain]) * special.ndtr(-v[plain])
        far = ~plain
        second[far] = np.exp(e[far] + special.log_ndtr(-v[far]))
        out[neg] = special.ndtr(-u) - second
    out = out.reshape(eps.shape)
    return np.clip(out, np.maximum(-np.expm1(np.minimum(eps, 0.0)), 0.0), 1.0)


def _gaussian_model(std: float, sensitivity: float) -> _LossModel:
    mu = sensitivity**2 / (2.0 * std**2)  # L ~ N(mu, 2 mu) under A, N(-mu, 2 mu) under B
    s = math.sqrt(2.0 * mu)

    def hockey(eps: np.ndarray) -> np.ndarray:
        return _gaussian_hockey(eps, mu)

    return _LossModel(
        cdf_a=lambda x: special.ndtr((x - mu) / s),
        sf_a=lambda x: special.ndtr((mu - x) / s),
        cdf_b=lambda x: special.ndtr((x + mu) / s),
        sf_b=lambda x: special.ndtr((-mu - x) / s),
        center=mu,
        delta_ab=hockey,
        delta_ba=hockey,  # symmetric pair
    )


def _laplace_model(b: float, sensitivity: float) -> _LossModel:
    a = sensitivity / b  # L in [-a, a]; atoms 1/2 at a and e^{-a}/2 at -a under A

    def cdf_a(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        mid = 0.5 * np.exp(np.minimum(x - a, 0.0) / 2.0)
        return np.where(x < -a, 0.0, np.where(x >= a, 1.0, mid))

    def sf_a(x: np.ndarray) -> np.ndarray:  # P_A(L > x)
        return 1.0 - cdf_a(x)

    def cdf_b(x: np.ndarray) -> np.ndarray:  # P_B(L <= x) = P_A(L >= -x)
        x = np.asarray(x, dtype=np.float64)
        mid = 1.0 - 0.5 * np.exp(np.minimum(-x - a, 0.0) / 2.0)
        return np.where(x < -a, 0.0, np.where(x >= a, 1.0, mid))

    def sf_b(x: np.ndarray) -> np.ndarray:
        return 1.0 - cdf_b(x)

    def hockey(eps: np.ndarray) -> np.ndarray:
        # 1 - e^eps below -a, 1 - e^{(eps - a)/2} on [-a, a), 0 from a on (symmetric pair)
        eps = np.asarray(eps, dtype=np.float64)
        mid = -np.expm1(np.minimum(eps - a, 0.0) / 2.0)
        low = -np.expm1(np.minimum(eps, 0.0))
        return np.where(eps < -a, low, np.where(eps >= a, 0.0, mid))

    return _LossModel(cdf_a, sf_a, cdf_b, sf_b, center=0.0, delta_ab=hockey, delta_ba=hockey)
