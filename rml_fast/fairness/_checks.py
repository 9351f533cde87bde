"""sklearn's ``validate_data`` with errors that name the offending argument (issue 25 §1).

sklearn's messages are kept verbatim after the name (its estimator checks match on them).
"""

from __future__ import annotations

from typing import Any

from sklearn.utils import check_array as sk_check_array
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data


def _named(exc: Exception, name: str) -> Exception:
    cls = TypeError if isinstance(exc, TypeError) else ValueError
    return cls(f"{name}: {exc}")


def validate_X(est: Any, X: Any, **kw: Any) -> Any:
    """``validate_data(est, X, reset=False, **kw)``; an error is re-raised naming ``X``."""
    try:
        return validate_data(est, X, reset=False, **kw)
    except (TypeError, ValueError) as exc:
        raise _named(exc, "X") from exc


def validate_Xy(est: Any, X: Any, y: Any, **kw: Any) -> Any:
    """``validate_data(est, X, y, **kw)``; an error is re-raised naming ``X`` when ``X`` alone
    fails sklearn's ``check_array`` with the same options, else ``y``."""
    try:
        return validate_data(est, X, y, **kw)
    except (TypeError, ValueError) as exc:
        opts = {k: v for k, v in kw.items()
                if k in ("dtype", "accept_sparse", "ensure_min_samples", "ensure_all_finite")}
        try:
            sk_check_array(X, **opts)
        except (TypeError, ValueError):
            raise _named(exc, "X") from exc
        raise _named(exc, "y") from exc


def check_targets(y: Any, name: str = "y") -> None:
    """sklearn's ``check_classification_targets`` whose error names ``y``."""
    try:
        check_classification_targets(y)
    except (TypeError, ValueError) as exc:
        raise _named(exc, name) from exc
