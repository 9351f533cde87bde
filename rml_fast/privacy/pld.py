"""Privacy-loss distributions (PLDs): tight, pessimistic accounting of composed mechanisms.

A mechanism's privacy is captured by a dominating pair of output laws ``(A, B)`` and its
privacy loss ``L = ln dA/dB`` under ``A``. The hockey-stick divergence is

    delta(eps) = E_A[(1 - exp(eps - L))_+] + P_A(L = +inf),

and the loss of a composition is the sum of independent losses, so composing
mechanisms is a convolution of their loss laws (Koskela et al., arXiv 1906.03049;
Meiser & Mohammadi, CCS 2018; Doroshenko et al., arXiv 2207.04380).

Discretisation is pessimistic: the loss is rounded *up* onto the lattice
``l_i = i * h`` (the mass of ``(l_{i-1}, l_i]`` is put on ``l_i``), the mass below the
lowest kept bucket goes to that bucket and the mass above the highest to ``+inf``.
Rounding a loss up can only increase ``delta(eps)`` for every ``eps``, and the rounded
pair is again a valid dominating pair, so every number read out of these objects is an
upper bound on the true ``delta(eps)`` (or ``eps(delta)``), up to floating-point
round-off in the FFT (absolute ~1e-16 per bucket).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.fft
from scipy import special

from rml_fast._validation import Interval, check_array, check_scalar

__all__ = ["PLDAccountant", "PrivacyLossDistribution"]

RELATIONS = ("add_or_remove", "remove", "add")
_H = Interval("real", 0.0, 1.0, "neither")
_TAIL = Interval("real", 0.0, 0.1, "neither")
_Q = Interval("real", 0.0, 1.0, "right")
_MAX_BUCKETS = 50_000_000

CdfFn = Callable[[np.ndarray], np.ndarray]


# --- one direction: a pmf on the lattice i*h ---------------------------------------------


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float64)
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class _Pmf:
    """Mass ``pmf[i]`` at loss ``(lower_index + i) * h``, plus ``infinity_mass`` at +inf."""

    pmf: np.ndarray
    lower_index: int
    h: float
    infinity_mass: float

    @property
    def losses(self) -> np.ndarray:
        return (self.lower_index + np.arange(self.pmf.size)) * self.h

    def delta(self, eps: np.ndarray) -> np.ndarray:
        """Vectorised delta(eps) = sum_{l_i > eps} p_i (1 - e^{eps - l_i}) + p_inf."""
        from rml_fast.kernels.sgg import pld_delta_for_epsilon

        return pld_delta_for_epsilon(self.pmf, self.lower_index, self.h, self.infinity_mass, eps)

    def epsilon(self, delta: np.ndarray) -> np.ndarray:
        """Smallest eps >= 0 with delta(eps) <= delta (inf if p_inf > delta)."""
        from rml_fast.kernels.sgg import pld_epsilon_for_delta

        return pld_epsilon_for_delta(self.pmf, self.lower_index, self.h, self.infinity_mass, delta)


def _trim(p: np.ndarray, lower: int) -> tuple[np.ndarray, int]:
    nz = np.flatnonzero(p > 0.0)
    if nz.size == 0:
        return np.zeros(1), lower
    return p[nz[0] : nz[-1] + 1], lower + int(nz[0])


def _make(p: np.ndarray, lower: int, h: float, inf_mass: float, budget: float) -> _Pmf:
    """Move <= budget of upper-tail mass to +inf and <= budget of lower tail up to the floor."""
    p, lower = _trim(p, lower)
    if p.size > 2 and budget > 0.0:
        upper_tail = np.cumsum(p[::-1])  # upper_tail[j] = mass of the top j+1 buckets
        n_up = int(np.searchsorted(upper_tail, budget, side="right"))  # buckets to drop
        n_up = min(n_up, p.size - 1)
        if n_up > 0:
            inf_mass += float(upper_tail[n_up - 1])
            p = p[: p.size - n_up]
        lower_tail = np.cumsum(p)
        n_lo = int(np.searchsorted(lower_tail, budget, side="right"))
        n_lo = min(n_lo, p.size - 1)
        if n_lo > 0:
            moved = float(lower_tail[n_lo - 1])
            p = p[n_lo:].copy()
            p[0] += moved
            lower += n_lo
    return _Pmf(_readonly(p), lower, h, min(inf_mass, 1.0))


def _convolve(a: _Pmf, b: _Pmf, budget: float) -> _Pmf:
    """Linear (never circular) convolution of two pmfs on the same lattice, via real FFT."""
    n = a.pmf.size + b.pmf.size - 1
    if min(a.pmf.size, b.pmf.size) <= 64:
        c = np.convolve(a.pmf, b.pmf)
    else:
        size = scipy.fft.next_fast_len(n, real=True)
        c = scipy.fft.irfft(
            scipy.fft.rfft(a.pmf, size) * scipy.fft.rfft(b.pmf, size), size
        )[:n]
    np.maximum(c, 0.0, out=c)
    finite = (1.0 - a.infinity_mass) * (1.0 - b.infinity_mass)
    inf_mass = 1.0 - finite
    lost = finite - float(c.sum())
    if lost > 0.0:  # mass lost to clamped round-off goes (pessimistically) to +inf
        inf_mass += lost
    return _make(c, a.lower_index + b.lower_index, a.h, inf_mass, budget)


class _Mgf:
    """ln E[e^{lam L}; L finite] of a pmf, and Chernoff bounds for its n-fold sums."""

    def __init__(self, a: _Pmf) -> None:
        mask = a.pmf > 0
        self.logp = np.log(a.pmf[mask])
        self.losses = a.losses[mask]
        self.scale = float(self.losses[-1] - self.losses[0]) + a.h

    def log_mgf(self, lam: float) -> float:
        z = lam * self.losses + self.logp
        m = float(z.max())
        return m + math.log(float(np.exp(z - m).sum()))

    def _minimise(self, fn: Callable[[float], float], n: int) -> float:
        """min over lam > 0 of fn(lam): log-grid, then golden section around the best."""
        base = max(self.scale * math.sqrt(n), 1e-12)
        grid = np.geomspace(1e-4, 1e5, 28) / base
        vals = [fn(float(x)) for x in grid]
        k = int(np.argmin(vals))
        lo, hi = math.log(grid[max(k - 1, 0)]), math.log(grid[min(k + 1, grid.size - 1)])
        g = (math.sqrt(5.0) - 1.0) / 2.0
        x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
        f1, f2 = fn(math.exp(x1)), fn(math.exp(x2))
        for _ in range(30):
            if f1 < f2:
                hi, x2, f2 = x2, x1, f1
                x1 = hi - g * (hi - lo)
                f1 = fn(math.exp(x1))
            else:
                lo, x1, f1 = x1, x2, f2
                x2 = lo + g * (hi - lo)
                f2 = fn(math.exp(x2))
        return min(vals[k], f1, f2)

    def upper_quantile(self, n: int, log_beta: float) -> float:
        """hi with P(S >= hi) <= beta: min_lam (n K(lam) - ln beta) / lam."""
        return self._minimise(lambda lam: (n * self.log_mgf(lam) - log_beta) / lam, n)

    def lower_quantile(self, n: int, log_beta: float) -> float:
        """lo with P(S <= lo) <= beta: max_lam (ln beta - n K(-lam)) / lam."""
        return -self._minimise(lambda lam: (n * self.log_mgf(-lam) - log_beta) / lam, n)

    def log_upper_tail(self, n: int, t: float) -> float:
        """ln of a bound on P(S >= t): min_lam n K(lam) - lam t."""
        return min(0.0, self._minimise(lambda lam: n * self.log_mgf(lam) - lam * t, n))


def _power(z: np.ndarray, n: int) -> np.ndarray:
    """z**n elementwise by binary exponentiation (complex multiplies, no exp/log)."""
    result: np.ndarray | None = None
    base = z
    while True:
        if n & 1:
            result = base.copy() if result is None else np.multiply(result, base, out=result)
        n >>= 1
        if not n:
            break
        base = base * base
    return result  # type: ignore[return-value]


def _self_compose_fft(a: _Pmf, n: int, budget: float) -> _Pmf:
    """a^{*n} by one FFT power on a window chosen with Chernoff bounds.

    The n-fold law lies in [lo, hi] except for <= budget mass on each side. A circular
    convolution of length Lf >= hi - lo + 1 folds the outside mass into the window:
    mass from below lands on a larger loss (pessimistic) and the mass that truly lies at
    or above lo + Lf is added again, as its Chernoff bound, to +inf. So the result stays
    an upper bound for delta(eps) although the transform is circular.
    """
    mgf = _Mgf(a)
    lo = mgf.lower_quantile(n, math.log(budget))
    hi = mgf.upper_quantile(n, math.log(budget))
    h = a.h
    base = n * a.lower_index  # index of the smallest possible sum
    full = n * (a.pmf.size - 1) + 1
    lo_rel = max(0, math.floor(lo / h) - base)
    hi_rel = min(full - 1, math.ceil(hi / h) - base)
    if hi_rel - lo_rel + 1 >= full or full <= 4 * a.pmf.size:
        return _self_compose_squaring(a, n, budget)
    size = scipy.fft.next_fast_len(hi_rel - lo_rel + 1, real=True)
    spec = scipy.fft.rfft(a.pmf, size)
    c = scipy.fft.irfft(_power(spec, n), size)
    c = np.roll(c, -(lo_rel % size))  # c[j] now holds the sums with index lo_rel + j (mod size)
    np.maximum(c, 0.0, out=c)
    finite = (1.0 - a.infinity_mass) ** n
    above = math.exp(mgf.log_upper_tail(n, (base + lo_rel + size) * h))
    inf_mass = 1.0 - finite + above
    lost = finite - float(c.sum())
    if lost > 0.0:
        inf_mass += lost
    return _make(c, base + lo_rel, h, inf_mass, 0.0)


def _self_compose(a: _Pmf, n: int, budget: float, method: str = "fft_power") -> _Pmf:
    if method == "fft_power":
        return _self_compose_fft(a, n, budget)
    return _self_compose_squaring(a, n, budget)


def _self_compose_squaring(a: _Pmf, n: int, budget: float) -> _Pmf:
    """a^{*n} by repeated squaring of linear convolutions, truncating after each step."""
    result: _Pmf | None = None
    base = a
    while True:
        if n & 1:
            result = base if result is None else _convolve(result, base, budget)
        n >>= 1
        if not n:
            break
        base = _convolve(base, base, budget)
    if result is None:  # pragma: no cover - n >= 1 is validated
        raise ValueError("num_compositions must be >= 1")
    return result


# --- building a pmf from a loss CDF ------------------------------------------------------


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
) -> _Pmf:
    """Pessimistic bucketing of a loss law given by its CDF (and optionally survival fn).

    ``upper_tail`` (default ``tail``) is the mass allowed above the top bucket; it must be
    above the absolute accuracy of ``sf`` (e.g. ~1e-15 for a quadrature CDF).
    """
    sf_fn: CdfFn = sf if sf is not None else (lambda x: 1.0 - cdf(x))
    if bounds is None:
        lo = _find_bound(cdf, tail, increasing=True, start=center)
        hi = _find_bound(sf_fn, tail if upper_tail is None else upper_tail, increasing=False, start=center)
    else:
        lo, hi = bounds
    i_lo = math.floor(lo / h)
    i_hi = max(math.ceil(hi / h), i_lo + 1)
    if i_hi - i_lo + 1 > _MAX_BUCKETS:
        raise ValueError(
            f"the privacy-loss range [{lo:.4g}, {hi:.4g}] needs {i_hi - i_lo + 1} buckets of "
            f"width {h:g}: use a larger value_discretization_interval"
        )
    grid = np.arange(i_lo, i_hi + 1, dtype=np.float64) * h
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
    """Connect-the-dots PLD (Doroshenko et al., arXiv 2207.04380) from delta on the grid.

    In ``x = e^eps`` the hockey-stick curve ``D(x) = E_P[(1 - x e^{-L})_+]`` is convex and
    decreasing with ``D(0) = 1``; its piecewise-linear interpolation through
    ``(0, 1), (x_i, delta(eps_i))`` and constant ``delta(eps_max)`` beyond lies above it, and
    is exactly the curve of the discrete PLD with ``p_i e^{-eps_i}`` = the slope change at
    ``x_i`` and ``p_inf = delta(eps_max)``. So the result dominates the mechanism (a
    pessimistic estimate) while rounding far less than bucketing.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        delta = np.asarray(sf_p(grid), dtype=np.float64) - np.exp(grid) * np.asarray(sf_q(grid))
    delta = np.clip(np.nan_to_num(delta, nan=1.0), -np.expm1(np.minimum(grid, 0.0)), 1.0)
    delta = np.maximum(delta, 0.0)
    # T_j = -(slope of D on [x_{j-1}, x_j]) for j = 1..n-1; T_0 from the chord to (0, 1).
    dx = np.exp(grid[1:]) * -np.expm1(-h)
    t = np.empty(grid.size + 1)
    t[0] = (1.0 - delta[0]) * math.exp(-grid[0])
    t[1:-1] = (delta[:-1] - delta[1:]) / dx
    t[-1] = 0.0
    # D is anchored at the top (D = p_inf beyond eps_max), so D(x_j) = p_inf + sum_{i>j} T_i dx_i.
    # Round-off (or quadrature noise) can make the T_j non-monotone; raising each T_j to the
    # maximum of those to its right restores convexity and only raises D (pessimistic).
    t = np.maximum.accumulate(t[::-1])[::-1]
    pmf = np.maximum((t[:-1] - t[1:]) * np.exp(grid), 0.0)
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


def _symmetric_model(cdf_a: CdfFn, sf_a: CdfFn, center: float = 0.0) -> _LossModel:
    """Model of a pair swapped by a reflection: L under B has the law of -L under A."""
    return _LossModel(
        cdf_a=cdf_a,
        sf_a=sf_a,
        cdf_b=lambda x: sf_a(-x),  # P_A(L > -x) <= P_B(L <= x): pessimistic
        sf_b=lambda x: cdf_a(np.nextafter(-np.asarray(x, dtype=np.float64), -np.inf)),  # P_A(L < -x)
        center=center,
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
    kw = {"upper_tail": upper_tail, "estimator": estimator}
    if q == 1.0:
        return (
            _pmf_from_cdf(model.cdf_a, model.sf_a, h, tail, model.center, sf_q=model.sf_b, **kw),
        )
    logq = math.log(q)
    out = []
    if relation in ("add_or_remove", "remove"):
        # Remove: pair (qA + (1-q)B, B); L' = ln(q e^L + 1 - q) = y  <=>  L = g(y).
        def g(y: np.ndarray) -> np.ndarray:
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                return np.log(np.expm1(y) + q) - logq

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

        out.append(_pmf_from_cdf(cdf_r, sf_r, h, tail, center=0.0, sf_q=sfq_r, **kw))
    if relation in ("add_or_remove", "add"):
        # Add: pair (B, qA + (1-q)B); L' = -ln(q e^L + 1 - q) = y  <=>  L = k(y).
        def k(y: np.ndarray) -> np.ndarray:
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                return np.log(np.expm1(-y) + q) - logq

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

        out.append(_pmf_from_cdf(cdf_ad, sf_ad, h, tail, center=0.0, sf_q=sfq_ad, **kw))
    return tuple(out)


def _gaussian_model(std: float, sensitivity: float) -> _LossModel:
    mu = sensitivity**2 / (2.0 * std**2)  # L ~ N(mu, 2 mu) under A, N(-mu, 2 mu) under B
    s = math.sqrt(2.0 * mu)
    return _LossModel(
        cdf_a=lambda x: special.ndtr((x - mu) / s),
        sf_a=lambda x: special.ndtr((mu - x) / s),
        cdf_b=lambda x: special.ndtr((x + mu) / s),
        sf_b=lambda x: special.ndtr((-mu - x) / s),
        center=mu,
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

    return _LossModel(cdf_a, sf_a, cdf_b, sf_b, center=0.0)


# --- public class ------------------------------------------------------------------------


ESTIMATORS = ("bucket", "connect_dots")


def _check_estimator(estimator: Any) -> str:
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    return str(estimator)


def _check_relation(relation: Any) -> str:
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    return str(relation)


@dataclass(frozen=True)
class PrivacyLossDistribution:
    """An immutable, pessimistically discretised privacy-loss distribution (float64).

    Holds one pmf per neighbouring direction: one entry for a mechanism whose dominating
    pair is symmetric (Gaussian, Laplace, every SGG member, without subsampling), two
    (``remove``, ``add``) for Poisson-subsampled mechanisms under the add-or-remove
    relation. Read-outs take the maximum over the directions; composition composes each
    direction (a one-entry PLD is used for both directions of a two-entry one).

    The mass ``pmf[i]`` sits at loss ``lower_loss + i * h``; ``infinity_mass`` is the mass
    at ``+inf`` (it adds directly to every delta).

    Parameters
    ----------
    pmfs : tuple of _Pmf
        Use the factories (:meth:`from_cdf`, :meth:`from_gaussian`, :meth:`from_laplace`,
        ``SGGMechanism.pld``) rather than this constructor.

    References
    ----------
    Koskela, Jalko, Honkela, "Computing tight differential privacy guarantees using
    FFT", arXiv 1906.03049. Doroshenko, Ghazi, Kamath, Kumar, Manurangsi,
    "Connect the dots", arXiv 2207.04380. Zhu, Dong, Wang, "Optimal accounting of
    differential privacy via characteristic function", arXiv 2106.08567.

    Examples
    --------
    >>> from rml_fast.privacy import PrivacyLossDistribution
    >>> pld = PrivacyLossDistribution.from_gaussian(std=1.0)
    >>> round(float(pld.get_delta_for_epsilon(1.0)), 4)  # Balle & Wang: 0.1269
    0.1269
    """

    pmfs: tuple[_Pmf, ...]
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # -- views of the first ("remove") direction, as in the spec ---------------------------
    @property
    def pmf(self) -> np.ndarray:
        """Read-only pmf of shape (n,) of the first direction."""
        return self.pmfs[0].pmf

    @property
    def lower_loss(self) -> float:
        """Loss of ``pmf[0]``."""
        return self.pmfs[0].lower_index * self.pmfs[0].h

    @property
    def h(self) -> float:
        """The value discretisation interval."""
        return self.pmfs[0].h

    @property
    def infinity_mass(self) -> float:
        """Mass at +inf of the first direction."""
        return self.pmfs[0].infinity_mass

    @property
    def losses(self) -> np.ndarray:
        """Losses of shape (n,) of ``pmf``."""
        return self.pmfs[0].losses

    # -- factories ---------------------------------------------------------------------
    @classmethod
    def from_cdf(
        cls,
        cdf_on_grid: Any,
        lower_loss: float,
        h: float,
        infinity_mass: float | None = None,
    ) -> PrivacyLossDistribution:
        """Pessimistic bucketing of a loss CDF given on the grid ``lower_loss + i*h``.

        ``pmf[0] = F(l_0)`` (all mass at or below the floor), ``pmf[i] = F(l_i) - F(l_{i-1})``
        (the mass of ``(l_{i-1}, l_i]`` goes up to ``l_i``), ``infinity_mass = 1 - F(l_{n-1})``.

        Parameters
        ----------
        cdf_on_grid : array-like of shape (n,)
            Non-decreasing values ``F(l_i) = P_A(L <= l_i)`` in [0, 1].
        lower_loss : float
            ``l_0``; must be an integer multiple of ``h`` (all PLDs share the lattice ``i*h``).
        h : float
            Grid spacing in (0, 1).
        infinity_mass : float, optional
            Mass at +inf; at least ``1 - F(l_{n-1})`` (default: exactly that).

        Returns
        -------
        PrivacyLossDistribution
        """
        f = check_array(cdf_on_grid, "cdf_on_grid", dtypes=(np.float64,), ndim=1)
        h = float(check_scalar(h, "h", _H))
        lower_loss = float(check_scalar(lower_loss, "lower_loss", Interval("real", None, None)))
        if f.size == 0:
            raise ValueError("cdf_on_grid must not be empty")
        if (f < 0).any() or (f > 1).any() or (np.diff(f) < -1e-15).any():
            raise ValueError("cdf_on_grid must be non-decreasing values in [0, 1]")
        idx = lower_loss / h
        if abs(idx - round(idx)) > 1e-6:
            raise ValueError(f"lower_loss must be an integer multiple of h={h}, got {lower_loss}")
        tail = max(1.0 - float(f[-1]), 0.0)
        if infinity_mass is None:
            infinity_mass = tail
        infinity_mass = float(check_scalar(infinity_mass, "infinity_mass", Interval("real", 0, 1)))
        if infinity_mass < tail - 1e-15:
            raise ValueError(
                f"infinity_mass={infinity_mass} is below 1 - F(last)={tail}: not pessimistic"
            )
        pmf = np.maximum(np.diff(f, prepend=0.0), 0.0)
        return cls((_Pmf(_readonly(pmf), round(idx), h, infinity_mass),))

    @classmethod
    def _from_model(
        cls,
        model: _LossModel,
        h: float,
        sampling_prob: float,
        relation: str,
        tail: float,
        estimator: str = "bucket",
    ) -> PrivacyLossDistribution:
        return cls(_directions(model, h, sampling_prob, relation, tail, estimator=estimator))

    @classmethod
    def from_gaussian(
        cls,
        std: float,
        sensitivity: float = 1.0,
        h: float = 1e-4,
        *,
        sampling_prob: float = 1.0,
        relation: str = "add_or_remove",
        tail_mass_truncation: float = 1e-15,
        estimator: str = "connect_dots",
    ) -> PrivacyLossDistribution:
        """PLD of the Gaussian mechanism ``f(D) + N(0, std^2)``, optionally Poisson-subsampled.

        The loss is ``L ~ N(mu, 2 mu)`` with ``mu = sensitivity^2 / (2 std^2)``. With
        ``sampling_prob = q < 1`` the pairs are ``(qA + (1-q)B, B)`` (remove) and
        ``(B, qA + (1-q)B)`` (add); their loss CDFs are computed exactly before bucketing.

        Parameters
        ----------
        std : float
            Noise standard deviation, > 0.
        sensitivity : float, default=1.0
            l2 sensitivity, > 0.
        h : float, default=1e-4
            Value discretisation interval.
        sampling_prob : float, default=1.0
            Poisson sampling rate q in (0, 1].
        relation : {"add_or_remove", "remove", "add"}, default="add_or_remove"
            Which neighbouring directions to account (only matters for q < 1).
        tail_mass_truncation : float, default=1e-15
            Mass allowed in each truncated tail (upper tail goes to +inf).
        estimator : {"connect_dots", "bucket"}, default="connect_dots"
            "bucket": the loss rounded up to the lattice (CDF bucketing). "connect_dots":
            the discrete PLD whose hockey-stick curve linearly interpolates (in e^eps) the
            exact delta(eps) at the lattice points (Doroshenko et al. 2022; dp-accounting's
            default): also pessimistic, and much tighter after many compositions.

        Returns
        -------
        PrivacyLossDistribution
        """
        std = float(check_scalar(std, "std", Interval("real", 0.0, None, "neither")))
        sensitivity = float(
            check_scalar(sensitivity, "sensitivity", Interval("real", 0.0, None, "neither"))
        )
        h, q, relation, tail = _common_args(h, sampling_prob, relation, tail_mass_truncation)
        estimator = _check_estimator(estimator)
        return cls._from_model(_gaussian_model(std, sensitivity), h, q, relation, tail, estimator)

    @classmethod
    def from_laplace(
        cls,
        b: float,
        sensitivity: float = 1.0,
        h: float = 1e-4,
        *,
        sampling_prob: float = 1.0,
        relation: str = "add_or_remove",
        tail_mass_truncation: float = 1e-15,
        estimator: str = "connect_dots",
    ) -> PrivacyLossDistribution:
        """PLD of the Laplace mechanism ``f(D) + Lap(b)`` (1-D), optionally subsampled.

        ``L = (|x - sensitivity| - |x|) / b`` lies in ``[-a, a]``, ``a = sensitivity/b``;
        ``delta(eps) = 1 - exp((eps - a)/2)`` for ``eps < a`` and 0 beyond.

        Parameters
        ----------
        b : float
            Laplace scale, > 0.
        sensitivity, h, sampling_prob, relation, tail_mass_truncation, estimator
            As in :meth:`from_gaussian`.

        Returns
        -------
        PrivacyLossDistribution
        """
        b = float(check_scalar(b, "b", Interval("real", 0.0, None, "neither")))
        sensitivity = float(
            check_scalar(sensitivity, "sensitivity", Interval("real", 0.0, None, "neither"))
        )
        h, q, relation, tail = _common_args(h, sampling_prob, relation, tail_mass_truncation)
        estimator = _check_estimator(estimator)
        model = _laplace_model(b, sensitivity)
        if q == 1.0:
            a = sensitivity / b
            return cls((
                _pmf_from_cdf(
                    model.cdf_a, model.sf_a, h, tail, bounds=(-a, a), sf_q=model.sf_b,
                    estimator=estimator,
                ),
            ))
        return cls._from_model(model, h, q, relation, tail, estimator)

    # -- algebra -----------------------------------------------------------------------
    def compose(
        self, other: PrivacyLossDistribution, tail_mass_truncation: float = 1e-15
    ) -> PrivacyLossDistribution:
        """The PLD of running both mechanisms (independent noise): a linear convolution.

        Parameters
        ----------
        other : PrivacyLossDistribution
            Must have the same ``h``.
        tail_mass_truncation : float, default=1e-15
            Mass moved out of each tail after the convolution (upper tail to +inf).

        Returns
        -------
        PrivacyLossDistribution
        """
        if not isinstance(other, PrivacyLossDistribution):
            raise TypeError(f"other must be a PrivacyLossDistribution, got {type(other).__name__}")
        if not math.isclose(other.h, self.h, rel_tol=1e-12):
            raise ValueError(f"other.h={other.h} differs from h={self.h}")
        tail = float(check_scalar(tail_mass_truncation, "tail_mass_truncation", _TAIL))
        a, b = self.pmfs, other.pmfs
        if len(a) == 1 and len(b) == 1:
            return PrivacyLossDistribution((_convolve(a[0], b[0], tail),))
        a2 = a if len(a) == 2 else (a[0], a[0])
        b2 = b if len(b) == 2 else (b[0], b[0])
        return PrivacyLossDistribution(tuple(_convolve(x, y, tail) for x, y in zip(a2, b2, strict=True)))

    def self_compose(
        self,
        num_compositions: int,
        tail_mass_truncation: float = 1e-15,
        method: str = "fft_power",
    ) -> PrivacyLossDistribution:
        """The PLD of ``num_compositions`` independent runs of this mechanism.

        Repeated squaring of *linear* FFT convolutions (the FFT length always covers the
        full support, so there is no wrap-around); after each of the <= 2 log2(N)
        convolutions at most ``tail_mass_truncation`` of each tail is truncated
        pessimistically (upper tail to +inf, lower tail onto the lowest kept bucket).

        Parameters
        ----------
        num_compositions : int
            N >= 1.
        tail_mass_truncation : float, default=1e-15
        method : {"fft_power", "squaring"}, default="fft_power"
            "fft_power": one real FFT, ``pmf_hat ** N``, on a window that holds all but
            ``tail_mass_truncation`` of each tail by a Chernoff bound; the mass the circular
            transform folds back is accounted pessimistically (mass from below moves up,
            the Chernoff bound of the mass from above is added to +inf).
            "squaring": repeated squaring of *linear* convolutions with truncation after
            each step (no folding at all).

        Returns
        -------
        PrivacyLossDistribution
        """
        n = int(check_scalar(num_compositions, "num_compositions", Interval("int", 1, None)))
        tail = float(check_scalar(tail_mass_truncation, "tail_mass_truncation", _TAIL))
        if method not in ("fft_power", "squaring"):
            raise ValueError(f"method must be 'fft_power' or 'squaring', got {method!r}")
        if n == 1:
            return self
        return PrivacyLossDistribution(
            tuple(_self_compose(p, n, tail, method) for p in self.pmfs)
        )

    def subsample(
        self, sampling_prob: float, relation: str = "add_or_remove"
    ) -> PrivacyLossDistribution:
        """Poisson subsampling of this (discretised, symmetric) PLD with rate ``q``.

        The discrete pmf defines a dominating pair ``(A~, B~)`` with ``B~ = sum_i p_i
        e^{-l_i}`` (remaining B-mass at ``L = -inf``); subsampling preserves dominance,
        and the new losses ``ln(q e^l + 1 - q)`` (remove) and ``-ln(q e^l + 1 - q)``
        (add) are rounded up onto the lattice. Prefer the mechanism factories with
        ``sampling_prob`` (they subsample the exact loss law, one rounding instead of two).

        Parameters
        ----------
        sampling_prob : float
            q in (0, 1].
        relation : {"add_or_remove", "remove", "add"}

        Returns
        -------
        PrivacyLossDistribution
        """
        q = float(check_scalar(sampling_prob, "sampling_prob", _Q))
        relation = _check_relation(relation)
        if len(self.pmfs) != 1:
            raise ValueError("subsample needs a symmetric (single-direction) PLD")
        if q == 1.0:
            return self
        base = self.pmfs[0]
        h = base.h
        losses, p = base.losses, base.pmf
        pb = p * np.exp(-losses)  # B-mass at each loss
        b_minus_inf = max(1.0 - float(pb.sum()), 0.0)
        out = []
        if relation in ("add_or_remove", "remove"):
            new = np.log1p(q * np.expm1(losses))
            mass = q * p + (1 - q) * pb
            vals = np.concatenate([new, [math.log1p(-q)]])
            masses = np.concatenate([mass, [(1 - q) * b_minus_inf]])
            out.append(_bucket(vals, masses, h, q * base.infinity_mass))
        if relation in ("add_or_remove", "add"):
            new = -np.log1p(q * np.expm1(losses))
            vals = np.concatenate([new, [-math.log1p(-q)]])
            masses = np.concatenate([pb, [b_minus_inf]])
            out.append(_bucket(vals, masses, h, 0.0))
        return PrivacyLossDistribution(tuple(out))

    # -- read-outs ---------------------------------------------------------------------
    def get_delta_for_epsilon(self, epsilon: float | Sequence[float] | np.ndarray) -> Any:
        """The smallest delta such that the mechanism is (epsilon, delta)-DP (upper bound).

        ``delta(eps) = sum_{l_i > eps} p_i (1 - e^{eps - l_i}) + p_inf``, maximised over
        directions; O(n + q log n) with suffix sums.

        Parameters
        ----------
        epsilon : float or array-like of shape (m,)

        Returns
        -------
        float or ndarray of shape (m,)
        """
        eps = check_array(epsilon, "epsilon", dtypes=(np.float64,), ndim=(0, 1))
        out = np.max([p.delta(np.atleast_1d(eps)) for p in self.pmfs], axis=0)
        out = np.minimum(out, 1.0)
        return float(out[0]) if eps.ndim == 0 else out

    def get_epsilon_for_delta(self, delta: float | Sequence[float] | np.ndarray) -> Any:
        """The smallest epsilon >= 0 with delta(epsilon) <= delta (inf if none).

        Between lattice points delta(eps) = S1 - e^eps S2 + p_inf with fixed suffix sums, so
        the solution is exact for the discretised PLD.

        Parameters
        ----------
        delta : float or array-like of shape (m,)
            Values in [0, 1].

        Returns
        -------
        float or ndarray of shape (m,)
        """
        d = check_array(delta, "delta", dtypes=(np.float64,), ndim=(0, 1))
        if ((d < 0) | (d > 1)).any():
            raise ValueError("delta must lie in [0, 1]")
        out = np.max([p.epsilon(np.atleast_1d(d)) for p in self.pmfs], axis=0)
        return float(out[0]) if d.ndim == 0 else out


def _bucket(vals: np.ndarray, masses: np.ndarray, h: float, inf_mass: float) -> _Pmf:
    idx = np.ceil(vals / h - 1e-9).astype(np.int64)
    lo = int(idx.min())
    p = np.bincount(idx - lo, weights=masses)
    p, lo = _trim(p, lo)
    return _Pmf(_readonly(p), lo, h, inf_mass)


def _common_args(h: Any, q: Any, relation: Any, tail: Any) -> tuple[float, float, str, float]:
    return (
        float(check_scalar(h, "h", _H)),
        float(check_scalar(q, "sampling_prob", _Q)),
        _check_relation(relation),
        float(check_scalar(tail, "tail_mass_truncation", _TAIL)),
    )


# --- accountant --------------------------------------------------------------------------


class PLDAccountant:
    """Accumulates heterogeneous mechanisms and reports the composed (epsilon, delta).

    Parameters
    ----------
    h : float, default=1e-4
        Value discretisation interval shared by every composed PLD.
    tail_mass_truncation : float, default=1e-15
    estimator : {"connect_dots", "bucket"}, default="connect_dots"
        Discretisation of the Gaussian/Laplace/SGG events (see ``from_gaussian``).

    Examples
    --------
    >>> from rml_fast.privacy import PLDAccountant
    >>> acc = PLDAccountant(h=1e-3)
    >>> acc = acc.compose_gaussian(std=20.0, count=100).compose_laplace(b=50.0)
    >>> 0 < acc.get_epsilon(1e-5) < 3
    True
    """

    def __init__(
        self, h: float = 1e-4, tail_mass_truncation: float = 1e-15, estimator: str = "connect_dots"
    ) -> None:
        self.h = float(check_scalar(h, "h", _H))
        self.estimator = _check_estimator(estimator)
        self.tail_mass_truncation = float(
            check_scalar(tail_mass_truncation, "tail_mass_truncation", _TAIL)
        )
        self._events: list[tuple[PrivacyLossDistribution, int]] = []
        self._composed: PrivacyLossDistribution | None = None

    def compose(self, pld: PrivacyLossDistribution, count: int = 1) -> PLDAccountant:
        """Add ``count`` runs of the mechanism whose PLD is ``pld``; returns ``self``."""
        if not isinstance(pld, PrivacyLossDistribution):
            raise TypeError(f"pld must be a PrivacyLossDistribution, got {type(pld).__name__}")
        if not math.isclose(pld.h, self.h, rel_tol=1e-12):
            raise ValueError(f"pld.h={pld.h} differs from the accountant's h={self.h}")
        count = int(check_scalar(count, "count", Interval("int", 1, None)))
        self._events.append((pld, count))
        self._composed = None
        return self

    def compose_gaussian(
        self, std: float, sensitivity: float = 1.0, count: int = 1, sampling_prob: float = 1.0
    ) -> PLDAccountant:
        """Add ``count`` (Poisson-subsampled) Gaussian mechanisms, e.g. DP-SGD steps."""
        pld = PrivacyLossDistribution.from_gaussian(
            std, sensitivity, self.h, sampling_prob=sampling_prob,
            tail_mass_truncation=self.tail_mass_truncation, estimator=self.estimator,
        )
        return self.compose(pld, count)

    def compose_laplace(
        self, b: float, sensitivity: float = 1.0, count: int = 1, sampling_prob: float = 1.0
    ) -> PLDAccountant:
        """Add ``count`` (Poisson-subsampled) Laplace mechanisms."""
        pld = PrivacyLossDistribution.from_laplace(
            b, sensitivity, self.h, sampling_prob=sampling_prob,
            tail_mass_truncation=self.tail_mass_truncation, estimator=self.estimator,
        )
        return self.compose(pld, count)

    def compose_mechanism(self, mechanism: Any, count: int = 1) -> PLDAccountant:
        """Add ``count`` runs of any object with a ``pld(value_discretization_interval)``."""
        if not hasattr(mechanism, "pld"):
            raise TypeError(f"mechanism must have a pld() method, got {type(mechanism).__name__}")
        return self.compose(mechanism.pld(value_discretization_interval=self.h), count)

    def pld(self) -> PrivacyLossDistribution:
        """The composed PLD of every event so far."""
        if not self._events:
            raise ValueError("no mechanism has been composed yet")
        if self._composed is None:
            total: PrivacyLossDistribution | None = None
            for pld, count in self._events:
                part = pld.self_compose(count, self.tail_mass_truncation)
                total = part if total is None else total.compose(part, self.tail_mass_truncation)
            self._composed = total
        return self._composed  # type: ignore[return-value]

    def get_epsilon(self, delta: float) -> float:
        """Composed epsilon at ``delta`` in (0, 1)."""
        delta = float(check_scalar(delta, "delta", Interval("real", 0.0, 1.0, "neither")))
        return float(self.pld().get_epsilon_for_delta(delta))

    def get_delta(self, epsilon: float) -> float:
        """Composed delta at ``epsilon`` >= 0."""
        epsilon = float(check_scalar(epsilon, "epsilon", Interval("real", 0.0, None)))
        return float(self.pld().get_delta_for_epsilon(epsilon))
