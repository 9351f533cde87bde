"""Unconstrained mode (falling=False) vs treefarms (set sizes) and gosdt (optimum)."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from rml_fast.datasets import load_binarized
from rml_fast.kernels.gravitree import gravitree_fit
from rml_fast.trees import QuantileBinarizer


def _breast_cancer() -> tuple[np.ndarray, np.ndarray, list[str]]:
    datasets = pytest.importorskip("sklearn.datasets")
    data = datasets.load_breast_cancer()
    cols = [0, 1, 6, 7, 20, 21, 27]  # radius, texture, concavity, ... (mean and worst)
    binz = QuantileBinarizer(n_thresholds=2).fit(data.data[:, cols])
    y = (data.target == 0).astype(np.int64)  # 1 = malignant
    return binz.transform(data.data[:, cols]), y, binz.feature_names_out_


def _load(name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    return _breast_cancer() if name == "breast-cancer" else load_binarized(name)


def _treefarms_count(X, y, names, **cfg) -> int:
    treefarms = pytest.importorskip("treefarms")
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    with contextlib.redirect_stdout(io.StringIO()):
        model = treefarms.TREEFARMS(cfg)
        model.fit(frame, pd.Series(y, name="label"))
    return int(model.model_set.get_tree_count())


@pytest.mark.parametrize("name", ["monk_1", "monk_2", "monk_3", "breast-cancer"])
@pytest.mark.parametrize(("depth", "lam", "eps", "trivial"), [
    (2, 0.01, 0.1, False), (3, 0.01, 0.05, False), (3, 0.02, 0.1, True), (3, 0.005, 0.02, False),
])
def test_set_size_equals_treefarms(name, depth, lam, eps, trivial):
    pytest.importorskip("treefarms")
    X, y, names = _load(name)
    ours = gravitree_fit(X, y, depth=depth, regularization=lam, bound_value=eps,
                         falling=False, ignore_trivial_extensions=trivial)
    theirs = _treefarms_count(
        X, y, names, regularization=lam, rashomon_bound_multiplier=eps, depth_budget=depth + 1,
        rashomon_ignore_trivial_extensions=trivial)
    assert len(ours) == theirs
    assert len(ours) > 0


@pytest.mark.parametrize("name", ["monk_1", "monk_2", "monk_3", "breast-cancer"])
@pytest.mark.parametrize("depth", [2, 3])
def test_optimum_equals_gosdt(name, depth):
    gosdt = pytest.importorskip("gosdt")
    pd = pytest.importorskip("pandas")
    X, y, _ = _load(name)
    # gosdt 1.0's depth_budget counts splits on a path (our depth); treefarms' counts nodes.
    clf = gosdt.GOSDTClassifier(regularization=0.01, depth_budget=depth, verbose=False)
    clf.fit(pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])]), pd.Series(y))
    ours = gravitree_fit(X, y, depth=depth, regularization=0.01, falling=False,
                         bound_mode="optimal")
    # gosdt reports its bounds in float32
    assert ours.optimal_objective == pytest.approx(clf.result_.upperbound, abs=1e-6)
    falling = gravitree_fit(X, y, depth=depth, regularization=0.01, bound_mode="optimal")
    assert falling.optimal_objective >= ours.optimal_objective
