"""Numba kernels of the fairness-metric compatibility games (fast Moebius transform and friends).

Coalitions are bitmasks: bit ``i`` of the column index ``S`` of a ``(M, 2**d)`` array is set
when player ``i`` belongs to ``S``. Every kernel has a plain-Python twin ``*_reference`` used by
the tests and the benchmark.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _moebius_inplace(values: np.ndarray, d: int, sign: float) -> None:  # pragma: no cover - jit
    """Butterfly ``v[:, S] += sign * v[:, S \\ {i}]`` for each player ``i`` and ``S`` containing it.

    ``sign = -1`` is the Moebius transform ``a(T) = sum_{S <= T} (-1)^{|T|-|S|} v(S)``;
    ``sign = +1`` its inverse ``v(S) = sum_{T <= S} a(T)``. O(M d 2^d) operations.
    """
    m = values.shape[0]
    n = values.shape[1]
    for r in range(m):
        row = values[r]
        for i in range(d):
            bit = 1 << i
            # the masks with bit i set: blocks of length `bit` starting at odd multiples of bit
            for hi in range(0, n, 2 * bit):
                for lo in range(bit):
                    row[hi + bit + lo] += sign * row[hi + lo]


@numba.njit(cache=True)
def _shapley_kernel(dividends: np.ndarray, d: int) -> np.ndarray:  # pragma: no cover - jit
    """``phi_i = sum_{T containing i} a(T) / |T|`` for each row; returns (M, d)."""
    m = dividends.shape[0]
    n = dividends.shape[1]
    out = np.zeros((m, d))
    for t in range(1, n):
        size = 0
        x = t
        while x:
            x &= x - 1
            size += 1
        for r in range(m):
            share = dividends[r, t] / size
            for i in range(d):
                if (t >> i) & 1:
                    out[r, i] += share
    return out


@numba.njit(cache=True)
def _popcounts(n: int) -> np.ndarray:  # pragma: no cover - jit
    """Number of set bits of ``0, 1, ..., n - 1``."""
    out = np.zeros(n, dtype=np.int64)
    for s in range(1, n):
        out[s] = out[s >> 1] + (s & 1)
    return out


def moebius_inplace(values: np.ndarray, d: int, *, inverse: bool = False) -> None:
    """Run the numba butterfly in place on a C-contiguous float64 ``(M, 2**d)`` array."""
    _moebius_inplace(values, d, 1.0 if inverse else -1.0)


def shapley_kernel(dividends: np.ndarray, d: int) -> np.ndarray:
    """Shapley values of each row of a float64 ``(M, 2**d)`` dividend array; (M, d)."""
    return _shapley_kernel(dividends, d)


def popcounts(n: int) -> np.ndarray:
    """Coalition sizes of the bitmasks ``0 .. n-1``."""
    return _popcounts(n)


# --- plain-Python twins -------------------------------------------------------------------------


def moebius_reference(values: list[float] | np.ndarray, d: int) -> list[float]:
    """Plain-Python butterfly on one game (a list of ``2**d`` floats); the timing baseline."""
    v = [float(x) for x in values]
    n = 1 << d
    for i in range(d):
        bit = 1 << i
        for s in range(n):
            if s & bit:
                v[s] -= v[s ^ bit]
    return v


def moebius_definition(values: list[float] | np.ndarray, d: int) -> list[float]:
    """The definition ``a(T) = sum_{S <= T} (-1)^{|T|-|S|} v(S)``, enumerating subsets; O(3^d)."""
    n = 1 << d
    out = [0.0] * n
    for t in range(n):
        size_t = bin(t).count("1")
        s = t
        acc = 0.0
        while True:  # all submasks of t
            acc += (-1.0) ** (size_t - bin(s).count("1")) * float(values[s])
            if s == 0:
                break
            s = (s - 1) & t
        out[t] = acc
    return out


def shapley_reference(dividends: list[float] | np.ndarray, d: int) -> list[float]:
    """Plain-Python ``phi_i = sum_{T containing i} a(T) / |T|``."""
    phi = [0.0] * d
    for t in range(1, 1 << d):
        members = [i for i in range(d) if (t >> i) & 1]
        for i in members:
            phi[i] += float(dividends[t]) / len(members)
    return phi
