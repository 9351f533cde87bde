"""Lasso paths for wide dense designs (SAE decoders): screening, working sets, extrapolation.

Solves, for every penalty ``lam`` of a non-increasing path and every right-hand side ``y_b``
(column ``b`` of ``Y``), the Lasso without intercept in scikit-learn's scaling

.. math::

    \\hat w(\\lambda) = \\arg\\min_w \\frac{1}{2n} \\lVert y - X w \\rVert_2^2
                      + \\lambda \\lVert w \\rVert_1, \\qquad X \\in \\mathbb{R}^{n \\times m},

(``n = d`` rows, ``m`` features, ``m >> n`` is the intended regime) with the dual

.. math::

    D(\\theta) = \\frac{1}{2n}\\lVert y\\rVert^2 - \\frac{n\\lambda^2}{2}
                 \\lVert \\theta - y/(n\\lambda) \\rVert^2, \\quad \\lVert X^\\top\\theta\\rVert_\\infty \\le 1,

and stops when the duality gap ``P(w) - D(theta) <= tol * ||y||^2 / (2n)``.

Backends: ``"native"`` (C++, OpenMP over right-hand sides, GIL released; celer/skglm-style
gap-safe sphere screening, working sets grown from the dual constraint violations, inner
coordinate descent on a cached Gram matrix with Anderson extrapolation; correlations
``x_j^T r`` are recomputed only where the bound
``|x_j^T r| <= |c_j + a g_j| + ||x_j|| ||r - r_t - a q_t||`` from a past pass (``c_j = x_j^T r_t``,
``g_j = x_j^T q_t``, ``q_t`` the unit direction of the last residual step, ``a = q_t^T (r - r_t)``)
exceeds ``n lam``, which leaves the duality gap exact and costs about 0.13 passes over ``D``
per penalty on a warm-started path, see ``LassoPath.n_passes``), ``"triton"``
(batched FISTA with restarts and gap-safe screening, for CUDA tensors; see
:mod:`rml_fast.kernels.triton.lasso`), ``"reference"`` (plain NumPy cyclic coordinate
descent with the same stopping rule and screening, for tests).

References
----------
Fercoq, Gramfort, Salmon, "Mind the duality gap: safer rules for the Lasso", ICML 2015
(arXiv:1505.03410). Massias, Gramfort, Salmon, "Celer: a fast solver for the Lasso with dual
extrapolation", ICML 2018 (arXiv:1802.07481). Bertrand et al., "Beyond L1: faster and better
sparse models with skglm", NeurIPS 2022 (arXiv:2204.07826).
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np

from rml_fast._validation import Interval, check_array, check_scalar
from rml_fast.exceptions import ConvergenceWarning
from rml_fast.kernels._dispatch import Device, Kernel, device_of, resolve_device

__all__ = [
    "LassoPath",
    "LassoResult",
    "lambda_grid",
    "lambda_max",
    "lasso",
    "lasso_path",
    "lasso_path_gram",
    "lasso_path_reference",
    "ridge_refit",
]

_path = Kernel("lasso.path")


class LassoPath(NamedTuple):
    """Result of :func:`lasso_path`.

    Attributes
    ----------
    coefs : ndarray of shape (L, B, m) or (L, m), or list of L scipy CSR matrices (B, m)
        Coefficients (dtype of ``D``); 2-D when ``Y`` was 1-D; CSR when ``sparse=True``.
    gaps : ndarray of shape (L, B) or (L,), float64
        Duality gaps at exit (absolute, in the units of the objective), ``>= 0``, computed in
        float64. Triton backend: the gap of the returned coefficients. Native backend: the gap
        of the solver's float64 iterate, which a float32 ``D`` gets rounded to float32 (that
        rounding moves the gap by ~1e-7 of ``||y||^2 / (2n)``).
    n_epochs : ndarray of shape (L, B) or (L,), int64
        Inner coordinate-descent epochs (FISTA iterations on the Triton backend).
    lambdas : ndarray of shape (L,), float64
        The penalties.
    n_passes : ndarray of shape (L, B) or (L,), float64, or None
        Native backend: correlations ``x_j^T r`` computed, divided by ``m`` (the number of
        full passes over ``D`` the penalty cost; the first round of a penalty reuses the
        correlations of the last round of the previous one). None on the other backends.
    converged : ndarray of shape (L, B) or (L,), bool
        ``gaps <= tol * ||y_b||^2 / (2n)``: the solution meets the requested tolerance. Where
        it is False the solver ran out of ``max_epochs`` first, and :func:`lasso_path` has
        warned (:class:`rml_fast.exceptions.ConvergenceWarning`).
    """

    coefs: Any
    gaps: Any
    n_epochs: Any
    lambdas: np.ndarray
    n_passes: Any = None
    converged: Any = None


class LassoResult(NamedTuple):
    """Result of :func:`lasso`: ``coef`` of shape (m,) or (B, m), ``gap``, ``n_epochs`` and
    ``converged`` (bool or bool array of shape (B,), see :class:`LassoPath`)."""

    coef: Any
    gap: Any
    n_epochs: Any
    converged: Any = None


# --- validation ---------------------------------------------------------------------------


def _check_design(D: Any, Y: Any, *, finite_D: bool = True, y_name: str = "Y"
                  ) -> tuple[np.ndarray, np.ndarray, bool]:
    """``D`` (n, m) and ``Y`` as (n, B); errors name ``D`` and ``y_name`` (the caller's
    spelling of the target argument)."""
    D = check_array(D, "D", ndim=2, finite=finite_D)
    Y = check_array(Y, y_name, ndim=(1, 2))
    one_d = Y.ndim == 1
    if one_d:
        Y = Y[:, None]
    if Y.shape[0] != D.shape[0]:
        raise ValueError(
            f"{y_name} must have D.shape[0]={D.shape[0]} rows (one per row of D), got shape "
            f"{Y.shape}"
        )
    if D.shape[0] == 0 or D.shape[1] == 0 or Y.shape[1] == 0:
        raise ValueError(f"D and {y_name} must be non-empty, got D {D.shape} and {y_name} "
                         f"{Y.shape}")
    if Y.dtype != D.dtype:
        raise TypeError(
            f"{y_name} must have the dtype of D ({D.dtype}), got {Y.dtype}; cast one of them "
            "explicitly"
        )
    return D, Y, one_d


def _check_lambdas(lambdas: Any) -> np.ndarray:
    lam = check_array(lambdas, "lambdas", dtypes=(np.float64,), ndim=(0, 1))
    lam = np.atleast_1d(lam).astype(np.float64)
    if lam.size == 0:
        raise ValueError("lambdas must hold at least one value")
    if (lam <= 0).any():
        raise ValueError(f"lambdas must be strictly positive, got min {lam.min()!r}")
    if (np.diff(lam) > 0).any():
        raise ValueError("lambdas must be non-increasing (a path runs from large to small)")
    return np.ascontiguousarray(lam)


def _check_options(tol: Any, max_epochs: Any, ws_start: Any, anderson_k: Any, screening: Any) -> dict:
    out = {
        "tol": check_scalar(tol, "tol", Interval("real", 0, None, "left")),
        "max_epochs": check_scalar(max_epochs, "max_epochs", Interval("int", 0, None)),
        "ws_start": check_scalar(ws_start, "ws_start", Interval("int", 1, None)),
        "anderson_k": check_scalar(anderson_k, "anderson_k", Interval("int", 0, 64)),
    }
    if screening not in ("gap_safe", None, False):
        raise ValueError(f"screening must be 'gap_safe' or None, got {screening!r}")
    out["screening"] = screening == "gap_safe"
    return out


def _native_norms(D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fortran-ordered ``D`` and its squared column norms from one native pass that also
    checks finiteness (raises the ValueError ``check_array`` would)."""
    from rml_fast._native import _C

    D = np.asfortranarray(D)
    nrm2, finite = _C.lasso.col_norm2(D)
    if not finite:
        raise ValueError("D must be finite, got NaN or infinite values")
    return D, nrm2


def _col_norm2(D: np.ndarray, col_norm2: Any, computed: np.ndarray | None = None) -> np.ndarray:
    if col_norm2 is None:
        if computed is not None:
            return computed
        return np.einsum("ij,ij->j", D, D, dtype=np.float64)
    c = check_array(col_norm2, "col_norm2", dtypes=(np.float64,), ndim=1).astype(np.float64)
    if c.shape != (D.shape[1],):
        raise ValueError(f"col_norm2 must have shape ({D.shape[1]},), got {c.shape}")
    if (c < 0).any():
        raise ValueError("col_norm2 must be non-negative")
    return np.ascontiguousarray(c)


def _check_warm(warm_start: Any, B: int, m: int, one_d: bool) -> np.ndarray | None:
    if warm_start is None:
        return None
    w = check_array(warm_start, "warm_start", ndim=(1, 2)).astype(np.float64)
    if w.ndim == 1:
        w = np.broadcast_to(w, (B, w.shape[0]))
    if w.shape != (B, m):
        expect = f"({m},)" if one_d else f"({m},) or ({B}, {m})"
        raise ValueError(f"warm_start must have shape {expect}, got {np.shape(warm_start)}")
    return np.ascontiguousarray(w, dtype=np.float64)


# --- public API ---------------------------------------------------------------------------


def lambda_max(D: Any, Y: Any) -> np.ndarray | float:
    """Smallest penalty with an all-zero solution: ``||D^T y||_inf / n`` per right-hand side.

    Parameters
    ----------
    D : array-like of shape (n, m), float32 or float64
    Y : array-like of shape (n,) or (n, B), dtype of ``D``

    Returns
    -------
    lam_max : float or ndarray of shape (B,)

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.kernels.lasso import lambda_max
    >>> lambda_max(np.eye(2), np.array([2.0, -4.0]))
    2.0
    """
    D, Y, one_d = _check_design(D, Y)
    lm = np.abs(D.T.astype(np.float64) @ Y.astype(np.float64)).max(axis=0) / D.shape[0]
    return float(lm[0]) if one_d else lm


def lambda_grid(D: Any, Y: Any, n_lambdas: int = 50, eps: float = 1e-3) -> np.ndarray:
    """Geometric grid of ``n_lambdas`` penalties from ``max_b lambda_max`` down to ``eps`` times it.

    Returns
    -------
    lambdas : ndarray of shape (n_lambdas,), float64, decreasing
    """
    n_lambdas = check_scalar(n_lambdas, "n_lambdas", Interval("int", 1, None))
    eps = check_scalar(eps, "eps", Interval("real", 0, 1, "neither"))
    top = float(np.max(lambda_max(D, Y)))
    if top == 0.0:
        raise ValueError("Y is orthogonal to every column of D: lambda_max is 0")
    return np.geomspace(top, top * eps, int(n_lambdas))


def lasso_path(
    D: Any,
    Y: Any,
    lambdas: Any,
    *,
    col_norm2: Any = None,
    tol: float = 1e-6,
    max_epochs: int = 10_000,
    ws_start: int = 40,
    screening: str | None = "gap_safe",
    anderson_k: int = 5,
    working_set: bool = True,
    warm_start: Any = None,
    sparse: bool = False,
    n_threads: int | None = None,
    backend: str = "auto",
) -> LassoPath:
    """Lasso solutions along a penalty path, warm started, for one or many right-hand sides.

    Minimises ``1/(2n) ||y_b - D w||^2 + lam ||w||_1`` (scikit-learn's ``Lasso`` objective
    with ``fit_intercept=False``, ``n = D.shape[0]``) for every ``lam`` in ``lambdas`` and
    every column ``y_b`` of ``Y``, each warm started from the previous penalty.

    Parameters
    ----------
    D : array-like of shape (n, m), float32 or float64
        Design (the SAE decoder, one atom per column). Fortran order avoids a copy on the
        native backend. A CUDA torch tensor selects the Triton backend.
    Y : array-like of shape (n,) or (n, B), dtype of ``D``
        Targets.
    lambdas : float or array-like of shape (L,)
        Strictly positive, non-increasing penalties.
    col_norm2 : array-like of shape (m,), optional
        Squared column norms of ``D`` if known (computed otherwise).
    tol : float, default=1e-6
        Stop when the duality gap is at most ``tol * ||y_b||^2 / (2n)``.
    max_epochs : int, default=10_000
        Inner epochs allowed per (penalty, right-hand side).
    ws_start : int, default=40
        Smallest working set; each round's holds ``max(ws_start, 2 |support|)`` features
        (celer's pruning rule). celer and skglm start at 10; 40 saves one pass over ``D`` on
        a cold single-penalty solve with a support of a few tens (measured in
        ``benchmarks/bench_lasso.py``), and the Gram matrix of 40 columns costs far less
        than that pass.
    screening : {"gap_safe", None}, default="gap_safe"
        Gap-safe sphere screening (features certified zero are dropped).
    anderson_k : int, default=5
        Anderson extrapolation memory of the inner solver (0 disables).
    working_set : bool, default=True
        Solve on working sets (False: on all unscreened features).
    warm_start : array-like of shape (m,) or (B, m), optional
        Initial coefficients for the first penalty.
    sparse : bool, default=False
        Return ``coefs`` as a list of L scipy CSR matrices of shape (B, m).
    n_threads : int, optional
        OpenMP threads of the native backend (default: OpenMP's choice).
    backend : {"auto", "native", "triton", "reference"}, default="auto"

    Returns
    -------
    result : LassoPath
        ``(coefs, gaps, n_epochs, lambdas)``; see :class:`LassoPath` for shapes.

    Raises
    ------
    ValueError
        On shape mismatch, NaN/inf, non-positive or increasing ``lambdas``, bad options.
    TypeError
        If ``D`` is not float32/float64 or ``Y`` has another dtype than ``D``.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.kernels.lasso import lasso_path
    >>> D = np.linalg.qr(np.random.default_rng(0).standard_normal((4, 4)))[0]
    >>> y = D @ np.array([3.0, 0.0, -2.0, 0.0])
    >>> res = lasso_path(D, y, [1.0, 0.25])
    >>> np.round(res.coefs[-1], 6)  # soft_threshold(D^T y, n * lam)
    array([ 2.,  0., -1.,  0.])
    """
    dev = device_of(D)
    if dev.is_torch and (dev.kind == "cuda" or backend == "triton"):
        res = _path(D, Y, lambdas, tol=tol, max_epochs=max_epochs, screening=screening,
                    device=dev, backend=backend)
        _warn_unconverged(res, tol, max_epochs)
        return res
    if dev.is_torch:
        D = D.detach().cpu().numpy()
        Y = Y.detach().cpu().numpy() if hasattr(Y, "detach") else Y
    # The native backend checks D's finiteness in the same pass that computes its column norms.
    native = backend in ("auto", "native")
    D, Y2, one_d = _check_design(D, Y, finite_D=not native)
    norms = None
    if native:
        D, norms = _native_norms(D)
    lam = _check_lambdas(lambdas)
    opts = _check_options(tol, max_epochs, ws_start, anderson_k, screening)
    nrm2 = _col_norm2(D, col_norm2, norms)
    w0 = _check_warm(warm_start, Y2.shape[1], D.shape[1], one_d)
    if n_threads is not None:
        n_threads = check_scalar(n_threads, "n_threads", Interval("int", 1, None))
    if not isinstance(working_set, (bool, np.bool_)):
        raise TypeError(f"working_set must be a bool, got {type(working_set).__name__}")
    _check_path_memory(D, Y2.shape[1], lam.size, sparse, n_threads)
    indices, values, indptr, gaps, epochs, *passes = _path(
        D, Y2, lam, nrm2, w0, opts, bool(working_set), int(n_threads or 0),
        device=resolve_device(None), backend=backend,
    )
    res = _assemble(indices, values, indptr, gaps, epochs, lam, D.shape[1], Y2.shape[1], D.dtype,
                    one_d, sparse, passes[0] if passes else None,
                    converged=_converged(gaps, Y2, opts["tol"]))
    _warn_unconverged(res, opts["tol"], opts["max_epochs"])
    return res


def lasso_path_gram(
    G: Any,
    Xy: Any,
    yy: Any,
    n: Any,
    lambdas: Any,
    *,
    tol: float = 1e-6,
    max_epochs: int = 10_000,
    anderson_k: int = 5,
    warm_start: Any = None,
    n_threads: int | None = 1,
    polish: bool = True,
) -> LassoPath:
    """Lasso paths from Gram matrices (tall designs, ``n >= m``), for one or many problems.

    For each problem ``p`` (given by ``G_p = X_p^T X_p``, ``Xy_p = X_p^T y_p``,
    ``yy_p = y_p^T y_p`` and its sample count ``n_p``) and every penalty ``lam`` minimises

    ``1/(2 n_p) (yy_p - 2 w^T Xy_p + w^T G_p w) + lam ||w||_1``,

    which equals :func:`lasso_path`'s objective ``1/(2n) ||y - X w||^2 + lam ||w||_1`` of
    the design ``X_p``, without touching ``X_p``: every step costs ``O(m)``, not ``O(n)``
    (scikit-learn's ``precompute=True``). Cyclic coordinate descent keeps the correlations
    ``c = Xy - G w`` of all ``m`` features up to date (covariance updates), so the duality
    gap of :func:`lasso_path` (``||r||^2 = yy - w^T Xy - w^T c``, dual point
    ``r / max(n lam, ||c||_inf)``) is checked after every epoch, in ``O(m)``, and certified on
    recomputed correlations; Anderson extrapolation (``anderson_k`` iterates) accelerates the
    epochs, and ``polish`` solves the optimality conditions ``G_SS w_S = Xy_S - n lam s`` on
    a support ``S`` with signs ``s`` that an epoch left unchanged (Cholesky; kept when the
    signs agree and the objective decreases, so a path usually needs 2-3 epochs per penalty
    and ends at the exact optimum). Each penalty is warm started from the previous one; features with ``G_jj = 0``
    stay 0. The problems run in parallel on ``n_threads`` OpenMP threads (native C++).

    Parameters
    ----------
    G : array-like of shape (m, m) or (P, m, m)
        Symmetric positive semi-definite Gram matrices (float64 is used).
    Xy : array-like of shape (m,) or (P, m)
        ``X^T y`` per problem.
    yy : float or array-like of shape (P,)
        ``||y||^2`` per problem, ``>= 0``.
    n : float or array-like of shape (P,)
        Sample count of each problem (the ``n`` of ``1/(2n)``), ``> 0``.
    lambdas : float or array-like of shape (L,)
        Strictly positive, non-increasing penalties (shared by the problems).
    tol : float, default=1e-6
        Stop when the duality gap is at most ``tol * yy / (2n)`` (as :func:`lasso_path`).
        Below ``~1e-12`` the gap, computed from ``G``, is dominated by rounding.
    max_epochs : int, default=10_000
        Epochs allowed per (penalty, problem).
    anderson_k : int, default=5
        Anderson extrapolation memory (0 disables).
    warm_start : array-like of shape (m,) or (P, m), optional
        Initial coefficients for the first penalty.
    n_threads : int or None, default=1
        OpenMP threads over the problems (None: OpenMP's choice).
    polish : bool, default=True
        Support polishing (see above); False: coordinate descent only.

    Returns
    -------
    result : LassoPath
        ``coefs`` of shape (L, m) for a 2-D ``G``, (L, P, m) for a 3-D one (float64);
        ``gaps``, ``n_epochs``, ``converged`` of shape (L,) or (L, P); ``n_passes`` None.
        Warns :class:`rml_fast.exceptions.ConvergenceWarning` where ``max_epochs`` ran out.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.kernels.lasso import lasso_path_gram
    >>> X = np.linalg.qr(np.random.default_rng(0).standard_normal((4, 4)))[0]
    >>> y = X @ np.array([3.0, 0.0, -2.0, 0.0])
    >>> res = lasso_path_gram(X.T @ X, X.T @ y, y @ y, 4, [1.0, 0.25])
    >>> np.round(res.coefs[-1], 6)  # soft_threshold(X^T y, n * lam), as lasso_path
    array([ 2.,  0., -1.,  0.])
    """
    G = check_array(G, "G", dtypes=(np.float64,), ndim=(2, 3))
    one = G.ndim == 2
    G3 = G[None] if one else G
    P, m = G3.shape[0], G3.shape[1]
    if G3.shape[2] != m or m == 0 or P == 0:
        raise ValueError(f"G must be non-empty and square, (m, m) or (P, m, m), got {G.shape}")
    scale = float(np.abs(G3).max()) if G3.size else 0.0
    if np.abs(G3 - G3.transpose(0, 2, 1)).max() > 1e-10 * scale:
        raise ValueError("G must be symmetric (a Gram matrix X^T X)")
    if (np.einsum("pjj->pj", G3) < 0).any():
        raise ValueError("G must have a non-negative diagonal (a Gram matrix X^T X)")
    Xy = check_array(Xy, "Xy", dtypes=(np.float64,), ndim=(1, 2))
    if Xy.shape != ((m,) if one else (P, m)):
        raise ValueError(f"Xy must have shape {(m,) if one else (P, m)} to match G of shape "
                         f"{G.shape}, got {Xy.shape}")
    yy_a = check_array(yy, "yy", dtypes=(np.float64,), ndim=(0, 1))
    n_a = check_array(n, "n", dtypes=(np.float64,), ndim=(0, 1))
    yy_a = np.broadcast_to(np.atleast_1d(yy_a), (P,)) if yy_a.size in (1, P) else yy_a
    n_a = np.broadcast_to(np.atleast_1d(n_a), (P,)) if n_a.size in (1, P) else n_a
    if yy_a.shape != (P,):
        raise ValueError(f"yy must be a scalar or have shape ({P},), got {np.shape(yy)}")
    if n_a.shape != (P,):
        raise ValueError(f"n must be a scalar or have shape ({P},), got {np.shape(n)}")
    if (yy_a < 0).any():
        raise ValueError("yy must be non-negative (a squared norm)")
    if (n_a <= 0).any():
        raise ValueError("n must be positive (a sample count)")
    lam = _check_lambdas(lambdas)
    opts = _check_options(tol, max_epochs, 1, anderson_k, None)
    if n_threads is not None:
        n_threads = check_scalar(n_threads, "n_threads", Interval("int", 1, None))
    if not isinstance(polish, (bool, np.bool_)):
        raise TypeError(f"polish must be a bool, got {type(polish).__name__}")
    w0 = None
    if warm_start is not None:
        w0 = check_array(warm_start, "warm_start", ndim=(1, 2)).astype(np.float64)
        w0 = np.broadcast_to(w0, (P, m)) if w0.shape == (m,) else w0
        if w0.shape != (P, m):
            raise ValueError(f"warm_start must have shape ({m},) or ({P}, {m}), got {w0.shape}")
        w0 = np.ascontiguousarray(w0)
    from rml_fast._native import _C

    coefs, gaps, epochs = _C.lasso.gram_path(
        np.ascontiguousarray(G3), np.ascontiguousarray(Xy.reshape(P, m)),
        np.ascontiguousarray(yy_a, dtype=np.float64), np.ascontiguousarray(n_a, dtype=np.float64),
        lam, w0, tol=opts["tol"], max_epochs=opts["max_epochs"], anderson_k=opts["anderson_k"],
        n_threads=int(n_threads or 0), polish=bool(polish),
    )
    conv = gaps <= (opts["tol"] * yy_a / (2 * n_a))[:, None] * (1 + 1e-9)
    coefs, gaps, epochs, conv = coefs.transpose(1, 0, 2), gaps.T, epochs.T, conv.T
    if one:
        coefs, gaps, epochs, conv = coefs[:, 0], gaps[:, 0], epochs[:, 0], conv[:, 0]
    res = LassoPath(coefs, gaps, epochs, lam, None, conv)
    _warn_unconverged(res, opts["tol"], opts["max_epochs"])
    return res


def lasso(D: Any, y: Any, lam: float, **kwargs: Any) -> LassoResult:
    """Single-penalty Lasso ``argmin_w 1/(2n)||y - D w||^2 + lam ||w||_1``.

    Parameters
    ----------
    D : array-like of shape (n, m), float32 or float64
    y : array-like of shape (n,) or (n, B), dtype of ``D``
    lam : float
        Penalty, ``> 0``.
    **kwargs
        Options of :func:`lasso_path` (``tol``, ``warm_start``, ``backend`` ...).

    Returns
    -------
    result : LassoResult
        ``coef`` of shape (m,) (or (B, m)), ``gap`` and ``n_epochs`` (float / arrays (B,)).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.kernels.lasso import lasso
    >>> lasso(np.eye(3), np.array([3.0, -1.0, 0.5]), 1 / 3).coef  # soft_threshold(y, 1)
    array([2., 0., 0.])
    """
    lam = check_scalar(lam, "lam", Interval("real", 0, None, "neither"))
    if not device_of(D).is_torch:  # lasso_path calls the target Y: check it as y here
        _check_design(D, y, finite_D=False, y_name="y")
    res = lasso_path(D, y, [lam], **kwargs)
    coef = res.coefs[0]
    gap, ep, conv = res.gaps[0], res.n_epochs[0], res.converged[0]
    if np.ndim(gap) == 0:
        gap, ep, conv = float(gap), int(ep), bool(conv)
    return LassoResult(coef, gap, ep, conv)


def ridge_refit(D: Any, y: Any, support: Any, mu: float) -> np.ndarray:
    """Ridge refit restricted to a support (the "relaxed" debiasing step of SRLS).

    ``w_S = argmin 1/(2n)||y - D_S w_S||^2 + (mu/2)||w_S||^2 = (D_S^T D_S + n mu I)^{-1} D_S^T y``,
    ``w_j = 0`` off ``S`` (Cholesky solve; ``mu = 0`` gives least squares on ``S``). Equals
    ``sklearn.linear_model.Ridge(alpha=n * mu, fit_intercept=False).fit(D[:, S], y)``.

    Parameters
    ----------
    D : array-like of shape (n, m), float32 or float64
    y : array-like of shape (n,) or (n, B), dtype of ``D``
    support : array-like of int of shape (k,)
        Distinct feature indices in ``[0, m)``.
    mu : float
        Ridge strength, ``>= 0``.

    Returns
    -------
    coef : ndarray of shape (m,) or (B, m), dtype of ``D``

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.kernels.lasso import ridge_refit
    >>> ridge_refit(np.eye(3), np.array([2.0, 1.0, 4.0]), [0, 2], mu=1 / 3)
    array([1., 0., 2.])
    """
    D, Y, one_d = _check_design(D, y, y_name="y")
    mu = check_scalar(mu, "mu", Interval("real", 0, None))
    S = check_array(support, "support", dtypes=(np.int64,), ndim=1)
    m = D.shape[1]
    if S.size and (S.min() < 0 or S.max() >= m):
        raise ValueError(f"support must hold indices in [0, {m}), got range [{S.min()}, {S.max()}]")
    if np.unique(S).size != S.size:
        raise ValueError("support must not repeat an index")
    n = D.shape[0]
    out = np.zeros((Y.shape[1], m), dtype=D.dtype)
    if S.size:
        DS = D[:, S].astype(np.float64)
        A = DS.T @ DS + n * mu * np.eye(S.size)
        rhs = DS.T @ Y.astype(np.float64)
        try:
            import scipy.linalg

            sol = scipy.linalg.cho_solve(scipy.linalg.cho_factor(A, lower=True), rhs)
        except np.linalg.LinAlgError:
            sol = np.linalg.lstsq(A, rhs, rcond=None)[0]
        out[:, S] = sol.T
    return out[0] if one_d else out


# --- result assembly ------------------------------------------------------------------------


def _converged(gaps: np.ndarray, Y2: np.ndarray, tol: float) -> np.ndarray:
    """``gaps (L, B) <= tol ||y_b||^2 / (2n)`` (the solvers' stopping rule; the slack covers
    another summation order of ``||y_b||^2``)."""
    Yd = Y2.astype(np.float64, copy=False)
    tol_abs = tol * np.einsum("ij,ij->j", Yd, Yd) / (2 * Y2.shape[0])
    return np.asarray(gaps) <= tol_abs[None, :] * (1 + 1e-9)


def _warn_unconverged(res: LassoPath, tol: float, max_epochs: int) -> None:
    conv = np.asarray(res.converged)
    if conv.all():
        return
    gaps = np.asarray(res.gaps, dtype=np.float64).reshape(conv.shape[0], -1)
    bad = ~conv.reshape(gaps.shape)
    ell = int(np.argmax(np.where(bad, gaps, -np.inf).max(axis=1)))
    warnings.warn(
        f"lasso_path: {int(bad.sum())} of {bad.size} (penalty, right-hand side) problems "
        f"stopped at max_epochs={max_epochs} before reaching tol={tol:g}; the largest duality "
        f"gap left is {gaps[bad].max():.3g} (at lambdas[{ell}]={res.lambdas[ell]:.4g}). Raise "
        "max_epochs or tol; LassoPath.converged says which problems are affected.",
        ConvergenceWarning,
        stacklevel=3,
    )


def _assemble(indices, values, indptr, gaps, epochs, lam, m, B, dtype, one_d, sparse,
              passes=None, converged=None) -> LassoPath:
    L = lam.shape[0]
    if sparse:
        import scipy.sparse

        coefs: Any = []
        for ell in range(L):
            lo, hi = indptr[ell * B], indptr[(ell + 1) * B]
            coefs.append(
                scipy.sparse.csr_matrix(
                    (values[lo:hi].astype(dtype), indices[lo:hi], indptr[ell * B : (ell + 1) * B + 1] - lo),
                    shape=(B, m),
                )
            )
    else:
        coefs = np.zeros((L * B, m), dtype=dtype)
        rows = np.repeat(np.arange(L * B), np.diff(indptr))
        coefs[rows, indices] = values
        coefs = coefs.reshape(L, B, m)
        if one_d:
            coefs = coefs[:, 0, :]
    if one_d:
        gaps, epochs = gaps[:, 0], epochs[:, 0]
        passes = None if passes is None else passes[:, 0]
        converged = None if converged is None else converged[:, 0]
    return LassoPath(coefs, gaps, epochs, lam, passes, converged)


# --- backends ---------------------------------------------------------------------------------


_GRAM_CAP = 1024  # features in the native solver's Gram cache per problem (kGramCap)


def _check_path_memory(D: np.ndarray, B: int, L: int, sparse: bool, n_threads: Any) -> None:
    """Refuse (ResourceLimitError) a path whose dense coefficients and Gram caches exceed the
    memory limit: ``L B m`` coefficients unless ``sparse``, and one Gram cache of at most
    ``min(m, 1024)^2`` float64 per problem solved at once (``min(B, threads)``)."""
    from rml_fast.config import check_memory, get_num_threads

    m = D.shape[1]
    dense = 0 if sparse else L * B * m * D.dtype.itemsize
    k = min(m, _GRAM_CAP)
    gram = min(B, int(n_threads or get_num_threads())) * k * k * 8
    check_memory(dense + gram,
                 f"the Lasso path (dense coefficients (L, B, m) = ({L}, {B}, {m}) and Gram "
                 f"caches)", hint="pass sparse=True (CSR coefficients) or fewer lambdas or "
                 "right-hand sides per call")


@_path.register("native")
def _path_native(D, Y, lam, nrm2, w0, opts, working_set, n_threads, *, device: Device):
    from rml_fast._native import _C

    return _C.lasso.path(
        np.asfortranarray(D), np.asfortranarray(Y), lam, nrm2, w0,
        tol=opts["tol"], max_epochs=opts["max_epochs"], ws_start=opts["ws_start"],
        anderson_k=opts["anderson_k"], screening=opts["screening"], working_set=working_set,
        n_threads=n_threads,
    )


@_path.register("reference")
def _path_ref(
    D, Y, lam, nrm2, w0, opts, working_set, n_threads, *, device: Device
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    coefs, gaps, epochs = _reference_dense(
        D, Y, lam, nrm2, w0, opts["tol"], opts["max_epochs"], opts["screening"]
    )
    L, B, m = coefs.shape
    flat = coefs.reshape(L * B, m)
    rows, cols = np.nonzero(flat)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=L * B))])
    return cols.astype(np.int64), flat[rows, cols], indptr.astype(np.int64), gaps, epochs


def lasso_path_reference(
    D: Any,
    Y: Any,
    lambdas: Any,
    *,
    col_norm2: Any = None,
    tol: float = 1e-6,
    max_epochs: int = 10_000,
    screening: str | None = "gap_safe",
    warm_start: Any = None,
    sparse: bool = False,
) -> LassoPath:
    """Pure NumPy twin of :func:`lasso_path` (cyclic coordinate descent, same stopping rule).

    Every epoch visits all unscreened features with residual updates; every 10 epochs the
    duality gap is computed from the rescaled residual and, if ``screening="gap_safe"``,
    features passing the gap-safe sphere test are removed. Float64 arithmetic throughout;
    coefficients are returned in the dtype of ``D``. Meant for tests (Python loops).

    Returns
    -------
    result : LassoPath
        As :func:`lasso_path`.
    """
    D, Y2, one_d = _check_design(D, Y)
    lam = _check_lambdas(lambdas)
    opts = _check_options(tol, max_epochs, 10, 0, screening)
    nrm2 = _col_norm2(D, col_norm2)
    w0 = _check_warm(warm_start, Y2.shape[1], D.shape[1], one_d)
    indices, values, indptr, gaps, epochs = _path_ref(
        D, Y2, lam, nrm2, w0, opts, True, 0, device=resolve_device(None))
    res = _assemble(indices, values, indptr, gaps, epochs, lam, D.shape[1], Y2.shape[1],
                    D.dtype, one_d, sparse, converged=_converged(gaps, Y2, opts["tol"]))
    _warn_unconverged(res, opts["tol"], opts["max_epochs"])
    return res


def _gap(X, y, w, r, lam, n, active):
    c = X[:, active].T @ r
    s = max(n * lam, float(np.abs(c).max()) if c.size else 0.0)
    primal = r @ r / (2 * n) + lam * np.abs(w).sum()
    dual = lam * (r @ y) / s - n * lam**2 * (r @ r) / (2 * s * s)
    return max(0.0, primal - dual), c, s


def _reference_dense(D, Y, lam, nrm2, w0, tol, max_epochs, screening):
    X = D.astype(np.float64)
    n, m = X.shape
    B, L = Y.shape[1], lam.shape[0]
    coefs = np.zeros((L, B, m))
    gaps = np.zeros((L, B))
    epochs = np.zeros((L, B), dtype=np.int64)
    for b in range(B):
        y = Y[:, b].astype(np.float64)
        w = np.zeros(m) if w0 is None else w0[b].copy()
        w[nrm2 == 0] = 0.0
        tol_abs = tol * (y @ y) / (2 * n)
        for ell, lmb in enumerate(lam):
            active = np.flatnonzero(nrm2 > 0)
            r = y - X @ w
            ep = 0
            while True:
                gap, c, s = _gap(X, y, w, r, lmb, n, active)
                if gap <= tol_abs or ep >= max_epochs:
                    break
                if screening:
                    rho = np.sqrt(2 * gap / (n * lmb**2))
                    keep = np.abs(c) / s + np.sqrt(nrm2[active]) * rho >= 1.0
                    dropped = active[~keep]
                    r += X[:, dropped] @ w[dropped]
                    w[dropped] = 0.0
                    active = active[keep]
                for _ in range(min(10, max_epochs - ep)):
                    for j in active:
                        old = w[j]
                        z = old + (X[:, j] @ r) / nrm2[j]
                        t = n * lmb / nrm2[j]
                        new = np.sign(z) * max(abs(z) - t, 0.0)
                        if new != old:
                            r -= (new - old) * X[:, j]
                            w[j] = new
                    ep += 1
            coefs[ell, b], gaps[ell, b], epochs[ell, b] = w, gap, ep
    return coefs, gaps, epochs


@_path.register("triton")
def _path_triton(D, Y, lambdas, *, tol, max_epochs, screening, device: Device) -> LassoPath:
    from rml_fast.kernels.triton import lasso as triton_lasso

    return triton_lasso.fista_path(D, Y, lambdas, tol=tol, max_iter=max_epochs,
                                   screening=screening == "gap_safe")
