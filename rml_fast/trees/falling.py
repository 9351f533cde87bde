"""Falling trees and their exact Rashomon sets (GraviTree).

A *falling tree* tests a literal ``x_j = o`` at each internal node; the child satisfying it is
visited first, and the risks ``r_l = P_l / N_l`` of the leaves, read in that depth-first
(prioritisation) order, never increase. So the first leaves hold the highest-risk cases and
reach them by short paths; with ``branch_budget=0`` a falling tree is a falling rule list.

Both estimators minimise

``R(T) = (1/W) sum_l loss_l + lambda * L(T)``,

``loss_l = N_l - P_l`` if ``r_l >= tau`` else ``C P_l`` (weighted misclassification; ``C`` =
false-negative cost, ``tau = 1/(1+C)`` when ``fn_cost`` is given) or the log loss, over falling
trees of depth ``<= depth_budget`` with ``<= branch_budget`` branching nodes.
:class:`FallingTreeClassifier` returns an optimal tree; :class:`FallingRashomonSet` returns every
tree with ``R(T) <= theta`` (``theta = (1 + eps) R*`` by default), counted exactly and built on
demand, in objective order. ``falling=False`` drops the constraint (the TreeFARMS problem).

PROPOSED (the paper's text was not available): the formalisation of "falling tree" (literal
orientation, pre-order prioritisation, non-strict risk order, ``x_j = 1`` first on ties), the
branching budget as the number of internal nodes with two internal children, and the objective
above (the GOSDT/TreeFARMS family), as in ``specs/tabular_decisions.md`` §1.

References
----------
Wang & Rudin, "Falling Rule Lists", AISTATS 2015, arXiv:1411.5899.
Chen & Rudin, "An optimization approach to learning falling rule lists", AISTATS 2018,
arXiv:1710.02572.
Xin et al., "Exploring the Whole Rashomon Set of Sparse Decision Trees", NeurIPS 2022,
arXiv:2209.08040.
"""

from __future__ import annotations

import inspect
import logging
import warnings
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_scalar
from rml_fast.kernels.gravitree import GraviTreeResult, gravitree_fit
from rml_fast.trees._tree import FallingTree, check_binary_X

logger = logging.getLogger(__name__)

__all__ = [
    "FallingRashomonSet",
    "FallingTree",
    "FallingTreeClassifier",
    "IncompleteSearchError",
    "IncompleteSearchWarning",
    "rashomon_sweep",
]


class IncompleteSearchWarning(UserWarning):
    """The time limit or an interrupt stopped the search; the result is a valid subset."""


class IncompleteSearchError(RuntimeError):
    """Raised with ``on_incomplete="raise"``; ``.partial`` holds the fitted estimator."""

    def __init__(self, message: str, partial: Any) -> None:
        super().__init__(message)
        self.partial = partial


class _Params:
    """``get_params``/``set_params`` from the ``__init__`` signature (scikit-learn protocol)."""

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p for p in sig.parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._param_names()}

    def set_params(self, **params: Any) -> Any:
        valid = self._param_names()
        for k, v in params.items():
            if k not in valid:
                raise ValueError(f"Invalid parameter {k!r} for {type(self).__name__}; "
                                 f"valid parameters are {valid}")
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    _estimator_type: str | None = None

    def __sklearn_tags__(self) -> Any:
        """scikit-learn (>= 1.6) estimator tags, built lazily so sklearn stays optional."""
        from sklearn.utils import ClassifierTags, InputTags, Tags, TargetTags

        classifier = self._estimator_type == "classifier"
        return Tags(estimator_type=self._estimator_type,
                    target_tags=TargetTags(required=True),
                    classifier_tags=ClassifierTags(multi_class=False) if classifier else None,
                    input_tags=InputTags())

    def _check_fitted(self) -> None:
        if not hasattr(self, "result_"):
            raise RuntimeError(f"This {type(self).__name__} instance is not fitted yet; "
                               "call fit(X, y) first")


def _search(est: Any, X: Any, y: Any, sample_weight: Any, *, bound_mode: str,
            bound_value: float, max_trees: int) -> GraviTreeResult:
    if est.on_incomplete not in ("warn", "raise", "ignore"):
        raise ValueError("on_incomplete must be 'warn', 'raise' or 'ignore', "
                         f"got {est.on_incomplete!r}")
    # the kernel names these depth / branch / max_leaves: check them under the names the
    # user set, with the kernel's ranges
    check_scalar(est.depth_budget, "depth_budget", Interval("int", 1, 64))
    if est.branch_budget is not None:
        check_scalar(est.branch_budget, "branch_budget", Interval("int", 0, None))
    if est.leaf_budget is not None:
        check_scalar(est.leaf_budget, "leaf_budget", Interval("int", 1, None))
    res = gravitree_fit(
        X, y, sample_weight, regularization=est.regularization, depth=est.depth_budget,
        branch=est.branch_budget, loss=est.loss, tau=est.tau, fn_cost=est.fn_cost,
        falling=est.falling, bound_mode=bound_mode, bound_value=bound_value,
        max_trees=max_trees, time_limit=est.time_limit, progress=est.progress,
        ignore_trivial_extensions=est.ignore_trivial_extensions, max_leaves=est.leaf_budget,
        memory_limit=_memory_limit_mib(est), n_threads=est.n_threads)
    return res


def _memory_limit_mib(est: Any) -> float:
    """The search's memory limit in MiB: the estimator's, else the process-wide one."""
    if est.memory_limit is not None:
        return est.memory_limit
    from rml_fast.config import get_memory_limit

    return get_memory_limit() / 2**20


def _report_incomplete(est: Any, res: GraviTreeResult) -> None:
    if res.complete or est.on_incomplete == "ignore":
        return
    reason = res.stats.get("stop_reason", "")
    if res.stats.get("keyboard_interrupt"):
        why = "interrupted (Ctrl-C)"
    elif reason == "memory_limit":
        why = (f"memory limit of {est.memory_limit} MiB reached" if est.memory_limit is not None
               else f"the process memory limit of {_memory_limit_mib(est):.0f} MiB "
                    "(rml_fast.config.set_memory_limit) reached")
    elif reason == "time_limit":
        why = f"time limit of {est.time_limit} s reached"
    else:
        why = "stopped by the progress callback"
    msg = (f"{type(est).__name__}: search {why}; the {res.n_trees} trees returned are valid "
           "but the result may be incomplete (complete_=False)")
    if est.on_incomplete == "raise":
        raise IncompleteSearchError(msg, est)
    warnings.warn(msg, IncompleteSearchWarning, stacklevel=3)


_COMMON_DOC = """
    regularization : float, default=0.01
        ``lambda``, penalty per leaf.
    depth_budget : int, default=4
        Maximum literals on a root-to-leaf path (root split = depth 1; TreeFARMS'
        ``depth_budget`` = this + 1).
    branch_budget : int or None, default=None
        Maximum number of branching nodes (internal nodes with two internal children);
        0 = falling rule lists, None = no limit. PROPOSED reading.
    loss : {"misclassification", "logloss"}, default="misclassification"
    tau : float, default=0.5
        A leaf predicts 1 iff its risk ``>= tau``.
    fn_cost : float or None, default=None
        False-negative cost ``C``; sets ``tau = 1/(1+C)``.
    falling : bool, default=True
        False: unconstrained sparse trees (TreeFARMS problem, same objective).
    time_limit : float or None, default=None
        Seconds; the search then stops and the result is flagged incomplete.
    memory_limit : float or None, default=None
        MiB of search state; when exceeded the search stops like at the time limit. None:
        the process-wide limit of :func:`rml_fast.config.get_memory_limit` (by default 90 %
        of the available memory), so a search runs out of budget, never out of memory.
    n_threads : int, default=1
        OpenMP threads for the candidate splits of large subproblems; the output is the
        same for every thread count (the recursion itself is sequential).
    on_incomplete : {"warn", "raise", "ignore"}, default="warn"
        What to do when the time limit or Ctrl-C stops the search: warn
        (:class:`IncompleteSearchWarning`) and keep the partial result, raise
        :class:`IncompleteSearchError` (``.partial`` is the fitted estimator), or nothing.
    progress : bool, default=True
        Show a progress bar for searches that last more than a moment.
    ignore_trivial_extensions : bool, default=False
        Leave out trees with a split into two leaves of the same prediction (TreeFARMS
        option of the same name).
    leaf_budget : int or None, default=None
        Maximum number of leaves: the alternative reading of the paper's budget (PROPOSED);
        combines with ``branch_budget``.
"""


class FallingTreeClassifier(_Params):
    """An optimal falling tree (scikit-learn classifier API).

    Parameters
    ----------
    {common}
    Attributes
    ----------
    tree_ : FallingTree
    objective_ : float
        ``R(T)`` of the fitted tree (the optimum when ``complete_``).
    n_leaves_ : int
    leaf_risks_ : ndarray of shape (n_leaves_,), float64, non-increasing
    n_features_in_ : int
    classes_ : ndarray [0, 1]
    n_optimal_trees_ : int
        Number of trees attaining the optimum.
    complete_ : bool
    stats_ : dict

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.trees import FallingTreeClassifier
    >>> X = np.array([[1, 0], [1, 1], [0, 1], [0, 0]] * 10)
    >>> y = np.array([1, 1, 0, 1] * 10)
    >>> clf = FallingTreeClassifier(depth_budget=2, regularization=0.01).fit(X, y)
    >>> clf.tree_.to_rules(["a", "b"])
    ['if a == 1 then risk = 1.000 (predict 1)', 'else if a == 0 and b == 0 then risk = 1.000 (predict 1)', \
'else risk = 0.000 (predict 0)']
    """

    _estimator_type = "classifier"

    def __init__(self, regularization: float = 0.01, depth_budget: int = 4,
                 branch_budget: int | None = None, loss: str = "misclassification",
                 tau: float = 0.5, fn_cost: float | None = None, falling: bool = True,
                 time_limit: float | None = None, n_threads: int = 1,
                 on_incomplete: str = "warn", progress: bool = True,
                 ignore_trivial_extensions: bool = False,
                 leaf_budget: int | None = None, memory_limit: float | None = None) -> None:
        self.regularization = regularization
        self.depth_budget = depth_budget
        self.branch_budget = branch_budget
        self.loss = loss
        self.tau = tau
        self.fn_cost = fn_cost
        self.falling = falling
        self.time_limit = time_limit
        self.n_threads = n_threads
        self.on_incomplete = on_incomplete
        self.progress = progress
        self.ignore_trivial_extensions = ignore_trivial_extensions
        self.leaf_budget = leaf_budget
        self.memory_limit = memory_limit

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> FallingTreeClassifier:
        """Fit an optimal falling tree to 0/1 ``X`` of shape (n, p) and 0/1 ``y`` of shape (n,)."""
        res = _search(self, X, y, sample_weight, bound_mode="optimal", bound_value=0.0,
                      max_trees=1)
        self.result_ = res
        self.n_features_in_ = res.n_features
        self.classes_ = np.array([0, 1], dtype=np.int64)
        self.tree_ = FallingTree.from_dict(res.tree(0), tau=_tau_of(self))
        self.objective_ = self.tree_.objective
        self.n_leaves_ = self.tree_.n_leaves
        self.leaf_risks_ = self.tree_.leaf_risks
        self.n_optimal_trees_ = res.n_trees
        self.complete_ = res.complete
        self.stats_ = res.stats
        _report_incomplete(self, res)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Array of shape (n, 2), float64; column 1 is the leaf risk."""
        self._check_fitted()
        return self.tree_.predict_proba(check_binary_X(X, self.n_features_in_))

    def predict(self, X: Any) -> np.ndarray:
        """Labels ``1[risk >= tau]``, shape (n,) int64."""
        self._check_fitted()
        return self.tree_.predict(check_binary_X(X, self.n_features_in_))

    def apply(self, X: Any) -> np.ndarray:
        """Leaf rank in prioritisation order (0 = highest risk), shape (n,) int64."""
        self._check_fitted()
        return self.tree_.apply(check_binary_X(X, self.n_features_in_))

    def decision_path_length(self, X: Any) -> np.ndarray:
        """Literals on each row's path, shape (n,) int64."""
        self._check_fitted()
        return self.tree_.decision_path_length(check_binary_X(X, self.n_features_in_))

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Weighted accuracy."""
        pred = self.predict(X)
        yy = np.asarray(y)
        w = np.ones(len(yy)) if sample_weight is None else np.asarray(sample_weight, float)
        return float(np.sum(w * (pred == yy)) / np.sum(w))


def _tau_of(est: Any) -> float:
    """The decision threshold an estimator's parameters imply."""
    return 1.0 / (1.0 + est.fn_cost) if est.fn_cost is not None else float(est.tau)


class FallingRashomonSet(_Params):
    """All falling trees within ``theta`` of the optimum, counted exactly, in objective order.

    Parameters
    ----------
    {common}
    rashomon_multiplier : float or None, default=None
        ``theta = (1 + rashomon_multiplier) R*``; when none of the three ``rashomon_*``
        parameters is given, ``rashomon_multiplier=0.05`` is used.
    rashomon_adder : float or None, default=None
        ``theta = R* + rashomon_adder``.
    rashomon_bound : float or None, default=None
        Absolute ``theta``. Give at most one of ``rashomon_multiplier``, ``rashomon_adder``
        and ``rashomon_bound``; ``fit`` raises ``ValueError`` naming them otherwise.
    max_trees : int, default=10**7
        ``objectives_`` lists at most this many trees; ``len`` stays exact and any index
        can be built lazily.

    Attributes
    ----------
    n_trees_ : int
        Exact size of the set (a Python int, may be huge; ``len()`` works below ``2**63``).
    objectives_ : ndarray of shape (min(n_trees_, max_trees),), float64, sorted
    optimal_objective_ : float
    theta_ : float
    complete_ : bool
    stats_ : dict
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.trees import FallingRashomonSet
    >>> rng = np.random.default_rng(0)
    >>> X = rng.integers(0, 2, size=(200, 5))
    >>> y = (rng.random(200) < 0.2 + 0.6 * X[:, 0]).astype(int)
    >>> rs = FallingRashomonSet(depth_budget=2, rashomon_multiplier=0.1).fit(X, y)
    >>> len(rs) >= 1, rs[0].objective == rs.optimal_objective_
    (True, True)
    >>> bool(np.all(np.diff(rs.objectives_) >= 0))
    True
    """

    def __init__(self, regularization: float = 0.01, depth_budget: int = 4,
                 branch_budget: int | None = None, rashomon_multiplier: float | None = None,
                 rashomon_adder: float | None = None, rashomon_bound: float | None = None,
                 loss: str = "misclassification", tau: float = 0.5,
                 fn_cost: float | None = None, falling: bool = True,
                 max_trees: int = 10**7, time_limit: float | None = None,
                 n_threads: int = 1, on_incomplete: str = "warn", progress: bool = True,
                 ignore_trivial_extensions: bool = False,
                 leaf_budget: int | None = None, memory_limit: float | None = None) -> None:
        self.regularization = regularization
        self.depth_budget = depth_budget
        self.branch_budget = branch_budget
        self.rashomon_multiplier = rashomon_multiplier
        self.rashomon_adder = rashomon_adder
        self.rashomon_bound = rashomon_bound
        self.loss = loss
        self.tau = tau
        self.fn_cost = fn_cost
        self.falling = falling
        self.max_trees = max_trees
        self.time_limit = time_limit
        self.n_threads = n_threads
        self.on_incomplete = on_incomplete
        self.progress = progress
        self.ignore_trivial_extensions = ignore_trivial_extensions
        self.leaf_budget = leaf_budget
        self.memory_limit = memory_limit

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> FallingRashomonSet:
        """Find the optimum and the whole Rashomon set on 0/1 ``X`` (n, p) and ``y`` (n,)."""
        given = [name for name in ("rashomon_multiplier", "rashomon_adder", "rashomon_bound")
                 if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of rashomon_multiplier, rashomon_adder and "
                             f"rashomon_bound (each sets theta); got {' and '.join(given)}")
        if self.rashomon_bound is not None:
            mode, value, name = "bound", self.rashomon_bound, "rashomon_bound"
        elif self.rashomon_adder is not None:
            mode, value, name = "adder", self.rashomon_adder, "rashomon_adder"
        else:
            value = 0.05 if self.rashomon_multiplier is None else self.rashomon_multiplier
            mode, name = "multiplier", "rashomon_multiplier"
        value = check_scalar(value, name, Interval("real", 0, None))
        max_trees = check_scalar(self.max_trees, "max_trees", Interval("int", 1, None))
        res = _search(self, X, y, sample_weight, bound_mode=mode, bound_value=value,
                      max_trees=int(max_trees))
        self.result_ = res
        self.n_features_in_ = res.n_features
        self.n_trees_ = res.n_trees
        self.optimal_objective_ = res.optimal_objective
        self.theta_ = res.theta
        self.complete_ = res.complete
        self.stats_ = res.stats
        _report_incomplete(self, res)
        return self

    @property
    def objectives_(self) -> np.ndarray:
        """Objectives of the first ``min(n_trees_, max_trees)`` trees, sorted, float64."""
        self._check_fitted()
        return self.result_.objectives

    def __len__(self) -> int:
        self._check_fitted()
        return self.n_trees_

    def __getitem__(self, i: int) -> FallingTree:
        """The ``i``-th tree in non-decreasing objective order (negative ``i`` from the end)."""
        self._check_fitted()
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"index must be an int, got {type(i).__name__}")
        i = int(i)
        if i < 0:
            i += self.n_trees_
        if not 0 <= i < self.n_trees_:
            raise IndexError(f"index out of range for a Rashomon set of {self.n_trees_} trees")
        return FallingTree.from_dict(self.result_.tree(i), tau=_tau_of(self))

    def __iter__(self) -> Any:
        for i in range(self.n_trees_):
            yield self[i]

    def _first(self, max_trees: int) -> range:
        k = check_scalar(max_trees, "max_trees", Interval("int", 1, None))
        return range(min(self.n_trees_, int(k)))

    def predict_all(self, X: Any, max_trees: int = 1000) -> np.ndarray:
        """Labels of the first ``max_trees`` trees: array of shape (k, n), int8."""
        self._check_fitted()
        x = check_binary_X(X, self.n_features_in_)
        idx = self._first(max_trees)
        out = np.empty((len(idx), x.shape[0]), dtype=np.int8)
        for k in idx:
            out[k] = self[k].predict(x)
        return out

    def predict_proba_all(self, X: Any, max_trees: int = 1000) -> np.ndarray:
        """Risks of the first ``max_trees`` trees: array of shape (k, n), float64."""
        self._check_fitted()
        x = check_binary_X(X, self.n_features_in_)
        idx = self._first(max_trees)
        out = np.empty((len(idx), x.shape[0]), dtype=np.float64)
        for k in idx:
            out[k] = self[k].predict_proba(x)[:, 1]
        return out

    def variable_importance(self, max_trees: int | None = None) -> np.ndarray:
        """Fraction of trees that test each feature: array of shape (p,), float64.

        Exact over the whole set by default, computed from the counts without building any
        tree; with ``max_trees`` it is the fraction among the best ``max_trees`` trees.
        """
        self._check_fitted()
        if max_trees is None:
            if self.n_trees_ == 0:
                return np.zeros(self.n_features_in_)
            counts = self.result_.feature_counts()
            return np.array([c / self.n_trees_ for c in counts], dtype=np.float64)
        k = min(self.n_trees_, int(check_scalar(max_trees, "max_trees",
                                                Interval("int", 1, None))))
        out = np.zeros(self.n_features_in_, dtype=np.float64)
        for i in range(k):
            out[self[i].features_used()] += 1
        return out / max(k, 1)


for _cls in (FallingTreeClassifier, FallingRashomonSet):
    _cls.__doc__ = (_cls.__doc__ or "").replace("{common}", _COMMON_DOC.strip("\n").lstrip())


def _sweep_point(rd: tuple[float, int], X: Any, y: Any, sample_weight: Any,
                 params: dict[str, Any]) -> dict[str, Any]:
    """One grid point's record (module level: picklable for process pools and Ray)."""
    r, d = rd
    rs = FallingRashomonSet(regularization=r, depth_budget=d, **params).fit(X, y, sample_weight)
    if rs.stats_.get("keyboard_interrupt"):  # the native search returned on Ctrl-C
        raise KeyboardInterrupt(
            f"rashomon_sweep interrupted at regularization={r}, depth_budget={d}; "
            "the finished points are in the checkpoint (if one was given)")
    return {
        "regularization": r, "depth_budget": d, "n_trees": rs.n_trees_,
        "optimal_objective": float(rs.optimal_objective_), "theta": float(rs.theta_),
        "complete": bool(rs.complete_), "objectives": np.array(rs.objectives_),
    }


def _rashomon_sweep(X: Any, y: Any, regularizations: Any, depth_budgets: Any, *,
                    sample_weight: Any, checkpoint: Any, backend: Any, progress: Any,
                    params: dict[str, Any], caller: str) -> list[dict[str, Any]]:
    """The one implementation behind :func:`rashomon_sweep` and ``grid.rashomon_grid``."""
    import functools

    from rml_fast._checkpoint import digest, load_checkpoint, save_checkpoint
    from rml_fast.parallel import _check_backend, parallel_map

    _check_backend(backend)
    regs = [float(check_scalar(r, "regularizations", Interval("real", 0, None)))
            for r in np.atleast_1d(np.asarray(regularizations, dtype=object))]
    depths = [int(check_scalar(d, "depth_budgets", Interval("int", 1, 64)))
              for d in np.atleast_1d(np.asarray(depth_budgets, dtype=object))]
    if not regs or not depths:
        raise ValueError("regularizations and depth_budgets must be non-empty")
    for bad in ("regularization", "depth_budget", "progress"):
        if bad in params:
            raise TypeError(f"{caller} sets {bad!r} itself; do not pass it in params")
    params = {**params, "progress": False}
    FallingRashomonSet(**params)  # unknown parameters raise TypeError here, before any fit
    grid = [(r, d) for r in regs for d in depths]
    done: dict[tuple[float, int], dict[str, Any]] = {}
    fingerprint: dict[str, Any] = {}
    if checkpoint is not None:
        # the same fingerprint as before the merge: old checkpoints stay valid
        fingerprint = {
            "data": digest(np.asarray(X), np.asarray(y),
                           None if sample_weight is None else np.asarray(sample_weight)),
            "grid": grid, "params": sorted((k, repr(v)) for k, v in params.items()),
        }
        state = load_checkpoint(checkpoint, kind="rashomon_sweep", fingerprint=fingerprint)
        done = dict(state or {})
    todo = [p for p in grid if p not in done]

    def finished(i: int, record: dict[str, Any]) -> None:
        done[todo[i]] = record
        if checkpoint is not None:
            save_checkpoint(checkpoint, done, kind="rashomon_sweep", fingerprint=fingerprint)

    fn = functools.partial(_sweep_point, X=X, y=y, sample_weight=sample_weight, params=params)
    parallel_map(fn, todo, backend=backend, progress=bool(progress), desc="Rashomon sweep",
                 on_result=finished)
    return [done[p] for p in grid]


def rashomon_sweep(
    X: Any,
    y: Any,
    regularizations: Any,
    depth_budgets: Any,
    *,
    sample_weight: Any = None,
    checkpoint: str | None = None,
    backend: Any = "serial",
    progress: bool = True,
    **params: Any,
) -> list[dict[str, Any]]:
    """Fit a :class:`FallingRashomonSet` at every (regularization, depth_budget) of a grid,
    resumably, serially or in parallel.

    Each grid point ``(lambda, d)`` is an independent exact search: the Rashomon set
    ``{t : R(t) + lambda * leaves(t) <= theta}`` with ``regularization=lambda`` and
    ``depth_budget=d``. The searches are deterministic, so every backend returns the serial
    result exactly. :func:`rml_fast.trees.grid.rashomon_grid` is the same function (an alias
    whose ``progress`` defaults to False).

    Parameters
    ----------
    X : array-like of shape (n, p), 0/1
    y : array-like of shape (n,), 0/1
    regularizations : sequence of float
        ``lambda`` values >= 0 (outer loop of the grid order).
    depth_budgets : sequence of int
        Depth budgets in [1, 64] (inner loop).
    sample_weight : array-like of shape (n,), optional
    checkpoint : str or path, optional
        A file rewritten atomically after every finished grid point (in the calling process,
        whatever the backend); a call whose ``checkpoint`` exists skips the points it holds
        (same data, grid and parameters, else ``ValueError``), so an interrupted sweep
        (Ctrl-C, a killed process) continues where it stopped with the same result. A single
        native search is not resumable: a point interrupted mid-search starts again from
        scratch (the search's state is a large in-memory DAG of subproblems; bound it with
        ``time_limit`` / ``memory_limit``).
    backend : {"serial", "ray"} or concurrent.futures.Executor, default="serial"
        See :func:`rml_fast.parallel.parallel_map`; one task per grid point still to do.
    progress : bool, default=True
        A tqdm bar over the grid points still to do.
    **params
        Other :class:`FallingRashomonSet` parameters (``rashomon_multiplier``, ``max_trees``, ...).

    Returns
    -------
    list of dict
        One per grid point, in grid order: ``regularization``, ``depth_budget``, ``n_trees``
        (exact, a Python int), ``optimal_objective``, ``theta``, ``complete`` and
        ``objectives`` (ndarray of the first ``min(n_trees, max_trees)`` objectives, sorted).

    Raises
    ------
    ValueError, TypeError
        On a bad grid, backend, parameter or a checkpoint of another configuration, before
        any search.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.trees.falling import rashomon_sweep
    >>> rng = np.random.default_rng(0)
    >>> X = rng.integers(0, 2, size=(100, 4))
    >>> y = (rng.random(100) < 0.2 + 0.6 * X[:, 0]).astype(int)
    >>> out = rashomon_sweep(X, y, [0.01, 0.05], [1, 2], progress=False)
    >>> [(r["regularization"], r["depth_budget"]) for r in out]
    [(0.01, 1), (0.01, 2), (0.05, 1), (0.05, 2)]
    >>> all(r["n_trees"] >= 1 for r in out)
    True
    """
    return _rashomon_sweep(X, y, regularizations, depth_budgets, sample_weight=sample_weight,
                           checkpoint=checkpoint, backend=backend, progress=progress,
                           params=params, caller="rashomon_sweep")
