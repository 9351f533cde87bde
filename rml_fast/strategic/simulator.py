"""A simulator of strategic agents that evaluates any classifier.

Agents ``x_i in R^d`` with labels ``y_i`` face a deployed classifier. An agent that is rejected
may move to ``x' = x + delta`` at cost ``c(delta)`` and gains 1 if accepted; it moves iff the
cheapest move that gets it accepted costs **strictly** less than 1 (a tie, cost exactly 1, leaves
the agent where it is: it is indifferent and we break the tie towards not moving). This is the
agent model of Hardt et al. (2016) "Strategic classification" with the linear costs of the robust
strategic classification problem (rml_fast.strategic.decision_dependent, spec section 4.1):

* ``cost_norm=2``: ``c(delta) = kappa ||delta||_2``;
* ``cost_norm=1``: ``c(delta) = kappa ||delta||_1``;
* ``cost_norm="weighted-l1"``: ``c(delta) = kappa sum_j weights_j |delta_j|`` (per-feature costs
  ``kappa_j = kappa * weights_j``; ``weights_j = inf`` makes feature ``j`` immutable).

For a linear rule ``s(x) = w.x + b`` (accept iff ``s(x) > 0``) the best response has the closed
form :func:`linear_best_response`: a rejected agent moves onto the boundary ``s = 0`` (nudged by a
relative ``1e-12`` in score so that a strict ``s > 0`` predictor accepts it) iff
``kappa * (-s(x)) / ||w||_* < 1``, ``||.||_*`` the dual norm of the cost. For any other classifier
:func:`grid_best_response` searches a finite candidate set exhaustively.

:class:`StrategicSimulator` runs one or several rounds: in each round the agents best-respond (from
their true features) to the rule deployed that round, and the simulator records the accuracy on the
responses, the gaming rate (fraction of true negatives accepted after the response), the fraction
of agents that moved and the mean cost they paid; an optional callback retrains the rule between
rounds. The best response is pluggable: any callable ``best_response(X, classifier) ->
(X_new, moved)`` (or ``(X_new, moved, cost)``) can replace the linear-cost model, e.g. the
max-min best response of :mod:`rml_fast.strategic.ambiguity`.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from rml_fast._validation import Interval, check_array, check_rng, check_scalar

__all__ = [
    "RoundResult",
    "SimulationResult",
    "StrategicSimulator",
    "grid_best_response",
    "linear_best_response",
    "linear_rule",
    "move_cost",
]

_COST_NORMS = (1, 2, "weighted-l1")
_NUDGE = 1e-12  # relative score margin added to a move so that ``s(x') > 0`` in floating point


def _check_cost_norm(cost_norm: Any, weights: Any, d: int) -> np.ndarray | None:
    if isinstance(cost_norm, (bool, np.bool_)) or cost_norm not in _COST_NORMS:
        raise ValueError(f"cost_norm must be one of 1, 2 or 'weighted-l1', got {cost_norm!r}")
    if cost_norm != "weighted-l1":
        if weights is not None:
            raise ValueError(
                f"weights is only used with cost_norm='weighted-l1', got cost_norm={cost_norm!r}"
            )
        return None
    if weights is None:
        raise ValueError("cost_norm='weighted-l1' needs weights, an array of shape (d,)")
    wts = check_array(weights, "weights", ndim=1, finite=False).astype(np.float64)
    if wts.shape[0] != d:
        raise ValueError(f"weights must have shape ({d},), got {wts.shape}")
    if np.isnan(wts).any() or (wts <= 0).any():
        raise ValueError("weights must be positive (inf marks an immutable feature), got "
                         f"min {np.nanmin(wts) if not np.isnan(wts).all() else wts[0]!r}")
    return wts


def _check_kappa(kappa: Any, n: int, name: str = "kappa") -> np.ndarray:
    if isinstance(kappa, numbers.Real) and not isinstance(kappa, (bool, np.bool_)):
        k = check_scalar(kappa, name, Interval("real", 0.0, None, closed="neither"))
        return np.full(n, float(k))
    arr = check_array(kappa, name, ndim=1).astype(np.float64)
    if arr.shape[0] != n:
        raise ValueError(f"{name} must be a positive scalar or an array of shape ({n},), "
                         f"got shape {arr.shape}")
    if (arr <= 0).any():
        raise ValueError(f"{name} must be positive, got min {arr.min()!r}")
    return arr


def move_cost(
    delta: np.ndarray, kappa: float | np.ndarray = 1.0, cost_norm: int | str = 2,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """Cost ``c_kappa(delta)`` of each agent's move (spec section 4.1).

    Parameters
    ----------
    delta : ndarray of shape (n, d)
        Moves ``x' - x`` (feature units).
    kappa : float or ndarray of shape (n,), default=1.0
        Cost per unit of movement (per agent when an array); positive.
    cost_norm : {2, 1, "weighted-l1"}, default=2
        ``kappa ||delta||_2``, ``kappa ||delta||_1`` or ``kappa sum_j weights_j |delta_j|``.
    weights : ndarray of shape (d,), optional
        Per-feature weights for ``"weighted-l1"`` (positive, ``inf`` = immutable feature;
        ``inf * 0`` counts as 0).

    Returns
    -------
    cost : ndarray of shape (n,)
        In units of the agent's gain from acceptance (which is 1).

    Examples
    --------
    >>> import numpy as np
    >>> move_cost(np.array([[3.0, 4.0]]), kappa=0.5).tolist()
    [2.5]
    >>> move_cost(np.array([[3.0, -4.0]]), cost_norm=1).tolist()
    [7.0]
    """
    delta = check_array(delta, "delta", ndim=2)
    n, d = delta.shape
    wts = _check_cost_norm(cost_norm, weights, d)
    k = _check_kappa(kappa, n)
    return _move_cost(delta, k, cost_norm, wts)


def _move_cost(delta: np.ndarray, k: np.ndarray, cost_norm: Any, wts: np.ndarray | None):
    if cost_norm == 2:
        return k * np.linalg.norm(delta, axis=1)
    if cost_norm == 1:
        return k * np.abs(delta).sum(axis=1)
    a = np.abs(delta)
    with np.errstate(invalid="ignore"):
        per = np.where(a > 0, a * wts, 0.0)
    return k * per.sum(axis=1)


def linear_best_response(
    X: np.ndarray, w: np.ndarray, b: float, kappa: float | np.ndarray = 1.0,
    cost_norm: int | str = 2, weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form best response of agents to the linear rule ``accept iff w.x + b > 0``.

    A rejected agent (``s(x) = w.x + b <= 0``) moves iff the cheapest crossing costs strictly less
    than its gain 1, i.e. ``kappa * (-s(x)) / ||w||_* < 1`` with ``||.||_*`` the dual norm of the
    cost (spec section 4.1; Hardt et al. 2016): ``||w||_2`` for ``cost_norm=2``, ``max_j |w_j|``
    for ``1`` and ``max_j |w_j| / weights_j`` for ``"weighted-l1"``. The move is the cheapest one:

    * l2: ``delta = -s(x) w / ||w||_2^2`` (orthogonal projection onto the boundary);
    * l1 / weighted-l1: along the single feature ``j* = argmax_j |w_j| / weights_j`` (the lowest
      such index on ties), ``delta_j* = -s(x) / w_j*``.

    Ties: an agent whose cheapest crossing costs exactly 1 does not move (it is indifferent).
    Moved agents land on the boundary, nudged by ``1e-12 * max(1, |b|, ||w||_* ||x||)`` in score
    so that ``s(x') > 0`` holds in floating point (scikit-learn predicts the positive class only for
    scores ``> 0``). Agents already accepted do not move.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        True features.
    w : ndarray of shape (d,)
        Weights of the rule.
    b : float
        Intercept of the rule.
    kappa : float or ndarray of shape (n,), default=1.0
        Cost per unit of movement (per agent when an array).
    cost_norm : {2, 1, "weighted-l1"}, default=2
        The cost's norm (see :func:`move_cost`).
    weights : ndarray of shape (d,), optional
        Per-feature cost weights for ``"weighted-l1"`` (``inf`` = immutable).

    Returns
    -------
    X_new : ndarray of shape (n, d)
        Responded features (a new array; ``X`` is not modified).
    moved : ndarray of shape (n,), bool
        Which agents moved.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[-0.5, 0.0], [-2.0, 0.0], [1.0, 0.0]])
    >>> Xn, moved = linear_best_response(X, np.array([1.0, 0.0]), 0.0, kappa=1.0)
    >>> moved.tolist()
    [True, False, False]
    >>> np.round(Xn, 6).tolist()
    [[0.0, 0.0], [-2.0, 0.0], [1.0, 0.0]]
    """
    X = check_array(X, "X", ndim=2)
    n, d = X.shape
    w = check_array(w, "w", ndim=1).astype(np.float64)
    if w.shape[0] != d:
        raise ValueError(f"w must have shape ({d},) to match X of shape {X.shape}, got {w.shape}")
    b = float(check_scalar(b, "b", Interval("real", None, None)))
    wts = _check_cost_norm(cost_norm, weights, d)
    k = _check_kappa(kappa, n)
    return _linear_best_response(X, w, b, k, cost_norm, wts)


def _linear_best_response(X, w, b, k, cost_norm, wts):
    X = np.asarray(X, dtype=np.float64)
    s = X @ w + b
    X_new = X.copy()
    moved = np.zeros(X.shape[0], dtype=bool)
    if cost_norm == 2:
        dual = float(np.linalg.norm(w))
    elif cost_norm == 1:
        ratio = np.abs(w)
        j = int(np.argmax(ratio))
        dual = float(ratio[j])
    else:
        with np.errstate(divide="ignore"):
            ratio = np.where(np.isinf(wts), 0.0, np.abs(w) / wts)
        j = int(np.argmax(ratio))
        dual = float(ratio[j])
    if dual == 0.0:  # constant rule: nobody can change the decision
        return X_new, moved
    need = -s  # score the agent has to gain (>= 0 for rejected agents)
    with np.errstate(over="ignore"):
        crossing = k * need / dual
    moved = (s <= 0) & (crossing < 1.0)
    if not moved.any():
        return X_new, moved
    scale = np.maximum(1.0, np.maximum(abs(b), np.abs(X[moved]).sum(axis=1) * np.abs(w).max()))
    gain = need[moved] + _NUDGE * scale
    if cost_norm == 2:
        X_new[moved] += np.outer(gain / dual**2, w)
    else:
        X_new[moved, j] += gain / w[j]
    return X_new, moved


def linear_rule(classifier: Any, d: int) -> tuple[np.ndarray, float]:
    """The weights ``(w, b)`` of a linear classifier, ``decision_function(x) = w.x + b``.

    Uses ``coef_`` / ``intercept_`` when the classifier has them (binary: one row), otherwise
    recovers the affine map from ``decision_function`` at ``0`` and the unit vectors
    (``b = f(0)``, ``w_j = f(e_j) - b``), which is exact for any affine decision function.

    Parameters
    ----------
    classifier : object
        A fitted binary classifier with ``coef_``/``intercept_`` or ``decision_function``.
    d : int
        Number of features.

    Returns
    -------
    w : ndarray of shape (d,)
    b : float

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> X = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 1.0], [3.0, 0.0]])
    >>> clf = LogisticRegression().fit(X, [0, 0, 1, 1])
    >>> w, b = linear_rule(clf, 2)
    >>> bool(np.allclose(X @ w + b, clf.decision_function(X)))
    True
    """
    d = check_scalar(d, "d", Interval("int", 1, None))
    coef = getattr(classifier, "coef_", None)
    inter = getattr(classifier, "intercept_", None)
    if coef is not None and inter is not None:
        w = np.asarray(coef, dtype=np.float64).reshape(-1)
        b_arr = np.asarray(inter, dtype=np.float64).reshape(-1)
        if w.shape[0] != d or b_arr.shape[0] != 1:
            raise ValueError(
                f"classifier must be a binary linear rule with coef_ of d={d} weights and one "
                f"intercept, got coef_ shape {np.shape(coef)} and intercept_ shape {np.shape(inter)}"
            )
        return w, float(b_arr[0])
    if not hasattr(classifier, "decision_function"):
        raise TypeError(
            "the 'linear-cost' best response needs a linear classifier (coef_/intercept_ or "
            f"decision_function); {type(classifier).__name__} has neither — pass a callable "
            "best_response, e.g. functools.partial(grid_best_response, candidates=...)"
        )
    pts = np.vstack([np.zeros((1, d)), np.eye(d)])
    f = np.asarray(classifier.decision_function(pts), dtype=np.float64).reshape(-1)
    if f.shape[0] != d + 1:
        raise ValueError("classifier.decision_function must return one score per row "
                         "(a binary classifier)")
    return f[1:] - f[0], float(f[0])


def grid_best_response(
    X: np.ndarray, classifier: Any, candidates: np.ndarray, kappa: float | np.ndarray = 1.0,
    cost_norm: int | str = 2, weights: np.ndarray | None = None, pos_label: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Best response of agents to any classifier, by brute force over a finite candidate set.

    Each agent ``x`` maximises ``1[h(x') = pos_label] - c_kappa(x' - x)`` over ``x' in {x} U
    candidates``. Ties go to staying put; among candidates with equal utility, the first one wins.
    An agent already accepted stays. This is exact on the candidate set and serves as an oracle
    for the closed forms (and as a best response for nonlinear classifiers on small ``d``).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        True features.
    classifier : object
        Anything with ``predict(X)``.
    candidates : ndarray of shape (m, d)
        Points the agents may move to (e.g. a grid).
    kappa : float or ndarray of shape (n,), default=1.0
        Cost per unit of movement.
    cost_norm : {2, 1, "weighted-l1"}, default=2
        The cost's norm (see :func:`move_cost`).
    weights : ndarray of shape (d,), optional
        Per-feature weights for ``"weighted-l1"``.
    pos_label : object, optional
        The accepted label; default ``classifier.classes_[-1]`` if present, else 1.

    Returns
    -------
    X_new : ndarray of shape (n, d)
    moved : ndarray of shape (n,), bool

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.tree import DecisionTreeClassifier
    >>> clf = DecisionTreeClassifier().fit([[0.0], [1.0]], [0, 1])
    >>> grid = np.linspace(-1, 2, 31)[:, None]
    >>> Xn, moved = grid_best_response(np.array([[0.2], [-1.0]]), clf, grid)
    >>> moved.tolist(), np.round(Xn[:, 0], 6).tolist()
    ([True, False], [0.6, -1.0])
    """
    X = check_array(X, "X", ndim=2)
    n, d = X.shape
    cand = check_array(candidates, "candidates", ndim=2).astype(np.float64)
    if cand.shape[1] != d or cand.shape[0] == 0:
        raise ValueError(f"candidates must have shape (m >= 1, {d}), got {cand.shape}")
    wts = _check_cost_norm(cost_norm, weights, d)
    k = _check_kappa(kappa, n)
    pos = _pos_label(classifier, pos_label)
    if n == 0:  # no agents: nothing to ask the classifier
        return np.asarray(X, dtype=np.float64).copy(), np.zeros(0, dtype=bool)
    acc_x = np.asarray(classifier.predict(X)) == pos
    acc_c = np.asarray(classifier.predict(cand)) == pos
    X_new = np.asarray(X, dtype=np.float64).copy()
    moved = np.zeros(n, dtype=bool)
    if not acc_c.any():
        return X_new, moved
    good = cand[acc_c]
    for i in np.flatnonzero(~acc_x):
        delta = good - X_new[i]
        c = _move_cost(delta, np.full(good.shape[0], k[i]), cost_norm, wts)
        j = int(np.argmin(c))
        if c[j] < 1.0:
            X_new[i] = good[j]
            moved[i] = True
    return X_new, moved


def _pos_label(classifier: Any, pos_label: Any) -> Any:
    if pos_label is not None:
        return pos_label
    classes = getattr(classifier, "classes_", None)
    if classes is not None and len(classes) > 0:
        return classes[-1]
    return 1


@dataclass
class RoundResult:
    """What happened in one round of :class:`StrategicSimulator`.

    Attributes
    ----------
    round : int
        Round index (0-based).
    classifier : object
        The rule deployed in this round.
    X_response : ndarray of shape (n, d)
        The agents' responded features.
    moved : ndarray of shape (n,), bool
        Which agents moved.
    cost : ndarray of shape (n,)
        The cost each agent paid (0 for those that stayed).
    y_pred : ndarray of shape (n,)
        The rule's predictions on the responses.
    accuracy : float
        ``mean(y_pred == y)`` on the responses.
    accuracy_truthful : float
        Accuracy on the true (unresponded) features, for comparison.
    gaming_rate : float
        Fraction of true negatives accepted after the response (nan if there are no negatives).
    manipulation_rate : float
        Fraction of true negatives that moved.
    move_rate : float
        Fraction of all agents that moved.
    mean_cost : float
        Mean cost paid over all agents.
    """

    round: int
    classifier: Any
    X_response: np.ndarray
    moved: np.ndarray
    cost: np.ndarray
    y_pred: np.ndarray
    accuracy: float
    accuracy_truthful: float
    gaming_rate: float
    manipulation_rate: float
    move_rate: float
    mean_cost: float

    def __post_init__(self) -> None:
        _check_responses(self)


def _check_responses(res: Any) -> None:
    """Responses and costs must be finite arrays: a NaN response is refused, never recorded."""
    res.X_response = check_array(res.X_response, "X_response", ndim=2)
    res.cost = check_array(res.cost, "cost", ndim=1)


@dataclass
class SimulationResult:
    """Result of :meth:`StrategicSimulator.run`: the last round's numbers plus the history.

    Attributes
    ----------
    X_response, moved, cost, y_pred, accuracy, accuracy_truthful, gaming_rate,
    manipulation_rate, move_rate, mean_cost
        As in :class:`RoundResult`, for the last round.
    history : list of RoundResult
        One entry per round (length ``n_rounds``).
    """

    X_response: np.ndarray
    moved: np.ndarray
    cost: np.ndarray
    y_pred: np.ndarray
    accuracy: float
    accuracy_truthful: float
    gaming_rate: float
    manipulation_rate: float
    move_rate: float
    mean_cost: float
    history: list[RoundResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        _check_responses(self)

    def series(self, name: str) -> np.ndarray:
        """One metric over the rounds, e.g. ``series("gaming_rate")`` -> ndarray (n_rounds,).

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.linear_model import LogisticRegression
        >>> X = np.array([[-1.0], [-0.2], [0.5], [1.0]]); y = np.array([0, 0, 1, 1])
        >>> res = StrategicSimulator(n_rounds=2).run(LogisticRegression().fit(X, y), X, y)
        >>> res.series("accuracy").shape
        (2,)
        """
        if not self.history or not hasattr(self.history[0], name) or name in (
                "classifier", "round"):
            raise ValueError(f"name must be a numeric RoundResult field, got {name!r}")
        return np.array([getattr(r, name) for r in self.history], dtype=np.float64)


class StrategicSimulator:
    """Simulate strategic agents against any classifier, over one or several rounds.

    In round ``t`` the rule ``h_t`` is deployed; every agent best-responds to it from its true
    features (Hardt et al. 2016; costs as in spec section 4.1), and the simulator records accuracy
    on the responses, the gaming rate (true negatives accepted after the response), the fraction
    that moved and the mean cost paid. Between rounds an optional ``retrain`` callback may replace
    the rule (e.g. refit on the observed responses), or a list of rules, one per round, can be
    given (e.g. the stage rules of a two-stage robust classifier).

    Parameters
    ----------
    best_response : "linear-cost" or callable, default="linear-cost"
        ``"linear-cost"``: the closed form :func:`linear_best_response` (needs a linear rule, see
        :func:`linear_rule`). A callable ``best_response(X, classifier)`` must return
        ``(X_new (n, d), moved (n,) bool)`` or ``(X_new, moved, cost (n,))``; without ``cost``
        the simulator prices moves with ``cost_norm`` and ``kappa``.
    cost_norm : {2, 1, "weighted-l1"}, default=2
        The norm of the linear cost ``kappa ||delta||``.
    kappa : float, ndarray of shape (n,), (lo, hi) tuple or callable, default=1.0
        Cost per unit of movement. A tuple draws one ``kappa_i ~ U[lo, hi]`` per agent (with
        ``rng``, once per run); a callable ``kappa(round, previous_classifier)`` returns a scalar
        or an (n,) array for each round (``previous_classifier`` is None in round 0), which
        models decision-dependent costs (agents learn to game the rules they have seen).
    weights : ndarray of shape (d,), optional
        Per-feature weights for ``cost_norm="weighted-l1"``.
    n_rounds : int, default=1
        Number of rounds.
    retrain : callable, optional
        ``retrain(classifier, X_response, y, round) -> classifier`` called after each round but
        the last; its return value is deployed in the next round.
    pos_label : object, optional
        The accepted label; default ``classifier.classes_[-1]`` if present, else the larger label
        of ``y``.
    rng : numpy.random.Generator, int or None, default=None
        Randomness for a ``(lo, hi)`` kappa.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(-1, 1, (100, 2)), rng.normal(1, 1, (100, 2))]
    >>> y = np.r_[np.zeros(100, int), np.ones(100, int)]
    >>> clf = LogisticRegression().fit(X, y)
    >>> res = StrategicSimulator(kappa=2.0).run(clf, X, y)
    >>> bool(res.gaming_rate >= np.mean(clf.predict(X[y == 0]) == 1))
    True
    >>> bool(res.accuracy <= res.accuracy_truthful)
    True
    """

    def __init__(
        self, best_response: str | Callable[..., Any] = "linear-cost", cost_norm: int | str = 2,
        kappa: Any = 1.0, weights: np.ndarray | None = None, n_rounds: int = 1,
        retrain: Callable[..., Any] | None = None, pos_label: Any = None, rng: Any = None,
    ) -> None:
        self.best_response = best_response
        self.cost_norm = cost_norm
        self.kappa = kappa
        self.weights = weights
        self.n_rounds = n_rounds
        self.retrain = retrain
        self.pos_label = pos_label
        self.rng = rng

    def _validate(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        X = check_array(X, "X", ndim=2)
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
        if not (self.best_response == "linear-cost" or callable(self.best_response)):
            raise ValueError("best_response must be 'linear-cost' or a callable "
                             f"best_response(X, classifier), got {self.best_response!r}")
        check_scalar(self.n_rounds, "n_rounds", Interval("int", 1, None))
        wts = _check_cost_norm(self.cost_norm, self.weights, X.shape[1])
        if self.retrain is not None and not callable(self.retrain):
            raise TypeError(f"retrain must be callable or None, got {type(self.retrain).__name__}")
        return X, y, wts

    def _kappa_tuple(self, n: int) -> np.ndarray | None:
        kap = self.kappa
        if isinstance(kap, tuple):
            if len(kap) != 2:
                raise ValueError(f"kappa as a tuple must be (lo, hi), got {kap!r}")
            lo = check_scalar(kap[0], "kappa[0]", Interval("real", 0.0, None, closed="neither"))
            hi = check_scalar(kap[1], "kappa[1]", Interval("real", lo, None))
            return check_rng(self.rng).uniform(lo, hi, size=n)
        return None

    def run(self, classifier: Any, X: np.ndarray, y: np.ndarray) -> SimulationResult:
        """Run the simulation.

        Parameters
        ----------
        classifier : object or sequence of objects
            A fitted classifier with ``predict`` (and ``coef_``/``decision_function`` for
            ``"linear-cost"``), or a sequence of ``n_rounds`` classifiers, one per round.
        X : ndarray of shape (n, d)
            The agents' true features (never modified).
        y : ndarray of shape (n,)
            True labels (two classes; the accepted one is ``pos_label``).

        Returns
        -------
        SimulationResult

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.linear_model import LogisticRegression
        >>> X = np.array([[-2.0], [-0.3], [0.4], [2.0]]); y = np.array([0, 0, 1, 1])
        >>> clf = LogisticRegression().fit(X, y)
        >>> res = StrategicSimulator(kappa=1.0).run(clf, X, y)
        >>> res.moved.tolist(), res.gaming_rate
        ([False, True, False, False], 0.5)
        """
        X, y, wts = self._validate(X, y)
        n, d = X.shape
        rounds = self.n_rounds
        if isinstance(classifier, Sequence) and not isinstance(classifier, (str, bytes)):
            rules = list(classifier)
            if len(rules) != rounds:
                raise ValueError(f"classifier as a sequence must hold n_rounds={rounds} rules, "
                                 f"got {len(rules)}")
            if self.retrain is not None:
                raise ValueError("pass either a sequence of classifiers or retrain, not both")
        else:
            rules = [classifier] + [None] * (rounds - 1)
        for r in rules:
            if r is not None and not hasattr(r, "predict"):
                raise TypeError(f"classifier must have a predict method, got {type(r).__name__}")
        fixed_kappa = self._kappa_tuple(n)
        if fixed_kappa is None and not callable(self.kappa):
            fixed_kappa = _check_kappa(self.kappa, n)
        history: list[RoundResult] = []
        current = rules[0]
        previous = None
        for t in range(rounds):
            if t > 0:
                current = rules[t] if rules[t] is not None else current
            if fixed_kappa is not None:
                k = fixed_kappa
            else:
                k = _check_kappa(self.kappa(t, previous), n, name="kappa(round, previous)")
            pos = self.pos_label
            if pos is None:
                classes = getattr(current, "classes_", None)
                pos = classes[-1] if classes is not None and len(classes) else np.max(y)
            cost = None
            if self.best_response == "linear-cost":
                w, b = linear_rule(current, d)
                X_new, moved = _linear_best_response(X, w, b, k, self.cost_norm, wts)
            else:
                out = cast(Callable[..., Any], self.best_response)(X, current)  # not the string
                if not isinstance(out, tuple) or len(out) not in (2, 3):
                    raise TypeError("best_response must return (X_new, moved) or "
                                    "(X_new, moved, cost)")
                X_new = np.asarray(out[0], dtype=np.float64)
                moved = np.asarray(out[1], dtype=bool)
                if X_new.shape != X.shape or moved.shape != (n,):
                    raise ValueError(f"best_response returned X_new of shape {X_new.shape} and "
                                     f"moved of shape {moved.shape}; expected {X.shape}, ({n},)")
                if len(out) == 3:
                    cost = np.asarray(out[2], dtype=np.float64).reshape(n)
            if cost is None:
                cost = _move_cost(X_new - X, k, self.cost_norm, wts)
                cost[~moved] = 0.0
            y_pred = np.asarray(current.predict(X_new))
            y_true_pred = np.asarray(current.predict(X))
            neg = y != pos
            accepted = y_pred == pos
            history.append(RoundResult(
                round=t, classifier=current, X_response=X_new, moved=moved, cost=cost,
                y_pred=y_pred, accuracy=float(np.mean(y_pred == y)),
                accuracy_truthful=float(np.mean(y_true_pred == y)),
                gaming_rate=float(np.mean(accepted[neg])) if neg.any() else float("nan"),
                manipulation_rate=float(np.mean(moved[neg])) if neg.any() else float("nan"),
                move_rate=float(np.mean(moved)), mean_cost=float(np.mean(cost)),
            ))
            previous = current
            if self.retrain is not None and t < rounds - 1:
                current = self.retrain(current, X_new, y, t)
        last = history[-1]
        return SimulationResult(
            X_response=last.X_response, moved=last.moved, cost=last.cost, y_pred=last.y_pred,
            accuracy=last.accuracy, accuracy_truthful=last.accuracy_truthful,
            gaming_rate=last.gaming_rate, manipulation_rate=last.manipulation_rate,
            move_rate=last.move_rate, mean_cost=last.mean_cost, history=history,
        )
