"""The shipped binarised tables load with the documented shapes."""

from __future__ import annotations

import numpy as np
import pytest

from rml_fast.datasets import BINARIZED_DATASETS, load_binarized

SHAPES = {"monk_1": (124, 11), "monk_2": (169, 11), "monk_3": (122, 11),
          "compas-binned": (6907, 12), "fico-binary": (10459, 17), "tic-tac-toe": (958, 18),
          "car_evaluation": (1728, 15), "coupon-bar": (1913, 14)}


@pytest.mark.parametrize("name", BINARIZED_DATASETS)
def test_load(name):
    X, y, names = load_binarized(name)
    assert X.shape == SHAPES[name]
    assert X.dtype == np.uint8
    assert set(np.unique(X)) <= {0, 1}
    assert set(np.unique(y)) == {0, 1}
    assert len(names) == X.shape[1]


def test_unknown_name():
    with pytest.raises(ValueError, match="name must be one of"):
        load_binarized("iris")
