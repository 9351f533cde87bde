"""Warning classes that rml_fast raises (filter them with :mod:`warnings` as usual)."""

from __future__ import annotations

__all__ = ["ConvergenceWarning", "SteeringWarning"]


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped at its iteration budget before meeting its tolerance.

    The result is returned (it is the best iterate found, with its certificate, e.g. the
    duality gap), and the result object says which problems did not converge (for the Lasso:
    ``LassoPath.converged``). Raise the budget or loosen the tolerance to silence it; turn it
    into an error with ``warnings.simplefilter("error", ConvergenceWarning)``.
    """


class SteeringWarning(UserWarning):
    """SRLS returned a result that is correct but not what was asked for.

    For example the Lasso path never reached ``k`` features (``support="fixed_k"``), or the
    selected support is empty so the steering vector is zero. Silence it with
    ``warnings.filterwarnings("ignore", category=SteeringWarning)``, or turn it into an error
    with ``warnings.simplefilter("error", SteeringWarning)``. Also importable from
    :mod:`rml_fast.steering`.
    """
