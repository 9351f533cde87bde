"""Composition of privacy-loss pmfs: linear convolution and N-fold self-composition.

The transforms run in the native FFT of ``rml_fast.kernels.sgg`` (``pld_convolve``,
``pld_self_compose``; C++, OpenMP, GIL released); the tail bounds that size the windows
are Chernoff bounds computed here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from rml_fast.kernels.sgg import fft_good_size, pld_convolve, pld_self_convolve
from rml_fast.privacy._pld_discretise import _MAX_BUCKETS
from rml_fast.privacy._pld_lattice import _make, _Pmf


def _check_size(size: int, h: float) -> None:
    if size > _MAX_BUCKETS:
        raise ValueError(
            f"the composed privacy loss needs {size} buckets of width {h:g} (more than "
            f"{_MAX_BUCKETS}): use a larger value_discretization_interval"
        )


def _convolve(a: _Pmf, b: _Pmf, budget: float) -> _Pmf:
    """Linear (never circular) convolution of two pmfs on the same lattice, via real FFT."""
    _check_size(a.pmf.size + b.pmf.size - 1, a.h)
    if min(a.pmf.size, b.pmf.size) <= 64:
        c = np.convolve(a.pmf, b.pmf)
    else:
        c = pld_convolve(a.pmf, b.pmf)  # native FFT, length covers the full support
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

    def log_mgf(self, lam: np.ndarray) -> np.ndarray:
        """K(lam) = ln sum_i p_i e^{lam l_i} for a vector of lam (one matrix pass)."""
        z = np.multiply.outer(lam, self.losses)
        z += self.logp
        m = z.max(axis=1)
        z -= m[:, None]
        np.exp(z, out=z)
        return m + np.log(z.sum(axis=1))

    def _minimise(self, fn: Callable[[np.ndarray], np.ndarray], n: int) -> float:
        """min over lam > 0 of fn(lam): a log-spaced grid, then two finer grids around the best.

        Every lam gives a valid Chernoff bound, so the search only affects tightness; the
        final grid spacing is ~1% in lam.
        """
        base = max(self.scale * math.sqrt(n), 1e-12)
        grid = np.geomspace(1e-4, 1e5, 19) / base
        best = math.inf
        for _ in range(3):
            vals = fn(grid)
            k = int(np.argmin(vals))
            best = min(best, float(vals[k]))
            lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
            grid = np.geomspace(lo, hi, 12)
        return best

    def upper_quantile(self, n: int, log_beta: float) -> float:
        """hi with P(S >= hi) <= beta: min_lam (n K(lam) - ln beta) / lam."""
        return self._minimise(lambda lam: (n * self.log_mgf(lam) - log_beta) / lam, n)

    def lower_quantile(self, n: int, log_beta: float) -> float:
        """lo with P(S <= lo) <= beta: max_lam (ln beta - n K(-lam)) / lam."""
        return -self._minimise(lambda lam: (n * self.log_mgf(-lam) - log_beta) / lam, n)

    def log_upper_tail(self, n: int, t: float) -> float:
        """ln of a bound on P(S >= t): min_lam n K(lam) - lam t."""
        return min(0.0, self._minimise(lambda lam: n * self.log_mgf(lam) - lam * t, n))


def _self_compose_fft(a: _Pmf, n: int, budget: float) -> _Pmf:
    """a^{*n} by one FFT power on a window chosen with Chernoff bounds.

    The n-fold law lies in [lo, hi] except for <= budget mass on each side. A circular
    convolution of length Lf >= hi - lo + 1 folds the outside mass into the window:
    mass from below lands on a larger loss (pessimistic) and the mass that truly lies at
    or above lo + Lf is added again, as its Chernoff bound, to +inf. So the result stays
    an upper bound for delta(eps) although the transform is circular.
    """
    if not (a.pmf > 0.0).any():  # no finite mass: everything sits at +inf
        return _make(np.zeros(1), n * a.lower_index, a.h, 1.0, 0.0)
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
    size = fft_good_size(hi_rel - lo_rel + 1)
    _check_size(size, h)
    # Native FFT power; c[j] holds the sums with index lo_rel + j (mod size).
    c = pld_self_convolve(a.pmf, n, size, lo_rel)
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
