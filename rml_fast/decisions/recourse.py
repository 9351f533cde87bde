"""ASR-ICL: zeroth-order adaptive-subspace recourse for any black-box predictor.

Algorithmic recourse asks, for an instance ``x`` that a model classifies as ``c``, for the
cheapest feasible change ``delta`` such that the model assigns ``x + delta`` to a desired class
``t``. ASR-ICL (arXiv 2605.31272) solves it with *queries only* -- it never needs gradients, so
it works for in-context-learning predictors (a transformer conditioned on a context table, an
LLM, TabPFN), for any scikit-learn model and for any callable -- by zeroth-order descent of

.. math::

    L(\\delta) = \\max\\bigl(0,\\ \\kappa - (\\log f_t(x+\\delta) - \\max_{k \\ne t}
    \\log f_k(x+\\delta))\\bigr) + \\lambda\\, \\mathrm{cost}(\\delta),
    \\qquad \\mathrm{cost}(\\delta) = \\sum_j |\\delta_j| / \\mathrm{MAD}_j,

restricted to an adaptive subspace ``J`` of ``s`` actionable coordinates: the gradient is
estimated from ``q`` probes ``g = (1/q) sum_r [(L(delta + mu u_r) - L(delta)) / mu] u_r`` with
``u_r`` supported on ``J``, ``J`` is re-chosen every ``refresh`` steps by the running size of
``|g_j|`` (with an exploration swap), and the search stops at the first valid point. A final
sparsification resets changed coordinates that are not needed.

Only the abstract and a summary of the paper were available to us; every detail below that is
not in them is marked PROPOSED in the parameter descriptions and can be switched off.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from rml_fast._sklearn_validation import validate_named
from rml_fast._validation import Interval, check_array, check_rng, check_scalar, validate_params
from rml_fast.decisions._recourse_search import (
    _Config,
    _Outcome,
    _Space,
    cost_of,
    is_valid,
    margins,
    search,
)

__all__ = ["AdaptiveSubspaceRecourse", "RecourseResult", "as_predict_proba", "asr_recourse",
           "validity_under"]

STATUSES = ("found", "already_valid", "budget_exhausted", "no_actionable_features",
            "failed_verification")


@dataclass(frozen=True)
class RecourseResult:
    """Counterfactuals of one :meth:`AdaptiveSubspaceRecourse.generate` call.

    Attributes
    ----------
    x_cf : ndarray of shape (m, d), float64
        The counterfactual of each instance; a row is NaN where no recourse was found (an
        invalid point is never returned).
    found : ndarray of shape (m,), bool
        Whether a valid counterfactual was found (``status`` is ``"found"`` or
        ``"already_valid"``).
    valid : ndarray of shape (m,), bool
        Whether the model's prediction at ``x_cf`` is a desired class -- read from the query
        of that very point during the search, or from the re-query with ``verify=True``
        (equal to ``found``).
    status : ndarray of shape (m,), object
        ``"found"``, ``"already_valid"`` (the model already predicts a desired class; ``x_cf``
        is ``x``), ``"budget_exhausted"`` (no valid point within ``max_queries``),
        ``"no_actionable_features"`` (every feature is immutable or pinned by its bounds) or
        ``"failed_verification"`` (``verify=True`` and the re-query disagreed).
    target : ndarray of shape (m,), int64
        The desired class (column of ``predict_proba``), or -1 for "any class but the
        current one".
    original_class : ndarray of shape (m,), int64
        The model's class (column index) at ``x``.
    cost : ndarray of shape (m,), float64
        ``sum_j |x_cf_j - x_j| / scale_j`` (l1/MAD) or its l2 version, per the ``cost``
        setting; NaN where not found.
    n_changed : ndarray of shape (m,), int64
        Number of features that changed (-1 where not found).
    n_queries : ndarray of shape (m,), int64
        Model evaluations (rows passed to the model) spent on each instance, the first query
        of ``x`` included; never above ``max_queries``.
    n_calls : int
        Number of calls to the model (rows of all instances are batched into one call per
        round).

    Examples
    --------
    >>> import numpy as np
    >>> f = lambda X: (X[:, 0] > 1).astype(int)
    >>> res = asr_recourse(f, np.array([[0.0, 0.0], [2.0, 0.0]]), target=1, n_classes=2,
    ...                    X_ref=np.eye(2), random_state=0, progress=False)
    >>> res.status.tolist(), res.validity, bool(res.x_cf[0, 0] > 1)
    (['found', 'already_valid'], 1.0, True)
    """

    x_cf: np.ndarray
    found: np.ndarray
    valid: np.ndarray
    status: np.ndarray
    target: np.ndarray
    original_class: np.ndarray
    cost: np.ndarray
    n_changed: np.ndarray
    n_queries: np.ndarray
    n_calls: int

    def __post_init__(self) -> None:
        # NaN marks "no recourse" -- exactly the rows not found, never a found one (a NaN
        # counterfactual reported as found would be an invalid point returned silently)
        x_cf = check_array(self.x_cf, "x_cf", ndim=2, finite=False)
        cost = check_array(self.cost, "cost", ndim=1, finite=False)
        found = np.asarray(self.found)
        m = x_cf.shape[0]
        if found.dtype != bool or found.shape != (m,):
            raise ValueError(f"found must be a bool array of shape ({m},) (one per row of x_cf), "
                             f"got {found.dtype} {found.shape}")
        if cost.shape != (m,):
            raise ValueError(f"cost must have shape ({m},) (one per row of x_cf), got {cost.shape}")
        fin = np.isfinite(x_cf)
        if not (fin[found].all() and np.isnan(x_cf[~found]).all()):
            raise ValueError("x_cf must be finite in the rows found and NaN in the others, got a "
                             "non-finite value in a found row or a number in a row not found")
        if not (np.isfinite(cost[found]).all() and np.isnan(cost[~found]).all()):
            raise ValueError("cost must be finite where found and NaN elsewhere, got a "
                             "non-finite cost where found or a number where not found")
        object.__setattr__(self, "x_cf", x_cf)
        object.__setattr__(self, "cost", cost)

    @property
    def validity(self) -> float:
        """Fraction of instances with a valid counterfactual (NaN for no instances).

        Examples
        --------
        >>> import numpy as np
        >>> res = asr_recourse(lambda X: (X[:, 0] > 1).astype(int), np.zeros((3, 1)), 1,
        ...                    n_classes=2, X_ref=np.eye(2)[:, :1], progress=False)
        >>> res.validity
        1.0
        """
        return float(self.valid.mean()) if self.valid.size else float("nan")


# --------------------------------------------------------------------------- model adapters


def as_predict_proba(predictor: Any, n_classes: int | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """Wrap a predictor as ``X (m, d) -> probabilities (m, K)`` for the search.

    Parameters
    ----------
    predictor : object or callable
        An object with ``predict_proba`` (a scikit-learn classifier, an ICL predictor of
        :mod:`rml_fast.decisions.icl_predictor`), an object with only ``predict`` (its labels
        become one-hot rows over ``classes_``), or a callable ``X -> y``. A callable may return
        probabilities (m, K), the probability of class 1 (m,) with values in [0, 1], or
        integer labels (m,) in ``0..n_classes-1`` (one-hot rows).
    n_classes : int or None, default=None
        K for a predictor that returns labels; inferred from ``classes_`` when present.

    Returns
    -------
    callable
        ``f(X) -> P`` with ``P`` float64 of shape (m, K). It raises ``ValueError`` when the
        predictor returns something else (wrong length, negative values, labels out of range).

    Examples
    --------
    >>> import numpy as np
    >>> f = as_predict_proba(lambda X: (X[:, 0] > 0).astype(int), n_classes=2)
    >>> f(np.array([[1.0], [-1.0]]))
    array([[0., 1.],
           [1., 0.]])
    """
    if n_classes is not None:
        n_classes = check_scalar(n_classes, "n_classes", Interval("int", 2, None))
    classes = getattr(predictor, "classes_", None)
    if n_classes is None and classes is not None:
        n_classes = len(classes)
    if hasattr(predictor, "predict_proba"):
        fn = predictor.predict_proba
        label_map = None
    elif hasattr(predictor, "predict"):
        fn = predictor.predict
        label_map = None if classes is None else {c: i for i, c in enumerate(np.asarray(classes))}
    elif callable(predictor):
        fn, label_map = predictor, None
    else:
        raise TypeError(
            "predictor must be callable or have predict_proba/predict, got "
            f"{type(predictor).__name__}"
        )

    def f(X: np.ndarray) -> np.ndarray:
        out = np.asarray(fn(X))
        m = X.shape[0]
        if out.ndim == 2 and out.shape[0] == m:
            p = out.astype(np.float64, copy=False)
            if not np.isfinite(p).all() or (p < 0).any():
                raise ValueError("predictor returned probabilities that are negative or not finite")
            return p
        if out.ndim != 1 or out.shape[0] != m:
            raise ValueError(
                f"predictor must return (m,) labels/probabilities or (m, K) probabilities for "
                f"m={m} rows, got shape {out.shape}"
            )
        if label_map is not None:
            idx = np.array([label_map[v] for v in out.tolist()], dtype=np.int64)
            k = len(label_map)
        elif out.dtype.kind in "biu" or (np.all(out == np.round(out)) and out.max(initial=0) > 1):
            idx = out.astype(np.int64)
            k = n_classes if n_classes is not None else max(2, int(idx.max(initial=0)) + 1)
            if (idx < 0).any() or (idx >= k).any():
                raise ValueError(f"predictor returned labels outside 0..{k - 1} (n_classes={k})")
        else:
            p1 = out.astype(np.float64)
            if not np.isfinite(p1).all() or (p1 < 0).any() or (p1 > 1).any():
                raise ValueError("a 1-D float output must be P(class 1) in [0, 1]")
            return np.column_stack([1.0 - p1, p1])
        P = np.zeros((m, k))
        P[np.arange(m), idx] = 1.0
        return P

    return f


class _Counter:
    """Counts the rows and calls that go to the model."""

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        self.fn, self.rows, self.calls = fn, 0, 0

    def __call__(self, X: np.ndarray) -> np.ndarray:
        self.rows += X.shape[0]
        self.calls += 1
        return self.fn(X)


# --------------------------------------------------------------------------- the estimator

_PARAMS = {
    "subspace_dim": Interval("int", 1, None),
    "n_directions": Interval("int", 1, None),
    "mu": Interval("real", 0, None, "neither"),
    "mu_max": Interval("real", 0, None, "neither"),
    "init_step": Interval("real", 0, None, "neither"),
    "lr": Interval("real", 0, None, "neither"),
    "lr_decay": Interval("real", 0, 1, "right"),
    "lam": Interval("real", 0, None, "left"),
    "margin": Interval("real", 0, None, "left"),
    "min_margin": Interval("real", 0, None, "left"),
    "max_queries": Interval("int", 1, None),
    "refresh": Interval("int", 1, None),
    "explore": Interval("real", 0, 1),
    "shrink_steps": Interval("int", 0, None),
}
_CHOICES = {
    "init": ("auto", "coordinate", "random"),
    "directions": ("orthogonal", "gaussian"),
    "step_rule": ("adaptive", "decay"),
    "sparsification": ("rescale", "reset", "off"),
    "cost": ("l1", "l2"),
}


class AdaptiveSubspaceRecourse(BaseEstimator):
    """Zeroth-order adaptive-subspace recourse (ASR-ICL) for a black-box predictor.

    Minimises ``L(delta) = max(0, kappa - (log f_t(x+delta) - max_{k!=t} log f_k(x+delta)))
    + lam * cost(delta)`` by zeroth-order descent in an adaptive subspace of ``subspace_dim``
    actionable features, under the constraints ``delta_j = 0`` (immutable), ``delta_j >= 0`` /
    ``<= 0`` (monotone), ``lo <= x + delta <= hi`` (bounds) and integer rounding; stops at the
    first valid point (the model predicts the target), then sparsifies (paper, Sec. "ASR").

    Parameters
    ----------
    predictor : object or callable, default=None
        The black box (see :func:`as_predict_proba`): a scikit-learn classifier, an ICL
        predictor, or a callable ``X (m, d) -> labels (m,) or probabilities (m, K)``. Needed by
        :meth:`generate`, not by :meth:`fit`.
    immutable : sequence of int, default=()
        Features that may not change.
    monotone : dict {int: "increase" | "decrease"} or None, default=None
        Features that may only go up / down.
    bounds : array-like of shape (2, d) or dict {int: (lo, hi)} or None, default=None
        Allowed range of each feature of the counterfactual (NaN/None: unbounded).
    integer : sequence of int, default=()
        Features rounded to integers after every move.
    n_classes : int or None, default=None
        Number of classes when the predictor returns labels and has no ``classes_``.
    subspace_dim : int, default=3
        ``s``, the number of coordinates moved at a time.
    n_directions : int, default=4
        ``q``, probes per gradient estimate (queries per step: ``q + 1``).
    mu : float, default=0.1
        Probe radius in MAD units (the spec's 0.05 works too; 0.1 saves queries on trees).
    mu_max : float, default=4.0
        PROPOSED: largest radius of the adaptive widening (see ``adaptive_mu``).
    init_step : float, default=0.2
        PROPOSED: the step ``h`` (MAD units) of the one-sided coordinate differences.
    lr : float, default=0.3
        Initial step size (MAD units; the spec's 0.1 with ``step_rule="decay"``).
    lr_decay : float, default=0.99
        Per-step decay of ``lr`` under ``step_rule="decay"``.
    lam : float, default=0.1
        ``lambda``, weight of the cost in ``L``.
    margin : float, default=0.1
        ``kappa``, the log-probability margin the hinge asks for (beyond ``min_margin``).
    min_margin : float, default=0.0
        PROPOSED robust recourse: a point counts as valid only when
        ``log f_t - max_{k!=t} log f_k >= min_margin`` (0: the predicted class is a desired
        one); the hinge then asks for ``min_margin + margin``. A positive value keeps the
        final shrink/polish steps away from the decision boundary, so that the recourse
        survives re-sampled contexts (see :func:`validity_under`).
    max_queries : int, default=200
        Query budget per instance (rows sent to the model, the query of ``x`` included).
    refresh : int, default=5
        ``T``: re-choose the subspace every ``T`` steps.
    explore : float, default=0.2
        Probability of swapping the weakest subspace coordinate for an unexplored one.
    init : {"auto", "coordinate", "random"}, default="auto"
        Initial subspace: by one-sided coordinate differences (one query per actionable
        feature), at random, or coordinate differences when the budget allows.
    directions : {"orthogonal", "gaussian"}, default="orthogonal"
        PROPOSED: probes from random orthonormal bases scaled by ``sqrt(s)`` (exact gradient
        of a linear loss when ``q >= s``) or i.i.d. Gaussian (the paper's form).
    step_rule : {"adaptive", "decay"}, default="adaptive"
        PROPOSED "adaptive": normalised step ``lr sqrt(s) g/||g||``, ``lr`` x1.5 after a loss
        decrease, x0.5 (and the step rejected) otherwise; "decay": ``delta -= lr g`` with
        ``lr *= lr_decay`` (the spec's rule).
    adaptive_mu : bool, default=True
        PROPOSED: double ``mu`` (up to ``mu_max``) when every probe leaves the hinge unchanged
        (saturated probabilities, trees, label-only predictors) or when a round makes no
        progress.
    probe_fallback : bool, default=True
        PROPOSED: when the gradient step does not lower ``L`` but the best probe does, move
        to that probe (already queried, so free); when neither does, widen ``mu`` (if
        ``adaptive_mu``).
    grow_subspace : bool, default=True
        PROPOSED: when a round makes no progress with ``mu`` already at ``mu_max``, add a
        random actionable coordinate to the subspace (plateaus of trees need more freedom).
    accept_probes : bool, default=True
        PROPOSED: stop as soon as any queried probe is valid (it is a queried point, so it is
        a valid recourse), not only the step's point.
    sparsification : {"rescale", "reset", "off"}, default="rescale"
        Final sparsification over changed coordinates in increasing ``|delta_j| / MAD_j``:
        "reset" sets one to 0 if the point stays valid (1 query, the paper's rule);
        "rescale" (PROPOSED) otherwise also tries the remaining move scaled up to the
        current cost (bisection) and keeps it if cheaper.
    polish : bool, default=True
        PROPOSED: after sparsifying, one boundary projection: forward differences of the
        margin at the best point (one query per coordinate of the subspace and the changed
        ones), then the cheapest point of the linearised decision boundary (l2: along the
        gradient; l1: the single coordinate of largest gradient), queried at 1.001, 1.02 and
        1.1 times until valid and kept if cheaper (exact for a linear margin).
    shrink_steps : int, default=6
        PROPOSED: bisection steps on the scale of the final move toward ``x`` (0 disables).
    cost : {"l1", "l2"}, default="l1"
        ``sum_j |delta_j| / MAD_j`` or ``||delta / MAD||_2``.
    verify : bool, default=False
        Re-query every returned point in one more batched call (one query per found
        instance, reserved inside ``max_queries``); a point the model no longer puts in the
        target class (a stochastic predictor, e.g. an LLM sampled at temperature > 0) becomes
        NaN with status ``"failed_verification"``.
    random_state : int, numpy.random.Generator or None, default=None
        Seed of the probe directions and the exploration.
    progress : bool, default=True
        Show a tqdm bar over the search rounds.

    Attributes
    ----------
    scale_ : ndarray of shape (d,)
        MAD of each feature of the reference data (``1.4826 * median|x - median|``; the
        standard deviation where the MAD is 0, and 1 where both are 0).
    lower_, upper_ : ndarray of shape (d,)
        The bounds (``-inf``/``inf`` where unbounded).
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 3)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> clf = LogisticRegression().fit(X, y)
    >>> asr = AdaptiveSubspaceRecourse(clf, immutable=[2], random_state=0, progress=False)
    >>> res = asr.fit(X).generate(X[y == 0][:5], target=1)
    >>> bool(res.valid.all()), bool((res.x_cf[:, 2] == X[y == 0][:5, 2]).all())
    (True, True)
    >>> bool((clf.predict(res.x_cf) == 1).all()), bool((res.n_queries <= 200).all())
    (True, True)
    """

    def __init__(self, predictor: Any = None, *, immutable: Sequence[int] = (),
                 monotone: dict[int, str] | None = None, bounds: Any = None,
                 integer: Sequence[int] = (), n_classes: int | None = None,
                 subspace_dim: int = 3, n_directions: int = 4, mu: float = 0.1,
                 mu_max: float = 4.0, init_step: float = 0.2, lr: float = 0.3,
                 lr_decay: float = 0.99,
                 lam: float = 0.1, margin: float = 0.1, min_margin: float = 0.0,
                 max_queries: int = 200,
                 refresh: int = 5, explore: float = 0.2, init: str = "auto",
                 directions: str = "orthogonal", step_rule: str = "adaptive",
                 adaptive_mu: bool = True, probe_fallback: bool = True,
                 grow_subspace: bool = True, accept_probes: bool = True,
                 sparsification: str = "rescale", polish: bool = True, shrink_steps: int = 6, cost: str = "l1",
                 verify: bool = False, random_state: Any = None,
                 progress: bool = True) -> None:
        self.predictor = predictor
        self.immutable = immutable
        self.monotone = monotone
        self.bounds = bounds
        self.integer = integer
        self.n_classes = n_classes
        self.subspace_dim = subspace_dim
        self.n_directions = n_directions
        self.mu = mu
        self.mu_max = mu_max
        self.init_step = init_step
        self.lr = lr
        self.lr_decay = lr_decay
        self.lam = lam
        self.margin = margin
        self.min_margin = min_margin
        self.max_queries = max_queries
        self.refresh = refresh
        self.explore = explore
        self.init = init
        self.directions = directions
        self.step_rule = step_rule
        self.adaptive_mu = adaptive_mu
        self.probe_fallback = probe_fallback
        self.grow_subspace = grow_subspace
        self.accept_probes = accept_probes
        self.sparsification = sparsification
        self.polish = polish
        self.shrink_steps = shrink_steps
        self.cost = cost
        self.verify = verify
        self.random_state = random_state
        self.progress = progress

    # ------------------------------------------------------------------ fit

    def _config(self) -> _Config:
        vals = validate_params({k: getattr(self, k) for k in _PARAMS}, _PARAMS)
        if self.n_classes is not None:
            check_scalar(self.n_classes, "n_classes", Interval("int", 2, None))
        for name, options in _CHOICES.items():
            if getattr(self, name) not in options:
                raise ValueError(f"{name} must be one of {options}, got {getattr(self, name)!r}")
        for name in ("adaptive_mu", "probe_fallback", "grow_subspace", "accept_probes",
                     "polish", "verify", "progress"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if vals.pop("max_queries") < 2 and self.verify:
            raise ValueError("max_queries must be >= 2 with verify=True (one query is reserved "
                             f"for the re-query), got {self.max_queries}")
        vals["margin"] = vals["margin"] + vals["min_margin"]  # the hinge's target
        return _Config(init=self.init, directions=self.directions, step_rule=self.step_rule,
                       adaptive_mu=bool(self.adaptive_mu),
                       probe_fallback=bool(self.probe_fallback),
                       grow_subspace=bool(self.grow_subspace), polish=bool(self.polish),
                       accept_probes=bool(self.accept_probes),
                       sparsify=self.sparsification, cost=self.cost, **vals)

    def _indices(self, value: Any, name: str, d: int) -> np.ndarray:
        idx = []
        for v in value if value is not None else ():
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
                raise TypeError(f"{name} must hold feature indices (ints), got {v!r}")
            if not -d <= int(v) < d:
                raise ValueError(f"{name} holds feature index {v}, but X has {d} features")
            idx.append(int(v) % d)
        return np.array(sorted(set(idx)), dtype=np.int64)

    def fit(self, X: Any, y: Any = None) -> AdaptiveSubspaceRecourse:
        """Learn the cost scales (MAD) and check the constraints against reference data.

        Parameters
        ----------
        X : array-like of shape (n, d)
            Reference data (e.g. the training set); only its per-feature MAD is used.
        y : None
            Ignored.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            A constraint names a feature outside ``0..d-1``, a feature is both immutable and
            monotone, a monotone direction is not "increase"/"decrease", or a bound has
            ``lo > hi``.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
        >>> AdaptiveSubspaceRecourse().fit(X).scale_
        array([1.4826, 1.    ])
        """
        return self._fit(X, "X")

    def _fit(self, X: Any, x_name: str) -> AdaptiveSubspaceRecourse:
        self._config()
        X = validate_named(self, X, x_name=x_name, dtype=[np.float64, np.float32], reset=True)
        X = np.asarray(X, dtype=np.float64)
        d = X.shape[1]
        med = np.median(X, axis=0)
        mad = 1.4826 * np.median(np.abs(X - med), axis=0)
        std = X.std(axis=0)
        self.scale_ = np.where(mad > 0, mad, np.where(std > 0, std, 1.0))
        self.immutable_ = self._indices(self.immutable, "immutable", d)
        self.integer_ = self._indices(self.integer, "integer", d)
        mono = np.zeros(d, dtype=np.int64)
        if self.monotone is not None:
            if not isinstance(self.monotone, dict):
                raise TypeError("monotone must be a dict {feature: 'increase'|'decrease'} or None")
            for k, v in self.monotone.items():
                (j,) = self._indices([k], "monotone", d)
                if v not in ("increase", "decrease"):
                    raise ValueError(f"monotone[{k}] must be 'increase' or 'decrease', got {v!r}")
                if j in self.immutable_:
                    raise ValueError(f"feature {j} is both immutable and monotone")
                mono[j] = 1 if v == "increase" else -1
        self.monotone_ = mono
        lo, hi = np.full(d, -np.inf), np.full(d, np.inf)
        if isinstance(self.bounds, dict):
            for k, (a, b) in self.bounds.items():
                (j,) = self._indices([k], "bounds", d)
                lo[j] = -np.inf if a is None else float(a)
                hi[j] = np.inf if b is None else float(b)
        elif self.bounds is not None:
            B = check_array(self.bounds, "bounds", ndim=2, finite=False)
            if B.shape != (2, d):
                raise ValueError(f"bounds must have shape (2, {d}) (lo row, hi row), got {B.shape}")
            lo = np.where(np.isnan(B[0]), -np.inf, B[0]).astype(np.float64)
            hi = np.where(np.isnan(B[1]), np.inf, B[1]).astype(np.float64)
        bad = np.flatnonzero(lo > hi)
        if bad.size:
            raise ValueError(f"bounds: lower > upper for features {bad.tolist()}")
        self.lower_, self.upper_ = lo, hi
        return self

    # ------------------------------------------------------------------ generate

    def _space(self, x: np.ndarray, row: int) -> _Space:
        d = x.size
        lo, hi = self.lower_, self.upper_
        imm = self.immutable_
        out = np.flatnonzero((x[imm] < lo[imm]) | (x[imm] > hi[imm]))
        if out.size:
            raise ValueError(
                f"X[{row}]: immutable feature {int(imm[out[0]])} = {x[imm[out[0]]]} lies "
                "outside its bounds, so it would have to change; no recourse can exist"
            )
        mono = self.monotone_
        stuck = np.flatnonzero(((mono == 1) & (x > hi)) | ((mono == -1) & (x < lo)))
        if stuck.size:
            raise ValueError(
                f"X[{row}]: monotone feature {int(stuck[0])} = {x[stuck[0]]} can only move away "
                "from its bounds; no recourse can exist"
            )
        zlo = (lo - x) / self.scale_
        zhi = (hi - x) / self.scale_
        zlo = np.where(mono == 1, np.maximum(zlo, 0.0), zlo)
        zhi = np.where(mono == -1, np.minimum(zhi, 0.0), zhi)
        zlo[imm], zhi[imm] = 0.0, 0.0
        # x itself may lie outside the box for a mutable feature: the move must reach the box
        zlo = np.minimum(zlo, zhi)
        integer = np.zeros(d, dtype=bool)
        integer[self.integer_] = True
        actionable = np.flatnonzero(zhi > zlo)
        return _Space(x=x, scale=self.scale_, zlo=zlo, zhi=zhi, integer=integer,
                      actionable=actionable)

    def generate(self, X: Any, target: Any = None) -> RecourseResult:
        """Search a counterfactual for every row of ``X``.

        Parameters
        ----------
        X : array-like of shape (m, d)
            Instances (float32 or float64; not modified).
        target : int, array-like of shape (m,) or None, default=None
            The desired class of each instance: a label of the predictor's ``classes_`` when
            it has one, else a column index of its probabilities. None asks for any class but
            the current one (for two classes: the other class).

        Returns
        -------
        RecourseResult
            ``x_cf`` (m, d) with NaN rows where nothing was found, ``valid``, ``status``,
            ``cost``, ``n_changed``, ``n_queries`` (m,) and ``n_calls``.

        Raises
        ------
        ValueError
            ``X`` has the wrong width or is not finite; a target is not a class of the model;
            an immutable (or monotone) feature lies outside its bounds so it would have to
            change; the predictor's output has the wrong shape.
        TypeError
            ``predictor`` is None or not callable.

        Examples
        --------
        >>> import numpy as np
        >>> f = lambda X: (X.sum(axis=1) > 3).astype(int)          # label-only black box
        >>> asr = AdaptiveSubspaceRecourse(f, n_classes=2, random_state=0, progress=False)
        >>> res = asr.fit(np.eye(3)).generate(np.zeros((2, 3)), target=1)
        >>> res.status.tolist(), bool((f(res.x_cf) == 1).all())
        (['found', 'found'], True)
        """
        check_is_fitted(self, "scale_")
        cfg = self._config()
        if self.predictor is None:
            raise TypeError("predictor is None: pass the model to AdaptiveSubspaceRecourse(...)")
        X = check_array(X, "X", ndim=2)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X must have {self.n_features_in_} features (as in fit), got "
                             f"{X.shape[1]}")
        X = np.array(X, dtype=np.float64)  # a copy: the caller's array is never touched
        m, d = X.shape
        spaces = [self._space(X[i], i) for i in range(m)]  # raises before any query
        rng = check_rng(self.random_state, "random_state")
        f = _Counter(as_predict_proba(self.predictor, self.n_classes))
        P0 = f(X) if m else np.zeros((0, 2))
        K = P0.shape[1]
        tgt = self._targets(target, m, K)
        cls0 = np.argmax(P0, axis=1)
        desired = np.zeros((m, K), dtype=bool)
        for i in range(m):
            if tgt[i] >= 0:
                desired[i, tgt[i]] = True
            else:
                desired[i] = True
                desired[i, cls0[i]] = False
        outs = [_Outcome(n_queries=1) for _ in range(m)]
        gens: dict[int, Any] = {}
        pending: dict[int, np.ndarray] = {}
        for i in range(m):
            if is_valid(P0[i : i + 1], desired[i])[0] and (
                    margins(P0[i : i + 1], desired[i])[0] >= cfg.min_margin):
                outs[i].status, outs[i].z_best, outs[i].cost_best = "already_valid", np.zeros(d), 0.0
                continue
            if spaces[i].actionable.size == 0:
                outs[i].status = "no_actionable_features"
                continue
            g = search(spaces[i], desired[i], self.max_queries - int(self.verify), cfg, rng,
                       outs[i], P0[i])
            first = next(g, None)
            if first is not None:
                gens[i], pending[i] = g, first
        bar = None
        if self.progress and gens:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(gens), desc="ASR recourse", leave=False)
        while pending:
            ids = list(pending)
            block = np.concatenate([pending[i] for i in ids])
            P = f(block)
            if P.shape[1] != K:
                raise ValueError(f"predictor returned {P.shape[1]} classes, earlier {K}")
            pos = 0
            for i in ids:
                k = pending[i].shape[0]
                try:
                    pending[i] = gens[i].send(P[pos : pos + k])
                except StopIteration:
                    del pending[i]
                    if bar is not None:
                        bar.update(1)
                pos += k
        if bar is not None:
            bar.close()
        return self._result(X, spaces, outs, tgt, cls0, desired, f)

    def _targets(self, target: Any, m: int, K: int) -> np.ndarray:
        if target is None:
            return np.full(m, -1, dtype=np.int64)
        t = np.asarray(target)
        if t.ndim == 0:
            t = np.full(m, t.item(), dtype=t.dtype if t.dtype.kind != "U" else object)
        if t.shape != (m,):
            raise ValueError(f"target must be a scalar or have shape ({m},), got {t.shape}")
        classes = getattr(self.predictor, "classes_", None)
        if classes is not None:
            lookup = {c: i for i, c in enumerate(np.asarray(classes).tolist())}
            bad = [v for v in t.tolist() if v not in lookup]
            if bad:
                raise ValueError(f"target {bad[0]!r} is not a class of the predictor "
                                 f"(classes_={list(lookup)})")
            return np.array([lookup[v] for v in t.tolist()], dtype=np.int64)
        if t.dtype.kind not in "iu" and not (t.dtype.kind == "f" and np.all(t == np.round(t))):
            raise TypeError(f"target must hold class indices (ints), got dtype {t.dtype}")
        t = t.astype(np.int64)
        if (t < 0).any() or (t >= K).any():
            raise ValueError(f"target must be a class index in 0..{K - 1} (the model has {K} "
                             f"classes), got {t[(t < 0) | (t >= K)][0]}")
        return t

    def _result(self, X, spaces, outs, tgt, cls0, desired, f) -> RecourseResult:
        m, d = X.shape
        x_cf = np.full((m, d), np.nan)
        cost = np.full(m, np.nan)
        n_changed = np.full(m, -1, dtype=np.int64)
        for i, o in enumerate(outs):
            if o.z_best is not None:
                x_cf[i] = spaces[i].point(o.z_best)
                cost[i] = float(cost_of(o.z_best, self.cost))
                n_changed[i] = int(np.count_nonzero(x_cf[i] != X[i]))
        status = np.array([o.status for o in outs], dtype=object)
        found = np.isin(status, ("found", "already_valid"))
        n_queries = np.array([o.n_queries for o in outs], dtype=np.int64)
        if self.verify and found.any():  # one more batched call re-queries every point
            rows = np.flatnonzero(found)
            ok = desired[rows, np.argmax(f(x_cf[rows]), axis=1)]
            n_queries[rows] += 1
            bad = rows[~ok]
            status[bad] = "failed_verification"
            found[bad] = False
            x_cf[bad], cost[bad], n_changed[bad] = np.nan, np.nan, -1
        if n_queries.sum() != f.rows:  # internal bookkeeping must match the model's calls
            raise RuntimeError(f"query count mismatch: {n_queries.sum()} vs {f.rows}")
        return RecourseResult(x_cf=x_cf, found=found, valid=found.copy(), status=status,
                              target=tgt, original_class=cls0, cost=cost, n_changed=n_changed,
                              n_queries=n_queries, n_calls=f.calls)


def asr_recourse(predictor: Any, X: Any, target: Any = None, *, X_ref: Any = None,
                 **params: Any) -> RecourseResult:
    """One-call ASR recourse: ``AdaptiveSubspaceRecourse(predictor, **params).fit(X_ref).generate(X, target)``.

    Parameters
    ----------
    predictor : object or callable
        The black box (see :func:`as_predict_proba`).
    X : array-like of shape (m, d)
        Instances.
    target : int, array-like of shape (m,) or None, default=None
        Desired class(es); None: any class but the current one.
    X_ref : array-like of shape (n, d) or None, default=None
        Reference data for the MAD scales (default: ``X``).
    **params
        Constructor parameters of :class:`AdaptiveSubspaceRecourse`.

    Returns
    -------
    RecourseResult

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = LogisticRegression(max_iter=500).fit(X, y)
    >>> res = asr_recourse(clf, X[:3], target=2, X_ref=X, random_state=0, progress=False)
    >>> clf.predict(res.x_cf).tolist(), res.status.tolist()
    ([2, 2, 2], ['found', 'found', 'found'])
    """
    est = AdaptiveSubspaceRecourse(predictor, **params)
    if X_ref is None:
        return est.fit(X).generate(X, target)
    return est._fit(X_ref, "X_ref").generate(X, target)


def validity_under(predictors: Sequence[Any], result: RecourseResult, *,
                   n_classes: int | None = None) -> np.ndarray:
    """Validity of the same counterfactuals under other predictors (e.g. re-sampled contexts).

    The paper's robustness measure for ICL recourse: a counterfactual found for ``f_C`` is
    re-queried under ``f_C'`` for new contexts ``C'`` (one predictor per context), counting
    it valid when the class of ``f_C'`` is a desired one (``result.target``, or any class but
    ``result.original_class`` when the target was None).

    Parameters
    ----------
    predictors : sequence of predictors
        Each read by :func:`as_predict_proba` (same class columns as the original).
    result : RecourseResult
        From :meth:`AdaptiveSubspaceRecourse.generate`.
    n_classes : int or None, default=None
        For label-only predictors.

    Returns
    -------
    ndarray of shape (len(predictors), m), bool
        False where ``result`` found nothing.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.decisions.icl_predictor import AttentionICL
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((300, 2)); y = (X[:, 0] > 0).astype(int)
    >>> iccls = [AttentionICL(X[i::3], y[i::3], temperature=0.5) for i in range(3)]
    >>> res = asr_recourse(iccls[0], X[y == 0][:5], target=1, X_ref=X, random_state=0,
    ...                    progress=False)
    >>> validity_under(iccls, res).shape
    (3, 5)
    """
    if not isinstance(result, RecourseResult):
        raise TypeError(f"result must be a RecourseResult, got {type(result).__name__}")
    ok = result.found
    out = np.zeros((len(predictors), ok.size), dtype=bool)
    if not ok.any():
        return out
    rows = np.flatnonzero(ok)
    for k, pred in enumerate(predictors):
        P = as_predict_proba(pred, n_classes)(result.x_cf[rows])
        cls = np.argmax(P, axis=1)
        t = result.target[rows]
        out[k, rows] = np.where(t >= 0, cls == t, cls != result.original_class[rows])
    return out
