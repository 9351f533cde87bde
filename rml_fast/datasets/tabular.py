"""Binarised tabular benchmarks used by optimal / Rashomon-set tree papers (GOSDT, TreeFARMS).

Sources and licences are listed in ``rml_fast/datasets/data/README.md``.
"""

from __future__ import annotations

import csv
import gzip
from importlib import resources

import numpy as np

__all__ = [
    "BINARIZED_DATASETS",
    "load_binarized",
]

BINARIZED_DATASETS = (
    "monk_1", "monk_2", "monk_3", "compas-binned", "fico-binary", "tic-tac-toe",
    "car_evaluation", "coupon-bar",
)


def load_binarized(name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Load a shipped binarised data set.

    Parameters
    ----------
    name : str
        One of :data:`BINARIZED_DATASETS`.

    Returns
    -------
    X : ndarray of shape (n, p), uint8
        0/1 features.
    y : ndarray of shape (n,), int64
        0/1 labels (the last column of the file).
    feature_names : list of str of length p

    Raises
    ------
    ValueError
        If ``name`` is not a shipped data set.

    Examples
    --------
    >>> from rml_fast.datasets import load_binarized
    >>> X, y, names = load_binarized("monk_1")
    >>> X.shape, y.shape, names[0]
    ((124, 11), (124,), 'a1_1')
    """
    if name not in BINARIZED_DATASETS:
        raise ValueError(f"name must be one of {BINARIZED_DATASETS}, got {name!r}")
    path = resources.files("rml_fast.datasets") / "data" / f"{name}.csv.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt", newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    data = np.array(body, dtype=np.int64)
    return data[:, :-1].astype(np.uint8), data[:, -1].astype(np.int64), header[:-1]
