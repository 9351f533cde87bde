"""Fairness metrics of many masked models at once (one row per coalition), oriented larger = better.

All group rates come from one matrix product with the one-hot (group, label) cell indicator, the
dense equivalent of a per-row ``bincount``: ``pos[b, 2 g + y] = #{k : yhat[b, k] = 1, g_k = g,
y_k = y}``. Differences across more than two groups are ``max_g - min_g``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: built-in metric names -> short description (PROPOSED instantiation, spec §3.1)
METRICS: dict[str, str] = {
    "accuracy": "accuracy of yhat = 1[p >= 0.5]",
    "demographic_parity": "-(max_g - min_g) P(yhat = 1 | A = g)",
    "equalized_odds": "-max(range_g TPR_g, range_g FPR_g) over groups with both labels",
    "equal_opportunity": "-(max_g - min_g) TPR_g over groups with a positive label",
    "predictive_parity": "-(max_g - min_g) PPV_g over groups with a positive prediction",
    "calibration": "-(max_g - min_g) (mean_g p - mean_g y)  (calibration in the large)",
}

def _range(rates: np.ndarray, defined: np.ndarray | None = None) -> np.ndarray:
    """``max - min`` over the last axis, restricted to ``defined`` entries (0 if < 2 defined)."""
    if defined is None:
        return rates.max(axis=-1) - rates.min(axis=-1)
    hi = np.where(defined, rates, -np.inf).max(axis=-1)
    lo = np.where(defined, rates, np.inf).min(axis=-1)
    ok = defined.sum(axis=-1) >= 2
    return np.where(ok, hi - lo, 0.0)


def check_metrics(metrics: Any) -> list[str | Callable[..., float]]:
    """Validate the metric list (built-in names or callables); returns a list."""
    if isinstance(metrics, str) or callable(metrics):
        metrics = [metrics]
    try:
        metrics = list(metrics)
    except TypeError as exc:
        raise TypeError(f"metrics must be a list of names or callables, got {metrics!r}") from exc
    if not metrics:
        raise ValueError("metrics must name at least one metric, got an empty list")
    for m in metrics:
        if callable(m):
            continue
        if not isinstance(m, str) or m not in METRICS:
            raise ValueError(f"metrics: unknown metric {m!r}; expected one of {sorted(METRICS)} "
                             "or a callable f(y_true, y_pred, y_prob, groups) -> float")
    return metrics


def metric_names(metrics: list[str | Callable[..., float]]) -> list[str]:
    """Display names: the built-in name or the callable's ``__name__``."""
    return [m if isinstance(m, str) else getattr(m, "__name__", "callable") for m in metrics]


def evaluate_metrics(prob: np.ndarray, y: np.ndarray, groups: np.ndarray,
                     metrics: list[str | Callable[..., float]]) -> np.ndarray:
    """Metric values of ``B`` masked models.

    Parameters
    ----------
    prob : ndarray of shape (B, n), float64
        Positive-class scores of each masked model on the evaluation rows.
    y : ndarray of shape (n,), 0/1
    groups : ndarray of shape (n,), int codes ``0 .. G-1`` (every code present)
    metrics : list of built-in names or callables ``f(y_true, y_pred, y_prob, groups)``

    Returns
    -------
    values : ndarray of shape (M, B), float64
    """
    n_groups = int(groups.max()) + 1
    yhat = (prob >= 0.5).astype(np.float64)
    cell = np.zeros((y.shape[0], 2 * n_groups))
    cell[np.arange(y.shape[0]), 2 * groups + y] = 1.0
    count = cell.sum(axis=0).reshape(n_groups, 2)  # (G, 2)
    pos = (yhat @ cell).reshape(-1, n_groups, 2)  # (B, G, 2) positive predictions per cell
    has_pos, has_neg = count[:, 1] > 0, count[:, 0] > 0  # groups where TPR / FPR are defined
    tpr = pos[:, :, 1] / np.where(has_pos, count[:, 1], 1.0)
    fpr = pos[:, :, 0] / np.where(has_neg, count[:, 0], 1.0)
    has_pos = np.broadcast_to(has_pos, tpr.shape)
    has_neg = np.broadcast_to(has_neg, fpr.shape)
    out = np.empty((len(metrics), prob.shape[0]))
    for k, m in enumerate(metrics):
        if m == "accuracy":
            correct = pos[:, :, 1].sum(axis=1) + (count[:, 0].sum() - pos[:, :, 0].sum(axis=1))
            out[k] = correct / y.shape[0]
        elif m == "demographic_parity":
            out[k] = -_range(pos.sum(axis=2) / count.sum(axis=1))
        elif m == "equal_opportunity":
            out[k] = -_range(tpr, has_pos)
        elif m == "equalized_odds":
            out[k] = -np.maximum(_range(tpr, has_pos), _range(fpr, has_neg))
        elif m == "predictive_parity":
            n_pos = pos.sum(axis=2)
            defined = n_pos > 0
            ppv = pos[:, :, 1] / np.where(defined, n_pos, 1.0)
            out[k] = -_range(ppv, defined)
        elif m == "calibration":
            mean_p = (prob @ cell).reshape(-1, n_groups, 2).sum(axis=2) / count.sum(axis=1)
            mean_y = count[:, 1] / count.sum(axis=1)
            out[k] = -_range(mean_p - mean_y)
        elif callable(m):  # a user callable, one call per masked model
            for b in range(prob.shape[0]):
                out[k, b] = float(m(y, yhat[b].astype(np.int64), prob[b], groups))
        else:
            raise ValueError(f"metrics: unknown metric {m!r}")
    return out
