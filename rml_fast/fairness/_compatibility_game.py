"""The metric game ``v_m(S)``: metrics of a model whose features outside coalition ``S`` are masked.

Coalition batches are pushed through the model in chunks of at most ``chunk_rows`` rows; the
metrics of a whole batch come from :func:`evaluate_metrics` (group rates by one matrix product).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.base import clone
from tqdm.auto import tqdm

from rml_fast.fairness._compatibility_metrics import evaluate_metrics

MASKINGS = ("interventional", "baseline", "retrain")


def positive_scores(model: Any, X: np.ndarray, positive: Any) -> np.ndarray:
    """Positive-class probability (``predict_proba``) or the 0/1 prediction as float64."""
    if hasattr(model, "predict_proba"):
        proba = np.asarray(model.predict_proba(X))
        classes = list(getattr(model, "classes_", [0, 1]))
        col = classes.index(positive) if positive in classes else proba.shape[1] - 1
        return proba[:, col].astype(np.float64)
    return (np.asarray(model.predict(X)) == positive).astype(np.float64)


def baseline_row(background: np.ndarray) -> np.ndarray:
    """Column mode for integer-valued columns, column mean otherwise (the "baseline" masking)."""
    out = background.mean(axis=0).astype(np.float64)
    for j in range(background.shape[1]):
        col = background[:, j]
        if np.all(col == np.round(col)):
            vals, counts = np.unique(col, return_counts=True)
            out[j] = vals[np.argmax(counts)]
    return out


class MetricGame:
    """Callable game: boolean player masks ``(B, d)`` -> metric values ``(M, B)``.

    Built by :func:`rml_fast.fairness.compatibility.metric_game`, which validates its inputs.
    """

    def __init__(self, model: Any, X: np.ndarray, y01: np.ndarray, groups: np.ndarray,
                 metrics: list[str | Callable[..., float]], players: list[list[int]],
                 masking: str, background: np.ndarray, positive: Any,
                 train: tuple[np.ndarray, np.ndarray] | None, chunk_rows: int,
                 progress: bool) -> None:
        self.model, self.X, self.y, self.groups = model, X, y01, groups
        self.metrics, self.players, self.masking = metrics, players, masking
        self.background, self.positive, self.train = background, positive, train
        self.chunk_rows, self.progress = chunk_rows, progress
        self.n_players = len(players)
        self.n_features = X.shape[1]
        self._base = baseline_row(background)  # used by the "baseline" masking

    def feature_masks(self, coalitions: np.ndarray) -> np.ndarray:
        """Player masks ``(B, d)`` -> feature masks ``(B, p)`` (a feature is kept if any player
        holding it is in the coalition)."""
        fm = np.zeros((coalitions.shape[0], self.n_features), dtype=bool)
        for i, cols in enumerate(self.players):
            fm[:, cols] |= coalitions[:, i : i + 1]
        return fm

    def scores(self, coalitions: np.ndarray) -> np.ndarray:
        """Positive-class scores of each masked model on the evaluation rows; (B, n)."""
        fm = self.feature_masks(coalitions)
        n = self.X.shape[0]
        out = np.empty((fm.shape[0], n))
        if self.masking == "retrain":
            self._retrain(fm, out)
            return out
        n_bg = self.background.shape[0] if self.masking == "interventional" else 1
        per_row = n_bg  # model rows per evaluation row and coalition
        rows_per_coal = n * per_row
        if rows_per_coal <= self.chunk_rows:
            step_c, step_n = max(1, self.chunk_rows // rows_per_coal), n
        else:
            step_c, step_n = 1, max(1, self.chunk_rows // per_row)
        blocks = [(c0, r0) for c0 in range(0, fm.shape[0], step_c) for r0 in range(0, n, step_n)]
        for c0, r0 in tqdm(blocks, disable=not self.progress, desc="coalitions", leave=False):
            f = fm[c0 : c0 + step_c]  # (b, p)
            x = self.X[r0 : r0 + step_n]  # (r, p)
            if self.masking == "interventional":
                z = np.where(f[:, None, None, :], x[None, :, None, :],
                             self.background[None, None, :, :])  # (b, r, n_bg, p)
                s = positive_scores(self.model, z.reshape(-1, self.n_features), self.positive)
                out[c0 : c0 + step_c, r0 : r0 + step_n] = s.reshape(
                    f.shape[0], x.shape[0], n_bg).mean(axis=2)
            else:
                z = np.where(f[:, None, :], x[None, :, :], self._base[None, None, :])
                s = positive_scores(self.model, z.reshape(-1, self.n_features), self.positive)
                out[c0 : c0 + step_c, r0 : r0 + step_n] = s.reshape(f.shape[0], x.shape[0])
        return out

    def _retrain(self, fm: np.ndarray, out: np.ndarray) -> None:
        if self.train is None:
            raise RuntimeError("retrain masking needs training data; build the game with metric_game")
        X_tr, y_tr = self.train
        for b in tqdm(range(fm.shape[0]), disable=not self.progress, desc="refits", leave=False):
            cols = np.flatnonzero(fm[b])
            if cols.size == 0 or np.unique(y_tr).size < 2:
                out[b] = float(np.mean(y_tr == self.positive))
                continue
            est = clone(self.model).fit(X_tr[:, cols], y_tr)
            out[b] = positive_scores(est, self.X[:, cols], self.positive)

    def __call__(self, coalitions: np.ndarray) -> np.ndarray:
        """Metric values ``(M, B)`` of the coalitions given as boolean player masks ``(B, d)``."""
        return evaluate_metrics(self.scores(coalitions), self.y, self.groups, self.metrics)
