"""scikit-learn input validation whose errors name the argument at fault (issue 25 section 1).

sklearn's ``validate_data`` says "Found array with 0 sample(s)" or "Input X contains NaN"
without naming the user's argument (which may be ``X_ref`` or ``X_fit``, not ``X``). These
wrappers run it unchanged on valid input (same arrays, same speed) and, only when it refuses an
input, re-raise the same exception type with the argument's name in front of sklearn's message
(which is kept whole, so regex checks on it still match). Shared by the strategic, decisions,
privacy and fairness estimators.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

_NO_Y = object()


def names_argument(msg: str, name: str) -> bool:
    """Whether ``msg`` names ``name`` as a word (``x`` in ``x[0]`` counts, ``x`` in ``xs`` not)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", msg) is not None


@contextlib.contextmanager
def naming(*names: str) -> Iterator[None]:
    """Re-raise a ValueError / TypeError raised inside (by a peer's checks, whose messages do
    not always say which argument) that names none of ``names`` with ``"<names>: "`` in front
    (ValueError or TypeError, the original chained).

    Examples
    --------
    >>> try:
    ...     with naming("X_ref"):
    ...         raise ValueError("Found array with 0 sample(s)")
    ... except ValueError as e:
    ...     print(e)
    X_ref: Found array with 0 sample(s)
    """
    try:
        yield
    except (ValueError, TypeError) as exc:
        msg = str(exc)
        if any(names_argument(msg, n) for n in names):
            raise
        new_type = ValueError if isinstance(exc, ValueError) else TypeError
        raise new_type(f"{' / '.join(names)}: {msg}") from exc


def renamed(exc: BaseException, name: str) -> BaseException:
    """``exc`` with ``name`` in front of its message (the same type where possible)."""
    msg = str(exc)
    if names_argument(msg, name):
        return exc
    text = f"{name}: {msg}"
    try:
        new = type(exc)(text)
    except Exception:  # an exception type with another constructor
        new = (TypeError if isinstance(exc, TypeError) else ValueError)(text)
    return new


def validate_named(est: Any, X: Any, y: Any = _NO_Y, *, x_name: str = "X", y_name: str = "y",
                   **kwargs: Any) -> Any:
    """``sklearn.utils.validation.validate_data(est, X[, y], **kwargs)`` naming the culprit.

    Parameters
    ----------
    est : BaseEstimator
        The estimator (``reset`` etc. as in sklearn).
    X, y : array-like
        The inputs; ``y`` omitted validates ``X`` only.
    x_name, y_name : str
        The user's names of the two arguments, put in front of the error message.
    **kwargs
        Passed to ``validate_data``.

    Returns
    -------
    What ``validate_data`` returns.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> try:
    ...     validate_named(LogisticRegression(), np.zeros((0, 2)), x_name="X_ref")
    ... except ValueError as e:
    ...     print(str(e)[:35])
    X_ref: Found array with 0 sample(s)
    """
    from sklearn.utils.validation import validate_data

    try:
        if y is _NO_Y:
            return validate_data(est, X, **kwargs)
        return validate_data(est, X, y, **kwargs)
    except (ValueError, TypeError) as exc:
        if y is _NO_Y:
            culprit = x_name
        elif "inconsistent numbers of samples" in str(exc):
            culprit = f"{x_name} and {y_name}"
        else:
            culprit = y_name if _x_alone_ok(X, kwargs) else x_name
        raise renamed(exc, culprit) from exc


def _x_alone_ok(X: Any, kwargs: dict[str, Any]) -> bool:
    from sklearn.utils import check_array

    try:
        check_array(X, dtype=kwargs.get("dtype", "numeric"),
                    ensure_min_samples=kwargs.get("ensure_min_samples", 1))
    except (ValueError, TypeError):
        return False
    return True


def check_targets_named(y: Any, name: str = "y") -> None:
    """``sklearn.utils.multiclass.check_classification_targets`` naming the argument.

    Examples
    --------
    >>> import numpy as np
    >>> check_targets_named(np.array([0, 1, 1]))
    >>> try:
    ...     check_targets_named(np.array([0.5, 1.5]), "y2")
    ... except ValueError as e:
    ...     print(str(e)[:22])
    y2: Unknown label type
    """
    from sklearn.utils.multiclass import check_classification_targets

    try:
        check_classification_targets(y)
    except (ValueError, TypeError) as exc:
        raise renamed(exc, name) from exc


def as_float_rows(X: Any, name: str, d: int) -> np.ndarray:
    """A finite float64 ``(n, d)`` array from ``X`` (the checks of an ``X @ w`` boundary).

    Examples
    --------
    >>> as_float_rows([[1.0, 2.0]], "X", 2).shape
    (1, 2)
    """
    from rml_fast._validation import check_array

    arr = check_array(X, name, ndim=2).astype(np.float64, copy=False)
    if arr.shape[1] != d:
        raise ValueError(f"{name} must have {d} columns, got an array of shape {arr.shape}")
    return arr
