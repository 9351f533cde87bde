"""Bootstrap of the error second moments (private helper of ``complementarity``).

One resample draws ``n`` indices with replacement; the five per-case statistics
``e_h^2, e_a^2, e_h e_a, e_h, e_a`` are averaged over them (a numba loop), a chunk of resamples at
a time so that memory stays below ~``_CHUNK_ELEMS`` indices. The chunk size depends only on ``n``,
so a seed gives the same resamples whatever the machine.
"""

from __future__ import annotations

import numpy as np

_CHUNK_ELEMS = 2_000_000


def bootstrap_means(stats: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Means of the rows of ``stats`` over ``n_boot`` bootstrap resamples.

    The indices come from ``rng.integers(0, n, size=(chunk, n))`` (NumPy, so the resamples are
    fixed by the seed); the sums run in a numba loop over them.

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
    rows = np.ascontiguousarray(stats.T, dtype=np.float64)
    out = np.empty((n_boot, k), dtype=np.float64)
    chunk = max(1, _CHUNK_ELEMS // max(n, 1))
    kernel = _kernel()
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = kernel(idx, rows)
    return out


_KERNEL = None


def _kernel():  # numba is imported on first use only (keeps ``import rml_fast`` fast)
    global _KERNEL
    if _KERNEL is None:
        import numba

        @numba.njit(cache=True)
        def resample_means(idx, rows):  # pragma: no cover - compiled
            b_count, n = idx.shape
            k = rows.shape[1]
            out = np.zeros((b_count, k))
            acc = np.zeros(k)
            for b in range(b_count):
                acc[:] = 0.0
                for i in range(n):
                    j = idx[b, i]
                    for c in range(k):
                        acc[c] += rows[j, c]
                for c in range(k):
                    out[b, c] = acc[c] / n
            return out

        _KERNEL = resample_means
    return _KERNEL


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
