"""Rashomon-set grids over (regularization, depth budget) on any :func:`rml_fast.parallel.parallel_map`
backend (serial, a ``concurrent.futures`` executor, or Ray).

Each grid point ``(lambda, d)`` is an independent exact search: the Rashomon set
``{t : R(t) + lambda * leaves(t) <= theta}`` of :class:`~rml_fast.trees.falling.FallingRashomonSet`
with ``regularization=lambda`` and ``depth_budget=d``. The searches are deterministic, so every
backend returns the serial result exactly. (For a resumable serial sweep use
:func:`rml_fast.trees.falling.rashomon_sweep`, which returns the same records.)
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_scalar
from rml_fast.parallel import _check_backend, parallel_map
from rml_fast.trees.falling import FallingRashomonSet

__all__ = ["rashomon_grid"]


def _point(rd: tuple[float, int], X: Any, y: Any, sample_weight: Any,
           params: dict[str, Any]) -> dict[str, Any]:
    r, d = rd
    rs = FallingRashomonSet(regularization=r, depth_budget=d, **params).fit(X, y, sample_weight)
    return {
        "regularization": r, "depth_budget": d, "n_trees": rs.n_trees_,
        "optimal_objective": float(rs.optimal_objective_), "theta": float(rs.theta_),
        "complete": bool(rs.complete_), "objectives": np.array(rs.objectives_),
    }


def rashomon_grid(
    X: Any,
    y: Any,
    regularizations: Any,
    depth_budgets: Any,
    *,
    sample_weight: Any = None,
    backend: Any = "serial",
    progress: bool = False,
    **params: Any,
) -> list[dict[str, Any]]:
    """Fit a :class:`~rml_fast.trees.falling.FallingRashomonSet` at every grid point, in
    parallel.

    Parameters
    ----------
    X : array-like of shape (n, p), 0/1
    y : array-like of shape (n,), 0/1
    regularizations : sequence of float
        ``lambda`` values >= 0 (outer loop of the grid order).
    depth_budgets : sequence of int
        Depth budgets in [1, 64] (inner loop).
    sample_weight : array-like of shape (n,), optional
    backend : {"serial", "ray"} or concurrent.futures.Executor, default="serial"
        See :func:`rml_fast.parallel.parallel_map`; one task per grid point.
    progress : bool, default=False
        A tqdm bar over the finished grid points.
    **params
        Other :class:`~rml_fast.trees.falling.FallingRashomonSet` parameters
        (``rashomon_multiplier``, ``max_trees``, ...).

    Returns
    -------
    list of dict
        One per grid point in grid order: ``regularization``, ``depth_budget``, ``n_trees``
        (exact Python int), ``optimal_objective``, ``theta``, ``complete``, ``objectives``
        (sorted ndarray), as :func:`~rml_fast.trees.falling.rashomon_sweep`.

    Raises
    ------
    ValueError, TypeError
        On a bad grid, backend or parameter, before any search.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.trees.grid import rashomon_grid
    >>> rng = np.random.default_rng(0)
    >>> X = rng.integers(0, 2, size=(100, 4))
    >>> y = (rng.random(100) < 0.2 + 0.6 * X[:, 0]).astype(int)
    >>> out = rashomon_grid(X, y, [0.01, 0.05], [1, 2])
    >>> [(r["regularization"], r["depth_budget"]) for r in out]
    [(0.01, 1), (0.01, 2), (0.05, 1), (0.05, 2)]
    """
    _check_backend(backend)
    regs = [float(check_scalar(r, "regularizations", Interval("real", 0, None)))
            for r in np.atleast_1d(np.asarray(regularizations, dtype=object))]
    depths = [int(check_scalar(d, "depth_budgets", Interval("int", 1, 64)))
              for d in np.atleast_1d(np.asarray(depth_budgets, dtype=object))]
    if not regs or not depths:
        raise ValueError("regularizations and depth_budgets must be non-empty")
    for bad in ("regularization", "depth_budget", "progress"):
        if bad in params:
            raise TypeError(f"rashomon_grid sets {bad!r} itself; do not pass it in params")
    params = {**params, "progress": False}
    FallingRashomonSet(**params)  # unknown parameters raise TypeError here, before any fit
    grid = [(r, d) for r in regs for d in depths]
    fn = functools.partial(_point, X=X, y=y, sample_weight=sample_weight, params=params)
    return parallel_map(fn, grid, backend=backend, progress=progress, desc="Rashomon grid")
