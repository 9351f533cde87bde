"""Support-restricted ridge refit with the ridge strength chosen by generalised cross-validation."""

from __future__ import annotations

import numpy as np

from rml_fast.kernels.lasso import ridge_refit

__all__ = ["gcv_ridge_mu", "ridge_refit"]


def gcv_ridge_mu(D: np.ndarray, y: np.ndarray, support: np.ndarray, n_grid: int = 20,
                 span: tuple[float, float] = (1e-6, 1.0)) -> tuple[float, np.ndarray, np.ndarray]:
    """GCV choice of ``mu`` for ``(D_S^T D_S + d mu I)^{-1} D_S^T y`` (**[PROPOSAL]** grid).

    ``GCV(mu) = d ||(I - H_mu) y||^2 / (d - tr H_mu)^2`` with the hat matrix
    ``H_mu = D_S (D_S^T D_S + d mu I)^{-1} D_S^T``, evaluated through the SVD of ``D_S`` on
    ``n_grid`` log-spaced values ``span * tr(D_S^T D_S) / (d |S|)``.

    Same orientation as :func:`rml_fast.kernels.lasso.lasso_path` and ``ridge_refit``: ``y``
    is aligned with the rows of ``D`` (one embedding coordinate per row).

    Parameters
    ----------
    D : ndarray of shape (d, m)
        SAE decoder, atoms as columns.
    y : ndarray of shape (d,)
        Target edit (e.g. the mean of the per-pair edits).
    support : ndarray of int of shape (k,), k >= 1

    Returns
    -------
    mu : float
        The minimiser on the grid.
    grid : ndarray of shape (n_grid,)
    scores : ndarray of shape (n_grid,)
    """
    n = D.shape[0]
    DS = D[:, support].astype(np.float64)
    y = np.asarray(y, dtype=np.float64)
    U, sv, _ = np.linalg.svd(DS, full_matrices=False)
    scale = float((sv**2).sum()) / (n * max(support.size, 1))
    grid = np.geomspace(span[0], span[1], n_grid) * scale
    uy = U.T @ y
    resid_perp = float(y @ y - uy @ uy)  # part of y outside the column space
    scores = np.empty(n_grid)
    for i, mu in enumerate(grid):
        shrink = sv**2 / (sv**2 + n * mu)
        rss = resid_perp + float((((1 - shrink) * uy) ** 2).sum())
        dof = n - float(shrink.sum())
        scores[i] = n * rss / dof**2 if dof > 0 else np.inf
    return float(grid[int(np.argmin(scores))]), grid, scores
