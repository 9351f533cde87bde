"""Argument checks: every constraint names the argument and rejects before work."""

from __future__ import annotations

import numpy as np
import pytest

from rml_fast._validation import Interval, check_array, check_rng, check_scalar, validate_params


@pytest.mark.parametrize(
    ("interval", "good", "bad"),
    [
        (Interval("real", 0, None, closed="neither"), [1e-9, 5.0], [0.0, -1.0]),
        (Interval("real", 0, 1, closed="left"), [0.0, 0.5], [1.0, 1.5]),
        (Interval("real", 0, 1, closed="right"), [1.0], [0.0]),
        (Interval("int", 1, 10), [1, 10, np.int64(3)], [0, 11]),
    ],
)
def test_interval_membership(interval, good, bad):
    for g in good:
        assert check_scalar(g, "x", interval) == g
    for b in bad:
        with pytest.raises(ValueError, match=r"x must be .* got"):
            check_scalar(b, "x", interval)


def test_check_scalar_types_and_finiteness():
    with pytest.raises(TypeError, match="eps must be a finite real number"):
        check_scalar("1", "eps", Interval("real", 0, None))
    with pytest.raises(ValueError, match="eps must be"):
        check_scalar(float("nan"), "eps", Interval("real", None, None))
    with pytest.raises(TypeError, match="the bool"):
        check_scalar(True, "n", Interval("int", 0, None))
    with pytest.raises(TypeError, match="n must be an int"):
        check_scalar(2.0, "n", Interval("int", 0, None))
    assert isinstance(check_scalar(np.float32(0.5), "p", Interval("real", 0, 1)), float)


def test_interval_rejects_bad_definitions():
    with pytest.raises(ValueError, match="kind"):
        Interval("complex", 0, 1)
    with pytest.raises(ValueError, match="closed"):
        Interval("real", 0, 1, closed="half")


def test_validate_params_table():
    table = {"epsilon": Interval("real", 0, None, closed="neither"), "n": Interval("int", 1, None)}
    assert validate_params({"epsilon": 1, "n": 3}, table) == {"epsilon": 1.0, "n": 3}
    with pytest.raises(ValueError, match="epsilon"):
        validate_params({"epsilon": 0, "n": 3}, table)


def test_check_array_keeps_float_dtypes_and_never_downcasts():
    x32 = np.ones((2, 3), dtype=np.float32)
    x64 = np.ones(3)
    assert check_array(x32, "X").dtype == np.float32
    assert check_array(x32, "X") is x32  # no copy when nothing changes
    assert check_array(x64, "X").dtype == np.float64
    assert check_array([1, 2], "X").dtype == np.float64
    with pytest.raises(TypeError, match="X must have dtype"):
        check_array(np.ones(2, dtype=np.float64), "X", dtypes=[np.float32])


def test_check_array_copy_does_not_alias():
    x = np.zeros(3)
    y = check_array(x, "x", copy=True)
    y[0] = 1
    assert x[0] == 0


def test_check_array_errors_name_the_argument():
    with pytest.raises(ValueError, match="X must have ndim in \\(2,\\)"):
        check_array(np.ones(3), "X", ndim=2)
    with pytest.raises(ValueError, match="y must be finite"):
        check_array([1.0, np.nan], "y")
    with pytest.raises(TypeError, match="y must hold real numbers"):
        check_array(["a"], "y")
    import torch

    with pytest.raises(TypeError, match="torch tensor"):
        check_array(torch.ones(2), "y")
    assert check_array([np.inf], "y", finite=False).shape == (1,)


def test_check_rng():
    g = np.random.default_rng(0)
    assert check_rng(g) is g
    assert check_rng(3).integers(1000) == np.random.default_rng(3).integers(1000)
    with pytest.raises(ValueError, match="rng must be a non-negative"):
        check_rng(-1)
    with pytest.raises(TypeError, match="rng must be"):
        check_rng(1.5)
