"""Robust strategic classification under decision-dependent cost uncertainty.

After Alhanouti, Bayraksan & Naghizadeh, "Robust Strategic Classification under Decision-Dependent
Cost Uncertainty" (arXiv 2606.30136, ICML 2026; NeurIPS 2025 version). The paper's full text was
not available to us: **the concrete model below is our reconstruction (PROPOSED)**, spec
``tabular_decisions.md`` section 4.1; the paper's own formulation may differ.

Model (PROPOSED)
----------------
Agents ``x_i in R^d`` with labels ``y_i in {-1, +1}`` (``classes_[1]`` is +1, the accepted class)
face the linear rule ``s(x) = w.x + b`` (accept iff ``s > 0``). A rejected agent moves at cost
``kappa ||delta||`` (``cost_norm`` 2, 1 or per-feature ``"weighted-l1"``) and gains 1, so it gets
accepted iff ``-s(x) < ||w||_* / kappa`` (dual norm; see :mod:`rml_fast.strategic.simulator`).
With ``kappa`` only known to lie in ``U = [kappa_lo, kappa_hi]``, the worst case for the learner is
the cheapest manipulation ``kappa_lo``, and the robust strategic hinge program (one stage) is the
SOCP

    min_{w, b}  (1/n) sum_{y_i=+1} max(0, 1 - s(x_i))
              + (1/n) sum_{y_i=-1} max(0, 1 + s(x_i) + ||w||_* / kappa_lo)  + (C/2) ||w||_2^2.  (1)

Two stages with a decision-dependent uncertainty set: the stage-1 rule ``theta_1 = (w_1, b_1)``
teaches agents to game, lowering their stage-2 costs,

    U_2(theta_1) = [kappa_lo - gamma g(w_1), kappa_hi - gamma g(w_1)],                       (2)

with ``g(w) = ||w||_1`` (``dependence="l1"``) or ``g(w) = ||w||_*`` (``dependence="dual"``, the
rule's manipulability), and the learner solves

    min_{theta_1} [ L_1(theta_1; kappa_lo) + min_{theta_2} max_{kappa in U_2(theta_1)} L_2(theta_2; kappa) ]
    s.t. kappa_lo - gamma g(w_1) >= kappa_floor,                                            (3)

where ``L_t`` is the objective of (1) on stage ``t``'s data. The inner max is attained at the lower
end of ``U_2``, so (3) = ``min_g [ L_1*(g) + V_2(kappa_lo - gamma g) ]`` with ``L_1*(g)`` the value of
(1) under ``g(w_1) <= g`` (an SOCP) and ``V_2`` nonincreasing in its argument; hence

* ``method="param_search"``: exact 1-D search over the scalar ``g`` (a grid of ``n_grid`` values,
  then golden-section refinement around the best grid point; every point is two SOCPs);
* ``method="alternating"``: block-coordinate descent — the stage-2 SOCP for fixed ``theta_1``,
  then the stage-1 program for fixed ``theta_2``, which is convex (``inv_pos`` of the concave
  ``kappa_lo - gamma g(w_1)``); the objective never increases, and it stops at a block optimum.

Every SOCP's optimality is certified from cvxpy's dual values: the Lagrange dual objective is
re-derived from them (``certificate_``) and the duality gap reported; an infeasible program
raises :class:`InfeasibleProgramError`, a failed or unbounded one :class:`SolverFailedError`,
never a solution.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted

from rml_fast._sklearn_validation import check_targets_named, validate_named
from rml_fast._validation import Interval, check_array, check_scalar
from rml_fast.exceptions import ConvergenceWarning, InfeasibleError
from rml_fast.strategic.simulator import _linear_best_response

__all__ = [
    "InfeasibleProgramError",
    "LinearRule",
    "RobustStrategicClassifier",
    "SolverFailedError",
    "StageCertificate",
    "TwoStageDDURobustClassifier",
    "robust_strategic_objective",
]

_COST_NORMS = (1, 2, "weighted-l1")
_DEPENDENCES = ("l1", "dual")
_METHODS = ("param_search", "alternating")


class InfeasibleProgramError(InfeasibleError):
    """The robust program has no feasible point (e.g. ``coef_bounds`` force a stage-1 rule so
    manipulable that the decision-dependent cost set (2) would drop below ``kappa_floor``).

    Attributes
    ----------
    status : str
        cvxpy's status string.
    """

    def __init__(self, message: str, status: str = "infeasible") -> None:
        super().__init__(message)
        self.status = status


class SolverFailedError(RuntimeError):
    """The conic solver failed or reported the program unbounded; no solution is returned.

    Attributes
    ----------
    status : str
        cvxpy's status string.
    """

    def __init__(self, message: str, status: str = "solver_error") -> None:
        super().__init__(message)
        self.status = status


@dataclass
class StageCertificate:
    """Optimality certificate of one stage's SOCP (1), from the solver's dual values.

    The Lagrange dual objective is re-derived in NumPy from the dual variables:
    ``D = sum(alpha) + rho_lo.lo - rho_hi.hi - nu G - ||v||^2 / (2C)`` with
    ``v = X^T (y * alpha) + u - (p - m) + rho_lo - rho_hi - zeta_p + zeta_m`` (``w* = v / C``), and
    ``gap = primal - D`` (nonnegative up to solver tolerance; zero at an optimum).

    Attributes
    ----------
    status : str
        cvxpy's status.
    primal : float
        Objective (1) at the returned ``(w, b)``, recomputed in NumPy.
    dual : float
        The dual objective ``D``.
    gap : float
        ``primal - dual``.
    stationarity : float
        Max-abs residual of the dual's equality constraints (``sum alpha y = 0``,
        ``alpha + beta = 1/n``, the ``t`` equation) and of ``w = v / C``.
    alpha : ndarray of shape (n,)
        Multipliers of the hinge constraints (``0 <= alpha_i <= 1/n``).
    u : ndarray of shape (d,)
        The dual-norm cone's multiplier for ``w`` (``||u||_dual <= sum_{neg} alpha / kappa``), with
        the sign convention ``w* = (X^T (y alpha) + u) / C`` when no other constraint is active.
    """

    status: str
    primal: float
    dual: float
    gap: float
    stationarity: float
    alpha: np.ndarray
    u: np.ndarray

    def __post_init__(self) -> None:
        # a certificate with NaN multipliers certifies nothing: refused, never stored
        self.alpha = check_array(self.alpha, "alpha", ndim=1)
        self.u = check_array(self.u, "u", ndim=1)


class LinearRule:
    """A fitted linear rule ``accept iff w.x + b > 0`` (one stage of a two-stage classifier).

    Has ``predict``, ``decision_function``, ``coef_``, ``intercept_`` and ``classes_``, so it can
    be handed to :class:`rml_fast.strategic.simulator.StrategicSimulator`.

    Parameters
    ----------
    w : ndarray of shape (d,)
    b : float
    classes : ndarray of shape (2,)
        ``classes[1]`` is predicted when the score is positive.

    Examples
    --------
    >>> import numpy as np
    >>> rule = LinearRule(np.array([1.0, -1.0]), 0.5, np.array([0, 1]))
    >>> rule.predict(np.array([[0.0, 0.0], [0.0, 1.0]])).tolist()
    [1, 0]
    """

    def __init__(self, w: np.ndarray, b: float, classes: np.ndarray) -> None:
        w = check_array(w, "w", ndim=1).astype(np.float64, copy=False)
        b = check_scalar(b, "b", Interval("real", None, None))
        classes = np.asarray(classes)
        if classes.shape != (2,):
            raise ValueError(f"classes must have shape (2,), got {classes.shape}")
        self.coef_ = w.reshape(1, -1)
        self.intercept_ = np.array([b])
        self.classes_ = classes

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Scores ``X @ w + b``, shape (n,).

        Examples
        --------
        >>> import numpy as np
        >>> LinearRule(np.array([2.0]), -1.0, np.array([-1, 1])).decision_function([[1.0]])
        array([1.])
        """
        X = check_array(X, "X", ndim=2)
        if X.shape[1] != self.coef_.shape[1]:
            raise ValueError(f"X must have {self.coef_.shape[1]} features, got {X.shape[1]}")
        return X @ self.coef_[0] + self.intercept_[0]

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels ``classes[1]`` where the score is ``> 0``, else ``classes[0]``; shape (n,).

        Examples
        --------
        >>> import numpy as np
        >>> LinearRule(np.array([2.0]), -1.0, np.array([-1, 1])).predict([[1.0], [0.0]]).tolist()
        [1, -1]
        """
        return self.classes_[(self.decision_function(X) > 0).astype(int)]


# --------------------------------------------------------------------------------------------
# validation helpers


def _omega(cost_norm: Any, cost_weights: Any, d: int) -> np.ndarray | None:
    """Weights of the dual norm: None for l2, else ``||w||_* = max_j |w_j| / omega_j``."""
    if isinstance(cost_norm, (bool, np.bool_)) or cost_norm not in _COST_NORMS:
        raise ValueError(f"cost_norm must be one of 1, 2 or 'weighted-l1', got {cost_norm!r}")
    if cost_norm == "weighted-l1":
        if cost_weights is None:
            raise ValueError("cost_norm='weighted-l1' needs cost_weights, an array of shape (d,)")
        om = check_array(cost_weights, "cost_weights", ndim=1, finite=False).astype(np.float64)
        if om.shape[0] != d:
            raise ValueError(f"cost_weights must have shape ({d},), got {om.shape}")
        if np.isnan(om).any() or (om <= 0).any():
            raise ValueError("cost_weights must be positive (inf = immutable feature)")
        return om
    if cost_weights is not None:
        raise ValueError(
            f"cost_weights is only used with cost_norm='weighted-l1', got cost_norm={cost_norm!r}")
    return None if cost_norm == 2 else np.ones(d)


def _dual_norm(w: np.ndarray, omega: np.ndarray | None) -> float:
    if omega is None:
        return float(np.linalg.norm(w))
    fin = np.isfinite(omega)
    return float(np.max(np.abs(w[fin]) / omega[fin])) if fin.any() else 0.0


def _bounds(coef_bounds: Any, d: int) -> tuple[np.ndarray, np.ndarray] | None:
    if coef_bounds is None:
        return None
    if not isinstance(coef_bounds, (tuple, list)) or len(coef_bounds) != 2:
        raise ValueError(f"coef_bounds must be None or a (lo, hi) pair, got {coef_bounds!r}")
    lo = np.broadcast_to(np.asarray(coef_bounds[0], dtype=np.float64), (d,)).copy()
    hi = np.broadcast_to(np.asarray(coef_bounds[1], dtype=np.float64), (d,)).copy()
    if np.isnan(lo).any() or np.isnan(hi).any():
        raise ValueError("coef_bounds must not contain NaN")
    if (lo > hi).any():
        j = int(np.argmax(lo > hi))
        raise InfeasibleProgramError(
            f"coef_bounds are infeasible: lo[{j}]={lo[j]!r} > hi[{j}]={hi[j]!r}")
    return lo, hi


def _check_common(est: Any) -> dict[str, Any]:
    out = {
        "kappa_lo": check_scalar(est.kappa_lo, "kappa_lo", Interval("real", 0.0, None, "neither")),
        "kappa_hi": check_scalar(est.kappa_hi, "kappa_hi", Interval("real", 0.0, None, "neither")),
        "C": check_scalar(est.C, "C", Interval("real", 0.0, None, "neither")),
    }
    if out["kappa_hi"] < out["kappa_lo"]:
        raise ValueError(f"kappa_lo must be <= kappa_hi (the uncertainty set [kappa_lo, kappa_hi]), "
                         f"got kappa_lo={est.kappa_lo!r}, kappa_hi={est.kappa_hi!r}")
    if est.solver is not None and not isinstance(est.solver, str):
        raise TypeError(f"solver must be None or a cvxpy solver name, got {est.solver!r}")
    return out


def _encode(est: Any, y: Any) -> np.ndarray:
    check_targets_named(y)
    classes = np.unique(y)
    if classes.shape[0] < 2:
        raise ValueError(f"{type(est).__name__} needs two classes in y, got one class "
                         f"({classes.tolist()!r}); a strategic classifier cannot be trained "
                         "on a single class")
    if classes.shape[0] > 2:
        raise ValueError(f"Only binary classification is supported. The type of the target is "
                         f"{type_of_target(y)} with {classes.shape[0]} classes.")
    return classes


def _solve(prob: Any, solver: str | None) -> None:
    import cvxpy as cp

    names = cp.installed_solvers()
    chosen = solver or ("CLARABEL" if "CLARABEL" in names else None)
    if chosen is not None and chosen not in names:
        raise ValueError(f"solver must be one of the installed cvxpy solvers {names}, "
                         f"got {solver!r}")
    try:
        prob.solve(solver=chosen)
    except cp.error.SolverError as exc:
        raise SolverFailedError(f"the conic solver {chosen} failed: {exc}") from exc


def _check_status(status: str, what: str) -> None:
    if status in ("infeasible", "infeasible_inaccurate"):
        raise InfeasibleProgramError(f"the {what} is infeasible (solver status {status!r}); "
                                     "no classifier is returned", status)
    if status in ("unbounded", "unbounded_inaccurate"):
        raise SolverFailedError(f"the {what} is unbounded (solver status {status!r})", status)
    if status not in ("optimal", "optimal_inaccurate"):
        raise SolverFailedError(f"the solver did not solve the {what} (status {status!r})", status)
    if status == "optimal_inaccurate":
        warnings.warn(f"the {what} was solved only inaccurately (status 'optimal_inaccurate'); "
                      "check certificate_.gap", ConvergenceWarning, stacklevel=3)


# --------------------------------------------------------------------------------------------
# the stage SOCP


def robust_strategic_objective(
    w: np.ndarray, b: float, X: np.ndarray, y_pm: np.ndarray, kappa: float, C: float = 1.0,
    cost_norm: int | str = 2, cost_weights: np.ndarray | None = None,
) -> float:
    """Objective (1): robust strategic hinge loss plus ``(C/2)||w||^2``, evaluated in NumPy.

    Parameters
    ----------
    w : ndarray of shape (d,)
    b : float
    X : ndarray of shape (n, d)
    y_pm : ndarray of shape (n,)
        Labels in {-1, +1} (+1 = accepted class).
    kappa : float
        Cost per unit of movement the learner guards against (worst case ``kappa_lo``).
    C : float, default=1.0
        Weight of ``(1/2)||w||_2^2``.
    cost_norm : {2, 1, "weighted-l1"}, default=2
    cost_weights : ndarray of shape (d,), optional
        For ``"weighted-l1"``: per-feature cost ``kappa * cost_weights_j``.

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0], [-1.0]]); y = np.array([1, -1])
    >>> robust_strategic_objective(np.array([1.0]), 0.0, X, y, kappa=2.0, C=0.0)
    0.25
    """
    X = check_array(X, "X", ndim=2)
    if X.shape[0] == 0:
        raise ValueError(f"X must have at least one row, got an array of shape {X.shape}")
    w = check_array(w, "w", ndim=1)
    if w.shape != (X.shape[1],):
        raise ValueError(f"w must have shape ({X.shape[1]},) like the columns of X, got "
                         f"{w.shape}")
    b = check_scalar(b, "b", Interval("real", None, None))
    y_pm = check_array(y_pm, "y_pm", dtypes=None, ndim=1)
    if y_pm.shape != (X.shape[0],) or not np.all((y_pm == 1) | (y_pm == -1)):
        raise ValueError(f"y_pm must hold labels in {{-1, +1}} with shape ({X.shape[0]},), got "
                         f"shape {y_pm.shape}")
    om = _omega(cost_norm, cost_weights, X.shape[1])
    kappa = check_scalar(kappa, "kappa", Interval("real", 0.0, None, "neither"))
    C = check_scalar(C, "C", Interval("real", 0.0, None))
    return _objective(w, b, X, y_pm, 1.0 / kappa, C, om)


def _objective(w, b, X, y_pm, inv_kappa, C, om) -> float:
    s = X @ w + b
    neg = y_pm < 0
    loss = np.where(neg, np.maximum(0.0, 1.0 + s + _dual_norm(w, om) * inv_kappa),
                    np.maximum(0.0, 1.0 - s))
    return float(loss.mean() + 0.5 * C * (w @ w))


class _StageProgram:
    """One stage's SOCP (1), built once with cvxpy Parameters for ``1/kappa`` and the budget."""

    def __init__(self, X, y_pm, C, om, bounds, budget: str | None) -> None:
        import cvxpy as cp

        n, d = X.shape
        self.X, self.y, self.C, self.om, self.bounds, self.budget = X, y_pm, C, om, bounds, budget
        self.n = n
        self.w = cp.Variable(d)
        self.b = cp.Variable()
        self.xi = cp.Variable(n)
        self.t = cp.Variable()
        self.ik = cp.Parameter(nonneg=True)
        self.G = cp.Parameter()
        negm = (y_pm < 0).astype(np.float64)
        self.negm = negm
        s = X @ self.w + self.b
        self.c_hinge = 1 - cp.multiply(y_pm, s) + negm * (self.t * self.ik) - self.xi <= 0
        self.c_xi = -self.xi <= 0
        cons = [self.c_hinge, self.c_xi]
        self.c_soc: Any = None  # cvxpy constraints, or None when not part of the problem
        self.c_p: Any = None
        self.c_m: Any = None
        if om is None:
            self.c_soc = cp.SOC(self.t, self.w)
            cons.append(self.c_soc)
        else:
            self.fin = np.flatnonzero(np.isfinite(om))
            if self.fin.size:
                self.c_p = self.w[self.fin] - self.t * om[self.fin] <= 0
                self.c_m = -self.w[self.fin] - self.t * om[self.fin] <= 0
                cons += [self.c_p, self.c_m]
            cons.append(self.t >= 0)
        self.c_lo: Any = None
        self.c_hi: Any = None
        if bounds is not None:
            lo, hi = bounds
            self.ilo = np.flatnonzero(np.isfinite(lo))
            self.ihi = np.flatnonzero(np.isfinite(hi))
            if self.ilo.size:
                self.c_lo = lo[self.ilo] - self.w[self.ilo] <= 0
                cons.append(self.c_lo)
            if self.ihi.size:
                self.c_hi = self.w[self.ihi] - hi[self.ihi] <= 0
                cons.append(self.c_hi)
        self.c_zp: Any = None
        self.c_zm: Any = None
        self.c_nu: Any = None
        if budget == "l1":
            self.a = cp.Variable(d)
            self.c_zp = self.w - self.a <= 0
            self.c_zm = -self.w - self.a <= 0
            self.c_nu = cp.sum(self.a) - self.G <= 0
            cons += [self.c_zp, self.c_zm, self.c_nu]
        elif budget == "dual":
            self.c_nu = self.t - self.G <= 0
            cons.append(self.c_nu)
        obj = cp.sum(self.xi) / n + 0.5 * C * cp.sum_squares(self.w)
        self.prob = cp.Problem(cp.Minimize(obj), cons)

    def solve(self, inv_kappa: float, solver: str | None, G: float | None = None,
              what: str = "robust strategic SOCP", strict: bool = True):
        self.ik.value = float(inv_kappa)
        self.G.value = float(G) if G is not None else 0.0
        _solve(self.prob, solver)
        status = self.prob.status
        if not strict and status in ("infeasible", "infeasible_inaccurate"):
            return None
        _check_status(status, what)
        w = np.asarray(self.w.value, dtype=np.float64).copy()
        b = float(cast(Any, self.b.value))  # set by the solve (status checked above)
        cert = self._certificate(w, b, float(inv_kappa), G, status)
        return w, b, cert

    def _certificate(self, w, b, ik, G, status) -> StageCertificate:
        X, y, C, n = self.X, self.y, self.C, self.n
        alpha = np.maximum(np.asarray(self.c_hinge.dual_value, dtype=np.float64), 0.0)
        beta = np.maximum(np.asarray(self.c_xi.dual_value, dtype=np.float64), 0.0)
        d = X.shape[1]
        u = np.zeros(d)
        t_res = ik * float(self.negm @ alpha)
        if self.c_soc is not None:
            lam_u = self.c_soc.dual_value
            lam = float(np.asarray(lam_u[0]).reshape(-1)[0])
            u = np.asarray(lam_u[1], dtype=np.float64).reshape(-1)
            t_res -= lam
        elif self.c_p is not None:
            p = np.asarray(self.c_p.dual_value, dtype=np.float64)
            m = np.asarray(self.c_m.dual_value, dtype=np.float64)
            u[self.fin] = m - p
            t_res -= float(self.om[self.fin] @ (p + m))
        v = X.T @ (y * alpha) + u
        const = float(alpha.sum())
        if self.c_lo is not None:
            rl = np.asarray(self.c_lo.dual_value, dtype=np.float64)
            v[self.ilo] += rl
            const += float(rl @ self.bounds[0][self.ilo])
        if self.c_hi is not None:
            rh = np.asarray(self.c_hi.dual_value, dtype=np.float64)
            v[self.ihi] -= rh
            const -= float(rh @ self.bounds[1][self.ihi])
        if self.c_nu is not None:
            nu = float(np.asarray(self.c_nu.dual_value).reshape(-1)[0])
            const -= nu * float(G)
            if self.budget == "l1":
                zp = np.asarray(self.c_zp.dual_value, dtype=np.float64)
                zm = np.asarray(self.c_zm.dual_value, dtype=np.float64)
                v += -zp + zm
            else:
                t_res += nu
        dual = const - float(v @ v) / (2.0 * C)
        primal = _objective(w, b, X, y, ik, C, self.om)
        station = max(abs(float(y @ alpha)), float(np.max(np.abs(alpha + beta - 1.0 / n))),
                      abs(t_res), float(np.max(np.abs(w - v / C))) if d else 0.0)
        return StageCertificate(status=status, primal=primal, dual=dual, gap=primal - dual,
                                stationarity=station, alpha=alpha, u=u)


# --------------------------------------------------------------------------------------------
# estimators


class RobustStrategicClassifier(ClassifierMixin, BaseEstimator):
    """Single-stage robust strategic classifier: the SOCP (1) with worst-case cost ``kappa_lo``.

    PROPOSED reconstruction of the stage problem of Alhanouti, Bayraksan & Naghizadeh
    (arXiv 2606.30136), spec section 4.1: negatives pay the strategic hinge
    ``max(0, 1 + s(x) + ||w||_* / kappa_lo)`` (they may game at the cheapest cost in
    ``[kappa_lo, kappa_hi]``), positives the standard hinge (conservatively, their own moves are
    not credited), plus ``(C/2)||w||_2^2``. Note that ``C`` weighs the *regulariser* (the spec's
    convention), unlike scikit-learn's SVMs; losses are averaged over samples. Since the loss is
    monotone in ``kappa``, only ``kappa_lo`` enters the fit; ``kappa_hi`` bounds the set reported in
    ``uncertainty_set_`` and the default of :meth:`best_response`'s range checks.

    Parameters
    ----------
    cost_norm : {2, 1, "weighted-l1"}, default=2
        The agents' cost ``kappa ||delta||_2``, ``kappa ||delta||_1`` or
        ``kappa sum_j cost_weights_j |delta_j|``.
    kappa_lo, kappa_hi : float, default=1.0, 2.0
        The cost uncertainty set ``[kappa_lo, kappa_hi]`` (units: cost per unit of feature move,
        relative to the gain 1 of acceptance).
    C : float, default=1.0
        Regularisation weight of ``(1/2)||w||_2^2`` (> 0).
    solver : str or None, default=None
        A cvxpy solver (default CLARABEL, shipped with cvxpy).
    cost_weights : ndarray of shape (d,) or None, default=None
        Per-feature cost weights for ``"weighted-l1"`` (``inf`` = immutable feature).
    coef_bounds : (lo, hi) or None, default=None
        Box constraints ``lo <= w <= hi`` (scalars or (d,) arrays; ``+-inf`` allowed), e.g. sign
        constraints from domain knowledge. ``lo > hi`` raises :class:`InfeasibleProgramError`.

    Attributes
    ----------
    coef_ : ndarray of shape (1, d)
    intercept_ : ndarray of shape (1,)
    classes_ : ndarray of shape (2,)
        ``classes_[1]`` is the accepted (+1) class.
    certificate_ : StageCertificate
        Solver status, primal and re-derived dual objective, duality gap, stationarity residual.
    objective_ : float
        Value of (1) at the solution.
    status_ : str
        cvxpy's status ("optimal").
    uncertainty_set_ : tuple of float
        ``(kappa_lo, kappa_hi)``.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(-1, 1, (60, 2)), rng.normal(1, 1, (60, 2))]
    >>> y = np.r_[np.zeros(60, int), np.ones(60, int)]
    >>> clf = RobustStrategicClassifier(kappa_lo=2.0, kappa_hi=4.0).fit(X, y)
    >>> clf.status_, bool(abs(clf.certificate_.gap) < 1e-6)
    ('optimal', True)
    >>> float(clf.score(X, y)) > 0.7
    True
    """

    def __init__(self, cost_norm: int | str = 2, kappa_lo: float = 1.0, kappa_hi: float = 2.0,
                 C: float = 1.0, solver: str | None = None, cost_weights: Any = None,
                 coef_bounds: Any = None) -> None:
        self.cost_norm = cost_norm
        self.kappa_lo = kappa_lo
        self.kappa_hi = kappa_hi
        self.C = C
        self.solver = solver
        self.cost_weights = cost_weights
        self.coef_bounds = coef_bounds

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def fit(self, X: Any, y: Any) -> RobustStrategicClassifier:
        """Solve the SOCP (1) on ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n, d)
            Features (the agents' true features).
        y : array-like of shape (n,)
            Two classes; ``np.unique(y)[1]`` is the accepted (+1) class.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            One class in ``y``, more than two, or bad parameters.
        InfeasibleProgramError
            ``coef_bounds`` with ``lo > hi``.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[-2.0], [-1.0], [1.0], [2.0]])
        >>> RobustStrategicClassifier(kappa_lo=4.0, kappa_hi=4.0).fit(X, [-1, -1, 1, 1]).predict(X)
        array([-1, -1,  1,  1])
        """
        p = _check_common(self)
        X, y = validate_named(self, X, y, dtype=[np.float64, np.float32])
        classes = _encode(self, y)
        X = np.asarray(X, dtype=np.float64)
        d = X.shape[1]
        om = _omega(self.cost_norm, self.cost_weights, d)
        bounds = _bounds(self.coef_bounds, d)
        y_pm = np.where(y == classes[1], 1.0, -1.0)
        prog = _StageProgram(X, y_pm, p["C"], om, bounds, None)
        w, b, cert = prog.solve(1.0 / p["kappa_lo"], self.solver)
        self.classes_ = classes
        self.coef_ = w.reshape(1, -1)
        self.intercept_ = np.array([b])
        self.certificate_ = cert
        self.objective_ = cert.primal
        self.status_ = cert.status
        self.uncertainty_set_ = (p["kappa_lo"], p["kappa_hi"])
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """Scores ``s(x) = w.x + b``, shape (n,); positive = accepted.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[-2.0], [2.0]])
        >>> clf = RobustStrategicClassifier().fit(X, [0, 1])
        >>> bool(clf.decision_function(X)[1] > 0)
        True
        """
        check_is_fitted(self)
        X = validate_named(self, X, dtype=[np.float64, np.float32], reset=False)
        return np.asarray(X, dtype=np.float64) @ self.coef_[0] + self.intercept_[0]

    def predict(self, X: Any) -> np.ndarray:
        """``classes_[1]`` where ``s(x) > 0``, else ``classes_[0]``; shape (n,).

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[-2.0], [2.0]])
        >>> RobustStrategicClassifier().fit(X, ["no", "yes"]).predict(X).tolist()
        ['no', 'yes']
        """
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(int)]

    def best_response(self, X: Any, kappa: float | None = None) -> np.ndarray:
        """The agents' best response to this rule at cost ``kappa`` (default ``kappa_lo``).

        Closed form of :func:`rml_fast.strategic.simulator.linear_best_response`: a rejected
        agent moves onto the boundary iff its cheapest crossing costs ``< 1``.

        Parameters
        ----------
        X : array-like of shape (n, d)
        kappa : float, optional
            The agents' cost per unit of movement; default the worst case ``kappa_lo``.

        Returns
        -------
        X_new : ndarray of shape (n, d)

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[-2.0], [2.0]])
        >>> clf = RobustStrategicClassifier(kappa_lo=0.5, kappa_hi=1.0).fit(X, [0, 1])
        >>> Xn = clf.best_response(np.array([[-0.1]]), kappa=100.0)
        >>> Xn.tolist()
        [[-0.1]]
        """
        check_is_fitted(self)
        X = validate_named(self, X, dtype=[np.float64, np.float32], reset=False)
        k = self.kappa_lo if kappa is None else kappa
        k = check_scalar(k, "kappa", Interval("real", 0.0, None, "neither"))
        om = _omega(self.cost_norm, self.cost_weights, X.shape[1])
        return _linear_best_response(X, self.coef_[0], float(self.intercept_[0]),
                                     np.full(X.shape[0], k), self.cost_norm,
                                     None if om is None or self.cost_norm == 1 else om)[0]


def _g(w: np.ndarray, dependence: str, om: np.ndarray | None) -> float:
    return float(np.abs(w).sum()) if dependence == "l1" else _dual_norm(w, om)


class TwoStageDDURobustClassifier(ClassifierMixin, BaseEstimator):
    """Two-stage robust strategic classifier with a decision-dependent cost set, problem (3).

    PROPOSED reconstruction (spec section 4.1) of Alhanouti, Bayraksan & Naghizadeh (arXiv
    2606.30136): the stage-1 rule ``(w_1, b_1)`` lowers the stage-2 costs to
    ``U_2 = [kappa_lo - gamma g(w_1), kappa_hi - gamma g(w_1)]`` (eq. 2) and the learner minimises
    the stage-1 robust loss plus the stage-2 worst-case optimal loss, keeping
    ``kappa_lo - gamma g(w_1) >= kappa_floor``. ``predict`` uses the stage-2 rule (the one deployed
    after the first stage); ``decision_function(X, stage=1)`` gives the stage-1 scores.

    Parameters
    ----------
    cost_norm : {2, 1, "weighted-l1"}, default=2
        The agents' cost norm (see :class:`RobustStrategicClassifier`).
    kappa_lo, kappa_hi : float, default=1.0, 2.0
        Stage-1 uncertainty set ``U_1``.
    gamma : float, default=0.5
        Strength of the decision dependence (>= 0; 0 decouples the stages).
    dependence : {"l1", "dual"}, default="l1"
        ``g(w_1) = ||w_1||_1`` or ``||w_1||_*`` (dual norm of the cost: how far a unit budget moves
        the score).
    C : float, default=1.0
        Regularisation weight of ``(1/2)||w_t||^2`` in each stage.
    method : {"param_search", "alternating"}, default="param_search"
        Exact 1-D search over ``g`` (global up to the grid + golden-section refinement) or
        block-coordinate descent (a local solution; cheaper for large ``n_grid``).
    n_grid : int, default=41
        Grid size over ``g in [0, g_max]`` for ``"param_search"``.
    solver : str or None, default=None
        cvxpy solver (default CLARABEL).
    kappa_floor : float or None, default=None
        Lowest admissible stage-2 worst-case cost; default ``0.1 * kappa_lo``.
    cost_weights : ndarray of shape (d,) or None, default=None
        Per-feature cost weights for ``"weighted-l1"``.
    coef_bounds : (lo, hi) or None, default=None
        Box constraints on ``w_1`` and ``w_2``.
    max_iter : int, default=30
        Iteration cap of ``"alternating"``.
    tol : float, default=1e-6
        Relative objective decrease that stops ``"alternating"`` and the refinement.

    Attributes
    ----------
    coef_stage_ : list of (ndarray (d,), float)
        ``[(w_1, b_1), (w_2, b_2)]``.
    coef_, intercept_ : ndarray of shape (1, d), (1,)
        The stage-2 rule (used by ``predict``).
    g_ : float
        ``g(w_1)`` of the chosen stage-1 rule.
    kappa_stage_ : ndarray of shape (2,)
        Worst-case costs ``[kappa_lo, kappa_lo - gamma g_]``.
    uncertainty_sets_ : list of (float, float)
        ``U_1`` and ``U_2(theta_1)``.
    objective_ : float
        Value of (3) at the solution: ``stage_objectives_.sum()``.
    stage_objectives_ : ndarray of shape (2,)
    certificates_ : list of StageCertificate
        The final stage SOCPs' certificates (stage 1 solved with the budget ``g(w_1) <= g`` for
        ``"param_search"``; for ``"alternating"`` the stage-1 certificate is that of (1) restricted
        to the final ``g_``).
    stage_gaming_rates_ : ndarray of shape (2,)
        Training-data gaming rate of each stage's rule at its worst-case cost.
    search_path_ : ndarray of shape (m, 2)
        ``"param_search"``: the evaluated ``(g, objective)`` pairs; ``"alternating"``: the
        objective per iteration in column 1.
    n_iter_ : int
        Number of alternating iterations, or for ``"param_search"`` the number of ``g`` values
        evaluated (each two SOCPs).
    classes_ : ndarray of shape (2,)
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(-1, 1, (50, 2)), rng.normal(1, 1, (50, 2))]
    >>> y = np.r_[np.zeros(50, int), np.ones(50, int)]
    >>> clf = TwoStageDDURobustClassifier(gamma=0.5, n_grid=9).fit(X, y)
    >>> bool(clf.kappa_stage_[1] < clf.kappa_stage_[0])
    True
    >>> bool(clf.stage_gaming_rates_[1] <= 1.0)
    True
    """

    def __init__(self, cost_norm: int | str = 2, kappa_lo: float = 1.0, kappa_hi: float = 2.0,
                 gamma: float = 0.5, dependence: str = "l1", C: float = 1.0,
                 method: str = "param_search", n_grid: int = 41, solver: str | None = None,
                 kappa_floor: float | None = None, cost_weights: Any = None,
                 coef_bounds: Any = None, max_iter: int = 30, tol: float = 1e-6) -> None:
        self.cost_norm = cost_norm
        self.kappa_lo = kappa_lo
        self.kappa_hi = kappa_hi
        self.gamma = gamma
        self.dependence = dependence
        self.C = C
        self.method = method
        self.n_grid = n_grid
        self.solver = solver
        self.kappa_floor = kappa_floor
        self.cost_weights = cost_weights
        self.coef_bounds = coef_bounds
        self.max_iter = max_iter
        self.tol = tol

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _params(self) -> dict[str, Any]:
        p = _check_common(self)
        p["gamma"] = check_scalar(self.gamma, "gamma", Interval("real", 0.0, None))
        if self.dependence not in _DEPENDENCES:
            raise ValueError(f"dependence must be one of {_DEPENDENCES}, got {self.dependence!r}")
        if self.method not in _METHODS:
            raise ValueError(f"method must be one of {_METHODS}, got {self.method!r}")
        p["n_grid"] = check_scalar(self.n_grid, "n_grid", Interval("int", 3, None))
        p["max_iter"] = check_scalar(self.max_iter, "max_iter", Interval("int", 1, None))
        p["tol"] = check_scalar(self.tol, "tol", Interval("real", 0.0, None, "neither"))
        floor = 0.1 * p["kappa_lo"] if self.kappa_floor is None else self.kappa_floor
        p["kappa_floor"] = check_scalar(floor, "kappa_floor",
                                        Interval("real", 0.0, None, "neither"))
        if p["kappa_floor"] > p["kappa_lo"]:
            raise InfeasibleProgramError(
                f"kappa_floor={p['kappa_floor']!r} > kappa_lo={p['kappa_lo']!r}: no stage-1 rule "
                "keeps the stage-2 cost set above the floor (infeasible constraints)")
        return p

    def fit(self, X: Any, y: Any, X2: Any = None, y2: Any = None) -> TwoStageDDURobustClassifier:
        """Solve the two-stage problem (3).

        Parameters
        ----------
        X, y : array-like of shape (n1, d), (n1,)
            Stage-1 data (two classes; ``np.unique(y)[1]`` is accepted).
        X2, y2 : array-like of shape (n2, d), (n2,), optional
            Stage-2 data (same classes); default the stage-1 data.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            One class, more than two, mismatched stage-2 data or bad parameters.
        InfeasibleProgramError
            No stage-1 rule satisfies ``coef_bounds`` and ``kappa_lo - gamma g(w_1) >= kappa_floor``.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[-2.0], [-1.0], [1.0], [2.0]]); y = np.array([0, 0, 1, 1])
        >>> clf = TwoStageDDURobustClassifier(gamma=0.0, n_grid=5).fit(X, y)
        >>> clf.predict(X).tolist()
        [0, 0, 1, 1]
        """
        p = self._params()
        X, y = validate_named(self, X, y, dtype=[np.float64, np.float32])
        classes = _encode(self, y)
        X = np.asarray(X, dtype=np.float64)
        d = X.shape[1]
        if (X2 is None) != (y2 is None):
            raise ValueError("X2 and y2 must be given together (or both omitted)")
        if X2 is None:
            X2a, y2a = X, y
        else:
            X2a = check_array(X2, "X2", ndim=2).astype(np.float64)
            y2a = np.asarray(y2)
            if X2a.shape[1] != d:
                raise ValueError(f"X2 must have {d} features like X, got {X2a.shape[1]}")
            if y2a.shape != (X2a.shape[0],):
                raise ValueError(f"y2 must have shape ({X2a.shape[0]},), got {y2a.shape}")
            if not np.isin(y2a, classes).all() or np.unique(y2a).shape[0] < 2:
                raise ValueError(f"y2 must hold both classes of y {classes.tolist()!r}, "
                                 f"got {np.unique(y2a).tolist()!r}")
        om = _omega(self.cost_norm, self.cost_weights, d)
        bounds = _bounds(self.coef_bounds, d)
        y1 = np.where(y == classes[1], 1.0, -1.0)
        y2p = np.where(y2a == classes[1], 1.0, -1.0)
        self.classes_ = classes
        if self.method == "param_search":
            res = self._param_search(X, y1, X2a, y2p, om, bounds, p)
        else:
            res = self._alternating(X, y1, X2a, y2p, om, bounds, p)
        (w1, b1, c1), (w2, b2, c2), g1, path, n_iter = res
        k2 = p["kappa_lo"] - p["gamma"] * g1
        self.coef_stage_ = [(w1, b1), (w2, b2)]
        self.coef_ = w2.reshape(1, -1)
        self.intercept_ = np.array([b2])
        self.g_ = g1
        self.kappa_stage_ = np.array([p["kappa_lo"], k2])
        self.uncertainty_sets_ = [(p["kappa_lo"], p["kappa_hi"]),
                                  (k2, p["kappa_hi"] - p["gamma"] * g1)]
        self.stage_objectives_ = np.array([
            _objective(w1, b1, X, y1, 1.0 / p["kappa_lo"], p["C"], om),
            _objective(w2, b2, X2a, y2p, 1.0 / k2, p["C"], om)])
        self.objective_ = float(self.stage_objectives_.sum())
        self.certificates_ = [c1, c2]
        self.search_path_ = np.asarray(path, dtype=np.float64).reshape(-1, 2)
        self.n_iter_ = n_iter
        self.stage_gaming_rates_ = np.array([
            self._gaming(X, y1, w1, b1, p["kappa_lo"], om),
            self._gaming(X2a, y2p, w2, b2, k2, om)])
        return self

    # -- solvers ------------------------------------------------------------------------------

    def _gaming(self, X, y_pm, w, b, kappa, om) -> float:
        neg = y_pm < 0
        if not neg.any():
            return float("nan")
        Xn, _ = _linear_best_response(X[neg], w, b, np.full(int(neg.sum()), kappa),
                                      self.cost_norm, None if om is None else om)
        return float(np.mean(Xn @ w + b > 0))

    def _param_search(self, X1, y1, X2, y2, om, bounds, p):
        kl, gam, C = p["kappa_lo"], p["gamma"], p["C"]
        budget = self.dependence
        st1 = _StageProgram(X1, y1, C, om, bounds, budget)
        st2 = _StageProgram(X2, y2, C, om, bounds, None)
        g_feas = math.inf if gam == 0 else (kl - p["kappa_floor"]) / gam
        free = _StageProgram(X1, y1, C, om, bounds, None).solve(1.0 / kl, self.solver,
                                                                what="stage-1 SOCP")
        g_free = _g(free[0], budget, om)
        if g_free <= g_feas:
            g_hi = g_free
        else:
            g_hi = g_feas
            if st1.solve(1.0 / kl, self.solver, G=g_hi, strict=False) is None:
                raise InfeasibleProgramError(
                    "the two-stage program is infeasible: every stage-1 rule allowed by "
                    f"coef_bounds has gamma * g(w_1) > kappa_lo - kappa_floor = "
                    f"{kl - p['kappa_floor']:.6g}, i.e. the decision-dependent cost set U_2 "
                    "would fall below kappa_floor")
        cache: dict[float, tuple] = {}

        def total(g: float):
            if g in cache:
                return cache[g]
            if g >= g_free:
                s1 = free
            else:
                s1 = st1.solve(1.0 / kl, self.solver, G=g, strict=False,
                               what="stage-1 SOCP with budget g(w_1) <= g")
            if s1 is None:
                cache[g] = (math.inf, None, None, None)
                return cache[g]
            g1 = min(_g(s1[0], budget, om), g)
            s2 = st2.solve(1.0 / (kl - gam * g1), self.solver, what="stage-2 SOCP")
            val = s1[2].primal + s2[2].primal
            cache[g] = (val, s1, s2, g1)
            return cache[g]

        if gam == 0.0:
            val, s1, s2, g1 = total(g_hi)
            return s1, s2, g1, [(g_hi, val)], 1
        grid = np.linspace(0.0, g_hi, p["n_grid"])
        vals = np.array([total(float(g))[0] for g in grid])
        if not np.isfinite(vals).any():
            raise InfeasibleProgramError("the two-stage program is infeasible on the whole "
                                         "g-grid (coef_bounds vs kappa_floor)")
        k = int(np.argmin(vals))
        lo_g, hi_g = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
        # golden-section refinement in the bracket around the best grid point
        phi = (math.sqrt(5.0) - 1.0) / 2.0
        a, bb = float(lo_g), float(hi_g)
        c, dd = bb - phi * (bb - a), a + phi * (bb - a)
        fc, fd = total(c)[0], total(dd)[0]
        for _ in range(20):  # the bracket shrinks to 0.618**20 ~ 7e-5 of two grid steps
            if bb - a <= p["tol"] * max(1.0, g_hi):
                break
            if fc <= fd:
                bb, dd, fd = dd, c, fc
                c = bb - phi * (bb - a)
                fc = total(c)[0]
            else:
                a, c, fc = c, dd, fd
                dd = a + phi * (bb - a)
                fd = total(dd)[0]
        best_g = min(cache, key=lambda g: cache[g][0])
        val, s1, s2, g1 = cache[best_g]
        path = sorted((g, v[0]) for g, v in cache.items())
        return s1, s2, g1, path, len(cache)

    def _alternating(self, X1, y1, X2, y2, om, bounds, p):
        import cvxpy as cp

        kl, gam, C = p["kappa_lo"], p["gamma"], p["C"]
        st2 = _StageProgram(X2, y2, C, om, bounds, None)
        st1b = _StageProgram(X1, y1, C, om, bounds, self.dependence)
        g_feas = math.inf if gam == 0 else (kl - p["kappa_floor"]) / gam
        # start: the stage-1 robust rule, capped to the feasible g-range
        if math.isfinite(g_feas):
            s1 = st1b.solve(1.0 / kl, self.solver, G=g_feas, strict=False)
            if s1 is None:
                raise InfeasibleProgramError(
                    "the two-stage program is infeasible: every stage-1 rule allowed by "
                    f"coef_bounds has gamma * g(w_1) > kappa_lo - kappa_floor = "
                    f"{kl - p['kappa_floor']:.6g}")
        else:
            s1 = _StageProgram(X1, y1, C, om, bounds, None).solve(1.0 / kl, self.solver)
        w1, b1 = s1[0], s1[1]
        n1, d = X1.shape
        # the stage-1 program for fixed stage-2 rule: convex via inv_pos
        w = cp.Variable(d)
        b = cp.Variable()
        neg1 = y1 < 0
        s = X1 @ w + b
        if om is None:
            dual = cp.norm(w, 2)
        else:
            fin = np.isfinite(om)
            dual = cp.max(cp.abs(w[np.flatnonzero(fin)]) / om[fin]) if fin.any() else 0
        gexpr = cp.norm1(w) if self.dependence == "l1" else dual
        s2c = cp.Parameter(X2.shape[0])
        D2 = cp.Parameter(nonneg=True)
        neg2 = y2 < 0
        loss1 = cp.sum(cp.pos(1 + cp.multiply(y1 * -1.0, s) + neg1 * (dual / kl))) / n1
        cons = []
        if bounds is not None:
            lo, hi = bounds
            ilo, ihi = np.flatnonzero(np.isfinite(lo)), np.flatnonzero(np.isfinite(hi))
            if ilo.size:
                cons.append(w[ilo] >= lo[ilo])
            if ihi.size:
                cons.append(w[ihi] <= hi[ihi])
        if gam > 0:
            cons.append(gam * gexpr <= kl - p["kappa_floor"])
            reach = D2 * cp.inv_pos(kl - gam * gexpr)
            loss2 = (cp.sum(cp.pos(1 + s2c[np.flatnonzero(neg2)] + reach)) +
                     cp.sum(cp.pos(1 - s2c[np.flatnonzero(~neg2)]))) / X2.shape[0]
        else:
            loss2 = 0
        prob1 = cp.Problem(cp.Minimize(loss1 + 0.5 * C * cp.sum_squares(w) + loss2), cons)
        history = []
        prev = math.inf
        n_iter = 0
        s2 = None
        for it in range(p["max_iter"]):
            n_iter = it + 1
            g1 = _g(w1, self.dependence, om)
            s2 = st2.solve(1.0 / (kl - gam * g1), self.solver, what="stage-2 SOCP")
            val = _objective(w1, b1, X1, y1, 1.0 / kl, C, om) + s2[2].primal
            history.append((float(it), val))
            if prev - val <= p["tol"] * max(1.0, abs(val)) or gam == 0:
                break
            prev = val
            s2c.value = X2 @ s2[0] + s2[1]
            D2.value = _dual_norm(s2[0], om)
            _solve(prob1, self.solver)
            _check_status(prob1.status, "stage-1 program (alternating step)")
            w_new = np.asarray(w.value, dtype=np.float64).copy()
            b_new = float(b.value)
            g_new = _g(w_new, self.dependence, om)
            if gam > 0 and gam * g_new > kl - p["kappa_floor"]:  # solver tolerance
                w_new *= (kl - p["kappa_floor"]) / (gam * g_new)
            w1, b1 = w_new, b_new
        else:
            warnings.warn(f"alternating minimisation stopped at max_iter={p['max_iter']} "
                          "before the objective settled", ConvergenceWarning, stacklevel=3)
        g1 = _g(w1, self.dependence, om)
        # certificate of the final stage-1 rule: (1) restricted to g(w) <= g1 (its own optimum
        # when the alternating solution is a block optimum; the gap then measures how far it is)
        cert1 = st1b.solve(1.0 / kl, self.solver, G=g1, strict=False)
        c1 = cert1[2] if cert1 is not None else None
        if c1 is not None:
            c1 = StageCertificate(status=c1.status,
                                  primal=_objective(w1, b1, X1, y1, 1.0 / kl, C, om),
                                  dual=c1.dual, gap=0.0, stationarity=c1.stationarity,
                                  alpha=c1.alpha, u=c1.u)
            c1.gap = c1.primal - c1.dual
        return (w1, b1, c1), s2, g1, history, n_iter

    # -- prediction ----------------------------------------------------------------------------

    def _stage(self, stage: Any) -> int:
        if isinstance(stage, (bool, np.bool_)) or not isinstance(stage, numbers.Integral) \
                or stage not in (1, 2):
            raise ValueError(f"stage must be 1 or 2, got {stage!r}")
        return int(stage)

    def decision_function(self, X: Any, stage: int = 2) -> np.ndarray:
        """Scores of the stage-``stage`` rule, shape (n,).

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[-2.0], [-1.0], [1.0], [2.0]])
        >>> clf = TwoStageDDURobustClassifier(n_grid=5).fit(X, [0, 0, 1, 1])
        >>> clf.decision_function(X, stage=1).shape
        (4,)
        """
        check_is_fitted(self)
        st = self._stage(stage)
        X = validate_named(self, X, dtype=[np.float64, np.float32], reset=False)
        w, b = self.coef_stage_[st - 1]
        return np.asarray(X, dtype=np.float64) @ w + b

    def predict(self, X: Any, stage: int = 2) -> np.ndarray:
        """Labels of the stage-``stage`` rule (default the stage-2 rule), shape (n,).

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[-2.0], [-1.0], [1.0], [2.0]])
        >>> TwoStageDDURobustClassifier(n_grid=5).fit(X, [0, 0, 1, 1]).predict(X).tolist()
        [0, 0, 1, 1]
        """
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X, stage=stage) > 0).astype(int)]

    def stage_rule(self, stage: int) -> LinearRule:
        """The stage-``stage`` rule as a :class:`LinearRule` (e.g. for the simulator).

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[-2.0], [-1.0], [1.0], [2.0]])
        >>> clf = TwoStageDDURobustClassifier(n_grid=5).fit(X, [0, 0, 1, 1])
        >>> clf.stage_rule(1).predict(X).tolist()
        [0, 0, 1, 1]
        """
        check_is_fitted(self)
        w, b = self.coef_stage_[self._stage(stage) - 1]
        return LinearRule(w, b, self.classes_)

    def gaming_rate_(self, X: Any, y: Any, stage: int = 2, kappa: float | None = None) -> float:
        """Fraction of true negatives accepted after best-responding to the stage rule.

        Parameters
        ----------
        X : array-like of shape (n, d)
        y : array-like of shape (n,)
            Labels in ``classes_``.
        stage : {1, 2}, default=2
        kappa : float, optional
            The agents' cost; default the stage's worst case ``kappa_stage_[stage - 1]``.

        Returns
        -------
        float
            nan when ``y`` has no negatives.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[-2.0], [-1.0], [1.0], [2.0]]); y = np.array([0, 0, 1, 1])
        >>> clf = TwoStageDDURobustClassifier(n_grid=5).fit(X, y)
        >>> clf.gaming_rate_(X, y, stage=1, kappa=1e6)
        0.0
        """
        check_is_fitted(self)
        st = self._stage(stage)
        X = validate_named(self, X, dtype=[np.float64, np.float32], reset=False)
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        if not np.isin(y, self.classes_).all():
            raise ValueError(f"y must hold labels in classes_ {self.classes_.tolist()!r}")
        k = self.kappa_stage_[st - 1] if kappa is None else kappa
        k = check_scalar(k, "kappa", Interval("real", 0.0, None, "neither"))
        om = _omega(self.cost_norm, self.cost_weights, X.shape[1])
        w, b = self.coef_stage_[st - 1]
        y_pm = np.where(y == self.classes_[1], 1.0, -1.0)
        return self._gaming(np.asarray(X, dtype=np.float64), y_pm, w, b, k, om)
