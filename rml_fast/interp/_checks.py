"""Private input checks shared by the interp modules (public-boundary validation, issue 25).

Thin wrappers over :mod:`rml_fast._validation` for the argument kinds the interp entry points
take: torch tensors of values or of token ids, and errors raised by a peer (scikit-learn's
``validate_data``) re-worded so that they name the user's argument.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from rml_fast._sklearn_validation import naming  # noqa: F401  (re-exported for interp)
from rml_fast._validation import check_tensor


def not_meta(t: Any, name: str) -> Any:
    """Refuse a tensor on the ``meta`` device (shape only, no values); return ``t``."""
    if isinstance(t, torch.Tensor) and t.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    return t


def float_tensor(
    t: Any,
    name: str,
    *,
    ndim: int | tuple[int, ...] | None = None,
    finite: bool = True,
    nonempty: bool = False,
) -> torch.Tensor:
    """A real floating-point tensor with values (``check_tensor`` with interp's defaults)."""
    return check_tensor(t, name, ndim=ndim, floating=True, finite=finite, nonempty=nonempty)


def id_tensor(
    t: Any, name: str, *, ndim: int | tuple[int, ...] | None = None, nonempty: bool = True
) -> torch.Tensor:
    """An integer tensor of token ids (non-negative), with values and no elements missing."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(t).__name__}")
    not_meta(t, name)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got dtype {t.dtype}")
    check_tensor(t, name, ndim=ndim, floating=False, finite=False, nonempty=nonempty)
    if t.numel() and bool((t < 0).any()):
        raise ValueError(f"{name} must hold non-negative token ids")
    return t


def int_arg(v: Any, name: str, low: int | None = None, high: int | None = None) -> int:
    """A Python int (not bool, not float) in ``[low, high]``."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(v).__name__} {v!r}")
    v = int(v)
    if (low is not None and v < low) or (high is not None and v > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {v}")
    return v


def real_arg(v: Any, name: str) -> float:
    """A finite real number (not bool)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__} {v!r}")
    if not math.isfinite(float(v)):
        raise ValueError(f"{name} must be finite, got {v!r}")
    return float(v)


def real_tensor(
    x: Any,
    name: str,
    *,
    ndim: int | tuple[int, ...] | None = None,
    nonempty: bool = False,
    finite: bool = True,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """A real array-like or tensor as a ``dtype`` tensor (a tensor is converted, never changed).

    Accepts a torch tensor (with values: not on the ``meta`` device; real: not complex) or a
    NumPy array-like of real numbers; checks ``ndim``, emptiness and finiteness.
    """
    if isinstance(x, torch.Tensor):
        not_meta(x, name)
        if x.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
        t = x.detach().to(dtype)
    else:
        import numpy as np

        from rml_fast._validation import check_array

        t = torch.as_tensor(check_array(x, name, dtypes=(np.float64,), finite=False)).to(dtype)
    check_tensor(t, name, ndim=ndim, floating=True, finite=finite, nonempty=nonempty)
    return t


def ids_like(x: Any, name: str) -> torch.Tensor:
    """Integer ids (an int, a sequence of ints, an integer array or tensor) as a LongTensor.

    Raises a TypeError naming ``name`` for None, strings, floats (NaN included), bools and
    non-integer tensors, and a ValueError for a ``meta`` tensor. Range checks are the caller's.
    """
    if isinstance(x, torch.Tensor):
        not_meta(x, name)
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer ids, got dtype {x.dtype}")
        return x.long()
    if x is None or isinstance(x, (str, bytes, bool, float)):
        raise TypeError(f"{name} must be an int or integer ids, got {type(x).__name__} {x!r}")
    try:
        t = torch.as_tensor(x)
    except (RuntimeError, TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"{name} must be an int or integer ids: {exc}") from exc
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer ids, got dtype {t.dtype}")
    return t.long()
