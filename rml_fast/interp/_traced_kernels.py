"""Numba kernels of TRACED: the kinematic summaries of many ragged trajectories in one pass."""

from __future__ import annotations

import math

import numba
import numpy as np

#: names of the columns :func:`trace_features` returns, in order
FEATURES = (
    "efficiency",
    "log_displacement",
    "mean_progress",
    "mean_turn",
    "std_turn",
    "reversal_frac",
    "log_steps",
)
N_FEATURES = len(FEATURES)


@numba.njit(cache=True, inline="always", fastmath=True)
def _sqdist(H: np.ndarray, i: int, j: int) -> float:
    s = 0.0
    for k in range(H.shape[1]):
        d = float(H[i, k]) - float(H[j, k])
        s += d * d
    return s


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def _one_trace(H: np.ndarray, a: int, b: int, out: np.ndarray) -> None:
    """Features of the trajectory ``H[a:b]`` (T = b - a >= 3) into ``out`` (N_FEATURES,).

    One pass over the rows: each velocity is formed once, kept for the next turning angle.
    """
    T = b - a
    d = H.shape[1]
    prev = np.empty(d)
    cur = np.empty(d)
    path = 0.0
    n_th = 0
    mean_th = 0.0
    m2 = 0.0
    rev = 0
    n_prev = 0.0
    for t in range(a, b - 1):
        n_cur = 0.0
        dot = 0.0
        for k in range(d):
            v = float(H[t + 1, k]) - float(H[t, k])
            cur[k] = v
            n_cur += v * v
            dot += v * prev[k]
        path += math.sqrt(n_cur)
        if t > a:
            if n_prev > 0.0 and n_cur > 0.0:
                c = min(1.0, max(-1.0, dot / math.sqrt(n_prev * n_cur)))
                th = math.acos(c)
            else:
                th = 0.0
            n_th += 1  # Welford: the variance without cancellation
            delta = th - mean_th
            mean_th += delta / n_th
            m2 += delta * (th - mean_th)
            if th > 0.5 * math.pi:
                rev += 1
        prev, cur = cur, prev
        n_prev = n_cur
    disp = math.sqrt(_sqdist(H, b - 1, a))
    n_turn = T - 2
    var_th = max(m2 / n_turn, 0.0)
    out[0] = disp / path if path > 0.0 else 0.0
    out[1] = math.log(disp) if disp > 0.0 else -math.inf
    out[2] = disp / (T - 1)  # mean of p_t = <v_t, e>: the projections telescope to the displacement
    out[3] = mean_th
    out[4] = math.sqrt(var_th)
    out[5] = rev / n_turn
    out[6] = math.log(T)


@numba.njit(cache=True, parallel=True)
def features_ragged(H: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Features of every trajectory ``H[offsets[i]:offsets[i+1]]``; shape (n, N_FEATURES)."""
    n = offsets.shape[0] - 1
    out = np.empty((n, N_FEATURES))
    for i in numba.prange(n):
        _one_trace(H, offsets[i], offsets[i + 1], out[i])
    return out
