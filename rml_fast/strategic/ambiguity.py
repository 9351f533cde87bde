"""Ambiguous strategic classification (Hikri & Rosenfeld, arXiv 2606.10137) -- PROPOSED reconstruction.

The learner *reveals* a set ``H`` of linear classifiers ``h(x) = 1[w.x >= b]`` and privately
*realises* one member ``h*``. Users know only ``H`` and are ambiguity averse (max-min expected
utility, Gilboa & Schmeidler): user ``x`` responds with

    x'(x) = argmax_{x'} [ min_{h in H} h(x') - c(x, x') ],   c(x, x') = (alpha / 2) ||x' - x||_2^2,

i.e. it moves iff the *robust acceptance region* ``R_H = cap_{h in H} {h = 1}`` is reachable at
cost ``< 1`` (ties: no move; a user already in ``R_H`` stays), and then moves to the Euclidean
projection of ``x`` onto ``R_H``. The learner's accuracy is ``mean_i 1[h*(x'(x_i)) = y_i]``.

Only the abstract of the paper was available when this was written (no code either); the model
above is the project's reconstruction (specs/tabular_decisions.md section 5, marked PROPOSED),
not necessarily the paper's formulation. Three revealed-set families:

* :class:`IntervalSet` -- one direction ``w``, threshold ``b in [b_lo, b_hi]``; ``R_H`` is the
  halfspace ``w.x >= b_hi`` (closed-form projection).
* :class:`FiniteSet` -- ``H = {(w_k, b_k)}_{k <= K}``; ``R_H`` is a polyhedron; projection by an
  exact active-set enumeration for ``K <= 8`` (numba), else by a cvxpy QP.
* :class:`BallSet` -- ``H = {(w, b0) : ||w - w0|| <= radius}``; ``R_H = {w0.x - radius ||x|| >= b0}``
  (a second-order-cone region; projection by bisection on the KKT multiplier).

An empty ``R_H`` raises :class:`InfeasibleRevealedSetError`: an infeasible program is reported,
never answered with a made-up response.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from rml_fast._sklearn_validation import (
    as_float_rows,
    check_targets_named,
    validate_named,
)
from rml_fast._validation import check_array, check_rng
from rml_fast.exceptions import InfeasibleError

__all__ = [
    "AmbiguousStrategicClassifier",
    "BallSet",
    "FiniteSet",
    "InfeasibleRevealedSetError",
    "IntervalSet",
    "RealizedRule",
    "exact_interval_sweep",
    "maxmin_best_response",
    "maxmin_response",
]

#: the projection targets R_H shrunk by this relative margin, so that a user who moves is
#: accepted by every member of H in floating point (landing "on" the boundary, up to ~1e-10)
_SLACK = 1e-10
#: largest K for the exact active-set projection (2^K subsets per row)
_ACTIVE_SET_MAX_K = 8


class InfeasibleRevealedSetError(InfeasibleError):
    """The robust acceptance region ``R_H = cap_{h in H} {h = 1}`` is empty (or has no interior).

    No user can be accepted by every member of ``H``; the max-min best response is then
    "never move", but a revealed set like this is almost always a modelling error, so it is
    reported instead of being answered.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.strategic.ambiguity import maxmin_best_response, InfeasibleRevealedSetError
    >>> H = [(np.array([1.0]), 1.0), (np.array([-1.0]), 1.0)]   # x >= 1 and -x >= 1
    >>> try:
    ...     maxmin_best_response(np.zeros((2, 1)), H)
    ... except InfeasibleRevealedSetError as e:
    ...     print("infeasible")
    infeasible
    """


# --- revealed sets --------------------------------------------------------------------------------


def _vec(w: Any, name: str) -> np.ndarray:
    arr = check_array(w, name, ndim=1).astype(np.float64)
    if not np.any(arr != 0):
        raise ValueError(f"{name} must be a non-zero vector, got all zeros")
    return arr


def _member(w: Any, b: Any) -> tuple[np.ndarray, float]:
    """A candidate member ``(w, b)`` of a revealed set: a finite 1-D ``w``, a finite ``b``."""
    return check_array(w, "w", ndim=1).astype(np.float64, copy=False), _real(b, "b")


def _real(v: Any, name: str) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__} {v!r}")
    out = float(v)
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {v!r}")
    return out


@dataclass(frozen=True, eq=False)
class IntervalSet:
    """Interval ambiguity: ``H = {x -> 1[w.x >= b] : b_lo <= b <= b_hi}``.

    ``R_H = {x : w.x >= b_hi}``; the disclosure size is ``b_hi - b_lo`` (in units of ``w.x``).

    Parameters
    ----------
    w : array of shape (d,)
        The revealed direction (non-zero).
    b_lo, b_hi : float
        The threshold interval, ``b_lo <= b_hi``.

    Examples
    --------
    >>> import numpy as np
    >>> H = IntervalSet(np.array([1.0, 0.0]), 0.0, 0.5)
    >>> H.in_region(np.array([[0.6, 0.0], [0.2, 0.0]]))
    array([ True, False])
    >>> H.contains(np.array([1.0, 0.0]), 0.25), H.size
    (True, 0.5)
    """

    w: np.ndarray
    b_lo: float
    b_hi: float
    kind: ClassVar[str] = "interval"

    def __post_init__(self) -> None:
        object.__setattr__(self, "w", _vec(self.w, "w"))
        object.__setattr__(self, "b_lo", _real(self.b_lo, "b_lo"))
        object.__setattr__(self, "b_hi", _real(self.b_hi, "b_hi"))
        if self.b_lo > self.b_hi:
            raise ValueError(f"b_lo must be <= b_hi, got b_lo={self.b_lo} > b_hi={self.b_hi}")

    @property
    def d(self) -> int:
        """Number of features."""
        return int(self.w.shape[0])

    @property
    def size(self) -> float:
        """Disclosure size ``b_hi - b_lo``."""
        return self.b_hi - self.b_lo

    def in_region(self, X: np.ndarray) -> np.ndarray:
        """Boolean mask (n,) of the rows of ``X`` (n, d), finite, in ``R_H`` (accepted by all)."""
        return as_float_rows(X, "X", self.d) @ self.w - self.b_hi >= 0.0

    def contains(self, w: np.ndarray, b: float) -> bool:
        """Whether the classifier ``(w, b)`` (``w`` finite, shape (d,)) is a member of ``H``."""
        w, b = _member(w, b)
        return bool(np.array_equal(w, self.w) and self.b_lo <= b <= self.b_hi)


@dataclass(frozen=True, eq=False)
class FiniteSet:
    """Finite ambiguity: ``H = {x -> 1[w_k.x >= b_k]}_{k < K}``; ``R_H = {x : W x >= b}``.

    Parameters
    ----------
    W : array of shape (K, d)
        One non-zero direction per member.
    b : array of shape (K,)
        Thresholds.

    Examples
    --------
    >>> import numpy as np
    >>> H = FiniteSet(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0.0, 0.0]))
    >>> H.in_region(np.array([[1.0, 1.0], [1.0, -1.0]]))
    array([ True, False])
    """

    W: np.ndarray
    b: np.ndarray
    kind: ClassVar[str] = "finite"

    def __post_init__(self) -> None:
        W = check_array(self.W, "W", ndim=2).astype(np.float64)
        b = check_array(self.b, "b", ndim=1).astype(np.float64)
        if W.shape[0] < 1 or W.shape[0] != b.shape[0]:
            raise ValueError(f"W must have shape (K, d) and b shape (K,) with K >= 1, got "
                             f"W {W.shape} and b {b.shape}")
        if np.any(~np.any(W != 0, axis=1)):
            raise ValueError("W must have non-zero rows (each member needs a direction)")
        object.__setattr__(self, "W", W)
        object.__setattr__(self, "b", b)

    @property
    def d(self) -> int:
        """Number of features."""
        return int(self.W.shape[1])

    @property
    def K(self) -> int:
        """Number of members."""
        return int(self.W.shape[0])

    def in_region(self, X: np.ndarray) -> np.ndarray:
        """Boolean mask (n,) of the rows of ``X`` (n, d), finite, in ``R_H``."""
        return np.all(as_float_rows(X, "X", self.d) @ self.W.T - self.b[None, :] >= 0.0, axis=1)

    def contains(self, w: np.ndarray, b: float) -> bool:
        """Whether ``(w, b)`` (``w`` finite, shape (d,)) is one of the members."""
        w, b = _member(w, b)
        return any(np.array_equal(w, self.W[k]) and b == self.b[k] for k in range(self.K))


@dataclass(frozen=True, eq=False)
class BallSet:
    """Ball ambiguity: ``H = {x -> 1[w.x >= b0] : ||w - w0||_2 <= radius}``.

    ``R_H = {x : w0.x - radius ||x||_2 >= b0}`` (``min_{||u|| <= r} u.x = -r ||x||``), a convex
    second-order-cone region; empty iff ``radius >= ||w0||`` and ``b0 > 0``.

    Parameters
    ----------
    w0 : array of shape (d,)
        Centre direction (non-zero).
    b0 : float
        The common threshold.
    radius : float
        Radius ``>= 0``; 0 is full disclosure.

    Examples
    --------
    >>> import numpy as np
    >>> H = BallSet(np.array([1.0, 0.0]), 1.0, 0.5)
    >>> H.in_region(np.array([[3.0, 0.0], [3.0, 3.0]]))
    array([ True, False])
    """

    w0: np.ndarray
    b0: float
    radius: float
    kind: ClassVar[str] = "ball"

    def __post_init__(self) -> None:
        object.__setattr__(self, "w0", _vec(self.w0, "w0"))
        object.__setattr__(self, "b0", _real(self.b0, "b0"))
        r = _real(self.radius, "radius")
        if r < 0:
            raise ValueError(f"radius must be >= 0, got {r}")
        object.__setattr__(self, "radius", r)

    @property
    def d(self) -> int:
        """Number of features."""
        return int(self.w0.shape[0])

    def in_region(self, X: np.ndarray) -> np.ndarray:
        """Boolean mask (n,) of the rows of ``X`` (n, d), finite, in ``R_H``."""
        X = as_float_rows(X, "X", self.d)
        return X @ self.w0 - self.radius * np.linalg.norm(X, axis=1) - self.b0 >= 0.0

    def contains(self, w: np.ndarray, b: float) -> bool:
        """Whether ``(w, b)`` is a member (``b == b0`` and ``||w - w0|| <= radius``)."""
        w, b = _member(w, b)
        if w.shape != self.w0.shape:
            return False
        return bool(b == self.b0 and np.linalg.norm(w - self.w0) <= self.radius * (1 + 1e-12))


RevealedSet = IntervalSet | FiniteSet | BallSet


def _as_revealed_set(H: Any) -> RevealedSet:
    if isinstance(H, (IntervalSet, FiniteSet, BallSet)):
        return H
    if isinstance(H, Sequence) and not isinstance(H, (str, bytes)) and len(H) > 0:
        try:
            ws = [np.asarray(h[0], dtype=np.float64) for h in H]
            bs = [float(h[1]) for h in H]
            if any(len(h) != 2 for h in H):
                raise ValueError
        except (TypeError, ValueError, IndexError) as exc:
            raise TypeError("H must be an IntervalSet, FiniteSet, BallSet or a non-empty list of "
                            "(w, b) pairs") from exc
        if len({w.shape for w in ws}) != 1 or ws[0].ndim != 1:
            raise ValueError(f"H: every w must be a 1-D array of the same length, got shapes "
                             f"{[w.shape for w in ws]}")
        return FiniteSet(np.stack(ws), np.asarray(bs))
    raise TypeError("H must be an IntervalSet, FiniteSet, BallSet or a non-empty list of (w, b) "
                    f"pairs, got {type(H).__name__}")


# --- feasibility of R_H ---------------------------------------------------------------------------


def _robust_depth(H: RevealedSet) -> float:
    """``sup_x min_k (w_k.x - b_k) / ||w_k||`` clipped to 1 (finite), the analogue for the ball.

    Negative: ``R_H`` is empty; 0: non-empty without interior; > 0: has interior.
    """
    if isinstance(H, IntervalSet):
        return 1.0
    if isinstance(H, BallSet):
        if H.radius < np.linalg.norm(H.w0):
            return 1.0
        return -H.b0  # sup_x (w0.x - r||x||) = 0 at x = 0 when r >= ||w0||
    from scipy.optimize import linprog

    norms = np.linalg.norm(H.W, axis=1)
    _K, d = H.W.shape
    # maximise t  s.t.  -(W x)_k + norms_k t <= -b_k,  t <= 1
    c = np.zeros(d + 1)
    c[-1] = -1.0
    A = np.hstack([-H.W, norms[:, None]])
    res = linprog(c, A_ub=A, b_ub=-H.b, bounds=[(None, None)] * d + [(None, 1.0)],
                  method="highs")
    if res.status == 2:
        return -1.0
    if res.status != 0:
        raise RuntimeError(f"the feasibility LP of R_H did not solve: {res.message}")
    return float(-res.fun)


def _check_nonempty(H: RevealedSet) -> float:
    depth = _robust_depth(H)
    if depth < -1e-12:
        raise InfeasibleRevealedSetError(
            "H: the robust acceptance region R_H = intersection of {h = 1} over h in H is "
            "empty (the members' acceptance regions do not intersect); no best response exists "
            "that every member accepts")
    return depth


# --- projections ----------------------------------------------------------------------------------


def _slack_abs(b: np.ndarray | float, scale: np.ndarray | float) -> np.ndarray | float:
    return _SLACK * (1.0 + np.abs(b)) * scale


def _project_cvxpy(X: np.ndarray, H: RevealedSet, slack: bool) -> np.ndarray:
    import cvxpy as cp

    n, d = X.shape
    Z = cp.Variable((n, d))
    if isinstance(H, IntervalSet):
        W, b = H.w[None, :], np.array([H.b_hi])
        H = FiniteSet(W, b)
    if isinstance(H, FiniteSet):
        norms = np.linalg.norm(H.W, axis=1)
        b = H.b + (_slack_abs(H.b / norms, 1.0) * norms if slack else 0.0)
        cons = [np.ones((n, 1)) @ b[None, :] <= Z @ H.W.T]
    else:
        b0 = H.b0 + (_slack_abs(H.b0, 1.0) if slack else 0.0)
        cons = [H.radius * cp.norm(Z, 2, axis=1) <= Z @ H.w0 - b0]
    prob = cp.Problem(cp.Minimize(cp.sum_squares(Z - X)), cons)
    if isinstance(H, FiniteSet):  # a QP: OSQP with solution polishing (exact active set)
        prob.solve(solver="OSQP", eps_abs=1e-10, eps_rel=1e-10, polishing=True,
                   max_iter=200000)
    else:  # an SOCP: the interior-point solver at tight tolerances
        prob.solve(solver="CLARABEL", tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10,
                   tol_ktratio=1e-8)
    if prob.status in ("infeasible", "infeasible_inaccurate"):
        raise InfeasibleRevealedSetError(
            f"H: the projection onto R_H is infeasible (cvxpy status {prob.status!r}): R_H is "
            "empty")
    if prob.status != "optimal" or Z.value is None:
        raise RuntimeError(f"the projection QP onto R_H did not solve (status {prob.status!r})")
    return np.asarray(Z.value, dtype=np.float64)


def _project(X: np.ndarray, H: RevealedSet, method: str, slack: bool) -> np.ndarray:
    """Euclidean projection of every row of ``X`` onto ``R_H`` (shrunk by the slack)."""
    from rml_fast.strategic import _ambiguity_numba as nb

    if method == "cvxpy":
        return _project_cvxpy(X, H, slack)
    if isinstance(H, IntervalSet):
        nw2 = float(H.w @ H.w)
        target = H.b_hi + (_slack_abs(H.b_hi / math.sqrt(nw2), 1.0) * math.sqrt(nw2)
                           if slack else 0.0)
        gap = np.maximum(target - X @ H.w, 0.0)
        return X + (gap / nw2)[:, None] * H.w[None, :]
    if isinstance(H, FiniteSet):
        if H.K > _ACTIVE_SET_MAX_K:
            return _project_cvxpy(X, H, slack)
        norms = np.linalg.norm(H.W, axis=1)
        b = H.b + (_slack_abs(H.b / norms, 1.0) * norms if slack else 0.0)
        Z, ok = nb.project_polytope(X, H.W, b)
    else:
        b0 = H.b0 + (_slack_abs(H.b0, 1.0) if slack else 0.0)
        Z, ok = nb.project_ball_region(X, H.w0, H.radius, b0)
    if not np.all(ok):  # degenerate rows: the QP decides (and reports infeasibility)
        Z[~ok] = _project_cvxpy(X[~ok], H, slack)
    return Z


def maxmin_best_response(X: Any, H: Any, alpha: float = 2.0, *,
                         method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Max-min (ambiguity-averse) best responses of users ``X`` to a revealed set ``H``.

    ``x'(x) = argmax_{x'} [min_{h in H} h(x') - (alpha / 2) ||x' - x||^2]`` (spec section 5.1,
    PROPOSED reconstruction of Hikri & Rosenfeld): a user outside ``R_H = cap_h {h = 1}`` moves to
    its Euclidean projection onto ``R_H`` iff the cost is ``< 1`` (distance
    ``< sqrt(2 / alpha)``; ties do not move); everyone else stays.

    Parameters
    ----------
    X : array of shape (n, d)
        Users' features (float32 or float64; the result is float64).
    H : IntervalSet, FiniteSet, BallSet or list of (w, b) pairs
        The revealed set; a list of ``(w (d,), b)`` pairs is a :class:`FiniteSet` (one pair is
        full disclosure, standard strategic classification of Hardt et al. 2016).
    alpha : float, default=2.0
        Cost scale (cost per squared unit of movement, halved); max useful move ``sqrt(2/alpha)``.
    method : {"auto", "exact", "cvxpy"}, default="auto"
        ``"auto"``/``"exact"``: closed form (interval), active-set enumeration (finite,
        ``K <= 8``; cvxpy above) or KKT bisection (ball); ``"cvxpy"``: one QP (OSQP, polished) /
        SOCP (CLARABEL) for all rows, the reference.

    Returns
    -------
    X_new : ndarray of shape (n, d), float64
        Responded features (a mover lands on the boundary of ``R_H``, up to a relative margin of
        1e-10 inside it so that every member accepts it in floating point).
    moved : ndarray of shape (n,), bool
        Who moved.

    Raises
    ------
    InfeasibleRevealedSetError
        If ``R_H`` is empty (a ``ValueError``).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.5, 0.0], [-2.0, 0.0], [2.0, 0.0]])
    >>> H = IntervalSet(np.array([1.0, 0.0]), 0.5, 1.0)       # R_H = {x_1 >= 1}
    >>> Xn, moved = maxmin_best_response(X, H)                 # alpha = 2: reach 1
    >>> np.round(Xn[:, 0], 6), moved
    (array([ 1., -2.,  2.]), array([ True, False, False]))
    """
    X = check_array(X, "X", ndim=2).astype(np.float64, copy=False)
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, numbers.Real) \
            or not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a finite real number > 0, got {alpha!r}")
    if method not in ("auto", "exact", "cvxpy"):
        raise ValueError(f"method must be 'auto', 'exact' or 'cvxpy', got {method!r}")
    H = _as_revealed_set(H)
    if H.d != X.shape[1]:
        raise ValueError(f"H has {H.d} features but X has {X.shape[1]} columns")
    depth = _check_nonempty(H)
    n = X.shape[0]
    if n == 0:
        return X.copy(), np.zeros(0, dtype=bool)
    inside = H.in_region(X)
    Z = X.copy()
    out = ~inside
    if np.any(out):
        Z[out] = _project(X[out], H, method, slack=depth > 1e-8)
    cost = 0.5 * float(alpha) * np.sum((Z - X) ** 2, axis=1)
    moved = out & (cost < 1.0)
    X_new = np.where(moved[:, None], Z, X)
    return X_new, moved


def maxmin_response(
    H: Any = None, alpha: float | None = None, *, method: str = "auto",
) -> Callable[[np.ndarray, Any], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A best-response callable ``(X, classifier) -> (X_new, moved, cost)`` for the simulator.

    Plugs the max-min response into
    :class:`rml_fast.strategic.simulator.StrategicSimulator` (``best_response=...``); the third
    element is the quadratic cost ``(alpha/2)||x' - x||^2`` each user paid (0 if it stayed).

    Parameters
    ----------
    H : revealed set or None, default=None
        As in :func:`maxmin_best_response`; None uses the classifier's ``revealed_set_``.
    alpha : float or None, default=None
        Cost scale; None uses the classifier's ``alpha`` (2.0 if it has none).
    method : str, default="auto"
        Passed to :func:`maxmin_best_response`.

    Returns
    -------
    best_response : callable
        ``best_response(X, classifier) -> (X_new (n, d), moved (n,) bool, cost (n,))``.

    Examples
    --------
    >>> import numpy as np
    >>> br = maxmin_response([(np.array([1.0]), 1.0)])
    >>> Xn, moved, cost = br(np.array([[0.5], [-1.0]]), None)
    >>> np.round(Xn.ravel(), 6), moved, np.round(cost, 6)
    (array([ 1., -1.]), array([ True, False]), array([0.25, 0.  ]))
    """
    def best_response(X: np.ndarray, classifier: Any = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        HH = H if H is not None else getattr(classifier, "revealed_set_", None)
        if HH is None:
            raise ValueError("maxmin_response: no H given and the classifier has no "
                             "revealed_set_ (fit it first)")
        a = alpha if alpha is not None else float(getattr(classifier, "alpha", 2.0))
        X_new, moved = maxmin_best_response(X, HH, a, method=method)
        cost = 0.5 * a * np.sum((X_new - np.asarray(X, dtype=np.float64)) ** 2, axis=1)
        return X_new, moved, np.where(moved, cost, 0.0)

    return best_response


@dataclass(frozen=True, eq=False)
class RealizedRule:
    """The deployed rule of a fitted :class:`AmbiguousStrategicClassifier`, for simulators.

    ``predict`` applies the realised ``h*`` to the features *as given* (no response), which is
    what a simulator that computes the responses itself needs; ``revealed_set_`` and ``alpha``
    let :func:`maxmin_response` (with ``H=None``) compute those responses.

    Parameters
    ----------
    w : array of shape (d,)
        Realised direction.
    b : float
        Realised threshold: ``h*(x) = 1[w.x >= b]``.
    classes_ : array of shape (2,)
        Labels; ``classes_[1]`` is the accepted one.
    revealed_set_ : IntervalSet, FiniteSet or BallSet
        What users know.
    alpha : float
        Users' cost scale.

    Examples
    --------
    >>> import numpy as np
    >>> rule = RealizedRule(np.array([1.0]), 0.5, np.array([0, 1]),
    ...                     IntervalSet(np.array([1.0]), 0.5, 1.0), 2.0)
    >>> rule.predict(np.array([[0.4], [0.7]]))
    array([0, 1])
    """

    w: np.ndarray
    b: float
    classes_: np.ndarray
    revealed_set_: RevealedSet
    alpha: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "w", check_array(self.w, "w", ndim=1).astype(np.float64,
                                                                               copy=False))
        object.__setattr__(self, "b", _real(self.b, "b"))
        a = _real(self.alpha, "alpha")
        if a <= 0:
            raise ValueError(f"alpha must be > 0, got {self.alpha!r}")
        object.__setattr__(self, "alpha", a)
        classes = np.asarray(self.classes_)
        if classes.shape != (2,):
            raise ValueError(f"classes_ must have shape (2,), got {classes.shape}")
        object.__setattr__(self, "classes_", classes)

    def predict(self, X: Any) -> np.ndarray:
        """``classes_[h*(x)]`` for each row of ``X`` (n, d), without any response."""
        X = check_array(X, "X", ndim=2).astype(np.float64, copy=False)
        if X.shape[1] != self.w.shape[0]:
            raise ValueError(f"X must have {self.w.shape[0]} columns, got {X.shape[1]}")
        return self.classes_[(X @ self.w - self.b >= 0).astype(np.int64)]


# --- the exact 1-D sweep --------------------------------------------------------------------------


def exact_interval_sweep(scores: Any, y: Any, *, radius: float = 1.0,
                         delta: float = 0.0) -> tuple[float, float, float, float]:
    """Exact learner optimum for a fixed direction (interval ambiguity), in 1-D score space.

    With scores ``s = w.x / ||w||``, move radius ``r = sqrt(2 / alpha)`` and revealed interval
    ``[b_hi - delta, b_hi]``, a user is accepted by the realised ``b*`` iff ``s > b_hi - r``
    (moves to ``b_hi`` or is already in ``R_H``) or ``s >= b*``. Every accepted set is a suffix of
    the sorted scores, so the optimum over ``(b_hi, b*)`` is the best threshold; the sweep
    (NumPy sort + one compiled pass, O(n log n)) returns it with ``b_hi = t + r`` and the ex post best
    ``b*`` in the interval. Consequence (for this homogeneous-cost model): interval ambiguity
    never beats full disclosure for a fixed ``w`` -- the optimum is flat in ``delta``.

    Parameters
    ----------
    scores : array of shape (n,)
        ``w.x / ||w||`` of the (unmoved) users.
    y : array of shape (n,)
        0/1 labels.
    radius : float, default=1.0
        ``sqrt(2 / alpha)``.
    delta : float, default=0.0
        Interval width ``b_hi - b_lo``.

    Returns
    -------
    b_lo, b_hi, b_star, accuracy : float

    Examples
    --------
    >>> import numpy as np
    >>> s = np.array([-2.0, -0.5, 0.2, 1.5]); y = np.array([0, 0, 1, 1])
    >>> b_lo, b_hi, b_star, acc = exact_interval_sweep(s, y, radius=1.0)
    >>> round(b_hi, 6), acc
    (0.85, 1.0)
    """
    from rml_fast.strategic import _ambiguity_numba as nb

    s = check_array(scores, "scores", ndim=1).astype(np.float64)
    yy = np.asarray(y)
    if yy.shape != s.shape or not np.all((yy == 0) | (yy == 1)):
        raise ValueError(f"y must be 0/1 labels of the shape of scores {s.shape}, got an array "
                         f"of shape {yy.shape}")
    r = _real(radius, "radius")
    dl = _real(delta, "delta")
    if r <= 0 or dl < 0:
        raise ValueError(f"radius must be > 0 and delta >= 0, got radius={r}, delta={dl}")
    yi = yy.astype(np.int64)
    t, _ = nb.best_threshold(s, yi, -np.inf, np.inf)
    if not np.isfinite(t):  # accept everyone: any threshold below the smallest score
        t = float(s.min()) - 1.0 if s.size else 0.0
    # b_hi a hair below t + r so that users with s > t reach it at cost < 1 despite the slack
    b_hi = float(t + r - 1e-9 * (1.0 + abs(t) + r))
    b_lo = b_hi - dl
    s_new = np.where((s < b_hi) & (s > b_hi - r), b_hi, s)
    b_star, correct = nb.best_threshold(s_new, yi, b_lo, b_hi)
    return b_lo, b_hi, float(b_star), float(correct) / max(s.size, 1)


# --- the estimator --------------------------------------------------------------------------------


class AmbiguousStrategicClassifier(ClassifierMixin, BaseEstimator):
    """Learner that reveals a set of linear classifiers and realises one (PROPOSED).

    Training (spec section 5.1): (1) full disclosure first: the smoothed best-response
    surrogate (full-batch Adam, ``epochs`` steps, torch) for the direction ``w`` (``||w|| = 1``),
    then the exact O(n log n) threshold sweep for it (:func:`exact_interval_sweep`; this is
    Hardt et al.'s strategic classifier for that ``w``); (2) for ``"finite"``/``"ball"`` with
    ``delta > 0``, the surrogate over the anchor and the members' offsets, started from (1);
    (3) exact re-evaluation with true max-min best responses, the realised ``h*`` chosen ex post
    as the member of ``H`` with the best accuracy on the responded training data (sweep over
    ``b*`` for the interval; best member for finite; best of ``{w0, trained w*}`` for the ball);
    (4) the full-disclosure solution of (1) is kept if it is strictly better, so the training
    accuracy never falls below full disclosure (and is weakly increasing from ``delta = 0``).
    For ``"interval"`` step (2) is skipped: for a fixed ``w`` the sweep is exact and interval
    ambiguity cannot beat full disclosure in this model (see :func:`exact_interval_sweep`).

    Disclosure bound (our choice, PROPOSED): ``delta`` is the diameter of ``H`` in the
    ``(w, b)`` parameter space with the anchor normalised to ``||w|| = 1``: interval
    ``b_hi - b_lo = delta``; finite ``||(w_k, b_k) - (w, c)|| <= delta / 2``; ball radius
    ``delta / 2`` (threshold fixed).

    Parameters
    ----------
    ambiguity : {"interval", "finite", "ball"}, default="interval"
        The revealed-set family (see :class:`IntervalSet`, :class:`FiniteSet`, :class:`BallSet`).
    delta : float, default=0.5
        Disclosure size bound (``>= 0``; 0 is full disclosure).
    K : int, default=2
        Number of members for ``"finite"``.
    alpha : float, default=2.0
        User cost ``(alpha/2)||x' - x||^2``; max useful move ``sqrt(2/alpha)`` (feature units).
    epochs : int, default=200
        Surrogate optimisation steps (0: skip, use the class-mean direction).
    lr : float, default=0.05
        Adam learning rate.
    temp : float, default=0.05
        Sigmoid temperature of the surrogate (feature units).
    random_state : int, Generator or None, default=None
        Seeds the initial member offsets (``"finite"``).
    progress : bool, default=False
        Show a tqdm bar over the epochs.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
        The two labels; ``classes_[1]`` is the accepted outcome.
    revealed_set_ : IntervalSet, FiniteSet or BallSet
        ``H`` revealed to users.
    realized_ : tuple (w (d,), b)
        The realised ``h*`` (a member of ``revealed_set_``).
    train_accuracy_ : float
        Accuracy of ``h*`` on the responded training data.
    full_disclosure_accuracy_ : float
        The same for the full-disclosure solution of stage (1) (what ``delta=0`` fits).
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal(-1, 1, (100, 2)), rng.normal(1, 1, (100, 2))])
    >>> y = np.repeat([0, 1], 100)
    >>> clf = AmbiguousStrategicClassifier(delta=0.5, epochs=50, random_state=0).fit(X, y)
    >>> clf.revealed_set_.size
    0.5
    >>> bool(clf.score(X, y) == clf.train_accuracy_ >= 0.8)
    True
    """

    _expected_failed_checks: ClassVar[dict[str, str]] = {}

    def __init__(self, ambiguity: str = "interval", delta: float = 0.5, K: int = 2,
                 alpha: float = 2.0, epochs: int = 200, lr: float = 0.05, temp: float = 0.05,
                 random_state: Any = None, progress: bool = False) -> None:
        self.ambiguity = ambiguity
        self.delta = delta
        self.K = K
        self.alpha = alpha
        self.epochs = epochs
        self.lr = lr
        self.temp = temp
        self.random_state = random_state
        self.progress = progress

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _check_params(self) -> None:
        from rml_fast._validation import Interval, check_scalar

        if self.ambiguity not in ("interval", "finite", "ball"):
            raise ValueError("ambiguity must be 'interval', 'finite' or 'ball', got "
                             f"{self.ambiguity!r}")
        check_scalar(self.delta, "delta", Interval("real", 0.0, None))
        check_scalar(self.K, "K", Interval("int", 1, None))
        check_scalar(self.alpha, "alpha", Interval("real", 0.0, None, closed="neither"))
        check_scalar(self.epochs, "epochs", Interval("int", 0, None))
        check_scalar(self.lr, "lr", Interval("real", 0.0, None, closed="neither"))
        check_scalar(self.temp, "temp", Interval("real", 0.0, None, closed="neither"))
        if not isinstance(self.progress, (bool, np.bool_)):
            raise TypeError(f"progress must be a bool, got {type(self.progress).__name__}")

    # -- exact evaluation -------------------------------------------------------------------------

    def _accuracy(self, X: np.ndarray, y01: np.ndarray, H: RevealedSet,
                  realised: tuple[np.ndarray, float]) -> float:
        Xn, _ = maxmin_best_response(X, H, self.alpha)
        w, b = realised
        return float(np.mean((Xn @ w - b >= 0) == (y01 == 1)))

    def fit(self, X: Any, y: Any) -> AmbiguousStrategicClassifier:
        """Fit on features ``X`` (n, d) and binary labels ``y`` (n,); returns self.

        Raises a ValueError if ``y`` has one class only (nothing to learn) or more than two.
        """
        from rml_fast.strategic._ambiguity_train import train_surrogate

        self._check_params()
        X, y = validate_named(self, X, y, dtype=[np.float64, np.float32], ensure_min_samples=2)
        check_targets_named(y)
        classes, y01 = np.unique(y, return_inverse=True)
        if classes.shape[0] == 1:
            raise ValueError(f"y has one class only ({classes[0]!r}); the classifier needs "
                             "two classes")
        if classes.shape[0] > 2:
            raise ValueError("Only binary classification is supported. The target y has "
                             f"{classes.shape[0]} classes; AmbiguousStrategicClassifier is "
                             "binary (two classes)")
        self.classes_ = classes
        rng = check_rng(self.random_state, "random_state")
        X = np.asarray(X, dtype=np.float64)
        y01 = y01.astype(np.int64)
        delta = float(self.delta)
        r = math.sqrt(2.0 / float(self.alpha))
        d = X.shape[1]

        # initial direction: class-mean difference; threshold: full-disclosure exact sweep
        v0 = X[y01 == 1].mean(axis=0) - X[y01 == 0].mean(axis=0)
        if not np.linalg.norm(v0) > 1e-12:
            v0 = np.eye(d)[0]
        w0 = v0 / np.linalg.norm(v0)
        common = dict(K=int(self.K), r=r, epochs=int(self.epochs), lr=float(self.lr),
                      temp=float(self.temp), rng=rng, progress=bool(self.progress))
        # stage 1: full disclosure (one classifier; Hardt et al.): surrogate for w, exact b
        w = w0
        if self.epochs > 0:
            _, b_init, _, _ = exact_interval_sweep(X @ w0, y01, radius=r)
            w = train_surrogate(X, y01, kind="interval", delta=0.0, w_init=w0, c_init=b_init,
                                **common).w
        s = X @ w
        _, b_fd, _, _ = exact_interval_sweep(s, y01, radius=r)
        K = int(self.K)
        full: tuple[RevealedSet, tuple[np.ndarray, float]]
        cands: list[tuple[RevealedSet, tuple[np.ndarray, float]]] = []
        if self.ambiguity == "interval":
            # exact for the stage-1 direction (flat in delta, see exact_interval_sweep)
            full = (IntervalSet(w, b_fd, b_fd), (w, b_fd))
            b_lo, b_hi, b_star, _ = exact_interval_sweep(s, y01, radius=r, delta=delta)
            cands.append((IntervalSet(w, b_lo, b_hi), (w, b_star)))
        elif self.ambiguity == "finite":
            full = (FiniteSet(np.tile(w, (K, 1)), np.full(K, b_fd)), (w, b_fd))
            if self.epochs > 0 and delta > 0:  # stage 2, started from stage 1
                res = train_surrogate(X, y01, kind="finite", delta=delta, w_init=w, c_init=b_fd,
                                      **common)
                Wf = res.w[None, :] + res.U
                if np.all(np.linalg.norm(Wf, axis=1) > 1e-12):  # a zero member is no classifier
                    cands += self._finite_candidates(X, y01, FiniteSet(Wf, res.c + res.V))
        else:
            full = (BallSet(w, b_fd, 0.0), (w, b_fd))
            if self.epochs > 0 and delta > 0:
                # start with R_H through the full-disclosure boundary at a typical ||x||
                c0 = b_fd - 0.5 * delta * float(np.median(np.linalg.norm(X, axis=1)))
                res = train_surrogate(X, y01, kind="ball", delta=delta, w_init=w, c_init=c0,
                                      **common)
                Hb = BallSet(res.w, res.c, 0.5 * delta)
                for ws in (res.w, res.w + res.U[0]):
                    cands.append((Hb, (np.asarray(ws, dtype=np.float64), Hb.b0)))
        best: tuple[RevealedSet, tuple[np.ndarray, float]] = full
        best_acc = self._accuracy(X, y01, *full)
        self.full_disclosure_accuracy_ = best_acc
        for Hc, real in cands:
            try:
                acc = self._accuracy(X, y01, Hc, real)
            except InfeasibleRevealedSetError:
                continue
            if acc >= best_acc:  # ties: reveal the ambiguous set that was asked for
                best, best_acc = (Hc, real), acc
        self.revealed_set_: RevealedSet = best[0]
        self.realized_: tuple[np.ndarray, float] = best[1]
        self.train_accuracy_ = best_acc
        return self

    def _finite_candidates(self, X: np.ndarray, y01: np.ndarray,
                           H: FiniteSet) -> list[tuple[RevealedSet, tuple[np.ndarray, float]]]:
        """Ex post: for a revealed finite set, every member is a candidate realisation."""
        try:
            Xn, _ = maxmin_best_response(X, H, self.alpha)
        except InfeasibleRevealedSetError:
            return []
        accs = [np.mean((Xn @ H.W[k] - H.b[k] >= 0) == (y01 == 1)) for k in range(H.K)]
        k = int(np.argmax(accs))
        return [(H, (H.W[k].copy(), float(H.b[k])))]

    def best_response(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Max-min best responses ``(X_new (n, d), moved (n,))`` of users ``X`` to ``revealed_set_``.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[-2.0], [-1.0], [0.5], [2.0]]); y = np.array([0, 0, 1, 1])
        >>> clf = AmbiguousStrategicClassifier(epochs=0).fit(X, y)
        >>> clf.best_response(X)[1]
        array([False, False,  True, False])
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "revealed_set_")
        X = validate_named(self, X, dtype=[np.float64, np.float32], reset=False)
        return maxmin_best_response(X, self.revealed_set_, self.alpha)

    def deployed(self) -> RealizedRule:
        """The realised rule as a :class:`RealizedRule` (for :class:`StrategicSimulator`).

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.strategic.simulator import StrategicSimulator
        >>> X = np.array([[-2.0], [-1.0], [0.5], [2.0]]); y = np.array([0, 0, 1, 1])
        >>> clf = AmbiguousStrategicClassifier(epochs=0).fit(X, y)
        >>> res = StrategicSimulator(best_response=maxmin_response()).run(clf.deployed(), X, y)
        >>> res.accuracy == clf.score(X, y), res.moved.tolist()
        (True, [False, False, True, False])
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "revealed_set_")
        w, b = self.realized_
        return RealizedRule(np.asarray(w, dtype=np.float64).copy(), float(b), self.classes_,
                            self.revealed_set_, float(self.alpha))

    def predict(self, X: Any, strategic: bool = True) -> np.ndarray:
        """Labels (n,) from ``classes_``: the realised ``h*`` applied to the users' responses.

        ``strategic=False`` applies ``h*`` to ``X`` as given (users who do not respond, or
        features that already are responses -- the response map is idempotent, so both agree
        on responded data).

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[-2.0], [-1.0], [0.5], [2.0]]); y = np.array([0, 0, 1, 1])
        >>> clf = AmbiguousStrategicClassifier(epochs=0).fit(X, y)
        >>> clf.predict(np.array([[0.0]])), clf.predict(np.array([[0.0]]), strategic=False)
        (array([1]), array([0]))
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "revealed_set_")
        X = validate_named(self, X, dtype=[np.float64, np.float32], reset=False)
        X = np.asarray(X, dtype=np.float64)
        if strategic:
            X, _ = maxmin_best_response(X, self.revealed_set_, self.alpha)
        w, b = self.realized_
        return self.classes_[(X @ w - b >= 0).astype(np.int64)]
