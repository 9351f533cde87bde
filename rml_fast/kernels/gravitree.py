"""GraviTree: exact Rashomon sets of (falling) sparse decision trees on binary data.

The search (``backend="native"``, C++ in ``csrc/gravitree/``) and a brute-force twin
(``backend="reference"``, pure Python, for tiny problems only) solve the same problem:

``R(T) = (1/W) sum_l loss_l + lambda * L(T)`` over binary trees ``T`` of depth ``<= D``
(root split = depth 1) and with at most ``B`` branching nodes (internal nodes whose two
children are both internal), where leaf ``l`` has positive mass ``P_l``, total mass ``N_l``,
risk ``r_l = P_l / N_l`` and loss ``N_l - P_l`` if ``r_l >= tau`` else ``C P_l``
(``loss="logloss"``: ``-P_l log r_l - (N_l - P_l) log(1 - r_l)``). With ``falling=True``
every internal node tests a literal ``x_j = o`` whose satisfying child is visited first
and the leaf risks must be non-increasing in that depth-first order; the literal's
orientation is the one with the larger pooled child risk (``x_j = 1`` on ties), which is
the only one that can be falling (orientation forcing, F1). The Rashomon set is
``{T : R(T) <= theta}`` with ``theta = (1 + eps) R*`` (``bound_mode="multiplier"``),
``R* + eps`` ("adder"), an absolute ``theta`` ("bound") or ``R*`` ("optimal").

Splits whose two children are not both non-empty are never made (as in GOSDT/TreeFARMS);
rows of zero weight are dropped first. Trees are returned in non-decreasing objective order
as flat pre-order arrays (``feature`` = -1 at leaves).

References
----------
Xin et al., "Exploring the Whole Rashomon Set of Sparse Decision Trees", NeurIPS 2022,
arXiv:2209.08040. Wang & Rudin, "Falling Rule Lists", AISTATS 2015, arXiv:1411.5899.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_array, check_scalar
from rml_fast.kernels._dispatch import NUMPY, Kernel

__all__ = [
    "BOUND_MODES",
    "LOSSES",
    "GraviTreeProblem",
    "GraviTreeResult",
    "canonical_string",
    "gravitree_fit",
    "gravitree_fit_reference",
    "leaf_loss",
    "objective",
    "prepare_problem",
    "theta_of",
]

logger = logging.getLogger(__name__)

BOUND_MODES = {"optimal": 0, "multiplier": 1, "adder": 2, "bound": 3}
LOSSES = {"misclassification": 0, "logloss": 1}

_fit = Kernel("gravitree.fit")


@dataclass(frozen=True)
class GraviTreeProblem:
    """A validated, deduplicated problem: unique rows with their masses.

    Attributes
    ----------
    xu : ndarray of shape (m, p), uint8
        The distinct feature vectors (rows of positive weight only).
    pos, tot : ndarray of shape (m,), float64
        Positive mass ``P_i`` and total mass ``N_i`` of each distinct row.
    total_weight : float
        ``W``, the sum of all sample weights.
    integral : bool
        Whether all masses are integers (exact objective arithmetic).
    """

    xu: np.ndarray
    pos: np.ndarray
    tot: np.ndarray
    total_weight: float
    integral: bool
    regularization: float
    depth: int
    branch: int  # -1 = unlimited
    loss: int
    tau: float
    cost: float
    falling: bool
    bound_mode: int
    bound_value: float
    max_trees: int
    time_limit: float  # <= 0: none
    prune: bool
    ignore_trivial: bool = False
    max_leaves: int = -1  # -1 = unlimited
    memory_limit: float = 0.0  # MiB of search state; <= 0: none
    n_threads: int = 1

    def __post_init__(self) -> None:
        # the arrays the search reads: checked once here (prepare_problem builds valid ones)
        xu = check_array(self.xu, "xu", dtypes=(np.uint8,), ndim=2)
        m = xu.shape[0]
        for name in ("pos", "tot"):
            arr = check_array(getattr(self, name), name, dtypes=(np.float64,), ndim=1)
            if arr.shape[0] != m:
                raise ValueError(f"{name} must have {m} entries (rows of xu), got {arr.shape[0]}")
            if (arr < 0).any():
                raise ValueError(f"{name} must be non-negative")
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "xu", xu)
        check_scalar(self.total_weight, "total_weight", Interval("real", 0, None))


def prepare_problem(
    X: Any,
    y: Any,
    sample_weight: Any = None,
    *,
    regularization: float = 0.01,
    depth: int = 4,
    branch: int | None = None,
    loss: str = "misclassification",
    tau: float = 0.5,
    fn_cost: float | None = None,
    falling: bool = True,
    bound_mode: str = "multiplier",
    bound_value: float = 0.05,
    max_trees: int = 10**7,
    time_limit: float | None = None,
    prune: bool = True,
    ignore_trivial_extensions: bool = False,
    max_leaves: int | None = None,
    memory_limit: float | None = None,
    n_threads: int = 1,
) -> GraviTreeProblem:
    """Validate the inputs of :func:`gravitree_fit` and deduplicate the rows.

    Raises
    ------
    TypeError, ValueError
        Naming the offending argument (non-binary ``X``, labels outside {0, 1}, NaN,
        negative weights, ``depth < 1``, unknown ``loss`` ...).
    """
    x = check_array(X, "X", dtypes=None, ndim=2)
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"X must have at least one row and one column, got shape {x.shape}")
    if not np.isin(x, (0, 1)).all():
        raise ValueError("X must be binary (0/1 only); binarise numeric data first, "
                         "e.g. with rml_fast.trees.QuantileBinarizer")
    yy = check_array(y, "y", dtypes=None, ndim=1)
    if yy.shape[0] != x.shape[0]:
        raise ValueError(f"y must have {x.shape[0]} entries (rows of X), got {yy.shape[0]}")
    if not np.isin(yy, (0, 1)).all():
        raise ValueError("y must hold labels in {0, 1} (1 = positive / high risk)")
    if sample_weight is None:
        w = np.ones(x.shape[0], dtype=np.float64)
    else:
        w = check_array(sample_weight, "sample_weight", dtypes=(np.float64,), ndim=1)
        if w.shape[0] != x.shape[0]:
            raise ValueError(
                f"sample_weight must have {x.shape[0]} entries (rows of X), got {w.shape[0]}")
        if (w < 0).any():
            raise ValueError("sample_weight must be non-negative")
    if w.sum() <= 0:
        raise ValueError("sample_weight must have a positive sum")
    lam = float(check_scalar(regularization, "regularization", Interval("real", 0, None)))
    depth = int(check_scalar(depth, "depth", Interval("int", 1, 64)))
    br = -1 if branch is None else int(check_scalar(branch, "branch", Interval("int", 0, None)))
    mem = 0.0 if memory_limit is None else float(
        check_scalar(memory_limit, "memory_limit", Interval("real", 0, None, "neither")))
    n_threads = int(check_scalar(n_threads, "n_threads", Interval("int", 1, 1024)))
    ml = -1 if max_leaves is None else int(
        check_scalar(max_leaves, "max_leaves", Interval("int", 1, None)))
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {sorted(LOSSES)}, got {loss!r}")
    if fn_cost is not None:
        cost = float(check_scalar(fn_cost, "fn_cost", Interval("real", 0, None, "neither")))
        tau = 1.0 / (1.0 + cost)
    else:
        cost = 1.0
        tau = float(check_scalar(tau, "tau", Interval("real", 0, 1)))
    if bound_mode not in BOUND_MODES:
        raise ValueError(f"bound_mode must be one of {sorted(BOUND_MODES)}, got {bound_mode!r}")
    bval = float(check_scalar(bound_value, "bound_value", Interval("real", 0, None)))
    max_trees = int(check_scalar(max_trees, "max_trees", Interval("int", 0, None)))
    tl = 0.0 if time_limit is None else float(
        check_scalar(time_limit, "time_limit", Interval("real", 0, None, "neither")))
    for flag, fname in ((falling, "falling"), (prune, "prune"),
                        (ignore_trivial_extensions, "ignore_trivial_extensions")):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{fname} must be a bool, got {type(flag).__name__}")
    keep = w > 0
    xb = np.ascontiguousarray(x[keep], dtype=np.uint8)
    yk = yy[keep].astype(np.float64)
    wk = w[keep]
    xu, inverse = np.unique(xb, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    tot = np.bincount(inverse, weights=wk, minlength=xu.shape[0])
    pos = np.bincount(inverse, weights=wk * yk, minlength=xu.shape[0])
    integral = bool(np.all(wk == np.round(wk)) and wk.sum() < 2**52)
    return GraviTreeProblem(
        xu=np.ascontiguousarray(xu), pos=pos, tot=tot, total_weight=float(w.sum()),
        integral=integral, regularization=lam, depth=depth, branch=br, loss=LOSSES[loss],
        tau=tau, cost=cost, falling=bool(falling), bound_mode=BOUND_MODES[bound_mode],
        bound_value=bval, max_trees=max_trees, time_limit=tl, prune=bool(prune),
        ignore_trivial=bool(ignore_trivial_extensions), max_leaves=ml, memory_limit=mem,
        n_threads=n_threads)


# --- objective pieces shared by the reference and the result checks -------------------------


def leaf_loss(p: float, n: float, loss: int, tau: float, cost: float) -> float:
    """Loss of one leaf of positive mass ``p`` and total mass ``n > 0``."""
    r = p / n
    if loss == 0:
        return (n - p) if r >= tau else cost * p
    out = 0.0
    if p > 0:
        out -= p * math.log(r)
    if n - p > 0:
        out -= (n - p) * math.log1p(-r)
    return out


def objective(loss_sum: float, n_leaves: int, total_weight: float, lam: float) -> float:
    """``loss_sum / W + lambda * L``, evaluated exactly as the native search does."""
    return loss_sum / total_weight + lam * n_leaves


def theta_of(opt: float, mode: int, value: float) -> float:
    """The Rashomon bound ``theta`` from the optimal objective."""
    if mode == 0:
        return opt
    if mode == 1:
        return (1.0 + value) * opt
    if mode == 2:
        return opt + value
    return value


class GraviTreeResult:
    """Outcome of :func:`gravitree_fit`: the exact set size and lazily built trees.

    Attributes
    ----------
    optimal_objective : float
        ``R*``, the best objective (inf if no tree exists, e.g. all infeasible).
    theta : float
        The Rashomon bound used.
    n_trees : int
        Exact number of trees with ``R(T) <= theta`` (may exceed ``max_trees``).
    objectives : ndarray of shape (min(n_trees, max_trees),), float64
        Objectives in non-decreasing order.
    complete : bool
        False when the time limit or an interrupt stopped the search: the trees returned
        are valid members of the set but the set may be incomplete.
    stats : dict
        Search counters (``n_subproblems``, ``n_expansions``, ``n_pruned_bound``,
        ``n_pruned_falling``, ``time_optimal_s``, ``time_s``, ``memory_mb``) and
        ``stop_reason`` ("", "time_limit", "memory_limit" or "interrupt").
    """

    def __init__(
        self,
        *,
        optimal_objective: float,
        theta: float,
        n_trees: int,
        record_objectives: np.ndarray,
        record_counts: list[int],
        getter: Callable[[int], dict[str, Any]],
        complete: bool,
        stats: dict[str, Any],
        max_trees: int,
        n_features: int,
        count_without: Callable[[int], int] | None = None,
    ) -> None:
        self.optimal_objective = _real_or_inf(optimal_objective, "optimal_objective")
        self.theta = _real_or_inf(theta, "theta")
        self.n_trees = int(check_scalar(n_trees, "n_trees", Interval("int", 0, None)))
        if not isinstance(complete, (bool, np.bool_)):
            raise TypeError(f"complete must be a bool, got {type(complete).__name__}")
        self.complete = bool(complete)
        if not isinstance(stats, dict):
            raise TypeError(f"stats must be a dict, got {type(stats).__name__}")
        self.stats = dict(stats)
        self.max_trees = int(check_scalar(max_trees, "max_trees", Interval("int", 0, None)))
        self.n_features = int(check_scalar(n_features, "n_features", Interval("int", 0, None)))
        if not callable(getter):
            raise TypeError(f"getter must be callable, got {type(getter).__name__}")
        if count_without is not None and not callable(count_without):
            raise TypeError(f"count_without must be callable or None, got {type(count_without).__name__}")
        self._getter = getter
        self._count_without = count_without
        self._record_objectives = check_array(
            record_objectives, "record_objectives", dtypes=(np.float64,), ndim=1
        )
        if isinstance(record_counts, (str, bytes)) or not hasattr(record_counts, "__len__"):
            raise TypeError(
                f"record_counts must be a sequence of ints, got {type(record_counts).__name__}"
            )
        counts = np.asarray(record_counts)
        if counts.ndim != 1 or (counts.size and counts.dtype.kind not in "iu"):
            raise TypeError(f"record_counts must be a sequence of ints, got {record_counts!r:.80}")
        if counts.size and (counts < 0).any():
            raise ValueError("record_counts must be non-negative")
        self._record_counts = list(record_counts)
        self._objectives: np.ndarray | None = None

    @property
    def objectives(self) -> np.ndarray:
        """The first ``min(n_trees, max_trees)`` objectives, sorted (built on first use)."""
        if self._objectives is None:
            counts, left = [], self.max_trees
            for c in self._record_counts:  # never expand more than max_trees entries
                take = min(int(c), left)
                counts.append(take)
                left -= take
            objs = self._record_objectives[: len(counts)]
            self._objectives = np.repeat(objs, np.array(counts, dtype=np.int64))
        return self._objectives

    def __len__(self) -> int:
        return self.n_trees

    def feature_counts(self) -> list[int]:
        """Exact number of trees that test each feature, list of ``n_features`` ints.

        Computed from the record counts without building the trees (native backend).
        """
        if self._count_without is not None:
            return [self.n_trees - int(self._count_without(j)) for j in range(self.n_features)]
        counts = [0] * self.n_features
        for i in range(self.n_trees):
            f = self.tree(i)["feature"]
            for j in np.unique(f[f >= 0]):
                counts[int(j)] += 1
        return counts

    def tree(self, i: int) -> dict[str, Any]:
        """The ``i``-th tree (objective order) as flat pre-order arrays.

        Returns a dict with ``feature`` (int32, -1 at leaves), ``orient`` (int8, -1 at
        leaves), ``priority``/``second`` (int32 child node ids, -1 at leaves), ``risk``
        (float64 pooled risk of each node's support), ``objective`` and ``loss`` (floats).
        """
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"i must be an int tree index, got {type(i).__name__} {i!r}")
        if not 0 <= i < self.n_trees:
            raise _TreeIndexError(
                f"tree index i={i} out of range for a set of {self.n_trees} trees"
            )
        return self._getter(int(i))


class _TreeIndexError(IndexError, ValueError):
    """A tree index out of range (both an ``IndexError`` and a ``ValueError``)."""


def _real_or_inf(v: Any, name: str) -> float:
    """A real number or +-inf (not NaN, not a non-number), as a float."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number or inf, got {type(v).__name__} {v!r}")
    v = float(v)
    if math.isnan(v):
        raise ValueError(f"{name} must be a real number or inf, got nan")
    return v


def canonical_string(tree: dict[str, Any], node: int = 0, oriented: bool = False) -> str:
    """A string identifying a tree: ``(j:A|B)`` with ``A`` the ``x_j = 1`` subtree.

    With ``oriented=True`` the literal is kept: ``(j=o:P|S)`` with ``P`` the priority child.
    """
    f = int(tree["feature"][node])
    if f < 0:
        return "L"
    o = int(tree["orient"][node])
    p = canonical_string(tree, int(tree["priority"][node]), oriented)
    s = canonical_string(tree, int(tree["second"][node]), oriented)
    if oriented:
        return f"({f}={o}:{p}|{s})"
    return f"({f}:{p}|{s})" if o == 1 else f"({f}:{s}|{p})"


# --- reference: brute-force enumeration ---------------------------------------------------


def _ref_enumerate(prob: GraviTreeProblem) -> list[tuple[float, int, int, Any]]:
    """All trees (unoriented, ``x_j = 1`` child first) with loss, leaves, branching count."""
    m, p = prob.xu.shape
    cols = [prob.xu[:, j].astype(bool) for j in range(p)]
    memo: dict[tuple[bytes, int], list[tuple[float, int, int, Any]]] = {}

    def gen(mask: np.ndarray, d: int) -> list[tuple[float, int, int, Any]]:
        key = (mask.tobytes(), d)
        if key in memo:
            return memo[key]
        pp = float(prob.pos[mask].sum())
        nn = float(prob.tot[mask].sum())
        out: list[tuple[float, int, int, Any]] = [
            (leaf_loss(pp, nn, prob.loss, prob.tau, prob.cost), 1, 0, ("leaf", pp, nn))]
        if d > 0:
            for j in range(p):
                m1 = mask & cols[j]
                m0 = mask & ~cols[j]
                if not m1.any() or not m0.any():
                    continue
                for a in gen(m1, d - 1):
                    for b in gen(m0, d - 1):
                        if prob.ignore_trivial and a[1] == 1 and b[1] == 1 and (
                                (a[3][1] / a[3][2] >= prob.tau) == (b[3][1] / b[3][2] >= prob.tau)):
                            continue
                        nbr = a[2] + b[2] + (1 if a[1] > 1 and b[1] > 1 else 0)
                        out.append((a[0] + b[0], a[1] + b[1], nbr, (j, a[3], b[3])))
        memo[key] = out
        return out

    return gen(np.ones(m, dtype=bool), prob.depth)


def _ref_orientations(s: Any) -> set[tuple[float, float]]:
    """Achievable (top, bottom) leaf risks over all falling orientations of ``s``."""
    if s[0] == "leaf":
        r = s[1] / s[2]
        return {(r, r)}
    a, b = _ref_orientations(s[1]), _ref_orientations(s[2])
    out = set()
    for first, second in ((a, b), (b, a)):
        for t1, b1 in first:
            for t2, b2 in second:
                if b1 >= t2:
                    out.add((t1, b2))
    return out


def _ref_to_tree(prob: GraviTreeProblem, s: Any, lossv: float, nl: int) -> dict[str, Any]:
    feature: list[int] = []
    orient: list[int] = []
    prio: list[int] = []
    sec: list[int] = []
    risk: list[float] = []

    def pooled(t: Any) -> tuple[float, float]:
        if t[0] == "leaf":
            return t[1], t[2]
        a, b = pooled(t[1]), pooled(t[2])
        return a[0] + b[0], a[1] + b[1]

    def walk(t: Any) -> int:
        i = len(feature)
        pp, nn = pooled(t)
        feature.append(-1)
        orient.append(-1)
        prio.append(-1)
        sec.append(-1)
        risk.append(pp / nn)
        if t[0] != "leaf":
            a, b = pooled(t[1]), pooled(t[2])
            o = 1 if (not prob.falling or a[0] / a[1] >= b[0] / b[1]) else 0
            first, second = (t[1], t[2]) if o == 1 else (t[2], t[1])
            feature[i] = t[0]
            orient[i] = o
            prio[i] = walk(first)
            sec[i] = walk(second)
        return i

    walk(s)
    return {
        "feature": np.array(feature, dtype=np.int32), "orient": np.array(orient, dtype=np.int8),
        "priority": np.array(prio, dtype=np.int32), "second": np.array(sec, dtype=np.int32),
        "risk": np.array(risk, dtype=np.float64), "loss": lossv, "n_leaves": nl,
        "objective": objective(lossv, nl, prob.total_weight, prob.regularization),
    }


def gravitree_fit_reference(prob: GraviTreeProblem) -> GraviTreeResult:
    """Brute force: enumerate every tree, filter, sort. Tiny problems only.

    Feasible sizes: ``depth <= 3`` with ``p <= 5`` features (about ``1 + p (1 + p ...)^2``
    trees); the orientation check enumerates all orientations of each candidate tree.
    """
    start = time.perf_counter()
    trees = _ref_enumerate(prob)
    W, lam = prob.total_weight, prob.regularization
    rows = []
    for lossv, nl, nbr, s in trees:
        if prob.branch >= 0 and nbr > prob.branch:
            continue
        if prob.max_leaves >= 0 and nl > prob.max_leaves:
            continue
        rows.append((objective(lossv, nl, W, lam), lossv, nl, s))
    rows.sort(key=lambda r: r[0])
    feasible: list[tuple[float, float, int, Any]] = []
    opt = math.inf
    for row in rows:
        if prob.falling and not _ref_orientations(row[3]):
            continue
        if math.isinf(opt):
            opt = row[0]
            theta = theta_of(opt, prob.bound_mode, prob.bound_value)
        if row[0] > theta:
            break
        feasible.append(row)
    if math.isinf(opt):
        theta = math.inf if prob.bound_mode != 3 else prob.bound_value
    built = [_ref_to_tree(prob, s, lossv, nl) for _, lossv, nl, s in feasible]
    return GraviTreeResult(
        optimal_objective=opt, theta=theta, n_trees=len(built),
        record_objectives=np.array([b["objective"] for b in built]),
        record_counts=[1] * len(built), getter=lambda i: built[i], complete=True,
        stats={"n_subproblems": 0, "n_expansions": len(trees), "n_pruned_bound": 0,
               "n_pruned_falling": 0, "time_s": time.perf_counter() - start},
        max_trees=prob.max_trees, n_features=prob.xu.shape[1])


@_fit.register("reference")
def _fit_reference(prob: GraviTreeProblem, *, device: Any,
                   progress: bool = False) -> GraviTreeResult:
    return gravitree_fit_reference(prob)


@_fit.register("native")
def _fit_native(prob: GraviTreeProblem, *, device: Any,
                progress: bool = False) -> GraviTreeResult:
    from rml_fast._native import _C

    monitor = _ProgressMonitor() if progress else None
    try:
        s = _C.gravitree.fit(
            prob.xu, prob.pos, prob.tot, prob.total_weight, prob.integral,
            prob.regularization, prob.depth, prob.branch, prob.loss, prob.tau, prob.cost,
            prob.falling, prob.bound_mode, prob.bound_value, prob.time_limit, prob.prune,
            prob.ignore_trivial, prob.max_leaves, prob.memory_limit, prob.n_threads, monitor)
    finally:
        if monitor is not None:
            monitor.close()
    stats = dict(s.stats)
    stats["keyboard_interrupt"] = bool(s.keyboard_interrupt)
    return GraviTreeResult(
        optimal_objective=s.optimal_objective, theta=s.theta, n_trees=s.n_trees,
        record_objectives=s.record_objectives(), record_counts=s.record_counts(),
        getter=s.get, complete=s.complete, stats=stats, max_trees=prob.max_trees,
        n_features=prob.xu.shape[1], count_without=s.count_without)


class _ProgressMonitor:
    """Progress display (tqdm) fed by the native search's periodic callback.

    The bar appears only once a search has run for a moment (the first callback comes
    after about 0.1 s), so quick fits print nothing.
    """

    def __init__(self) -> None:
        self._bar: Any = None
        self._phase = -1
        self._last = 0

    def __call__(self, phase: int, n_subproblems: int) -> bool:
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(unit=" subproblems", leave=False)
        if phase != self._phase:
            self._phase = phase
            self._bar.set_description(
                "gravitree: optimal pass" if phase == 0 else "gravitree: Rashomon enumeration")
        self._bar.update(n_subproblems - self._last)
        self._last = n_subproblems
        return False

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def gravitree_fit(
    X: Any,
    y: Any,
    sample_weight: Any = None,
    *,
    regularization: float = 0.01,
    depth: int = 4,
    branch: int | None = None,
    loss: str = "misclassification",
    tau: float = 0.5,
    fn_cost: float | None = None,
    falling: bool = True,
    bound_mode: str = "multiplier",
    bound_value: float = 0.05,
    max_trees: int = 10**7,
    time_limit: float | None = None,
    prune: bool = True,
    ignore_trivial_extensions: bool = False,
    max_leaves: int | None = None,
    memory_limit: float | None = None,
    n_threads: int = 1,
    progress: bool = False,
    backend: str = "auto",
) -> GraviTreeResult:
    """Optimal objective and exact Rashomon set of falling (or unconstrained) sparse trees.

    Minimises ``R(T) = (1/W) sum_l loss_l + lambda L(T)`` (see the module docstring) and
    enumerates ``{T : R(T) <= theta}``; the set is counted exactly without building its
    trees, which are built on demand by :meth:`GraviTreeResult.tree`.

    Parameters
    ----------
    X : array-like of shape (n, p), 0/1 values
        Binary features.
    y : array-like of shape (n,), values in {0, 1}
        Labels; 1 is the positive ("high-risk") class.
    sample_weight : array-like of shape (n,), float64, optional
        Non-negative weights (default 1). Integer weights give exact objectives.
    regularization : float, default=0.01
        ``lambda``, the penalty per leaf.
    depth : int, default=4
        Maximum number of literals on a root-to-leaf path (root split = depth 1; TreeFARMS'
        ``depth_budget`` is ``depth + 1``).
    branch : int or None, default=None
        Maximum number of branching nodes (both children internal); 0 gives rule lists,
        None no limit. PROPOSED reading of the paper's branching budget.
    loss : {"misclassification", "logloss"}, default="misclassification"
    tau : float, default=0.5
        A leaf predicts 1 iff its risk ``>= tau``.
    fn_cost : float, optional
        False-negative cost ``C``: sets ``tau = 1 / (1 + C)`` and a predicted-0 leaf costs
        ``C P_l``.
    falling : bool, default=True
        Require falling trees; False solves the unconstrained (TreeFARMS) problem.
    bound_mode : {"multiplier", "adder", "bound", "optimal"}, default="multiplier"
        ``theta = (1 + v) R*``, ``R* + v``, ``v`` or ``R*`` with ``v = bound_value``.
    bound_value : float, default=0.05
    max_trees : int, default=10**7
        At most this many objectives are listed in ``objectives`` (the count stays exact).
    time_limit : float, optional
        Seconds; when reached the search stops and the result has ``complete=False``.
    prune : bool, default=True
        Use the lower bounds and orientation forcing; False gives the same set, slower.
    ignore_trivial_extensions : bool, default=False
        Leave out trees with a split into two leaves that predict the same label (TreeFARMS'
        ``rashomon_ignore_trivial_extensions``, whose default there is True).
    max_leaves : int or None, default=None
        Maximum number of leaves (the alternative reading of the paper's budget; PROPOSED).
    memory_limit : float, optional
        MiB of search state (memo entries, records, pairs); when exceeded the search stops
        like at the time limit (``complete=False``, ``stats["stop_reason"]``).
    n_threads : int, default=1
        OpenMP threads for the candidate splits of large subproblems (many distinct rows);
        the output is identical for every thread count.
    progress : bool, default=False
        Show a progress bar (native backend).
    backend : {"auto", "native", "reference"}, default="auto"
        "reference" is a brute-force enumeration for tiny problems (tests).

    Returns
    -------
    GraviTreeResult

    Raises
    ------
    TypeError, ValueError
        For invalid inputs, naming the argument.

    References
    ----------
    Xin et al., NeurIPS 2022, arXiv:2209.08040 (TreeFARMS); Wang & Rudin, AISTATS 2015,
    arXiv:1411.5899 (falling rule lists).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.kernels.gravitree import gravitree_fit
    >>> X = np.array([[1, 0], [1, 1], [0, 1], [0, 0]] * 5)
    >>> y = np.array([1, 1, 0, 0] * 5)
    >>> res = gravitree_fit(X, y, depth=2, regularization=0.05)
    >>> round(res.optimal_objective, 3), len(res)
    (0.1, 1)
    >>> res.tree(0)["feature"].tolist()
    [0, -1, -1]
    """
    prob = prepare_problem(
        X, y, sample_weight, regularization=regularization, depth=depth, branch=branch,
        loss=loss, tau=tau, fn_cost=fn_cost, falling=falling, bound_mode=bound_mode,
        bound_value=bound_value, max_trees=max_trees, time_limit=time_limit, prune=prune,
        ignore_trivial_extensions=ignore_trivial_extensions, max_leaves=max_leaves,
        memory_limit=memory_limit, n_threads=n_threads)
    if not isinstance(progress, (bool, np.bool_)):
        raise TypeError(f"progress must be a bool, got {type(progress).__name__}")
    return _fit(prob, device=NUMPY, backend=backend, progress=bool(progress))
