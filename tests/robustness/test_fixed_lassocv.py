"""Regression tests of the fuzz contract fixes in the Lasso kernels and the scikit-learn front
end: bad input raises ValueError/TypeError whose message names the argument (as a word)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rml_fast.compat.sklearn import Lasso, LassoCV, lasso_path
from rml_fast.kernels.lasso import lasso, lasso_path_gram, ridge_refit


def _names(exc_info, name):
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])",
                     str(exc_info.value)) is not None


X3, Y3 = np.eye(3), np.array([3.0, -1.0, 0.5])
_rng = np.random.default_rng(0)
X60 = _rng.standard_normal((60, 5))
Y60 = X60 @ np.array([1.0, 0.0, -2.0, 0.0, 0.0])


@pytest.mark.parametrize("bad", [np.array([np.nan, 1.0, 2.0]), np.zeros(0), np.zeros((1, 3)),
                                 np.array(1.0), np.array(["a", "b", "c"]),
                                 np.array([1j, 2, 3])])
@pytest.mark.parametrize("fn", ["ridge_refit", "lasso"])
def test_kernel_target_errors_name_y(fn, bad):
    call = (lambda: ridge_refit(X3, bad, [0, 2], mu=0.1)) if fn == "ridge_refit" else (
        lambda: lasso(X3, bad, 0.1))
    with pytest.raises((ValueError, TypeError)) as ei:
        call()
    assert _names(ei, "y"), str(ei.value)


@pytest.mark.parametrize(("arg", "bad"), [("X", np.zeros((0, 3))), ("y", np.zeros(0)),
                                       ("X", np.eye(3) * 1j), ("y", Y3 * 1j),
                                       ("X", np.zeros((1, 3, 3))), ("X", np.ones(9)),
                                       ("y", np.array(3.0))])
def test_lasso_path_errors_name_argument(arg, bad):
    args = {"X": X3, "y": Y3, arg: bad}
    with pytest.raises((ValueError, TypeError)) as ei:
        lasso_path(args["X"], args["y"], alphas=[1 / 3])
    assert _names(ei, arg), str(ei.value)


@pytest.mark.parametrize("est", [Lasso(alpha=0.1), LassoCV(cv=3)])
@pytest.mark.parametrize(("arg", "bad"), [("X", np.zeros((0, 5))), ("y", []),
                                       ("X", X60 * 1j), ("y", Y60 * 1j),
                                       ("X", X60[None]), ("y", Y60[None]),
                                       ("X", X60.ravel()), ("y", np.array(1.0))])
def test_estimator_fit_errors_name_argument(est, arg, bad):
    args = {"X": X60, "y": Y60, arg: bad}
    X_before = X60.copy()
    with pytest.raises((ValueError, TypeError)) as ei:
        est.fit(args["X"], args["y"])
    assert _names(ei, arg), str(ei.value)
    np.testing.assert_array_equal(X60, X_before)


def test_lasso_path_gram_shape_errors_name_G():
    with pytest.raises(ValueError, match="to match G") as ei:
        lasso_path_gram(np.eye(4)[None], np.ones(4), 4.0, 4, [0.1])
    assert _names(ei, "G") and _names(ei, "Xy")
