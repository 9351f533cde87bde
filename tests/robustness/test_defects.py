"""Regression tests for the input-validation defects the entry-point fuzzer found (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def tree_data():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, size=(40, 4))
    return X, X[:, 0] ^ X[:, 1]


@pytest.mark.parametrize("cls_name", ["FallingRashomonSet", "FallingTreeClassifier"])
@pytest.mark.parametrize(("param", "value", "exc"), [
    ("depth_budget", 0, ValueError), ("depth_budget", 65, ValueError),
    ("depth_budget", 2.5, TypeError), ("branch_budget", -1, ValueError),
    ("leaf_budget", 0, ValueError),
])
def test_falling_budgets_are_named_as_the_user_set_them(cls_name, param, value, exc, tree_data):
    """The tree search calls them depth / branch / max_leaves; the error names the budget."""
    import rml_fast.trees as trees

    est = getattr(trees, cls_name)(**{param: value})
    with pytest.raises(exc, match=rf"^{param} must be"):
        est.fit(*tree_data)


def test_falling_valid_budgets_unchanged(tree_data):
    from rml_fast.trees import FallingRashomonSet

    rs = FallingRashomonSet(depth_budget=2, branch_budget=1, leaf_budget=3,
                            rashomon_multiplier=0.1).fit(*tree_data)
    assert rs.n_trees_ >= 1


@pytest.mark.parametrize("fn", ["nudft_type1", "nudft_type1_reference"])
def test_nudft_type1_refuses_nan_points(fn):
    import torch

    from rml_fast.kernels import nudft

    g = nudft.FrequencyGrid(1, 4.9, 0.1)
    x = torch.rand(2, 7, 1, dtype=torch.float64)
    x[1, 3, 0] = float("nan")
    before = x.clone()
    with pytest.raises(ValueError, match=r"^x must be finite"):
        getattr(nudft, fn)(x, torch.randn(2, 7, 3, dtype=torch.float64), g)
    assert torch.equal(x.isnan(), before.isnan())  # the caller's tensor untouched


@pytest.mark.parametrize("fn", ["pld_delta_for_epsilon", "pld_epsilon_for_delta"])
@pytest.mark.parametrize(("arg", "value", "exc", "match"), [
    ("pmf", np.array([0.5, np.nan, 0.25]), ValueError, "^pmf must be finite"),
    ("query", np.array([0.1, np.nan]), ValueError, "must not contain NaN"),
    ("h", float("nan"), ValueError, "^h must be"),
    ("h", 0.0, ValueError, "^h must be"),
    ("infinity_mass", 1.5, ValueError, "^infinity_mass must be"),
    ("lower_index", float("nan"), TypeError, "^lower_index must be"),
])
def test_pld_queries_refuse_nan(fn, arg, value, exc, match):
    """A NaN in a privacy-loss distribution used to give a finite (wrong) delta / epsilon."""
    from rml_fast.kernels import sgg

    args = {"pmf": np.array([0.5, 0.25, 0.25]), "lower_index": -1, "h": 0.1,
            "infinity_mass": 0.0, "query": np.array([0.1, 0.5])}
    args[arg] = value
    with pytest.raises(exc, match=match):
        getattr(sgg, fn)(args["pmf"], args["lower_index"], args["h"], args["infinity_mass"],
                         args["query"])


@pytest.mark.parametrize("fn", ["pld_delta_for_epsilon", "pld_epsilon_for_delta"])
def test_pld_queries_valid_input_unchanged(fn):
    from rml_fast.kernels import sgg

    pmf, q = np.array([0.5, 0.25, 0.25]), np.array([0.0, 0.05, 0.2, np.inf])
    if fn == "pld_epsilon_for_delta":
        q = np.array([0.0, 0.01, 0.2])
    got = getattr(sgg, fn)(pmf, -1, 0.1, 0.0, q)
    ref = getattr(sgg, fn + "_reference")(pmf, -1, 0.1, 0.0, q)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)
