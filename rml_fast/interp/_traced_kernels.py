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


@numba.njit(cache=True, inline="always")
def _sqdist(H: np.ndarray, i: int, j: int) -> float:
    s = 0.0
    for k in range(H.shape[1]):
        d = float(H[i, k]) - float(H[j, k])
        s += d * d
    return s


@numba.njit(cache=True)
def _one_trace(H: np.ndarray, a: int, b: int, out: np.ndarray) -> None:
    """Features of the trajectory ``H[a:b]`` (T = b - a >= 3) into ``out`` (N_FEATURES,)."""
    T = b - a
    d = H.shape[1]
    disp = math.sqrt(_sqdist(H, b - 1, a))
    path = 0.0
    for t in range(a, b - 1):
        path += math.sqrt(_sqdist(H, t + 1, t))
    sum_th = 0.0
    sum_th2 = 0.0
    rev = 0
    for t in range(a, b - 2):
        dot = 0.0
        n1 = 0.0
        n2 = 0.0
        for k in range(d):
            v1 = float(H[t + 1, k]) - float(H[t, k])
            v2 = float(H[t + 2, k]) - float(H[t + 1, k])
            dot += v1 * v2
            n1 += v1 * v1
            n2 += v2 * v2
        if n1 > 0.0 and n2 > 0.0:
            c = dot / math.sqrt(n1 * n2)
            c = min(1.0, max(-1.0, c))
            th = math.acos(c)
        else:
            th = 0.0
        sum_th += th
        sum_th2 += th * th
        if th > 0.5 * math.pi:
            rev += 1
    n_turn = T - 2
    mean_th = sum_th / n_turn
    var_th = max(sum_th2 / n_turn - mean_th * mean_th, 0.0)
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
