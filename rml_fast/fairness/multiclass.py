"""Optimal multi-class fair classification (OptFair, arXiv 2606.00656).

The Bayes-optimal classifier under group-fairness constraints, for any number of classes ``K``
and groups ``G``, in four forms:

* :func:`exact_fair_lp` -- the exact frontier of a *discrete* problem (finitely many cells with
  known ``eta(x) = P(Y|x)`` and group probabilities) as a linear program (cvxpy, HiGHS/Clarabel).
* :class:`OptFairPostProcessor` -- the plug-in post-processor: from base probabilities
  ``eta_hat`` and group-membership probabilities it solves the entropy-regularised dual
  ``min_lambda tau E[logsumexp((eta - Phi lambda)/tau)] + xi ||lambda||_1`` (FISTA with restart)
  and predicts ``h(x) = softmax((eta(x) - Phi(x) lambda)/tau)``.
* :class:`OptFairInProcessing` -- the in-processing reduction: a torch softmax model trained on
  the saddle point ``min_theta max_lambda CE(theta) + sum_c lambda_c g_c(theta) - xi ||lambda||_1``.
* :class:`OptFairReduction` -- the reductions route (Agarwal et al. 2018) for any scikit-learn
  learner: exponentiated gradient over cost-sensitive fits, mixed by an LP.

The constraints ("dp", "eop", "eo") are linear functionals ``|E <h(X), phi_c(X)>| <= xi``:

* ``"dp"`` (demographic parity), for every class ``k`` and group ``a``:
  ``|P(Yhat=k | A=a) - P(Yhat=k)| <= xi`` with ``phi_{k,a}(x) = e_k (p_a(x)/pi_a - 1)``.
* ``"eop"`` (equal opportunity), for every ``(k, a)``:
  ``|P(Yhat=k | Y=k, A=a) - P(Yhat=k | Y=k)| <= xi`` with
  ``phi_{k,a}(x) = e_k (q_{a,k}(x)/pi_{a,k} - eta_k(x)/pi_k)``, ``q_{a,k}(x) = P(A=a, Y=k | x)``.
* ``"eo"`` (equalised odds), for every ``(j, k, a)``: the same for ``Yhat=j`` given ``Y=k``.

This encoding of the paper's "constraints over group-specific confusion matrices" is the
spec's PROPOSAL (the paper's text was not available to us); so are the defaults ``tau=0.01``,
``xi=0.05`` and the in-processing step sizes.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.validation import _check_sample_weight, check_is_fitted
from threadpoolctl import threadpool_limits

from rml_fast._sklearn_validation import check_targets_named as check_targets
from rml_fast._sklearn_validation import validate_named
from rml_fast._validation import Interval, check_array, check_rng, check_scalar
from rml_fast.exceptions import ConvergenceWarning, InfeasibleError
from rml_fast.fairness._multiclass_dual import fista_dual, lbfgs_dual, softmax_scores

__all__ = [
    "CONSTRAINTS",
    "InfeasibleError",
    "OptFairInProcessing",
    "OptFairPostProcessor",
    "OptFairReduction",
    "disparity",
    "exact_fair_lp",
    "fairness_frontier",
]

#: the supported group-fairness constraints
CONSTRAINTS = ("dp", "eop", "eo")


# --- validation helpers -------------------------------------------------------------------------


def _check_constraint(constraint: Any) -> str:
    if constraint not in CONSTRAINTS:
        raise ValueError(f"constraint must be one of {CONSTRAINTS}, got {constraint!r}")
    return str(constraint)


def _check_xi(xi: Any) -> float:
    if isinstance(xi, (bool, np.bool_)) or not isinstance(xi, numbers.Real):
        raise TypeError(f"xi must be a real number >= 0, got {type(xi).__name__} {xi!r}")
    xi = float(xi)
    if not np.isfinite(xi):
        raise ValueError(f"xi must be a finite real number >= 0, got {xi!r}")
    if xi < 0:
        raise InfeasibleError(
            f"xi={xi!r} < 0: the constraints |disparity| <= xi are infeasible (xi must be >= 0)")
    return xi


def _check_proba(p: Any, name: str) -> np.ndarray:
    p = check_array(p, name, ndim=2).astype(np.float64, copy=False)
    if p.shape[0] == 0 or p.shape[1] < 2:
        raise ValueError(f"{name} must have shape (n, K) with n >= 1 and K >= 2, got {p.shape}")
    if (p < -1e-9).any() or np.abs(p.sum(axis=1) - 1.0).max() > 1e-6:
        raise ValueError(f"{name} must hold probability rows (>= 0, summing to 1)")
    return p


def _factorize(s: Any, name: str, *, min_groups: int = 2) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(s)
    if s.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one group label per sample), got shape {s.shape}")
    groups, codes = np.unique(s, return_inverse=True)
    if groups.size < min_groups:
        raise ValueError(
            f"{name} has {groups.size} group(s) ({groups.tolist()}); a fairness constraint needs "
            f"at least {min_groups} groups")
    return groups, codes


def _normalised_weights(sample_weight: Any, n: int) -> np.ndarray:
    if sample_weight is None:
        return np.full(n, 1.0 / n)
    w = check_array(sample_weight, "sample_weight", ndim=1).astype(np.float64)
    if w.shape[0] != n:
        raise ValueError(f"sample_weight must have shape ({n},), got {w.shape}")
    if (w < 0).any() or w.sum() <= 0:
        raise ValueError("sample_weight must be >= 0 with a positive sum")
    return w / w.sum()


# --- constraint features ------------------------------------------------------------------------


def _joint(eta: np.ndarray, group_proba: np.ndarray) -> np.ndarray:
    """``q_{a,k}(x) = P(A=a, Y=k | x)``, shape (n, G, K), from (n, G) or (n, G, K)."""
    if group_proba.ndim == 2:
        return group_proba[:, :, None] * eta[:, None, :]
    return group_proba


def _marginals(eta, group_proba, constraint, w):
    """The plug-in population marginals ``pi`` the features are normalised by."""
    if constraint == "dp":
        p = group_proba if group_proba.ndim == 2 else group_proba.sum(axis=2)
        pi = w @ p
        bad = np.flatnonzero(pi <= 0)
        if bad.size:
            raise ValueError(f"group(s) {bad.tolist()} have zero probability mass")
        return {"pi_a": pi}
    q = _joint(eta, group_proba)
    pi_ak = np.einsum("i,iak->ak", w, q)
    pi_k = w @ eta
    if (pi_ak <= 0).any():
        a, k = np.argwhere(pi_ak <= 0)[0]
        raise ValueError(
            f"the cell (group {a}, class {k}) has zero probability mass: "
            f"P(Y=k | A=a) is undefined, so constraint={constraint!r} cannot be enforced")
    return {"pi_ak": pi_ak, "pi_k": pi_k}


def _features(eta, group_proba, constraint, marg):
    """``R`` (n, M) and ``mask`` (K, M) with ``phi_c(x) = e_{j(c)} R[:, m(c)]``."""
    K = eta.shape[1]
    if constraint == "dp":
        p = group_proba if group_proba.ndim == 2 else group_proba.sum(axis=2)
        R = p / marg["pi_a"] - 1.0
        mask = np.ones((K, R.shape[1]), dtype=bool)
        if K == 2:          # h_1 = 1 - h_0 and E[R] = 0: the j = 1 constraints repeat j = 0
            mask[1] = False
        return R, mask
    q = _joint(eta, group_proba)
    G = q.shape[1]
    R = (q / marg["pi_ak"][None] - (eta / marg["pi_k"])[:, None, :]).reshape(-1, G * K)
    if constraint == "eo":
        mask = np.ones((K, G * K), dtype=bool)
        if K == 2:          # as for dp: the j = 1 constraints repeat j = 0 with the sign flipped
            mask[1] = False
    else:  # eop: (j, (a, k)) active iff j == k
        mask = np.zeros((K, G * K), dtype=bool)
        for a in range(G):
            mask[np.arange(K), a * K + np.arange(K)] = True
    return R, mask


def _constraint_labels(constraint: str, K: int, G: int) -> list[tuple[int, ...]]:
    """(k, a) for dp/eop, (j, k, a) for eo, in the order of ``lambda_``."""
    if constraint == "dp":
        return [(k, a) for k in range(K) for a in range(G)]
    if constraint == "eop":
        return [(k, a) for k in range(K) for a in range(G)]
    return [(j, k, a) for j in range(K) for a in range(G) for k in range(K)]


def _flat_lambda(lam: np.ndarray, mask: np.ndarray, constraint: str, K: int, G: int) -> np.ndarray:
    if constraint == "dp":
        return lam.ravel().copy()
    if constraint == "eop":
        return np.array([lam[k, a * K + k] for k in range(K) for a in range(G)])
    return np.array([lam[j, a * K + k] for j in range(K) for a in range(G) for k in range(K)])


def _solve_dual(eta, R, w, mask, tau, xi, *, solver, max_iter, tol):
    """FISTA: continuation in ``tau`` (0.1 down by 5x, warm-started); L-BFGS-B: one solve,
    polished by FISTA if it stalls before the KKT tolerance."""
    taus = []
    t = 0.1
    while solver == "fista" and t > tau * 1.5:
        taus.append(t)
        t *= 0.2
    taus.append(tau)
    solve = fista_dual if solver == "fista" else lbfgs_dual
    lam = None
    total = 0
    # the dual has at most K^2 G variables: threaded BLAS never pays there, and a busy machine's
    # BLAS threads slow L-BFGS-B's small vector updates by 10-20x
    with threadpool_limits(limits=1, user_api="blas"):
        for t in taus:
            res = solve(eta, R, w, mask, t, xi, lam0=lam, max_iter=max_iter, tol=tol)
            lam, total = res.lam, total + res.n_iter
        if not res.converged and solver == "lbfgs":
            # L-BFGS-B can stall at a kink of the l1 term (its line search stops on the
            # objective); FISTA's proximal steps finish the job from there
            polish = fista_dual(eta, R, w, mask, tau, xi, lam0=lam, max_iter=max_iter, tol=tol)
            polish.history = res.history + polish.history[1:]
            res, total = polish, total + polish.n_iter
    res.n_iter = total
    return res


# --- public functions ---------------------------------------------------------------------------


def disparity(y_pred: Any, y: Any, sensitive_features: Any, constraint: str = "dp",
              n_classes: int | None = None) -> float:
    """The largest group disparity of a (possibly randomised) multi-class classifier.

    ``"dp"``: ``max_{k,a} |P(Yhat=k | A=a) - P(Yhat=k)|``; ``"eop"``:
    ``max_{k,a} |P(Yhat=k | Y=k, A=a) - P(Yhat=k | Y=k)|``; ``"eo"``: ``max_{j,k,a}`` of the same
    with ``Yhat=j`` given ``Y=k`` (the constraints of the module docstring, empirical version).

    Parameters
    ----------
    y_pred : array of shape (n,) of int labels in ``0..K-1``, or (n, K) of probabilities
        Hard predictions, or the class probabilities of a randomised classifier (then the
        disparity is that of its expected confusion matrices).
    y : array of shape (n,) of int labels in ``0..K-1``
        True labels (unused for ``"dp"``, but checked).
    sensitive_features : array of shape (n,)
        Group labels (any hashable values); at least 2 groups.
    constraint : {"dp", "eop", "eo"}, default="dp"
    n_classes : int, optional
        ``K``; default ``max(y, y_pred) + 1`` (or ``y_pred.shape[1]``).

    Returns
    -------
    float
        The disparity, in probability units (in ``[0, 1]``).

    Examples
    --------
    >>> disparity([0, 1, 1, 1], [0, 1, 0, 1], ["a", "a", "b", "b"])
    0.25
    """
    constraint = _check_constraint(constraint)
    y = check_array(y, "y", dtypes=None, ndim=1)
    if y.dtype.kind not in "iu" or (y < 0).any():
        raise TypeError("y must hold non-negative integer labels 0..K-1")
    yp = np.asarray(y_pred)
    if yp.ndim == 1:
        yp = check_array(yp, "y_pred", dtypes=None, ndim=1)
        if yp.dtype.kind not in "iu" or (yp < 0).any():
            raise TypeError("y_pred must hold non-negative integer labels, or be (n, K) probabilities")
        K = int(n_classes or max(yp.max(initial=0), y.max(initial=0)) + 1)
        H = np.zeros((yp.shape[0], K))
        H[np.arange(yp.shape[0]), yp] = 1.0
    else:
        H = _check_proba(yp, "y_pred")
        K = int(n_classes or H.shape[1])
    n = H.shape[0]
    if y.shape[0] != n:
        raise ValueError(f"y must have shape ({n},), got {y.shape}")
    if y.max(initial=0) >= K or H.shape[1] != K:
        raise ValueError(f"labels must lie in 0..{K - 1} (n_classes={K})")
    _, a = _factorize(sensitive_features, "sensitive_features")
    if a.shape[0] != n:
        raise ValueError(f"sensitive_features must have shape ({n},), got {a.shape}")
    G = int(a.max()) + 1
    Ga = np.zeros((n, G))
    Ga[np.arange(n), a] = 1.0
    if constraint == "dp":
        rates = (Ga.T @ H) / Ga.sum(axis=0)[:, None]            # (G, K)
        return float(np.abs(rates - H.mean(axis=0)).max())
    Y = np.zeros((n, K))
    Y[np.arange(n), y] = 1.0
    worst = 0.0
    for k in range(K):
        sel = Y[:, k] > 0
        if not sel.any():
            continue
        overall = H[sel].mean(axis=0)                            # P(Yhat=. | Y=k)
        for g in range(G):
            cell = sel & (a == g)
            if not cell.any():
                continue
            diff = np.abs(H[cell].mean(axis=0) - overall)
            worst = max(worst, float(diff[k] if constraint == "eop" else diff.max()))
    return worst


def exact_fair_lp(eta: Any, group_proba: Any, *, constraint: str = "dp", xi: float = 0.05,
                  sample_weight: Any = None, solver: str | None = None) -> dict[str, Any]:
    """The exact fair Bayes classifier of a discrete problem, by linear programming.

    Solves ``max_h sum_i w_i <h_i, eta_i>`` over randomised classifiers ``h_i in Delta_K`` (one
    per cell ``i``) subject to ``|sum_i w_i <h_i, phi_c(i)>| <= xi`` for every constraint ``c``
    (the ``tau -> 0`` limit of the OptFair problem; module docstring). Solved with cvxpy on a
    solver shipped with it (Clarabel, else HiGHS).

    Parameters
    ----------
    eta : array of shape (n, K)
        ``P(Y=k | cell i)``.
    group_proba : array of shape (n, G) or (n, G, K)
        ``P(A=a | cell i)`` (``A`` independent of ``Y`` given the cell), or the joint
        ``P(A=a, Y=k | cell i)``.
    constraint : {"dp", "eop", "eo"}, default="dp"
    xi : float >= 0, default=0.05
        Allowed disparity; ``xi < 0`` raises :class:`InfeasibleError`.
    sample_weight : array of shape (n,), optional
        Cell masses (normalised to sum 1); default uniform.
    solver : str, optional
        A cvxpy solver name; default "CLARABEL" (silent interior point), else "HIGHS".

    Returns
    -------
    dict
        ``h`` (n, K) the optimal randomised classifier, ``accuracy`` its expected accuracy
        ``sum_i w_i <h_i, eta_i>``, ``violation`` ``max_c |E <h, phi_c>|`` (<= xi), ``status``.

    Raises
    ------
    InfeasibleError
        If ``xi < 0`` or the solver reports the program infeasible.

    Examples
    --------
    >>> eta = np.array([[0.9, 0.1], [0.2, 0.8]])
    >>> p = np.array([[1.0, 0.0], [0.0, 1.0]])          # cell 0 is group 0, cell 1 is group 1
    >>> round(exact_fair_lp(eta, p, xi=1.0)["accuracy"], 6)
    0.85
    >>> round(exact_fair_lp(eta, p, xi=0.0)["accuracy"], 6)   # both cells must look alike
    0.55
    """
    import cvxpy as cp

    constraint = _check_constraint(constraint)
    xi = _check_xi(xi)
    eta = _check_proba(eta, "eta")
    n, K = eta.shape
    gp = check_array(group_proba, "group_proba", ndim=(2, 3)).astype(np.float64, copy=False)
    if gp.shape[0] != n or (gp.ndim == 3 and gp.shape[2] != K) or gp.shape[1] < 2:
        raise ValueError(f"group_proba must have shape ({n}, G>=2) or ({n}, G, {K}), got {gp.shape}")
    w = _normalised_weights(sample_weight, n)
    marg = _marginals(eta, gp, constraint, w)
    R, mask = _features(eta, gp, constraint, marg)
    if solver is None:
        solver = "CLARABEL" if "CLARABEL" in cp.installed_solvers() else "HIGHS"
    h = cp.Variable((n, K), nonneg=True)
    wR = R * w[:, None]                                  # (n, M)
    G_ = wR.T @ h                                        # (M, K): sum_i w_i R_im h_ik
    Gm = G_.T                                            # (K, M)
    vals = cp.vec(Gm, order="C")[np.flatnonzero(mask.ravel())]
    cons = [cp.sum(h, axis=1) == 1, vals <= xi, vals >= -xi]
    prob = cp.Problem(cp.Maximize(cp.sum(cp.multiply(h, eta * w[:, None]))), cons)
    prob.solve(solver=solver)
    if prob.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        raise InfeasibleError(f"the fairness LP is infeasible (solver {solver}: {prob.status})")
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"the fairness LP was not solved (solver {solver}: {prob.status})")
    H = np.clip(np.asarray(h.value), 0.0, None)
    H /= H.sum(axis=1, keepdims=True)
    g = (H.T @ wR)[mask]
    return {"h": H, "accuracy": float(w @ (H * eta).sum(axis=1)),
            "violation": float(np.abs(g).max()), "status": prob.status}


def fairness_frontier(proba: Any, y: Any, sensitive_features: Any, xis: Any,
                      constraint: str = "dp", tau: float = 0.01, *,
                      max_iter: int = 2000) -> dict[str, np.ndarray]:
    """The accuracy-disparity frontier of the attribute-aware OptFair post-processor.

    For each ``xi`` in ``xis`` fits :class:`OptFairPostProcessor` (``estimator="passthrough"``,
    attribute-aware) on ``(proba, y, sensitive_features)`` and reports its expected accuracy
    ``mean_i h_{y_i}(x_i)`` and its disparity :func:`disparity` (of the randomised ``h``) on
    the same data.

    Parameters
    ----------
    proba : array of shape (n, K)
        Base class probabilities ``eta_hat``.
    y : array of shape (n,) of int labels ``0..K-1``
    sensitive_features : array of shape (n,)
    xis : sequence of float >= 0
    constraint : {"dp", "eop", "eo"}, default="dp"
    tau : float > 0, default=0.01
    max_iter : int, default=2000

    Returns
    -------
    dict
        ``xi``, ``acc``, ``violation`` (arrays of shape ``(len(xis),)``) and ``acc_argmax``
        (the accuracy of the deterministic argmax of ``h``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> a = rng.integers(0, 2, 2000)
    >>> eta = np.clip(rng.random(2000) * 0.7 + 0.3 * a, 0, 1)
    >>> proba = np.column_stack([1 - eta, eta])
    >>> y = (rng.random(2000) < eta).astype(int)
    >>> fr = fairness_frontier(proba, y, a, [0.0, 0.05, 1.0])
    >>> bool(fr["acc"][0] <= fr["acc"][1] <= fr["acc"][2] + 1e-9)
    True
    """
    proba = _check_proba(proba, "proba")
    try:
        xis = np.atleast_1d(np.asarray(xis, dtype=np.float64))
        for x in xis:
            _check_xi(float(x))
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"xis: {exc}") from exc
    accs, viols, hard = [], [], []
    y = np.asarray(y)
    for xi in xis:
        est = OptFairPostProcessor(estimator="passthrough", constraint=constraint, xi=float(xi),
                                   tau=tau, max_iter=max_iter)
        est.fit(proba, y, sensitive_features=sensitive_features)
        H = est.predict_proba(proba, sensitive_features=sensitive_features)
        accs.append(float(H[np.arange(len(y)), y].mean()))
        hard.append(float((H.argmax(axis=1) == y).mean()))
        viols.append(disparity(H, y, sensitive_features, constraint))
    return {"xi": xis, "acc": np.array(accs), "violation": np.array(viols),
            "acc_argmax": np.array(hard)}


# --- the post-processor -------------------------------------------------------------------------


def _default_estimator():
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=1000)


class OptFairPostProcessor(ClassifierMixin, BaseEstimator):
    """OptFair plug-in post-processing: the fair Bayes classifier from base probabilities.

    Fit on a calibration set: base probabilities ``eta_hat(x)`` (from ``estimator``) and group
    probabilities (one-hot of ``sensitive_features``: attribute-aware; or ``group_estimator``'s
    ``P(A | x)``: attribute-blind) define the constraint functionals ``phi_c`` (module
    docstring); the empirical dual

    ``D(lambda) = tau mean_i logsumexp((eta_hat_i - Phi_i lambda)/tau) + xi ||lambda||_1``

    is minimised by L-BFGS-B on the split ``lambda = P - N`` (``solver="lbfgs"``; polished by
    FISTA where it stalls at a kink of the l1 term) or by the
    spec's monotone FISTA with restart (``solver="fista"``, warm-started along a continuation in
    ``tau`` from 0.1 down). Prediction: ``h(x) = softmax((eta_hat(x) - Phi(x) lambda)/tau)``
    (``predict_proba``), label ``argmax h`` (or a draw from ``h`` with ``randomized=True``).
    As ``tau -> 0`` this is the cost-adjusted argmax rule ``argmax_k eta_k - (Phi lambda)_k``.

    Parameters
    ----------
    estimator : sklearn classifier, "passthrough" or None, default=None
        The base model giving ``eta_hat = estimator.predict_proba(X)``; None means
        ``LogisticRegression(max_iter=1000)``. ``"passthrough"``: ``X`` *is* the ``(n, K)``
        matrix of base probabilities and the classes are ``0..K-1``.
    prefit : bool, default=False
        Use ``estimator`` as already fitted (as fairlearn's ``ThresholdOptimizer``); else a
        clone is fitted on ``(X, y)`` in :meth:`fit`.
    constraint : {"dp", "eop", "eo"}, default="dp"
    xi : float >= 0, default=0.05
        Allowed disparity (PROPOSED default). ``xi < 0`` raises :class:`InfeasibleError`.
    tau : float > 0, default=0.01
        Entropy temperature (PROPOSED default); smaller is closer to the exact (LP) optimum.
    group_estimator : sklearn classifier or None, default=None
        None: attribute-aware (``predict`` needs ``sensitive_features``). Else it is fitted on
        ``(X, A)`` (``"dp"``) or ``(X, (A, Y))`` (``"eop"``, ``"eo"``) and its probabilities
        replace the one-hot groups: attribute-blind prediction.
    randomized : bool, default=False
        ``predict`` draws from ``h`` (seeded by ``random_state``) instead of taking the argmax.
    solver : {"lbfgs", "fista"}, default="lbfgs"
        "fista": the spec's monotone FISTA with restart; "lbfgs": L-BFGS-B on the split
        ``lambda = P - N >= 0`` (same optimum, fewer dual evaluations; the default).
    max_iter : int, default=2000
        Iteration budget (per continuation stage with ``"fista"``).
    tol : float, default=1e-6
        Stop when an accepted step changes ``lambda`` by less than ``tol`` (max-norm).
    random_state : int, Generator or None, default=None
        Seed of the draws of ``randomized=True``.

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
    lambda_ : ndarray of shape (C,)
        Dual multipliers, in the order of ``constraint_labels_`` (``(k, a)`` or ``(j, k, a)``);
        empty when fitted without ``sensitive_features``.
    constraint_values_ : ndarray of shape (C,)
        ``E_n <h(X), phi_c(X)>`` on the calibration set (each within ``[-xi, xi]``).
    dual_history_ : list of float
        The dual objective of the accepted iterates of the final stage (non-increasing).
    n_iter_, converged_ : int, bool
    groups_ : ndarray of shape (G,)

    Notes
    -----
    Without ``sensitive_features`` there is nothing to be fair across: the constraint set is
    empty, ``lambda_`` is empty and the estimator is the base classifier (``h =
    softmax(eta_hat / tau)``). A sensitive attribute with one group raises, as does a ``y``
    with one class. With ``xi >= 0`` the program is always feasible (a constant ``h`` has zero
    disparity under the plug-in marginals), so :class:`InfeasibleError` is raised only for
    ``xi < 0``. In a :class:`~sklearn.pipeline.Pipeline`, route the groups with
    ``pipe.fit(X, y, optfair__sensitive_features=s)``; with a ``group_estimator``,
    ``pipe.predict(X)`` needs no groups.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> a = rng.integers(0, 2, 3000)
    >>> X = np.column_stack([rng.normal(size=3000) + a, rng.normal(size=3000)])
    >>> y = (X[:, 0] + 0.5 * rng.normal(size=3000) > 0.5).astype(int)
    >>> post = OptFairPostProcessor(xi=0.02).fit(X, y, sensitive_features=a)
    >>> yhat = post.predict(X, sensitive_features=a)
    >>> base = post.estimator_.predict(X)
    >>> bool(disparity(yhat, y, a) < disparity(base, y, a))
    True
    >>> bool(disparity(post.predict_proba(X, sensitive_features=a), y, a) <= 0.02 + 1e-4)
    True
    """

    def __init__(self, estimator=None, *, prefit=False, constraint="dp", xi=0.05, tau=0.01,
                 group_estimator=None, randomized=False, solver="lbfgs", max_iter=2000,
                 tol=1e-6, random_state=None):
        self.estimator = estimator
        self.prefit = prefit
        self.constraint = constraint
        self.xi = xi
        self.tau = tau
        self.group_estimator = group_estimator
        self.randomized = randomized
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    # -- helpers --
    def _passthrough(self) -> bool:
        return isinstance(self.estimator, str) and self.estimator == "passthrough"

    def _check_params(self) -> None:
        _check_constraint(self.constraint)
        _check_xi(self.xi)
        check_scalar(self.tau, "tau", Interval("real", 0, None, closed="neither"))
        check_scalar(self.max_iter, "max_iter", Interval("int", 1, None))
        check_scalar(self.tol, "tol", Interval("real", 0, None, closed="neither"))
        if self.solver not in ("fista", "lbfgs"):
            raise ValueError(f"solver must be 'fista' or 'lbfgs', got {self.solver!r}")
        if isinstance(self.estimator, str) and not self._passthrough():
            raise ValueError(f"estimator must be a classifier, 'passthrough' or None, got "
                             f"{self.estimator!r}")

    def _base_proba(self, X, *, reset: bool) -> np.ndarray:
        if self._passthrough():
            P = _check_proba(X, "X (base probabilities, estimator='passthrough')")
            if reset:
                self.n_features_in_ = P.shape[1]
            elif P.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {P.shape[1]} columns, expected {self.n_features_in_}")
            return P
        return np.asarray(self.estimator_.predict_proba(X), dtype=np.float64)

    def _group_proba(self, X, P, sensitive_features, group_proba, *, fitting: bool, y_idx=None):
        """(n, G) or (n, G, K) group probabilities, or None for no constraints."""
        n, K = P.shape
        if group_proba is not None:
            gp = check_array(group_proba, "group_proba", ndim=(2, 3)).astype(np.float64)
            if gp.shape[0] != n or gp.shape[1] < 2 or (gp.ndim == 3 and gp.shape[2] != K):
                raise ValueError(f"group_proba must have shape ({n}, G>=2) or ({n}, G, {K}), "
                                 f"got {gp.shape}")
            if fitting:
                self.groups_ = np.arange(gp.shape[1])
                self.group_estimator_ = None
            elif gp.shape[1] != self.groups_.size:
                raise ValueError(f"group_proba has {gp.shape[1]} groups, fitted with "
                                 f"{self.groups_.size}")
            return gp
        if fitting:
            if sensitive_features is None:
                self.groups_ = np.array([])
                self.group_estimator_ = None
                return None
            groups, codes = _factorize(sensitive_features, "sensitive_features")
            if codes.shape[0] != n:
                raise ValueError(f"sensitive_features must have shape ({n},), got {codes.shape}")
            self.groups_ = groups
            G = groups.size
            if self.group_estimator is None:
                self.group_estimator_ = None
                return np.eye(G)[codes]
            target = codes if self.constraint == "dp" else codes * K + y_idx
            ge = clone(self.group_estimator).fit(X, target)
            self.group_estimator_ = ge
            return self._blind(X, n, K)
        if self.groups_.size == 0:
            return None
        if self.group_estimator_ is not None:
            return self._blind(X, n, K)
        if sensitive_features is None:
            raise ValueError("this OptFairPostProcessor is attribute-aware (group_estimator=None):"
                             " predict needs sensitive_features (or group_proba)")
        s = np.asarray(sensitive_features)
        if s.ndim != 1 or s.shape[0] != n:
            raise ValueError(f"sensitive_features must have shape ({n},), got {s.shape}")
        codes = np.searchsorted(self.groups_, s)
        codes = np.clip(codes, 0, self.groups_.size - 1)
        if not np.array_equal(self.groups_[codes], s):
            raise ValueError("sensitive_features holds groups not seen in fit: "
                             f"{sorted(set(s.tolist()) - set(self.groups_.tolist()))[:5]}")
        return np.eye(self.groups_.size)[codes]

    def _blind(self, X, n, K):
        ge = self.group_estimator_
        G = self.groups_.size
        raw = np.asarray(ge.predict_proba(X), dtype=np.float64)
        cols = np.asarray(ge.classes_, dtype=np.int64)
        if self.constraint == "dp":
            out = np.zeros((n, G))
            out[:, cols] = raw
            return out
        out = np.zeros((n, G * K))
        out[:, cols] = raw
        return out.reshape(n, G, K)

    # -- API --
    def fit(self, X, y, sensitive_features=None, *, sample_weight=None, group_proba=None):
        """Fit the base model (unless prefit/passthrough) and solve the fair dual.

        Parameters
        ----------
        X : array of shape (n, d)
            Features (or the (n, K) base probabilities with ``estimator="passthrough"``).
        y : array of shape (n,)
            Labels (``0..K-1`` with ``"passthrough"``).
        sensitive_features : array of shape (n,), optional
            Group labels; at least 2 groups. None: no constraints (see Notes).
        sample_weight : array of shape (n,), optional
            Sample weights (cell masses of a discrete problem).
        group_proba : array of shape (n, G) or (n, G, K), optional
            Known ``P(A=a | x)`` (or ``P(A=a, Y=k | x)``), overriding ``sensitive_features``.

        Returns
        -------
        self
        """
        self._check_params()
        if self._passthrough():
            P = self._base_proba(X, reset=True)
            y = np.asarray(y)
            check_targets(y)
            if y.ndim != 1 or y.shape[0] != P.shape[0]:
                raise ValueError(f"y must have shape ({P.shape[0]},), got {y.shape}")
            self.classes_ = np.arange(P.shape[1])
            if y.dtype.kind not in "iu" or (y < 0).any() or (y >= P.shape[1]).any():
                raise ValueError(f"y must hold labels 0..{P.shape[1] - 1} with 'passthrough'")
            y_idx = y.astype(np.int64)
            Xv = P
        else:
            Xv, y = validate_named(self, X, y)
            check_targets(y)
            if sample_weight is not None:
                sample_weight = _check_sample_weight(sample_weight, Xv)
            base = self.estimator if self.estimator is not None else _default_estimator()
            if self.prefit:
                check_is_fitted(base)
                self.estimator_ = base
            else:
                if np.unique(y).size < 2:
                    raise ValueError("y has one class (a single label); a classifier needs at least 2 classes")
                self.estimator_ = clone(base).fit(Xv, y, sample_weight=sample_weight) \
                    if sample_weight is not None else clone(base).fit(Xv, y)
            self.classes_ = np.asarray(self.estimator_.classes_)
            idx = np.searchsorted(self.classes_, y)
            idx = np.clip(idx, 0, self.classes_.size - 1)
            if not np.array_equal(self.classes_[idx], y):
                raise ValueError("y holds labels the base estimator does not know")
            y_idx = idx
            P = self._base_proba(Xv, reset=True)
        if np.unique(y_idx).size < 2:
            raise ValueError("y has one class (a single label); a classifier needs at least 2 classes")
        n, K = P.shape
        w = _normalised_weights(sample_weight, n)
        gp = self._group_proba(Xv, P, sensitive_features, group_proba, fitting=True, y_idx=y_idx)
        self.tau_ = float(self.tau)
        if gp is None:
            self._R_marg = None
            self._Lam = np.zeros((K, 0))
            self._mask = np.zeros((K, 0), dtype=bool)
            self.lambda_ = np.zeros(0)
            self.constraint_values_ = np.zeros(0)
            self.constraint_labels_ = []
            self.dual_history_ = []
            self.n_iter_, self.converged_ = 1, True      # the trivial solution lambda = ()
            return self
        G = self.groups_.size
        self._R_marg = _marginals(P, gp, self.constraint, w)
        R, mask = _features(P, gp, self.constraint, self._R_marg)
        res = _solve_dual(P, R, w, mask, self.tau_, float(self.xi), solver=self.solver,
                          max_iter=int(self.max_iter), tol=float(self.tol))
        self._Lam, self._mask = res.lam, mask
        self.lambda_ = _flat_lambda(res.lam, mask, self.constraint, K, G)
        H = softmax_scores(P, R, res.lam, self.tau_)
        g = (H * w[:, None]).T @ R
        self.constraint_values_ = _flat_lambda(g, mask, self.constraint, K, G)
        self.constraint_labels_ = _constraint_labels(self.constraint, K, G)
        self.dual_history_ = [float(v) for v in res.history]
        self.n_iter_, self.converged_ = int(res.n_iter), bool(res.converged)
        if not res.converged:
            warnings.warn(f"OptFairPostProcessor: the dual solver stopped at max_iter="
                          f"{self.max_iter} before tol={self.tol}; max |constraint| = "
                          f"{np.abs(self.constraint_values_).max():.3g} (xi={self.xi})",
                          ConvergenceWarning, stacklevel=2)
        return self

    def predict_proba(self, X, sensitive_features=None, *, group_proba=None):
        """The fair randomised classifier ``h(x) = softmax((eta_hat - Phi lambda)/tau)``.

        Parameters
        ----------
        X : array of shape (n, d) (or (n, K) base probabilities with ``"passthrough"``)
        sensitive_features : array of shape (n,), optional
            Needed when attribute-aware (``group_estimator=None``) and fitted with groups.
        group_proba : array of shape (n, G) or (n, G, K), optional

        Returns
        -------
        ndarray of shape (n, K), float64
        """
        check_is_fitted(self, "lambda_")
        if not self._passthrough():
            X = validate_named(self, X, reset=False)
        P = self._base_proba(X, reset=False)
        gp = self._group_proba(X, P, sensitive_features, group_proba, fitting=False)
        if gp is None:
            return softmax_scores(P, np.zeros((P.shape[0], 0)), self._Lam, self.tau_)
        R, _ = _features(P, gp, self.constraint, self._R_marg)
        return softmax_scores(P, R, self._Lam, self.tau_)

    def predict(self, X, sensitive_features=None, *, group_proba=None):
        """Class labels: ``argmax h(x)``, or a seeded draw from ``h(x)`` if ``randomized``.

        Parameters
        ----------
        X, sensitive_features, group_proba
            As in :meth:`predict_proba`.

        Returns
        -------
        ndarray of shape (n,)
            Labels from ``classes_``.
        """
        check_is_fitted(self, "lambda_")
        H = self.predict_proba(X, sensitive_features, group_proba=group_proba)
        if self.randomized:
            rng = check_rng(self.random_state, "random_state")
            u = rng.random(H.shape[0])
            idx = (np.cumsum(H, axis=1) < u[:, None]).sum(axis=1)
            idx = np.minimum(idx, H.shape[1] - 1)
        else:
            idx = H.argmax(axis=1)
        return self.classes_[idx]


# --- in-processing ------------------------------------------------------------------------------


class OptFairInProcessing(ClassifierMixin, BaseEstimator):
    """OptFair in-processing: a softmax model trained on the fair saddle point.

    ``min_theta max_lambda CE(theta) + sum_c lambda_c g_c(theta) - xi ||lambda||_1`` with the
    differentiable empirical constraints ``g_c(theta) = mean_i <softmax(f_theta(x_i)),
    gamma_c(a_i, y_i)>``, ``gamma_{k,a} = e_k (1[a_i=a]/pi_a - 1)`` (``"dp"``; for ``"eop"`` /
    ``"eo"`` ``1[a_i=a, y_i=k]/pi_{a,k} - 1[y_i=k]/pi_k``). Alternation (PROPOSED details): one
    Adam step on ``theta`` per minibatch, then one proximal gradient *ascent* step on ``lambda``,
    ``lambda <- soft_threshold(lambda + lr_lambda g, lr_lambda xi)``. The model ``f_theta`` sees
    the features only (attribute-blind prediction); ``A`` is needed in :meth:`fit` only.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=()
        ``()`` is multinomial logistic regression; otherwise a ReLU MLP.
    constraint : {"dp", "eop", "eo"}, default="dp"
    xi : float >= 0, default=0.05
    lr : float, default=0.01
        Adam step of ``theta`` (inputs are standardised inside).
    lr_lambda : float, default=0.1
    epochs : int, default=100
    batch_size : int, default=256
    weight_decay : float, default=0.0
    random_state : int or None, default=None
        Seeds the initialisation and the minibatch order (torch).
    progress : bool, default=False
        A tqdm bar over epochs.

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
    lambda_ : ndarray of shape (C,)
        Final multipliers (empty without ``sensitive_features``).
    constraint_values_ : ndarray of shape (C,)
        ``g_c(theta)`` on the training set after fitting.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> a = rng.integers(0, 2, 2000)
    >>> X = np.column_stack([rng.normal(size=2000) + a, rng.normal(size=2000)])
    >>> y = (X[:, 0] + 0.5 * rng.normal(size=2000) > 0.5).astype(int)
    >>> fair = OptFairInProcessing(xi=0.02, epochs=30, random_state=0).fit(X, y, a)
    >>> plain = OptFairInProcessing(epochs=30, random_state=0).fit(X, y)
    >>> bool(disparity(fair.predict_proba(X), y, a) < disparity(plain.predict_proba(X), y, a))
    True
    """

    def __init__(self, hidden_layer_sizes=(), *, constraint="dp", xi=0.05, lr=0.01,
                 lr_lambda=0.1, epochs=100, batch_size=256, weight_decay=0.0,
                 random_state=None, progress=False):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.constraint = constraint
        self.xi = xi
        self.lr = lr
        self.lr_lambda = lr_lambda
        self.epochs = epochs
        self.batch_size = batch_size
        self.weight_decay = weight_decay
        self.random_state = random_state
        self.progress = progress

    def _build(self, d, K, gen):
        import torch

        layers, width = [], d
        for h in self.hidden_layer_sizes:
            layers += [torch.nn.Linear(width, int(h)), torch.nn.ReLU()]
            width = int(h)
        layers.append(torch.nn.Linear(width, K))
        model = torch.nn.Sequential(*layers).double()
        with torch.no_grad():
            for p in model.parameters():
                if p.ndim == 2:
                    bound = 1.0 / np.sqrt(p.shape[1])
                    p.copy_(torch.rand(p.shape, generator=gen, dtype=p.dtype) * 2 * bound - bound)
                else:
                    p.zero_()
        return model

    def fit(self, X, y, sensitive_features=None):
        """Train ``f_theta`` on the fair saddle point.

        Parameters
        ----------
        X : array of shape (n, d)
        y : array of shape (n,)
        sensitive_features : array of shape (n,), optional
            Group labels (>= 2 groups); None trains the plain softmax model.

        Returns
        -------
        self
        """
        import torch

        _check_constraint(self.constraint)
        xi = _check_xi(self.xi)
        for name in ("lr", "lr_lambda"):
            check_scalar(getattr(self, name), name, Interval("real", 0, None, closed="neither"))
        check_scalar(self.weight_decay, "weight_decay", Interval("real", 0, None))
        check_scalar(self.epochs, "epochs", Interval("int", 1, None))
        check_scalar(self.batch_size, "batch_size", Interval("int", 1, None))
        if any(int(h) < 1 for h in self.hidden_layer_sizes):
            raise ValueError(f"hidden_layer_sizes must hold ints >= 1, got "
                             f"{self.hidden_layer_sizes!r}")
        X, y = validate_named(self, X, y)
        check_targets(y)
        self.classes_, y_idx = np.unique(y, return_inverse=True)
        K = self.classes_.size
        if K < 2:
            raise ValueError("y has one class (a single label); a classifier needs at least 2 classes")
        n, d = X.shape
        w = np.full(n, 1.0 / n)
        if sensitive_features is not None:
            groups, codes = _factorize(sensitive_features, "sensitive_features")
            if codes.shape[0] != n:
                raise ValueError(f"sensitive_features must have shape ({n},), got {codes.shape}")
            G = groups.size
            Y1 = np.eye(K)[y_idx]
            A1 = np.eye(G)[codes]
            gp = A1 if self.constraint == "dp" else A1[:, :, None] * Y1[:, None, :]
            R, mask = _features(Y1, gp, self.constraint, _marginals(Y1, gp, self.constraint, w))
            self.groups_ = groups
        else:
            G, R, mask = 0, np.zeros((n, 0)), np.zeros((K, 0), dtype=bool)
            self.groups_ = np.array([])
        self._mean = X.mean(axis=0)
        self._scale = X.std(axis=0)
        self._scale[self._scale == 0] = 1.0
        gen = torch.Generator().manual_seed(
            int(check_rng(self.random_state, "random_state").integers(2**62)))
        model = self._build(d, K, gen)
        opt = torch.optim.Adam(model.parameters(), lr=float(self.lr),
                               weight_decay=float(self.weight_decay))
        Xt = torch.from_numpy(((X - self._mean) / self._scale).astype(np.float64))
        yt = torch.from_numpy(y_idx.astype(np.int64))
        Rt = torch.from_numpy(R)
        maskt = torch.from_numpy(mask.astype(np.float64))
        lam = torch.zeros(K, R.shape[1], dtype=torch.float64)
        B = min(int(self.batch_size), n)
        step_l, thr = float(self.lr_lambda), float(self.lr_lambda) * xi
        epochs = range(int(self.epochs))
        if self.progress:
            from tqdm.auto import tqdm

            epochs = tqdm(epochs, desc="OptFairInProcessing")
        for _ in epochs:
            perm = torch.randperm(n, generator=gen)
            for start in range(0, n, B):
                idx = perm[start:start + B]
                logits = model(Xt[idx])
                loss = torch.nn.functional.cross_entropy(logits, yt[idx])
                if G:
                    g = torch.softmax(logits, dim=1).T @ Rt[idx] / idx.numel() * maskt
                    loss = loss + (lam * g).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                if G:
                    with torch.no_grad():
                        v = lam + step_l * g.detach()
                        lam = torch.sign(v) * torch.clamp(v.abs() - thr, min=0.0) * maskt
        self._model = model.eval()
        lam_np = lam.numpy()
        if G:
            H = self._proba(X)
            gv = (H * w[:, None]).T @ R
            self.lambda_ = _flat_lambda(lam_np, mask, self.constraint, K, G)
            self.constraint_values_ = _flat_lambda(gv, mask, self.constraint, K, G)
        else:
            self.lambda_ = np.zeros(0)
            self.constraint_values_ = np.zeros(0)
        return self

    def _proba(self, X):
        import torch

        with torch.no_grad():
            Z = ((np.asarray(X, np.float64) - self._mean) / self._scale).astype(np.float64)
            logits = self._model(torch.from_numpy(Z))
            return torch.softmax(logits, dim=1).numpy().astype(np.float64)

    def predict_proba(self, X):
        """Class probabilities ``softmax(f_theta(x))``, shape (n, K), float64.

        Parameters
        ----------
        X : array of shape (n, d)

        Returns
        -------
        ndarray of shape (n, K)
        """
        check_is_fitted(self, "lambda_")
        X = validate_named(self, X, reset=False)
        return self._proba(X)

    def predict(self, X):
        """Labels ``argmax_k softmax(f_theta(x))_k`` from ``classes_``, shape (n,).

        Parameters
        ----------
        X : array of shape (n, d)

        Returns
        -------
        ndarray of shape (n,)
        """
        check_is_fitted(self, "lambda_")
        return self.classes_[self.predict_proba(X).argmax(axis=1)]


# --- reductions route (Agarwal et al. 2018) -----------------------------------------------------


class OptFairReduction(ClassifierMixin, BaseEstimator):
    """In-processing for any scikit-learn learner: exponentiated gradient over cost-sensitive fits.

    The reductions route of Agarwal et al. (2018), in the multi-class form of the OptFair spec
    (PROPOSED). The Lagrangian ``L(h, lambda) = err(h) + sum_c lambda_c g_c(h) - xi ||lambda||_1``
    over randomised classifiers ``h`` (mixtures of ``estimator`` fits), with the label-based
    empirical constraints ``g_c(h) = mean_i <h(x_i), gamma_c(a_i, y_i)>`` of
    :class:`OptFairInProcessing`, is solved by alternating

    * the best response of the learner to ``lambda``: the cost-sensitive problem
      ``min_h sum_i c_{i, h(x_i)}`` with ``c_i = -e_{y_i} + Gamma_i lambda``, reduced to a
      weighted classification with label ``argmin_k c_ik`` and weight ``mean_{k != z} c_ik -
      min_k c_ik`` (exact for ``K = 2``; a surrogate for ``K > 2``);
    * an exponentiated-gradient step on ``lambda = B (w_+ - w_-)``, ``w`` on the simplex
      with a slack coordinate, driven by ``g_c - xi`` (and ``-g_c - xi``).

    As in fairlearn's ``ExponentiatedGradient``, the final randomised classifier is the most
    accurate mixture of the collected best responses (plus the ``K`` constant classifiers, which
    keep it feasible) that meets the constraints, found by a small LP (scipy HiGHS), enlarged by
    column generation (best responses at the LP's dual prices, as fairlearn does too):
    ``predict_proba`` is the mixture's class probabilities, ``predict`` a seeded draw from it
    (``randomized=True``) or its argmax.

    Parameters
    ----------
    estimator : sklearn classifier accepting ``sample_weight``, or None
        None means ``LogisticRegression(max_iter=1000)``.
    constraint : {"dp", "eop", "eo"}, default="dp"
    xi : float >= 0, default=0.05
    bound : float > 0 or None, default=None
        ``B``, the bound on ``||lambda||_1``; None means ``1 / max(xi, 0.01)``.
    eta : float > 0, default=2.0
        Exponentiated-gradient step.
    max_iter : int, default=30
        Exponentiated-gradient rounds (one learner fit each).
    refine_iter : int, default=10
        Column-generation rounds after them: a best response at the mixture LP's dual prices
        is added until it repeats one already in the pool (one learner fit each).
    randomized : bool, default=False
    random_state : int or None, default=None

    Attributes
    ----------
    estimators_ : list of fitted estimators (the mixture's support)
    weights_ : ndarray of shape (len(estimators_),)
        The mixture weights.
    lambda_ : ndarray of shape (C,)
        The constraints' prices at the final mixture (the LP's duals).
    constraint_values_ : ndarray of shape (C,)
        ``g_c`` of the mixture on the training set.
    n_iter_ : int

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> a = rng.integers(0, 2, 2000)
    >>> X = np.column_stack([rng.normal(size=2000) + a, rng.normal(size=2000)])
    >>> y = (X[:, 0] + 0.5 * rng.normal(size=2000) > 0.5).astype(int)
    >>> red = OptFairReduction(xi=0.02, max_iter=20).fit(X, y, a)
    >>> plain = OptFairReduction().fit(X, y)
    >>> bool(disparity(red.predict_proba(X), y, a) < disparity(plain.predict(X), y, a))
    True
    """

    def __init__(self, estimator=None, *, constraint="dp", xi=0.05, bound=None, eta=2.0,
                 max_iter=30, refine_iter=10, randomized=False, random_state=None):
        self.estimator = estimator
        self.refine_iter = refine_iter
        self.constraint = constraint
        self.xi = xi
        self.bound = bound
        self.eta = eta
        self.max_iter = max_iter
        self.randomized = randomized
        self.random_state = random_state

    def fit(self, X, y, sensitive_features=None):
        """Run exponentiated gradient against cost-sensitive fits of ``estimator``.

        Parameters
        ----------
        X : array of shape (n, d)
        y : array of shape (n,)
        sensitive_features : array of shape (n,), optional
            Group labels (>= 2 groups); None fits the plain ``estimator`` once.

        Returns
        -------
        self
        """
        _check_constraint(self.constraint)
        xi = _check_xi(self.xi)
        check_scalar(self.eta, "eta", Interval("real", 0, None, closed="neither"))
        check_scalar(self.max_iter, "max_iter", Interval("int", 1, None))
        check_scalar(self.refine_iter, "refine_iter", Interval("int", 0, None))
        if self.bound is not None:
            check_scalar(self.bound, "bound", Interval("real", 0, None, closed="neither"))
        X, y = validate_named(self, X, y)
        check_targets(y)
        self.classes_, y_idx = np.unique(y, return_inverse=True)
        K = self.classes_.size
        if K < 2:
            raise ValueError("y has one class (a single label); a classifier needs at least 2 "
                             "classes")
        n = X.shape[0]
        base = self.estimator if self.estimator is not None else _default_estimator()
        if sensitive_features is None:
            self.estimators_ = [clone(base).fit(X, y_idx)]
            self.weights_ = np.ones(1)
            self.lambda_ = np.zeros(0)
            self.constraint_values_ = np.zeros(0)
            self.n_iter_ = 1
            return self
        groups, codes = _factorize(sensitive_features, "sensitive_features")
        if codes.shape[0] != n:
            raise ValueError(f"sensitive_features must have shape ({n},), got {codes.shape}")
        G = groups.size
        self.groups_ = groups
        w = np.full(n, 1.0 / n)
        Y1 = np.eye(K)[y_idx]
        A1 = np.eye(G)[codes]
        gp = A1 if self.constraint == "dp" else A1[:, :, None] * Y1[:, None, :]
        R, mask = _features(Y1, gp, self.constraint, _marginals(Y1, gp, self.constraint, w))
        idx = np.flatnonzero(mask.ravel())
        C = idx.size
        B = float(self.bound) if self.bound is not None else 1.0 / max(xi, 0.01)
        theta = np.zeros(2 * C)
        estimators, lams, preds = [], [], []
        def best_response(lam_flat):
            lam = np.zeros(K * R.shape[1])
            lam[idx] = lam_flat
            cost = -Y1 + R @ lam.reshape(K, -1).T                 # (n, K)
            z = cost.argmin(axis=1)
            gap = (cost.sum(axis=1) - cost.min(axis=1) * K) / (K - 1)
            if np.unique(z).size < 2:
                est = _Constant(K, int(z[0]))
            else:
                est = clone(base).fit(X, z, sample_weight=gap + 1e-12)
            Hh = np.zeros((n, K))
            Hh[np.arange(n), _predict_index(est, X, K)] = 1.0
            return est, Hh

        # the constant classifiers have zero disparity: with them the mixture LP is feasible
        for k in range(K):
            const = np.zeros((n, K))
            const[:, k] = 1.0
            estimators.append(_Constant(K, k))
            preds.append(const)
        for _ in range(int(self.max_iter)):
            e = np.exp(theta - theta.max())
            wts = e / (e.sum() + np.exp(-theta.max()))          # simplex with a slack coordinate
            lam_flat = B * (wts[:C] - wts[C:])
            est, Hh = best_response(lam_flat)
            g = ((Hh * w[:, None]).T @ R).ravel()[idx]
            theta[:C] += float(self.eta) * (g - xi)
            theta[C:] += float(self.eta) * (-g - xi)
            estimators.append(est)
            lams.append(lam_flat)
            preds.append(Hh)
        # column generation: best responses at the mixture LP's dual prices, until none helps
        for _ in range(int(self.refine_iter)):
            q, lam_lp = _best_mixture(preds, Y1, R, mask, w, xi)
            est, Hh = best_response(lam_lp)
            if any(np.array_equal(Hh, P) for P in preds):
                break
            estimators.append(est)
            preds.append(Hh)
        q, lam_final = _best_mixture(preds, Y1, R, mask, w, xi)
        keep = np.flatnonzero(q > 1e-9)
        self.estimators_ = [estimators[t] for t in keep]
        self.weights_ = q[keep] / q[keep].sum()
        H = sum(wt * preds[t] for wt, t in zip(self.weights_, keep, strict=True))
        self.n_iter_ = int(self.max_iter)
        full = np.zeros(K * R.shape[1])
        full[idx] = lam_final
        self.lambda_ = _flat_lambda(full.reshape(K, -1), mask, self.constraint, K, G)
        gv = (H * w[:, None]).T @ R
        self.constraint_values_ = _flat_lambda(gv, mask, self.constraint, K, G)
        return self

    def predict_proba(self, X):
        """Class frequencies of the mixture of best responses, shape (n, K), float64.

        Parameters
        ----------
        X : array of shape (n, d)

        Returns
        -------
        ndarray of shape (n, K)
        """
        check_is_fitted(self, "estimators_")
        X = validate_named(self, X, reset=False)
        K = self.classes_.size
        H = np.zeros((X.shape[0], K))
        for wt, est in zip(self.weights_, self.estimators_, strict=True):
            H[np.arange(X.shape[0]), _predict_index(est, X, K)] += wt
        return H

    def predict(self, X):
        """Labels: a seeded draw from the mixture (``randomized``) or its most frequent class.

        Parameters
        ----------
        X : array of shape (n, d)

        Returns
        -------
        ndarray of shape (n,)
        """
        check_is_fitted(self, "estimators_")
        H = self.predict_proba(X)
        if self.randomized:
            u = check_rng(self.random_state, "random_state").random(H.shape[0])
            idx = np.minimum((np.cumsum(H, axis=1) < u[:, None]).sum(axis=1), H.shape[1] - 1)
        else:
            idx = H.argmax(axis=1)
        return self.classes_[idx]


def _best_mixture(preds, Y1, R, mask, w, xi) -> tuple[np.ndarray, np.ndarray]:
    """Mixture weights q on the simplex: min error s.t. |sum_t q_t g(h_t)| <= xi (an LP),
    and the constraints' dual prices ``lambda`` (C,)."""
    from scipy.optimize import linprog

    err = np.array([1.0 - float(w @ (P * Y1).sum(axis=1)) for P in preds])
    Gm = np.array([((P * w[:, None]).T @ R)[mask] for P in preds]).T     # (C, T)
    T = len(preds)
    res = linprog(err, A_ub=np.vstack([Gm, -Gm]), b_ub=np.full(2 * Gm.shape[0], xi),
                  A_eq=np.ones((1, T)), b_eq=[1.0], bounds=[(0, None)] * T, method="highs")
    if res.status == 2:
        raise InfeasibleError("the mixture LP of OptFairReduction is infeasible")
    if res.status != 0:
        raise RuntimeError(f"the mixture LP of OptFairReduction failed: {res.message}")
    C = Gm.shape[0]
    mu = -np.asarray(res.ineqlin.marginals)                # >= 0: prices of the two sides
    return np.clip(res.x, 0.0, None), mu[:C] - mu[C:]


class _Constant:
    """A best response that predicts one class everywhere."""

    def __init__(self, K: int, k: int):
        self.classes_ = np.arange(K)
        self.k = k

    def predict(self, X):
        return np.full(np.asarray(X).shape[0], self.k, dtype=np.int64)


def _predict_index(est, X, K) -> np.ndarray:
    return np.asarray(est.predict(X), dtype=np.int64)
