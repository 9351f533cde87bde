"""Composition of privacy-loss pmfs: linear convolution and N-fold self-composition.

The transforms run in the native FFT of ``rml_fast.kernels.sgg`` (``pld_convolve``,
``pld_self_compose``; C++, OpenMP, GIL released); the tail bounds that size the windows
are Chernoff bounds computed here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import scipy.fft

from rml_fast.privacy._pld_lattice import _make, _Pmf


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
