"""The one-direction privacy-loss pmf on the lattice ``l_i = i h`` and its tail truncation.

Part of :mod:`rml_fast.privacy.pld` (split by role: this lattice record, the discretisation
of loss laws in ``_pld_discretise``, the FFT composition in ``_pld_compose``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def _bucket(vals: np.ndarray, masses: np.ndarray, h: float, inf_mass: float) -> _Pmf:
    idx = np.ceil(vals / h - 1e-9).astype(np.int64)
    lo = int(idx.min())
    p = np.bincount(idx - lo, weights=masses)
    p, lo = _trim(p, lo)
    return _Pmf(_readonly(p), lo, h, inf_mass)
