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

from rml_fast._validation import Interval, check_array, check_scalar
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
                 progress: bool, tabulate: bool | str = "auto", max_table: int = 1 << 16) -> None:
        X = check_array(X, "X", ndim=2)
        if X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError(f"X must have at least one row and one column, got shape {X.shape}")
        background = check_array(background, "background", ndim=2)
        if background.shape[0] < 1 or background.shape[1] != X.shape[1]:
            raise ValueError(f"background must have shape (n_bg >= 1, {X.shape[1]}) (the columns "
                             f"of X), got {background.shape}")
        y01 = check_array(y01, "y01", dtypes=None, ndim=1)
        if y01.shape[0] != X.shape[0]:
            raise ValueError(f"y01 must have shape ({X.shape[0]},) (one label per row of X), got "
                             f"{y01.shape}")
        groups = np.asarray(groups)
        if groups.shape != (X.shape[0],):
            raise ValueError(f"groups must have shape ({X.shape[0]},) (one per row of X), got "
                             f"{groups.shape}")
        chunk_rows = check_scalar(chunk_rows, "chunk_rows", Interval("int", 1, None))
        max_table = check_scalar(max_table, "max_table", Interval("int", 1, None))
        self.model, self.X, self.y, self.groups = model, X, y01, groups
        self.metrics, self.players, self.masking = metrics, players, masking
        self.background, self.positive, self.train = background, positive, train
        self.chunk_rows, self.progress = chunk_rows, progress
        self.n_players = len(players)
        self.n_features = X.shape[1]
        self._base = baseline_row(background)  # used by the "baseline" masking
        self._table: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        if masking != "retrain" and tabulate:
            self._table = self._build_table(tabulate == "auto", max_table)

    def _build_table(self, auto: bool, max_table: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """Predict once on the grid of all level combinations when the features are discrete.

        Every masked row takes, column by column, a value of ``X``, of the background or of the
        baseline row, so it lies on the product grid of those columns' levels. When that grid
        has at most ``max_table`` points (and fewer than the rows the masked evaluation would
        predict), the model is evaluated once on the grid and a masked row's score is looked up
        by its mixed-radix code, which is additive over columns:
        ``code(x_S, b_-S) = sum_{j in S} r_j lx_j + sum_{j not in S} r_j lb_j``.
        """
        bg = self.background if self.masking == "interventional" else self._base[None, :]
        levels, radix, size = [], [], 1
        for j in range(self.n_features):
            lev = np.unique(np.concatenate([self.X[:, j], bg[:, j]]))
            levels.append(lev)
            radix.append(size)
            size *= lev.size
            if size > max_table:
                if auto:
                    return None
                raise ValueError(f"tabulate=True needs at most max_table = {max_table} level "
                                 f"combinations of the features, got more than {max_table}")
        n_model_rows = self.X.shape[0] * bg.shape[0] * (1 << min(self.n_players, 20))
        if auto and size >= n_model_rows:
            return None
        r = np.asarray(radix, dtype=np.int64)
        lx = np.stack([np.searchsorted(levels[j], self.X[:, j]) for j in range(self.n_features)],
                      axis=1) * r
        lb = np.stack([np.searchsorted(levels[j], bg[:, j]) for j in range(self.n_features)],
                      axis=1) * r
        codes = np.arange(size, dtype=np.int64)
        grid = np.empty((size, self.n_features))
        for j in range(self.n_features):
            grid[:, j] = levels[j][(codes // r[j]) % levels[j].size]
        table = np.empty(size)
        for c0 in range(0, size, self.chunk_rows):
            table[c0 : c0 + self.chunk_rows] = positive_scores(
                self.model, grid[c0 : c0 + self.chunk_rows], self.positive)
        return table, lx, lb, r

    @property
    def tabulated(self) -> bool:
        """Whether scores are looked up in a table of grid predictions (discrete features)."""
        return self._table is not None

    def _coalitions(self, coalitions: Any) -> np.ndarray:
        """``coalitions`` as a bool array of shape (B, d), checked (named in the errors)."""
        c = check_array(coalitions, "coalitions", dtypes=None, ndim=2)
        if c.shape[1] != self.n_players:
            raise ValueError(f"coalitions must have shape (B, {self.n_players}) (one column per "
                             f"player), got {c.shape}")
        if c.dtype != bool:
            if not np.all((c == 0) | (c == 1)):
                raise ValueError("coalitions must be boolean player masks (or 0/1 values)")
            c = c.astype(bool)
        return c

    def feature_masks(self, coalitions: np.ndarray) -> np.ndarray:
        """Player masks ``(B, d)`` -> feature masks ``(B, p)`` (a feature is kept if any player
        holding it is in the coalition)."""
        coalitions = self._coalitions(coalitions)
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
        if self._table is not None:
            self._lookup(self._table, fm, out)
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

    def _lookup(self, tab: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                fm: np.ndarray, out: np.ndarray) -> None:
        table, lx, lb, _ = tab
        n, n_bg = lx.shape[0], lb.shape[0]
        step = max(1, self.chunk_rows // (n * n_bg))
        f_int = fm.astype(np.int64)
        for c0 in tqdm(range(0, fm.shape[0], step), disable=not self.progress,
                       desc="coalitions", leave=False):
            f = f_int[c0 : c0 + step]  # (b, p)
            cx = lx @ f.T  # (n, b): codes of the kept columns
            cb = lb @ (1 - f).T  # (n_bg, b): codes of the masked columns
            vals = table[cx[:, None, :] + cb[None, :, :]]  # (n, n_bg, b)
            out[c0 : c0 + step] = vals.mean(axis=1).T

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
