"""Small real time series shipped inside the package (no download).

Sources and licences are listed in ``rml_fast/datasets/data/README.md``.
"""

from __future__ import annotations

import csv
from importlib import resources

import numpy as np

__all__ = ["load_lynx"]


def load_lynx() -> tuple[np.ndarray, np.ndarray]:
    """Annual numbers of lynx trapped in the Mackenzie River district of north-west Canada, 1821-1934.

    The classic series of Elton & Nicholson (1942) as given by Brockwell & Davis (1991, series G)
    and by R's ``datasets::lynx``: 114 annual counts with a ~10-year cycle. Ecologists usually
    model ``log10`` of the counts.

    Returns
    -------
    years : ndarray of shape (114,), int64
        1821, 1822, ..., 1934.
    counts : ndarray of shape (114,), float64
        Lynx trapped in each year.

    References
    ----------
    Elton, C. and Nicholson, M. (1942). The ten-year cycle in numbers of the lynx in Canada.
    *Journal of Animal Ecology* 11(2), 215-244.

    Brockwell, P. J. and Davis, R. A. (1991). *Time Series and Forecasting Methods*, 2nd ed.,
    Springer. Series G.

    Examples
    --------
    >>> from rml_fast.datasets import load_lynx
    >>> years, counts = load_lynx()
    >>> years[0], years[-1], int(counts[0]), int(counts.max())
    (np.int64(1821), np.int64(1934), 269, 6991)
    """
    path = resources.files("rml_fast.datasets") / "data" / "lynx.csv"
    with path.open("r", newline="") as fh:  # type: ignore[call-overload]  # typeshed omits newline
        rows = list(csv.reader(fh))
    if rows[0] != ["year", "lynx"]:
        raise ValueError(f"unexpected header in the shipped lynx.csv: {rows[0]!r}")
    data = np.array(rows[1:], dtype=np.int64)
    return data[:, 0], data[:, 1].astype(np.float64)
