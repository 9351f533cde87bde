"""Binarisers that turn numeric columns into 0/1 threshold features ``x_j <= t``.

``QuantileBinarizer`` uses per-column quantiles; ``ThresholdGuessBinarizer`` keeps only the
thresholds a gradient-boosted ensemble splits on (the "threshold guessing" of McTavish et al.,
"Fast Sparse Decision Tree Optimization via Reference Ensembles", AAAI 2022, arXiv:2112.00798),
which is what GOSDT/TreeFARMS users run before fitting. Columns that are already 0/1 are kept
as they are (one feature ``x_j == 1``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_array, check_rng, check_scalar

__all__ = [
    "QuantileBinarizer",
    "ThresholdGuessBinarizer",
]


class _Binarizer:
    fit: Callable[..., Any]  # defined by each subclass
    thresholds_: list[np.ndarray]
    binary_: np.ndarray
    feature_names_in_: list[str]

    def _check_X(self, X: Any, fitting: bool = False) -> np.ndarray:
        x = check_array(X, "X", dtypes=(np.float64, np.float32), ndim=2)
        if fitting and x.shape[0] == 0:
            raise ValueError(f"X must have at least one row to fit on, got shape {x.shape}")
        return x

    def _names(self, p: int, feature_names: Any) -> list[str]:
        if feature_names is None:
            return [f"x{j}" for j in range(p)]
        names = [str(n) for n in feature_names]
        if len(names) != p:
            raise ValueError(f"feature_names must have {p} entries, got {len(names)}")
        return names

    def _finish(self, x: np.ndarray, thresholds: list[np.ndarray], names: list[str]) -> None:
        self.n_features_in_ = x.shape[1]
        self.binary_ = np.array([np.isin(x[:, j], (0.0, 1.0)).all() for j in range(x.shape[1])])
        self.thresholds_ = [np.array([0.5]) if self.binary_[j] else np.unique(t)
                            for j, t in enumerate(thresholds)]
        self.feature_names_in_ = names
        out = []
        for j, ts in enumerate(self.thresholds_):
            if self.binary_[j]:
                out.append(f"{names[j]} == 1")
            else:
                out.extend(f"{names[j]} <= {t:.6g}" for t in ts)
        self.feature_names_out_ = out

    def transform(self, X: Any) -> np.ndarray:
        """0/1 features, array of shape (n, p_bin), uint8 (``x_j <= t``, or ``x_j == 1``)."""
        if not hasattr(self, "thresholds_"):
            raise RuntimeError(f"This {type(self).__name__} is not fitted yet; call fit(X)")
        x = self._check_X(X)
        if x.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {x.shape[1]} features, but {type(self).__name__} was "
                             f"fitted with {self.n_features_in_}")
        cols = []
        for j, ts in enumerate(self.thresholds_):
            if self.binary_[j]:
                cols.append((x[:, j] == 1)[:, None])
            else:
                cols.append(x[:, j][:, None] <= ts[None, :])
        if not cols:
            return np.zeros((x.shape[0], 0), dtype=np.uint8)
        return np.hstack(cols).astype(np.uint8)

    def fit_transform(self, X: Any, y: Any = None, feature_names: Any = None) -> np.ndarray:
        return self.fit(X, y, feature_names=feature_names).transform(X)


class QuantileBinarizer(_Binarizer):
    """Thresholds at ``n_thresholds`` evenly spaced quantiles of each numeric column.

    Parameters
    ----------
    n_thresholds : int, default=8
        Thresholds per numeric column (fewer when the column has fewer distinct values;
        the maximum is dropped since ``x <= max`` is always true).

    Attributes
    ----------
    thresholds_ : list of ndarray
    feature_names_out_ : list of str

    Examples
    --------
    >>> import numpy as np
    >>> b = QuantileBinarizer(n_thresholds=3).fit(np.arange(10.0)[:, None])
    >>> b.feature_names_out_
    ['x0 <= 2.25', 'x0 <= 4.5', 'x0 <= 6.75']
    >>> b.transform([[3.0]]).tolist()
    [[0, 1, 1]]
    """

    def __init__(self, n_thresholds: int = 8) -> None:
        self.n_thresholds = n_thresholds

    def fit(self, X: Any, y: Any = None, feature_names: Any = None) -> QuantileBinarizer:
        """Choose thresholds from ``X`` of shape (n, p), float."""
        k = int(check_scalar(self.n_thresholds, "n_thresholds", Interval("int", 1, None)))
        x = self._check_X(X, fitting=True)
        qs = np.arange(1, k + 1) / (k + 1)
        thresholds = []
        for j in range(x.shape[1]):
            col = x[:, j]
            t = np.unique(np.quantile(col, qs))
            thresholds.append(t[t < col.max()])
        self._finish(x, thresholds, self._names(x.shape[1], feature_names))
        return self


class ThresholdGuessBinarizer(_Binarizer):
    """Thresholds used by a gradient-boosted tree ensemble (GOSDT-style threshold guessing).

    Fits ``sklearn.ensemble.GradientBoostingClassifier(n_estimators, max_depth)`` and keeps
    every split threshold it uses (needs scikit-learn).

    Parameters
    ----------
    n_estimators : int, default=40
    max_depth : int, default=1
    rng : Generator, int or None, default=None
        Seed for the ensemble.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.linspace(0, 1, 100)[:, None]
    >>> b = ThresholdGuessBinarizer(n_estimators=5, rng=0).fit(x, (x[:, 0] > 0.3).astype(int))
    >>> len(b.feature_names_out_) >= 1
    True
    """

    def __init__(self, n_estimators: int = 40, max_depth: int = 1, rng: Any = None) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.rng = rng

    def fit(self, X: Any, y: Any = None, feature_names: Any = None) -> ThresholdGuessBinarizer:
        """Choose thresholds from ``X`` of shape (n, p), float, and labels ``y`` of shape (n,)."""
        try:
            from sklearn.ensemble import GradientBoostingClassifier
        except ImportError as exc:  # pragma: no cover - sklearn is in the test extra
            raise ImportError("ThresholdGuessBinarizer needs scikit-learn "
                              "(pip install scikit-learn)") from exc
        n_est = int(check_scalar(self.n_estimators, "n_estimators", Interval("int", 1, None)))
        depth = int(check_scalar(self.max_depth, "max_depth", Interval("int", 1, None)))
        x = self._check_X(X, fitting=True)
        if y is None:
            raise ValueError("y is required: thresholds are guessed from a supervised ensemble")
        yy = check_array(y, "y", dtypes=None, ndim=1)
        if yy.shape[0] != x.shape[0]:
            raise ValueError(f"y must have one entry per row of X ({x.shape[0]}), "
                             f"got {yy.shape[0]}")
        seed = int(check_rng(self.rng).integers(0, 2**31 - 1))
        gb = GradientBoostingClassifier(n_estimators=n_est, max_depth=depth, random_state=seed)
        gb.fit(x, yy)
        found: list[list[float]] = [[] for _ in range(x.shape[1])]
        for est in gb.estimators_.ravel():
            tree = est.tree_
            for f, t in zip(tree.feature, tree.threshold, strict=True):
                if f >= 0:
                    found[int(f)].append(float(t))
        self._finish(x, [np.array(t) for t in found], self._names(x.shape[1], feature_names))
        return self
