"""Warning and error classes that rml_fast raises (filter warnings with :mod:`warnings` as usual)."""

from __future__ import annotations

__all__ = ["ConvergenceWarning", "InfeasibleError", "ResourceLimitError", "SteeringWarning"]


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


class InfeasibleError(ValueError):
    """A program or constraint set has no feasible point, so there is no solution to return.

    Raised instead of returning anything (never a made-up solution): a fairness program with
    ``xi < 0`` or one the solver reports infeasible (:mod:`rml_fast.fairness.multiclass`), a
    robust strategic program (:class:`rml_fast.strategic.decision_dependent.InfeasibleProgramError`),
    an empty robust acceptance region
    (:class:`rml_fast.strategic.ambiguity.InfeasibleRevealedSetError`). Catch this class for
    all of them. Subclasses :class:`ValueError`.

    Examples
    --------
    >>> from rml_fast.exceptions import InfeasibleError
    >>> issubclass(InfeasibleError, ValueError)
    True
    """


class ResourceLimitError(MemoryError, ValueError):
    """Work whose memory is known in advance would exceed the memory limit; refused before it
    allocates anything.

    The message states the estimate, the limit and how to raise it
    (:func:`rml_fast.config.set_memory_limit`, :func:`rml_fast.config.memory_limit` or the
    ``RML_FAST_MEMORY_LIMIT`` environment variable) or how to stream the work instead (e.g. a
    smaller ``chunk``). Subclasses :class:`MemoryError` and :class:`ValueError`, so code that
    catches either keeps working. ``estimate`` and ``limit`` (bytes) are attributes.

    Examples
    --------
    >>> from rml_fast.exceptions import ResourceLimitError
    >>> err = ResourceLimitError("too big", estimate=2**31, limit=2**30)
    >>> isinstance(err, MemoryError), isinstance(err, ValueError), err.estimate
    (True, True, 2147483648)
    """

    def __init__(self, message: str, *, estimate: int | None = None,
                 limit: int | None = None) -> None:
        super().__init__(message)
        self.estimate = estimate
        self.limit = limit
