"""Vectorised bootstrap of the error second moments (private helper of ``complementarity``).

One resample draws ``n`` indices with replacement; the five per-case statistics
``e_h^2, e_a^2, e_h e_a, e_h, e_a`` are gathered and averaged, a chunk of resamples at a time so
that memory stays below ~``_CHUNK_ELEMS`` gathered values. The chunk size depends only on ``n``,
so a seed gives the same resamples whatever the machine.
"""

from __future__ import annotations

import numpy as np

_CHUNK_ELEMS = 2_000_000


def bootstrap_means(stats: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Means of the rows of ``stats`` over ``n_boot`` bootstrap resamples.

    Parameters
    ----------
    stats : ndarray of shape (k, n), float64
        One row per per-case statistic.
    n_boot : int
        Number of resamples.
    rng : numpy.random.Generator

    Returns
    -------
    means : ndarray of shape (n_boot, k)
    """
    k, n = stats.shape
    out = np.empty((n_boot, k), dtype=np.float64)
    chunk = max(1, _CHUNK_ELEMS // max(n, 1))
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        for j in range(k):
            out[start:stop, j] = np.take(stats[j], idx).mean(axis=1)
    return out


def bootstrap_counts(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Multiplicity of each case in each resample, ``(n_boot, n)`` float64 (rows sum to ``n``)."""
    out = np.empty((n_boot, n), dtype=np.float64)
    chunk = max(1, _CHUNK_ELEMS // max(n, 1))
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        flat = (idx + n * np.arange(stop - start)[:, None]).ravel()
        out[start:stop] = np.bincount(flat, minlength=(stop - start) * n).reshape(stop - start, n)
    return out
