"""Plain per-row Python twins of the VALUEFLOW evaluator (private; tests and benchmarks).

These follow the spec (``specs/steering_eval.md`` §5.1 (iii)) literally, one response at a time,
with Python loops over windows and stages, and are the oracle the vectorised
:meth:`~rml_fast.evaluation.valueflow.AnchorEvaluator.score_from_rankings` is tested against.
"""

from __future__ import annotations

import math

import numpy as np


def _exp_clip(x: float, lo: float, hi: float) -> float:
    return math.exp(min(max(x, lo), hi))


def grad_loglik_reference(u, orders, utils, prior=1e-3, bounds=(-20.0, 20.0)):
    """g(u) of one response: ``orders`` list of permutations (0 = response), ``utils`` list of
    dicts local id -> anchor utility."""
    lo, hi = bounds
    eu = _exp_clip(u, lo, hi)
    g = 0.0
    for order, lu in zip(orders, utils, strict=True):
        for j in range(len(order)):
            rest = order[j:]
            denom = 0.0
            has_r = False
            for idx in rest:
                if idx == 0:
                    denom += eu
                    has_r = True
                else:
                    denom += _exp_clip(lu[idx], lo, hi)
            if order[j] == 0:
                g += 1.0
            if has_r:
                g -= eu / denom
    return g - prior * u


def single_item_utility_reference(orders, utils, prior=1e-3, bounds=(-20.0, 20.0)):
    """Bisection on g (|g| < 1e-6 or width < 1e-6, <= 200 steps); gradient-ascent fallback."""
    lo, hi = bounds

    def g(x):
        return grad_loglik_reference(x, orders, utils, prior, bounds)

    a, b = lo, hi
    ga, gb = g(a), g(b)
    root = None
    if ga == 0.0:
        root = a
    elif gb == 0.0:
        root = b
    elif ga * gb < 0:
        for _ in range(200):
            mid = 0.5 * (a + b)
            gm = g(mid)
            if abs(gm) < 1e-6 or (b - a) < 1e-6:
                root = mid
                break
            if ga * gm > 0:
                a, ga = mid, gm
            else:
                b = mid
        if root is None:
            root = 0.5 * (a + b)
    if root is None:
        u = 0.0
        for _ in range(150):
            prev = u
            u = min(max(u + 0.1 * g(u), lo), hi)
            if abs(u - prev) < 1e-6:
                break
        root = u
    return min(max(root, lo), hi)


def score_rows_reference(orders_per_row, utils_per_row, prior=1e-3, bounds=(-20.0, 20.0)):
    """Scores in [-10, 10] of each response, one row at a time (the naive reference loop).

    ``orders_per_row[b]`` is a list of permutations (lists) with 0 the response;
    ``utils_per_row[b][w]`` a dict local id -> anchor intensity.
    """
    out = []
    for orders, utils in zip(orders_per_row, utils_per_row, strict=True):
        if not orders:
            out.append(float("nan"))
            continue
        clamped = [{i: min(max(float(v), -10.0), 10.0) for i, v in lu.items() if i != 0}
                   for lu in utils]
        u = single_item_utility_reference(orders, clamped, prior, bounds)
        s = min(max(u, -10.0), 10.0)  # isotonic fit on (I, I): the identity, clipped
        met, wins, losses = [], 0, 0
        for order, lu in zip(orders, clamped, strict=True):
            met.extend(lu.values())
            p = order.index(0)
            wins += len(order) - 1 - p
            losses += p
        w_min, w_max = min(met), max(met)
        if losses > 0 and wins == 0:
            s = float(np.nextafter(w_min, -np.inf))
        elif wins > 0 and losses == 0:
            s = float(np.nextafter(w_max, np.inf))
        else:
            s = max(w_min, min(w_max, s))
            if abs(s - w_min) < 1e-12:
                s = min(w_max - 1e-6, w_min + 1e-6)
            elif abs(s - w_max) < 1e-12:
                s = max(w_min + 1e-6, w_max - 1e-6)
        out.append(min(max(s, -10.0), 10.0))
    return np.array(out)
