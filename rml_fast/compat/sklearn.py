"""scikit-learn's ``Lasso``, ``LassoCV`` and ``lasso_path`` on rml_fast's native Lasso kernel.

Swap the import and keep the code::

    from rml_fast.compat.sklearn import Lasso, LassoCV, lasso_path
    # instead of: from sklearn.linear_model import Lasso, LassoCV, lasso_path

Semantics are scikit-learn's (1.x):

- objective ``1/(2 n) ||y - X w - b||^2 + alpha ||w||_1`` (``n`` = number of samples; with
  ``sample_weight`` the weights are first rescaled to sum to ``n`` and the squared loss is
  weighted: ``1/(2 sum(sw)) sum_i sw_i (y_i - x_i w - b)^2``);
- ``fit_intercept`` by (weighted) centring of ``X`` and ``y``, rows rescaled by
  ``sqrt(sample_weight)``, ``intercept_ = y_offset - X_offset @ coef_``;
- stopping rule: scikit-learn's coordinate descent stops when its duality gap (in units of
  ``n`` times the objective above) is at most ``tol * ||y_c||^2`` (``y_c`` the centred,
  rescaled target), i.e. when the gap of the objective above is at most
  ``tol * ||y_c||^2 / n``. rml_fast's kernel stops at ``tol_k * ||y_c||^2 / (2 n)``, so it is
  called with ``tol_k = 2 * tol``: both solvers certify the same gap bound. ``dual_gap_`` is
  reported in the units of the objective above, as scikit-learn's.
- multi-output ``y`` of shape (n, k) in ``Lasso`` fits k independent Lassos (as scikit-learn's
  ``Lasso`` does), in one call of the multi-right-hand-side kernel.
- a solve that stops at ``max_iter`` epochs before meeting the tolerance warns with
  :class:`ConvergenceWarning`, a subclass of both ``sklearn.exceptions.ConvergenceWarning``
  and :class:`rml_fast.exceptions.ConvergenceWarning` (filters on either keep working).
  ``max_iter`` bounds the kernel's inner epochs per penalty (its epochs run over working sets,
  not over all features, so ``n_iter_`` counts are not scikit-learn's).

What raises instead of silently differing (``ValueError``/``TypeError`` naming the option,
before any work, nothing mutated): ``positive=True`` (the kernel has no sign constraint),
``selection="random"`` (the kernel's solver is deterministic), ``precompute`` given as a Gram
matrix, sparse ``X`` (the kernel is dense; densify with ``X.toarray()``), ``alpha=0``
(use ``LinearRegression``), negative ``sample_weight``, and 2-D ``y`` in :func:`lasso_path`
(scikit-learn solves the multi-task group Lasso there, which the kernel does not).
``precompute=True``/``"auto"``, ``copy_X`` and ``random_state`` are accepted: they change how
scikit-learn computes, never the solution; rml_fast never writes into ``X``, and its kernel
always caches the Gram matrix of its working set (``LassoCV`` on tall data works on the
folds' full Gram matrices, see :class:`LassoCV`).
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any, cast

import numpy as np
from scipy import sparse as _sparse
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning as _SkConvergenceWarning
from sklearn.model_selection import check_cv
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from rml_fast._sklearn_validation import naming
from rml_fast._validation import Interval, check_scalar
from rml_fast.exceptions import ConvergenceWarning as _RmlConvergenceWarning
from rml_fast.kernels import lasso as _lasso_kernel

__all__ = ["ConvergenceWarning", "Lasso", "LassoCV", "lasso_path"]


class ConvergenceWarning(_RmlConvergenceWarning, _SkConvergenceWarning):
    """A Lasso solve stopped at ``max_iter`` before meeting ``tol``.

    Subclass of both :class:`sklearn.exceptions.ConvergenceWarning` and
    :class:`rml_fast.exceptions.ConvergenceWarning`, so that a filter on either catches it.
    """


_RESOLUTION = float(np.finfo(np.float64).resolution)


# --- validation ---------------------------------------------------------------------------


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


_NON_NEGATIVE = Interval("real", 0.0, None, "left")
_POSITIVE = Interval("real", 0.0, None, "neither")
_COUNT = Interval("int", 1, None)


def _check_unsupported(*, positive: Any, selection: Any, precompute: Any) -> None:
    """Raise on the options whose semantics the kernel cannot give."""
    if _check_bool(positive, "positive"):
        raise ValueError(
            "positive=True is not supported by rml_fast.compat.sklearn: the Lasso kernel has "
            "no sign constraint; use sklearn.linear_model.Lasso(positive=True)"
        )
    if selection not in ("cyclic", "random"):
        raise ValueError(f"selection must be 'cyclic' or 'random', got {selection!r}")
    if selection == "random":
        raise ValueError(
            "selection='random' is not supported by rml_fast.compat.sklearn: the kernel's "
            "coordinate descent is deterministic (working sets, cyclic inner passes); use "
            "selection='cyclic' (same solution to tolerance)"
        )
    if isinstance(precompute, str):
        if precompute != "auto":
            raise ValueError(f"precompute must be a bool or 'auto', got {precompute!r}")
    elif not isinstance(precompute, (bool, np.bool_)):
        raise ValueError(
            "precompute given as a Gram matrix is not supported by rml_fast.compat.sklearn "
            "(the kernel builds the Gram matrix of its working set itself); pass "
            "precompute=False or True"
        )



def _warn_cv_unconverged(not_conv: int, max_iter: int, stacklevel: int) -> None:
    """The ConvergenceWarning of LassoCV's fold paths (none when ``not_conv`` is 0)."""
    if not_conv:
        warnings.warn(
            f"Objective did not converge for {not_conv} (penalty, fold) problems of the CV "
            f"paths after max_iter={max_iter} epochs. You might want to increase the "
            "number of iterations (max_iter) or the tolerance (tol).",
            ConvergenceWarning,
            stacklevel=stacklevel,
        )

def _check_target(y: Any, X: np.ndarray, *, multi_output: bool) -> np.ndarray:
    """``y`` as an array of ``X``'s dtype with ``X.shape[0]`` rows (1-D, or 2-D when
    ``multi_output``); errors name ``y``."""
    if y is None:
        raise ValueError("requires y to be passed, but the target y is None")
    if _sparse.issparse(y):
        raise TypeError("sparse y is not supported by rml_fast.compat.sklearn")
    with naming("y"):
        y = check_array(y, dtype=X.dtype.type, ensure_2d=False, input_name="y")
    if y.ndim not in ((1, 2) if multi_output else (1,)):
        raise ValueError(f"y must be 1-D{' or 2-D' if multi_output else ''}, got shape {y.shape}")
    if y.shape[0] != X.shape[0]:
        raise ValueError(
            f"y must have X.shape[0]={X.shape[0]} rows (one per sample), got shape {y.shape}"
        )
    return y


def _check_X(X: Any, name: str = "X") -> None:
    if _sparse.issparse(X):
        raise TypeError(
            f"sparse {name} is not supported by rml_fast.compat.sklearn: the Lasso kernel is "
            f"dense-only; densify it with {name}.toarray() or use sklearn.linear_model"
        )


def _check_sample_weight(sample_weight: Any, n: int, dtype: np.dtype) -> np.ndarray | None:
    if sample_weight is None or isinstance(sample_weight, numbers.Number):
        # a scalar weight is a uniform weight: scikit-learn rescales it away
        return None
    with naming("sample_weight"):
        sw = check_array(sample_weight, ensure_2d=False, dtype=dtype, input_name="sample_weight")
    if sw.ndim != 1 or sw.shape[0] != n:
        raise ValueError(
            f"sample_weight must have shape ({n},), got {np.shape(sample_weight)}"
        )
    if (sw < 0).any():
        raise ValueError("sample_weight must be non-negative, got negative values")
    if sw.sum() <= 0:
        raise ValueError("sample_weight must have a positive sum, got all weights zero")
    return sw


# --- the pieces shared by the estimators ---------------------------------------------------


def _preprocess(
    X: np.ndarray, y: np.ndarray, sw: np.ndarray | None, fit_intercept: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Centre (weighted) and rescale rows by ``sqrt(sw)``; ``sw`` already sums to ``n``.

    Returns new arrays ``(Xc, yc, X_offset, y_offset)``; ``X`` and ``y`` are not written.
    """
    X, y = np.asarray(X), np.asarray(y)  # plain ndarrays (a memmap subclass stays out)
    if fit_intercept:
        X_offset = np.average(X, axis=0, weights=sw).astype(X.dtype, copy=False)
        y_offset = np.average(y, axis=0, weights=sw).astype(X.dtype, copy=False)
        Xc = X - X_offset
        yc = y - y_offset
    else:
        X_offset = np.zeros(X.shape[1], dtype=X.dtype)
        y_offset = np.zeros(y.shape[1:], dtype=X.dtype)
        Xc = np.array(X, dtype=X.dtype, copy=True)
        yc = np.array(y, dtype=X.dtype, copy=True)
    if sw is not None:
        root = np.sqrt(sw).astype(X.dtype, copy=False)
        Xc *= root[:, None]
        yc *= root if yc.ndim == 1 else root[:, None]
    return np.asfortranarray(Xc), yc, X_offset, y_offset


def _solve_path(
    Xc: np.ndarray, Y: np.ndarray, alphas: np.ndarray, *, tol: float, max_iter: int,
    coef_init: np.ndarray | None = None,
) -> _lasso_kernel.LassoPath:
    """Kernel call with scikit-learn's stopping rule; warns :class:`ConvergenceWarning`.

    ``alphas`` must be non-increasing and positive.
    """
    with warnings.catch_warnings():
        # re-emitted below as the class that subclasses scikit-learn's
        warnings.simplefilter("ignore", _RmlConvergenceWarning)
        res = _lasso_kernel.lasso_path(
            Xc, Y, alphas, tol=2.0 * tol, max_epochs=max_iter, warm_start=coef_init
        )
    conv = np.asarray(res.converged)
    if not conv.all():
        gaps = np.asarray(res.gaps)
        warnings.warn(
            f"Objective did not converge for {int((~conv).sum())} of {conv.size} "
            f"(penalty, target) problems after max_iter={max_iter} epochs; largest duality "
            f"gap {float(gaps[~conv].max()):.3e}. You might want to increase the number of "
            "iterations (max_iter) or the tolerance (tol).",
            ConvergenceWarning,
            stacklevel=3,
        )
    return res


def _alpha_grid(
    Xc: np.ndarray, yc: np.ndarray, eps: float, n_alphas: int, n_eff: float,
    Xy: np.ndarray | None = None,
) -> np.ndarray:
    """scikit-learn's grid: ``geomspace(alpha_max, eps * alpha_max, n_alphas)`` with
    ``alpha_max = max_j ||(Xc^T yc)_j||_2 / n_eff`` on the centred, rescaled data."""
    corr = Xc.T @ yc if Xy is None else Xy
    corr = corr.reshape(corr.shape[0], -1).astype(np.float64)
    alpha_max = float(np.sqrt(np.max(np.sum(corr**2, axis=1)))) / n_eff
    if alpha_max <= _RESOLUTION:
        return np.full(n_alphas, _RESOLUTION)
    return np.geomspace(alpha_max, alpha_max * eps, num=n_alphas)


def _grid_size(n_alphas: Any, alphas: Any) -> tuple[int | None, np.ndarray | None]:
    """``(count, None)`` for a generated grid, ``(None, sorted alphas)`` for a given one."""
    if alphas is None:
        return int(check_scalar(n_alphas, "n_alphas", _COUNT)), None
    if isinstance(alphas, numbers.Integral) and not isinstance(alphas, (bool, np.bool_)):
        return int(check_scalar(alphas, "alphas", _COUNT)), None
    a = np.asarray(alphas, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError("alphas must hold at least one value")
    if not np.isfinite(a).all() or (a <= 0).any():
        raise ValueError(
            "alphas must be finite and > 0 (alpha=0 is least squares: use LinearRegression)"
        )
    return None, np.sort(a)[::-1].copy()


# --- lasso_path -----------------------------------------------------------------------------


def lasso_path(
    X: Any,
    y: Any,
    *,
    eps: float = 1e-3,
    n_alphas: int = 100,
    alphas: Any = None,
    precompute: Any = "auto",
    Xy: Any = None,
    copy_X: bool = True,
    coef_init: Any = None,
    verbose: Any = False,
    return_n_iter: bool = False,
    positive: bool = False,
    **params: Any,
) -> tuple:
    """Lasso path by rml_fast's kernel, with ``sklearn.linear_model.lasso_path``'s semantics.

    Minimises ``1/(2 n) ||y - X w||^2 + alpha ||w||_1`` (no intercept, as scikit-learn's
    ``lasso_path``) for every alpha, warm started from the previous one.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Dense training data (sparse raises ``TypeError``).
    y : array-like of shape (n_samples,)
        Target. 2-D ``y`` raises ``ValueError``: scikit-learn's ``lasso_path`` solves the
        multi-task (group) Lasso for it, which rml_fast's kernel does not.
    eps : float, default=1e-3
        ``alpha_min / alpha_max`` of the generated grid.
    n_alphas : int, default=100
        Length of the generated grid.
    alphas : array-like or int, optional
        The penalties (sorted decreasing, as scikit-learn does); an int is a grid length
        (scikit-learn >= 1.7 spelling). None: a grid of ``n_alphas``.
    precompute : bool or "auto", default="auto"
        Accepted, no effect on the result (a Gram matrix raises ``ValueError``).
    Xy : array-like of shape (n_features,), optional
        ``X.T @ y``, used for the grid's ``alpha_max``.
    copy_X : bool, default=True
        Accepted; ``X`` is never written.
    coef_init : array-like of shape (n_features,), optional
        Initial coefficients.
    verbose : bool or int, default=False
        Accepted, prints nothing.
    return_n_iter : bool, default=False
        Also return the kernel's epochs per alpha.
    positive : bool, default=False
        True raises ``ValueError`` (no sign constraint in the kernel).
    **params
        ``tol`` (default 1e-4), ``max_iter`` (default 1000), ``selection`` ("cyclic"),
        ``random_state``, ``check_input``; anything else raises ``TypeError``.

    Returns
    -------
    alphas : ndarray of shape (n_alphas,)
    coefs : ndarray of shape (n_features, n_alphas)
    dual_gaps : ndarray of shape (n_alphas,)
        Duality gaps in the units of the objective above.
    n_iters : list of int
        Only with ``return_n_iter=True``.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.compat.sklearn import lasso_path
    >>> alphas, coefs, gaps = lasso_path(np.eye(3), np.array([3.0, -1.0, 0.5]), alphas=[1 / 3])
    >>> coefs[:, 0]  # soft_threshold(y, n * alpha)
    array([2., 0., 0.])
    """
    unknown = set(params) - {"tol", "max_iter", "selection", "random_state", "check_input"}
    if unknown:
        raise TypeError(f"lasso_path() got unexpected keyword arguments {sorted(unknown)}")
    tol = check_scalar(params.get("tol", 1e-4), "tol", _NON_NEGATIVE)
    max_iter = int(check_scalar(params.get("max_iter", 1000), "max_iter", _COUNT))
    _check_unsupported(positive=positive, selection=params.get("selection", "cyclic"),
                       precompute=precompute)
    eps = check_scalar(eps, "eps", _POSITIVE)
    count, grid = _grid_size(n_alphas, alphas)
    _check_bool(return_n_iter, "return_n_iter")
    _check_X(X)
    if _sparse.issparse(y):
        raise TypeError("sparse y is not supported by rml_fast.compat.sklearn")
    with naming("X"):
        X = check_array(X, dtype=[np.float64, np.float32], order="F", input_name="X")
    with naming("y"):
        y = check_array(y, dtype=X.dtype.type, ensure_2d=False, input_name="y")
    if y.ndim != 1:
        raise ValueError(
            "y must be 1-D: for 2-D y scikit-learn's lasso_path solves the multi-task (group) "
            "Lasso, which rml_fast's kernel does not; call lasso_path once per column"
        )
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"y must have X.shape[0]={X.shape[0]} rows, got {y.shape[0]}")
    n, m = X.shape
    if Xy is not None:
        with naming("Xy"):
            Xy = check_array(Xy, dtype=np.float64, ensure_2d=False, input_name="Xy")
        if Xy.shape != (m,):
            raise ValueError(f"Xy must have shape ({m},), got {Xy.shape}")
    if coef_init is not None:
        with naming("coef_init"):
            coef_init = check_array(coef_init, dtype=np.float64, ensure_2d=False,
                                    input_name="coef_init")
        if coef_init.shape != (m,):
            raise ValueError(f"coef_init must have shape ({m},), got {coef_init.shape}")
    if grid is None:
        grid = _alpha_grid(X, y, eps, cast(int, count), float(n), Xy)  # an int when grid is None
    res = _solve_path(np.asfortranarray(np.asarray(X)), np.asarray(y), grid, tol=tol,
                      max_iter=max_iter, coef_init=coef_init)
    coefs = np.ascontiguousarray(np.asarray(res.coefs).T)
    gaps = np.asarray(res.gaps, dtype=np.float64)
    if return_n_iter:
        return grid, coefs, gaps, [int(e) for e in np.asarray(res.n_epochs)]
    return grid, coefs, gaps


# --- Lasso ----------------------------------------------------------------------------------


class _LinearPredictor(RegressorMixin, BaseEstimator):
    """``predict`` of a fitted linear model with ``coef_`` (n_features,) or
    (n_targets, n_features) and ``intercept_``."""

    def predict(self, X: Any) -> np.ndarray:
        """Predict ``X @ coef_.T + intercept_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y : ndarray of shape (n_samples,) or (n_samples, n_targets)
        """
        check_is_fitted(self, "coef_")
        _check_X(X)
        with naming("X"):
            X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return X @ self.coef_.T + self.intercept_


class Lasso(_LinearPredictor):
    """``sklearn.linear_model.Lasso`` on rml_fast's native Lasso kernel.

    Minimises ``1/(2 n) ||y - X w - b||^2 + alpha ||w||_1`` (weighted by ``sample_weight``
    rescaled to sum to ``n``), exactly scikit-learn's objective, stopping at scikit-learn's
    duality-gap tolerance (see the module docstring).

    Parameters
    ----------
    alpha : float, default=1.0
        L1 penalty, ``> 0`` (0 raises ``ValueError``: use ``LinearRegression``).
    fit_intercept : bool, default=True
        Fit an intercept by (weighted) centring.
    precompute : bool, default=False
        Accepted, no effect on the result; a Gram matrix raises ``ValueError``.
    copy_X : bool, default=True
        Accepted; ``X`` is never written.
    max_iter : int, default=1000
        Epochs of the kernel's inner solver allowed.
    tol : float, default=1e-4
        scikit-learn's tolerance: stop at duality gap ``<= tol * ||y_c||^2 / n``.
    warm_start : bool, default=False
        Start from the previous ``coef_``.
    positive : bool, default=False
        True raises ``ValueError``.
    random_state : int, RandomState or None, default=None
        Accepted, unused (only ``selection="random"`` would use it, and it raises).
    selection : {"cyclic"}, default="cyclic"
        ``"random"`` raises ``ValueError``.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
    intercept_ : float or ndarray of shape (n_targets,)
    n_iter_ : int or list of int
        Kernel epochs per target.
    dual_gap_ : float or ndarray of shape (n_targets,)
        Duality gap at exit, in the units of the objective.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.compat.sklearn import Lasso
    >>> reg = Lasso(alpha=0.1).fit([[0, 0], [1, 1], [2, 2]], [0, 1, 2])
    >>> np.round(reg.coef_, 4), round(float(reg.intercept_), 4)
    (array([0.85, 0.  ]), 0.15)
    """

    coef_: np.ndarray
    dual_gap_: Any
    n_iter_: int | list[int]

    def __init__(
        self,
        alpha: float = 1.0,
        *,
        fit_intercept: bool = True,
        precompute: Any = False,
        copy_X: bool = True,
        max_iter: int = 1000,
        tol: float = 1e-4,
        warm_start: bool = False,
        positive: bool = False,
        random_state: Any = None,
        selection: str = "cyclic",
    ) -> None:
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.precompute = precompute
        self.copy_X = copy_X
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start
        self.positive = positive
        self.random_state = random_state
        self.selection = selection

    def __sklearn_tags__(self) -> Any:
        """scikit-learn tags: multi-output regressor, dense input only."""
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.input_tags.sparse = False
        return tags

    def _check_params(self) -> tuple[float, float, int]:
        alpha = check_scalar(self.alpha, "alpha", _NON_NEGATIVE)
        if alpha == 0.0:
            raise ValueError(
                "alpha=0 is not supported by rml_fast.compat.sklearn (the Lasso kernel needs a "
                "positive penalty); use sklearn.linear_model.LinearRegression"
            )
        tol = check_scalar(self.tol, "tol", _NON_NEGATIVE)
        max_iter = int(check_scalar(self.max_iter, "max_iter", _COUNT))
        _check_bool(self.fit_intercept, "fit_intercept")
        _check_bool(self.copy_X, "copy_X")
        _check_bool(self.warm_start, "warm_start")
        _check_unsupported(positive=self.positive, selection=self.selection,
                           precompute=self.precompute)
        if isinstance(self.precompute, str):
            raise ValueError(f"precompute must be a bool for Lasso, got {self.precompute!r}")
        return alpha, tol, max_iter

    def fit(self, X: Any, y: Any, sample_weight: Any = None, check_input: bool = True) -> Lasso:
        """Fit the Lasso.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Dense training data (sparse raises ``TypeError``).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Target(s); cast to ``X``'s dtype. Several targets: independent Lassos.
        sample_weight : float or array-like of shape (n_samples,), optional
            Non-negative weights, rescaled to sum to ``n_samples``.
        check_input : bool, default=True
            Accepted for compatibility; the input is always checked.

        Returns
        -------
        self : Lasso
        """
        alpha, tol, max_iter = self._check_params()
        _check_X(X)
        with naming("X"):
            X = validate_data(self, X, dtype=[np.float64, np.float32])
        y = _check_target(y, X, multi_output=True)
        n, m = X.shape
        sw = _check_sample_weight(sample_weight, n, X.dtype)
        if sw is not None:
            sw = sw * (n / sw.sum())
        one_d = y.ndim == 1
        Y = y[:, None] if one_d else y
        k = Y.shape[1]
        coef_init = None
        if self.warm_start and hasattr(self, "coef_"):
            coef_init = np.atleast_2d(np.asarray(self.coef_, dtype=np.float64))
            if coef_init.shape != (k, m):
                raise ValueError(
                    f"warm_start: the previous coef_ has shape {np.shape(self.coef_)}, which "
                    f"does not fit {k} target(s) x {m} features"
                )
        Xc, Yc, X_offset, y_offset = _preprocess(X, Y, sw, self.fit_intercept)
        res = _solve_path(Xc, Yc, np.array([alpha]), tol=tol, max_iter=max_iter,
                          coef_init=coef_init)
        coef = np.asarray(res.coefs)[0].reshape(k, m).astype(X.dtype, copy=False)
        gaps = np.asarray(res.gaps).reshape(-1).astype(X.dtype)
        epochs = [int(e) for e in np.asarray(res.n_epochs).reshape(-1)]
        if k == 1:
            self.coef_ = coef[0]
            self.dual_gap_ = gaps[0]
            self.n_iter_ = epochs[0]
        else:
            self.coef_ = coef
            self.dual_gap_ = gaps
            self.n_iter_ = epochs
        if self.fit_intercept:
            off = y_offset if not one_d else y_offset[0]
            self.intercept_ = off - X_offset @ self.coef_.T
        else:
            self.intercept_ = 0.0
        return self

    @property
    def sparse_coef_(self) -> Any:
        """``coef_`` as a scipy CSR matrix (as scikit-learn's ``sparse_coef_``)."""
        check_is_fitted(self, "coef_")
        return _sparse.csr_matrix(np.atleast_2d(self.coef_))

    path = staticmethod(lasso_path)


# --- LassoCV --------------------------------------------------------------------------------


def _fold_mse(
    X: np.ndarray, y: np.ndarray, sw: np.ndarray | None, train: np.ndarray, test: np.ndarray,
    alphas: np.ndarray, fit_intercept: bool, tol: float, max_iter: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Test-fold mean squared error (weighted by ``sw``) along the path fitted on ``train``;
    also the converged flags."""
    sw_train = None
    if sw is not None:
        sw_train = sw[train] * (len(train) / sw[train].sum())
    Xc, yc, X_offset, y_offset = _preprocess(X[train], y[train], sw_train, fit_intercept)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = _solve_path(Xc, yc, alphas, tol=tol, max_iter=max_iter)
    coefs = np.asarray(res.coefs, dtype=np.float64)  # (L, m)
    intercepts = float(y_offset) - coefs @ X_offset.astype(np.float64)
    resid = X[test].astype(np.float64) @ coefs.T + intercepts - y[test][:, None]
    w = None if sw is None else sw[test]
    if w is not None and w.sum() == 0:
        raise ValueError("sample_weight sums to 0 on a test fold")
    return np.average(resid**2, axis=0, weights=w), np.asarray(res.converged)


# --- LassoCV on Gram matrices (n >= m) -------------------------------------------------------

_GRAM_MAX_FEATURES = 2048  # beyond, the residual-form kernel's working sets win
_GRAM_MIN_TOL = 1e-11  # below, the gap computed from G is dominated by rounding
# The Gram solver checks the gap after every epoch, so it stops just inside the bound it is
# given, where scikit-learn's (which checks only once its coordinate updates are small) and
# the residual kernel (inner solves to 0.3 of the gap) overshoot it: its paths are certified
# to this fraction of scikit-learn's bound, which keeps the held-out MSEs as close to the
# optimum as theirs (diabetes: 1e-4 relative instead of 2e-3 at the bound itself).
_GRAM_TOL_FACTOR = 0.03


class _GramCV:
    """The folds' Lasso problems in Gram form, from one centred copy of the data.

    ``X0 = X - mean(X)`` (weighted; no centring without intercept), ``S = X0^T diag(sw) X0``
    once; a training fold that is the complement of its test fold gets
    ``S_train = S - X0_test^T diag(sw_test) X0_test`` (otherwise ``X0_train^T ...`` directly),
    and its centred, weight-rescaled Gram matrix
    ``G = (n_tr / W_tr) (S_train - W_tr mu mu^T)`` (``mu`` the fold's weighted mean of ``X0``,
    ``W_tr`` its weight sum), which equals ``Xc^T Xc`` of the fold's :func:`_preprocess`.
    Centring on the global mean first keeps the subtraction well conditioned (the folds'
    means differ from it by about ``std / sqrt(n)``).
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, sw: np.ndarray | None,
                 fit_intercept: bool) -> None:
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        self.n = X.shape[0]
        self.fit_intercept = fit_intercept
        if fit_intercept:
            self.x_mean = np.average(X, axis=0, weights=sw)
            self.y_mean = float(np.average(y, weights=sw))
            self.X0, self.y0 = X - self.x_mean, y - self.y_mean
        else:
            self.x_mean, self.y_mean = np.zeros(X.shape[1]), 0.0
            self.X0, self.y0 = X, y
        self.sw = sw
        self.Xw = self.X0 if sw is None else self.X0 * sw[:, None]
        self.yw = self.y0 if sw is None else self.y0 * sw
        self.S = self.Xw.T @ self.X0
        self.sx, self.sxy = self.Xw.sum(axis=0), self.Xw.T @ self.y0
        self.sy, self.syy = float(self.yw.sum()), float(self.yw @ self.y0)

    def problem(self, train: np.ndarray | None, test: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray, float, float, np.ndarray, float]:
        """``(G, Xy, yy, n_tr, mu, ybar)`` of the training rows (``None``: all rows)."""
        if train is None:
            S, sx, sxy, sy, syy = self.S, self.sx, self.sxy, self.sy, self.syy
            n_tr, W = self.n, float(self.n if self.sw is None else self.sw.sum())
        else:
            n_tr = len(train)
            W = float(n_tr if self.sw is None else self.sw[train].sum())
            mask = np.zeros(self.n, dtype=bool)
            mask[train] = True
            complement = (test is not None and int(mask.sum()) == n_tr
                          and n_tr + len(test) == self.n and not mask[test].any())
            if complement and test is not None and len(test) < n_tr:
                Xt, Xtw, yt, ytw = self.X0[test], self.Xw[test], self.y0[test], self.yw[test]
                S = self.S - Xtw.T @ Xt
                sx, sxy = self.sx - Xtw.sum(axis=0), self.sxy - Xtw.T @ yt
                sy, syy = self.sy - float(ytw.sum()), self.syy - float(ytw @ yt)
            else:
                Xt, Xtw, yt, ytw = self.X0[train], self.Xw[train], self.y0[train], self.yw[train]
                S, sx, sxy = Xtw.T @ Xt, Xtw.sum(axis=0), Xtw.T @ yt
                sy, syy = float(ytw.sum()), float(ytw @ yt)
        if self.fit_intercept:
            mu, ybar = sx / W, sy / W
            G = S - W * np.outer(mu, mu)
            Xy = sxy - W * ybar * mu
            yy = syy - W * ybar * ybar
        else:
            mu, ybar = np.zeros_like(sx), 0.0
            G, Xy, yy = S, sxy, syy
        # A column constant on the training rows has G_jj = 0 up to the rounding of the
        # subtractions (~1e-16 of its squared norm); make it exactly 0 (the coefficient of a
        # constant column is 0, as on scikit-learn's centred fold).
        dead = np.diag(G) <= 1e-10 * np.maximum(np.diag(self.S), np.diag(S))
        c = n_tr / W
        G = c * G
        G = 0.5 * (G + G.T)  # exactly symmetric
        Xy = c * Xy
        if dead.any():
            G[dead, :] = 0.0
            G[:, dead] = 0.0
            Xy[dead] = 0.0
        return G, Xy, max(0.0, c * yy), float(n_tr), mu, ybar

    def fold_mse(self, coefs: np.ndarray, test: np.ndarray, mu: np.ndarray, ybar: float
                 ) -> np.ndarray:
        """Test MSE (weighted by ``sw``) of the path ``coefs`` (L, m) fitted with offsets
        ``mu``, ``ybar`` (the training fold's means in the centred coordinates)."""
        resid = (self.X0[test] - mu) @ coefs.T - (self.y0[test] - ybar)[:, None]
        w = None if self.sw is None else self.sw[test]
        return np.average(resid**2, axis=0, weights=w)


_BLAS_ONE_THREAD_FLOPS = 2**28  # Gram products below this run on one BLAS thread
_blas_controller: Any = None


def _blas_one_thread(flops: float) -> Any:
    """A context limiting BLAS to one thread when the products are small (``flops``): an
    OpenBLAS worker spin-waiting between the many small products of the folds costs more than
    it saves, by far on a loaded machine (digits, 2 busy cores: 0.6 s instead of 40 ms)."""
    import contextlib

    global _blas_controller
    if flops > _BLAS_ONE_THREAD_FLOPS:
        return contextlib.nullcontext()
    try:
        if _blas_controller is None:
            from threadpoolctl import ThreadpoolController

            _blas_controller = ThreadpoolController()
        return _blas_controller.limit(limits=1, user_api="blas")
    except Exception:  # threadpoolctl missing or failing: run as is
        return contextlib.nullcontext()


_GRAM_MAX_BYTES = 2**28  # the folds' Gram matrices together (P m^2 float64)


def _use_gram(n_min_train: int, m: int, tol: float, n_folds: int = 1) -> bool:
    """Gram form for tall data (scikit-learn's precompute="auto" rule) when the folds' Gram
    matrices fit in 256 MiB and ``tol`` is above the rounding of a Gram-form gap."""
    return (m <= min(n_min_train, _GRAM_MAX_FEATURES) and tol >= _GRAM_MIN_TOL
            and 8 * (n_folds + 1) * m * m <= _GRAM_MAX_BYTES)


class LassoCV(_LinearPredictor):
    """``sklearn.linear_model.LassoCV`` on rml_fast's native Lasso kernel.

    The alpha grid is computed on the full (centred, weighted) data, every CV fold fits the
    whole warm-started path on its training part (weights rescaled to sum to the fold's size),
    ``alpha_`` minimises the mean test MSE over folds, and a :class:`Lasso` with ``alpha_`` is
    refitted on all the data, as scikit-learn does. Folds come from
    ``sklearn.model_selection.check_cv(cv)`` (5-fold ``KFold`` by default).

    Tall data (``n_features <= `` the smallest training fold, ``n_features <= 2048``, the
    folds' Gram matrices within 256 MiB, ``tol >= 1e-11``; scikit-learn's
    ``precompute="auto"`` regime) is solved in Gram form: the data is
    centred once on its (weighted) mean, ``S = X_0^T diag(sw) X_0`` is computed once, each
    training fold's centred, rescaled Gram matrix is ``S`` minus its test rows' part, corrected
    for the fold's mean (computed directly when train and test do not partition the rows), and
    all folds' paths run in one native call
    (:func:`rml_fast.kernels.lasso.lasso_path_gram`: covariance-update coordinate descent,
    ``O(m)`` per step instead of ``O(n m)``, Anderson extrapolation); the refit at ``alpha_``
    (from zero) is solved the same way. These paths stop at a duality gap of 0.03 times
    scikit-learn's bound ``tol * ||y_c||^2 / n`` (a stricter certificate: the Gram solver
    checks the gap after every epoch and would otherwise stop just inside the bound, where
    scikit-learn's solver overshoots it; the held-out MSEs then stay as close to the optimum
    as scikit-learn's); ``ConvergenceWarning`` is issued only when a gap exceeds
    scikit-learn's bound. Wide data uses the residual-form kernel per fold.

    Parameters
    ----------
    eps : float, default=1e-3
        ``alpha_min / alpha_max`` of the generated grid.
    n_alphas : int, default=100
        Length of the generated grid.
    alphas : array-like or int, optional
        Given penalties (sorted decreasing, all ``> 0``), or an int grid length
        (scikit-learn >= 1.7 spelling). None: a grid of ``n_alphas``.
    fit_intercept : bool, default=True
    precompute : bool or "auto", default="auto"
        Accepted, no effect on the result (the Gram form is chosen by shape, see above); a
        Gram matrix raises ``ValueError``.
    max_iter : int, default=1000
    tol : float, default=1e-4
        scikit-learn's duality-gap tolerance (see :class:`Lasso`).
    copy_X : bool, default=True
        Accepted; ``X`` is never written.
    cv : int, cross-validation generator or iterable, optional
        As in scikit-learn (``check_cv``).
    verbose : bool or int, default=False
        Accepted, prints nothing.
    n_jobs : int, optional
        Folds run on this many threads (OpenMP in the Gram form, joblib otherwise; the kernels
        release the GIL). None: one.
    positive : bool, default=False
        True raises ``ValueError``.
    random_state : int, RandomState or None, default=None
        Accepted, unused.
    selection : {"cyclic"}, default="cyclic"
        ``"random"`` raises ``ValueError``.

    Attributes
    ----------
    alpha_ : float
    alphas_ : ndarray of shape (n_alphas,)
    mse_path_ : ndarray of shape (n_alphas, n_folds)
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    dual_gap_ : float
    n_iter_ : int
    n_features_in_ : int
    feature_names_in_ : ndarray of str

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.compat.sklearn import LassoCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((60, 5))
    >>> y = X @ np.array([1.0, 0.0, -2.0, 0.0, 0.0]) + 0.01 * rng.standard_normal(60)
    >>> reg = LassoCV(cv=3).fit(X, y)
    >>> bool(np.abs(reg.coef_ - [1.0, 0.0, -2.0, 0.0, 0.0]).max() < 0.05)
    True
    """

    def __init__(
        self,
        *,
        eps: float = 1e-3,
        n_alphas: int = 100,
        alphas: Any = None,
        fit_intercept: bool = True,
        precompute: Any = "auto",
        max_iter: int = 1000,
        tol: float = 1e-4,
        copy_X: bool = True,
        cv: Any = None,
        verbose: Any = False,
        n_jobs: int | None = None,
        positive: bool = False,
        random_state: Any = None,
        selection: str = "cyclic",
    ) -> None:
        self.eps = eps
        self.n_alphas = n_alphas
        self.alphas = alphas
        self.fit_intercept = fit_intercept
        self.precompute = precompute
        self.max_iter = max_iter
        self.tol = tol
        self.copy_X = copy_X
        self.cv = cv
        self.verbose = verbose
        self.n_jobs = n_jobs
        self.positive = positive
        self.random_state = random_state
        self.selection = selection

    path = staticmethod(lasso_path)

    def __sklearn_tags__(self) -> Any:
        """scikit-learn tags: single-output regressor, dense input only."""
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags

    def fit(self, X: Any, y: Any, sample_weight: Any = None, **params: Any) -> LassoCV:
        """Choose ``alpha_`` by cross-validation and refit on all the data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Dense training data (sparse raises ``TypeError``).
        y : array-like of shape (n_samples,)
            Target (2-D with several columns raises ``ValueError``, as scikit-learn's).
        sample_weight : float or array-like of shape (n_samples,), optional
        **params
            Passed to the splitter's ``split`` (e.g. ``groups``).

        Returns
        -------
        self : LassoCV
        """
        eps = check_scalar(self.eps, "eps", _POSITIVE)
        count, grid = _grid_size(self.n_alphas, self.alphas)
        tol = check_scalar(self.tol, "tol", _NON_NEGATIVE)
        max_iter = int(check_scalar(self.max_iter, "max_iter", _COUNT))
        fit_intercept = _check_bool(self.fit_intercept, "fit_intercept")
        _check_bool(self.copy_X, "copy_X")
        _check_unsupported(positive=self.positive, selection=self.selection,
                           precompute=self.precompute)
        if self.n_jobs is not None:
            check_scalar(self.n_jobs, "n_jobs", Interval("int", None, None))
        unknown = set(params) - {"groups"}
        if unknown:
            raise TypeError(f"LassoCV.fit() got unexpected keyword arguments {sorted(unknown)}")
        _check_X(X)
        with naming("X"):
            X = validate_data(self, X, dtype=[np.float64, np.float32])
        y = _check_target(y, X, multi_output=True)
        if y.ndim > 1 and y.shape[1] > 1:
            raise ValueError(
                f"y has {y.shape[1]} columns: for multi-task outputs, use MultiTaskLassoCV"
            )
        if y.ndim > 1:
            from sklearn.utils.validation import column_or_1d

            y = column_or_1d(y, warn=True)
        y = np.asarray(y, dtype=X.dtype)
        n = X.shape[0]
        sw = _check_sample_weight(sample_weight, n, X.dtype)
        folds = list(check_cv(self.cv).split(X, y, **params))
        if sw is not None:
            for train, test in folds:
                if sw[train].sum() <= 0:
                    raise ValueError("sample_weight sums to 0 on a training fold")
                if sw[test].sum() <= 0:
                    raise ValueError("sample_weight sums to 0 on a test fold")
        m = X.shape[1]
        if folds and _use_gram(min(len(tr) for tr, _ in folds), m, tol, len(folds)):
            with _blas_one_thread(2.0 * n * m * m):
                return self._fit_gram(X, y, sw, folds, grid, count, eps, fit_intercept, tol,
                                      max_iter)
        if grid is None:
            sw_full = None if sw is None else sw * (n / sw.sum())
            Xc, yc, _, _ = _preprocess(X, y, sw_full, fit_intercept)
            grid = _alpha_grid(Xc, yc, eps, cast(int, count), float(n))  # an int here
        from joblib import Parallel, delayed

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", _RmlConvergenceWarning)
            out = Parallel(n_jobs=self.n_jobs, prefer="threads")(
                delayed(_fold_mse)(X, y, sw, train, test, grid, fit_intercept, tol, max_iter)
                for train, test in folds
            )
        not_conv = sum(int((~c).sum()) for _, c in out)
        _warn_cv_unconverged(not_conv, max_iter, stacklevel=3)
        self.mse_path_ = np.stack([mse for mse, _ in out], axis=1)
        self.alphas_ = grid
        self.alpha_ = float(grid[int(np.argmin(self.mse_path_.mean(axis=1)))])
        model = Lasso(
            alpha=self.alpha_, fit_intercept=fit_intercept, copy_X=self.copy_X,
            max_iter=max_iter, tol=tol, random_state=self.random_state,
            selection=self.selection,
        )
        model.fit(X, y, sample_weight=sw)
        self.coef_ = model.coef_
        self.intercept_ = model.intercept_
        self.dual_gap_ = model.dual_gap_
        self.n_iter_ = model.n_iter_
        return self

    def _fit_gram(
        self, X: np.ndarray, y: np.ndarray, sw: np.ndarray | None, folds: list,
        grid: np.ndarray | None, count: int | None, eps: float, fit_intercept: bool,
        tol: float, max_iter: int,
    ) -> LassoCV:
        """``fit`` for ``n_features <= n_train`` (scikit-learn's ``precompute="auto"``
        regime): every fold's path and the refit are solved in Gram form, all folds in one
        native call (:func:`rml_fast.kernels.lasso.lasso_path_gram`)."""
        from joblib import effective_n_jobs

        data = _GramCV(X, y, sw, fit_intercept)
        n = X.shape[0]
        G_full, Xy_full, yy_full, _, mu_full, ybar_full = data.problem(None, None)
        if grid is None:  # scikit-learn's grid on the centred, rescaled data
            alpha_max = float(np.abs(Xy_full).max()) / n
            if alpha_max <= _RESOLUTION:
                grid = np.full(cast(int, count), _RESOLUTION)
            else:
                grid = np.geomspace(alpha_max, alpha_max * eps, num=cast(int, count))
        probs = [data.problem(train, test) for train, test in folds]
        jobs = 1 if self.n_jobs is None else int(effective_n_jobs(self.n_jobs))
        n_threads = max(1, min(len(folds), jobs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", _RmlConvergenceWarning)
            res = _lasso_kernel.lasso_path_gram(
                np.stack([p[0] for p in probs]), np.stack([p[1] for p in probs]),
                np.array([p[2] for p in probs]), np.array([p[3] for p in probs]), grid,
                tol=2.0 * tol * _GRAM_TOL_FACTOR, max_epochs=max_iter, n_threads=n_threads,
            )
        coefs = np.asarray(res.coefs)  # (L, P, m)
        yys = np.array([p[2] for p in probs])
        # converged: within scikit-learn's bound (the kernel aimed at a fraction of it)
        not_conv = int((np.asarray(res.gaps) > tol * yys / np.array([p[3] for p in probs])
                        * (1 + 1e-9)).sum())
        _warn_cv_unconverged(not_conv, max_iter, stacklevel=4)
        self.mse_path_ = np.stack(
            [data.fold_mse(np.ascontiguousarray(coefs[:, f]), test, probs[f][4], probs[f][5])
             for f, (_, test) in enumerate(folds)], axis=1)
        self.alphas_ = grid
        self.alpha_ = float(grid[int(np.argmin(self.mse_path_.mean(axis=1)))])
        # refit on all the data from zero, as scikit-learn's LassoCV does
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", _RmlConvergenceWarning)
            fit = _lasso_kernel.lasso_path_gram(G_full, Xy_full, yy_full, float(n),
                                                [self.alpha_], tol=2.0 * tol * _GRAM_TOL_FACTOR,
                                                max_epochs=max_iter)
        if float(fit.gaps[0]) > tol * yy_full / n * (1 + 1e-9):
            warnings.warn(
                f"Objective did not converge after max_iter={max_iter} epochs; duality gap "
                f"{float(fit.gaps[0]):.3e}. You might want to increase the number of "
                "iterations (max_iter) or the tolerance (tol).",
                ConvergenceWarning,
                stacklevel=3,
            )
        coef = np.asarray(fit.coefs[0])
        self.coef_ = coef.astype(X.dtype, copy=False)
        self.dual_gap_ = np.asarray(fit.gaps[0], dtype=np.float64).astype(X.dtype)[()]
        self.n_iter_ = int(fit.n_epochs[0])
        if fit_intercept:
            x_off = data.x_mean + mu_full
            y_off = data.y_mean + ybar_full
            self.intercept_ = np.asarray(y_off - x_off @ coef).astype(X.dtype)[()]
        else:
            self.intercept_ = 0.0
        return self
