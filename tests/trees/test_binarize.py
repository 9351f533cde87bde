"""Binarisers: thresholds, transforms, and a falling tree on binarised numeric data."""

from __future__ import annotations

import numpy as np
import pytest

from rml_fast.trees import FallingTreeClassifier, QuantileBinarizer, ThresholdGuessBinarizer


def test_quantile_thresholds_and_transform():
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.normal(size=500), rng.integers(0, 2, 500), np.full(500, 3.0)])
    b = QuantileBinarizer(n_thresholds=4).fit(x, feature_names=["a", "flag", "const"])
    np.testing.assert_allclose(b.thresholds_[0], np.quantile(x[:, 0], [0.2, 0.4, 0.6, 0.8]))
    assert b.binary_.tolist() == [False, True, False]
    assert b.thresholds_[2].size == 0  # a constant column gives no feature
    xb = b.transform(x)
    assert xb.dtype == np.uint8
    assert xb.shape == (500, 5)
    assert b.feature_names_out_[4] == "flag == 1"
    np.testing.assert_array_equal(xb[:, 0], x[:, 0] <= b.thresholds_[0][0])
    np.testing.assert_array_equal(xb[:, 4], x[:, 1])
    # thresholds are nested: x <= t1 implies x <= t2 for t1 < t2
    assert np.all(xb[:, 0] <= xb[:, 1])


def test_float32_input_and_errors():
    x = np.arange(20, dtype=np.float32)[:, None]
    assert QuantileBinarizer(3).fit_transform(x).shape == (20, 3)
    with pytest.raises(ValueError, match="n_thresholds"):
        QuantileBinarizer(0).fit(x)
    with pytest.raises(ValueError, match="finite"):
        QuantileBinarizer().fit([[np.nan], [1.0]])
    with pytest.raises(RuntimeError, match="not fitted"):
        QuantileBinarizer().transform(x)
    with pytest.raises(ValueError, match="features"):
        QuantileBinarizer(2).fit(x).transform(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="feature_names"):
        QuantileBinarizer(2).fit(x, feature_names=["a", "b"])


def test_threshold_guessing_finds_the_true_cut():
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(400, 3))
    y = (x[:, 1] > 0.62).astype(int)
    b = ThresholdGuessBinarizer(n_estimators=10, rng=0).fit(x, y)
    assert b.thresholds_[1].size >= 1
    assert np.min(np.abs(b.thresholds_[1] - 0.62)) < 0.02
    with pytest.raises(ValueError, match="y is required"):
        ThresholdGuessBinarizer().fit(x)


def test_falling_tree_on_binarised_breast_cancer():
    datasets = pytest.importorskip("sklearn.datasets")
    data = datasets.load_breast_cancer()
    y = (data.target == 0).astype(int)
    b = ThresholdGuessBinarizer(n_estimators=20, rng=0).fit(data.data, y)
    xb = b.transform(data.data)
    clf = FallingTreeClassifier(depth_budget=3, regularization=0.01, progress=False).fit(xb, y)
    assert clf.tree_.is_falling
    assert clf.score(xb, y) > 0.9
    rules = clf.tree_.to_rules(b.feature_names_out_)
    assert len(rules) == clf.n_leaves_
    assert rules[0].startswith("if ")
