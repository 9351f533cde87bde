"""Input checks used once, at each public boundary.

Every error names the argument, what was expected and what was received, and is raised
before any work is done; nothing here copies or mutates a caller's data unless asked to.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

FLOAT_DTYPES = (np.float64, np.float32)


@dataclass(frozen=True)
class Interval:
    """A real or integer interval constraint, as in scikit-learn's ``Interval``.

    Parameters
    ----------
    kind : {"real", "int"}
        Whether the value must be a real number or an integer.
    left, right : float or None
        Bounds; None means unbounded on that side.
    closed : {"left", "right", "both", "neither"}, default="both"
        Which bounds belong to the interval.
    """

    kind: str
    left: float | None
    right: float | None
    closed: str = "both"

    def __post_init__(self) -> None:
        if self.kind not in ("real", "int"):
            raise ValueError(f"Interval kind must be 'real' or 'int', got {self.kind!r}")
        if self.closed not in ("left", "right", "both", "neither"):
            raise ValueError(
                f"Interval closed must be left/right/both/neither, got {self.closed!r}"
            )

    def __contains__(self, value: float) -> bool:
        if self.left is not None:
            lo_ok = value >= self.left if self.closed in ("left", "both") else value > self.left
            if not lo_ok:
                return False
        if self.right is not None:
            hi_ok = value <= self.right if self.closed in ("right", "both") else value < self.right
            if not hi_ok:
                return False
        return True

    def __str__(self) -> str:
        lb = "[" if self.closed in ("left", "both") else "("
        rb = "]" if self.closed in ("right", "both") else ")"
        lo = "-inf" if self.left is None else repr(self.left)
        hi = "inf" if self.right is None else repr(self.right)
        what = "an int" if self.kind == "int" else "a finite real number"
        return f"{what} in the range {lb}{lo}, {hi}{rb}"


def check_scalar(value: Any, name: str, interval: Interval) -> Any:
    """Return ``value`` as a Python int/float if it satisfies ``interval``.

    The result is an ``int`` when ``interval.kind == "int"`` and a ``float`` otherwise (typed
    ``Any`` because the kind is a runtime value, so callers may use it as either).

    Raises
    ------
    TypeError
        If ``value`` is not a number of the required kind (bools are rejected).
    ValueError
        If it is not finite or lies outside ``interval``.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be {interval}, got the bool {value!r}")
    if interval.kind == "int":
        if not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be {interval}, got {type(value).__name__} {value!r}")
        out: float | int = int(value)
    else:
        if not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be {interval}, got {type(value).__name__} {value!r}")
        out = float(value)
        if not math.isfinite(out):
            raise ValueError(f"{name} must be {interval}, got {value!r}")
    if out not in interval:
        raise ValueError(f"{name} must be {interval}, got {value!r}")
    return out


def validate_params(values: dict[str, Any], constraints: dict[str, Interval]) -> dict[str, Any]:
    """Check several scalars against a constraint table; returns the converted values."""
    return {k: check_scalar(values[k], k, c) for k, c in constraints.items()}


def check_array(
    x: Any,
    name: str,
    *,
    dtypes: Sequence[Any] | None = FLOAT_DTYPES,
    ndim: int | Sequence[int] | None = None,
    finite: bool = True,
    copy: bool = False,
) -> np.ndarray:
    """Validate an array-like and return it as a NumPy array.

    Parameters
    ----------
    x : array-like
        The input.
    name : str
        The argument's name, used in error messages.
    dtypes : sequence of dtypes or None, default=(float64, float32)
        Allowed dtypes. An input already of an allowed dtype is kept (never downcast);
        otherwise it is converted to ``dtypes[0]`` if that is lossless for its kind
        (bool/int/float), else a TypeError is raised. None keeps any numeric dtype.
    ndim : int or sequence of int, optional
        Allowed numbers of dimensions.
    finite : bool, default=True
        Reject NaN and infinities.
    copy : bool, default=False
        Return a copy even when no conversion is needed.

    Returns
    -------
    array : ndarray
    """
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch tensor
        raise TypeError(f"{name} must be a NumPy array-like, got a torch tensor; call .numpy()")
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{name} must be array-like, got {type(x).__name__}: {exc}") from exc
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    converted = False
    if dtypes is not None:
        allowed = [np.dtype(d) for d in dtypes]
        if arr.dtype not in allowed:
            converted = True
            if (
                arr.dtype.kind == "f"
                and allowed[0].kind == "f"
                and arr.dtype.itemsize > allowed[0].itemsize
            ):
                raise TypeError(
                    f"{name} must have dtype in {[str(d) for d in allowed]}, got {arr.dtype}"
                )
            arr = arr.astype(allowed[0])
    if ndim is not None:
        allowed_ndim = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed_ndim:
            raise ValueError(
                f"{name} must have ndim in {allowed_ndim}, got an array of shape {arr.shape}"
            )
    if finite and arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got NaN or infinite values")
    if copy and not converted:
        arr = arr.copy()
    return arr


def check_rng(rng: Any, name: str = "rng") -> np.random.Generator:
    """Return a ``numpy.random.Generator`` from a Generator, an int seed or None."""
    if rng is None or isinstance(rng, (numbers.Integral, np.random.SeedSequence)):
        if isinstance(rng, numbers.Integral) and (isinstance(rng, bool) or int(rng) < 0):
            raise ValueError(f"{name} must be a non-negative int seed, got {rng!r}")
        return np.random.default_rng(rng if rng is None or isinstance(rng, np.random.SeedSequence) else int(rng))
    if isinstance(rng, np.random.Generator):
        return rng
    raise TypeError(
        f"{name} must be a numpy.random.Generator, a non-negative int seed or None, "
        f"got {type(rng).__name__}"
    )


def check_tensor(
    t: Any,
    name: str,
    *,
    ndim: int | Sequence[int] | None = None,
    floating: bool = True,
    finite: bool = True,
    nonempty: bool = False,
) -> Any:
    """Validate a torch tensor argument and return it unchanged.

    Parameters
    ----------
    t : torch.Tensor
        The input. A tensor on the ``meta`` device (shape only, no values) is refused: the
        checks below and the work after them need values.
    name : str
        The argument's name, used in error messages.
    ndim : int or sequence of int, optional
        Allowed numbers of dimensions.
    floating : bool, default=True
        Require a real floating dtype (float16 / bfloat16 / float32 / float64).
    finite : bool, default=True
        Reject NaN and infinities (skipped while ``torch.compile`` / ``torch.export`` trace,
        when values are unknown).
    nonempty : bool, default=False
        Reject a tensor with no elements.

    Returns
    -------
    tensor : torch.Tensor
        ``t`` itself (never a copy).
    """
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    if floating and (not t.is_floating_point()):
        raise TypeError(f"{name} must have a real floating-point dtype, got {t.dtype}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.ndim not in allowed:
            raise ValueError(f"{name} must have ndim in {allowed}, got shape {tuple(t.shape)}")
    if nonempty and t.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(t.shape)}")
    tracing = bool(torch.compiler.is_compiling()) or bool(torch.compiler.is_exporting())
    if (finite and not tracing and t.is_floating_point() and t.numel()
            and not bool(torch.isfinite(t.detach()).all())):
        raise ValueError(f"{name} must be finite, got NaN or infinite values")
    return t
