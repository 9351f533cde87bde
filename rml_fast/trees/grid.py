"""Rashomon-set grids over (regularization, depth budget) on any :func:`rml_fast.parallel.parallel_map`
backend (serial, a ``concurrent.futures`` executor, or Ray).

:func:`rashomon_grid` is an alias of :func:`rml_fast.trees.falling.rashomon_sweep` (one
implementation: ``backend=`` and ``checkpoint=`` work in both); it only defaults to
``progress=False``. Each grid point ``(lambda, d)`` is an independent exact search: the Rashomon
set ``{t : R(t) + lambda * leaves(t) <= theta}`` of :class:`~rml_fast.trees.falling.FallingRashomonSet`
with ``regularization=lambda`` and ``depth_budget=d``. The searches are deterministic, so every
backend returns the serial result exactly.
"""

from __future__ import annotations

from typing import Any

from rml_fast.trees.falling import _rashomon_sweep

__all__ = ["rashomon_grid"]


def rashomon_grid(
    X: Any,
    y: Any,
    regularizations: Any,
    depth_budgets: Any,
    *,
    sample_weight: Any = None,
    backend: Any = "serial",
    progress: bool = False,
    checkpoint: str | None = None,
    **params: Any,
) -> list[dict[str, Any]]:
    """Alias of :func:`rml_fast.trees.falling.rashomon_sweep` with ``progress=False`` by default:
    a :class:`~rml_fast.trees.falling.FallingRashomonSet` at every grid point, on any backend.

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
    checkpoint : str or path, optional
        Resume file, as in :func:`~rml_fast.trees.falling.rashomon_sweep` (the same format:
        either function resumes the other's file).
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
    return _rashomon_sweep(X, y, regularizations, depth_budgets, sample_weight=sample_weight,
                           checkpoint=checkpoint, backend=backend, progress=progress,
                           params=params, caller="rashomon_grid")
