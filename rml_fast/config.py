"""Process-wide settings of the native kernels: how many threads they use.

The C++ kernels run their loops on OpenMP threads. Without a setting here each parallel region
uses the calling thread's OpenMP default: ``OMP_NUM_THREADS`` if set, else one thread per
core, and whatever ``threadpoolctl.threadpool_limits`` (or ``omp_set_num_threads``) set *for
that Python thread*. :func:`set_num_threads` sets a limit for the whole process instead: it
holds for every Python thread that calls a kernel, and it also caps an explicit per-call
``n_threads`` argument.

torch has its own thread pool (``torch.set_num_threads``); on a machine shared with a torch
model, give the two pools disjoint budgets, e.g. ``rml_fast.set_num_threads(k)`` and
``torch.set_num_threads(cores - k)``, or 1 for both in a multi-process service.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from rml_fast._native import _C

__all__ = ["get_num_threads", "num_threads", "set_num_threads"]

_lock = threading.Lock()


def _check(n: object) -> int:
    if n is None:
        return 0
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be a positive int or None, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n must be >= 1 (or None to remove the limit), got {n}")
    return n


def set_num_threads(n: int | None) -> None:
    """Limit every native kernel to ``n`` threads, in every Python thread of the process.

    Parameters
    ----------
    n : int >= 1, or None
        The limit; None removes it (back to OpenMP's per-thread default).

    Raises
    ------
    TypeError, ValueError
        If ``n`` is not a positive int or None.

    Examples
    --------
    >>> import rml_fast
    >>> rml_fast.set_num_threads(1)
    >>> rml_fast.get_num_threads()
    1
    >>> rml_fast.set_num_threads(None)
    """
    value = _check(n)
    with _lock:
        _C.set_thread_limit(value)


def get_num_threads() -> int:
    """Threads a kernel called from this Python thread uses now (the process-wide limit if
    one is set, else this thread's OpenMP default)."""
    return int(_C.max_threads())


@contextlib.contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    """Context manager: the process-wide limit ``n`` inside the block, the previous one after.

    The limit is process-wide while the block runs (kernels started by other Python threads
    meanwhile use it too), as with :func:`set_num_threads`.

    Examples
    --------
    >>> import rml_fast
    >>> with rml_fast.num_threads(1):
    ...     rml_fast.get_num_threads()
    1
    """
    value = _check(n)
    with _lock:
        before = int(_C.thread_limit())
        _C.set_thread_limit(value)
    try:
        yield
    finally:
        with _lock:
            _C.set_thread_limit(before)
