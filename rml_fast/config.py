"""Process-wide settings: how many threads the native kernels use, and the memory limit.

The C++ kernels run their loops on OpenMP threads. Without a setting here each parallel region
uses the calling thread's OpenMP default: ``OMP_NUM_THREADS`` if set, else one thread per
core, and whatever ``threadpoolctl.threadpool_limits`` (or ``omp_set_num_threads``) set *for
that Python thread*. :func:`set_num_threads` sets a limit for the whole process instead: it
holds for every Python thread that calls a kernel, and it also caps an explicit per-call
``n_threads`` argument.

torch has its own thread pool (``torch.set_num_threads``); on a machine shared with a torch
model, give the two pools disjoint budgets, e.g. ``rml_fast.set_num_threads(k)`` and
``torch.set_num_threads(cores - k)``, or 1 for both in a multi-process service.

Memory limit: work whose memory is known before it starts (the reference NUDFT's materialised
``(B, N, F)`` phases, the Lasso's dense coefficients and Gram cache, a circuit-evaluation chunk)
is checked against :func:`get_memory_limit` and refused with
:class:`~rml_fast.exceptions.ResourceLimitError` (stating the estimate and the limit) instead of
being killed by the operating system. The default is 90 % of the memory available when the
check runs (``MemAvailable`` of ``/proc/meminfo``, else the physical memory); the environment
variable ``RML_FAST_MEMORY_LIMIT`` (bytes, or with a suffix ``K``, ``M``, ``G``, ``T``: powers of
1024) or :func:`set_memory_limit` / :func:`memory_limit` override it.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import threading
from collections.abc import Iterator

from rml_fast._native import _C

__all__ = [
    "check_memory",
    "get_memory_limit",
    "get_num_threads",
    "memory_limit",
    "num_threads",
    "set_memory_limit",
    "set_num_threads",
]

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


# --- memory limit ----------------------------------------------------------------------------

DEFAULT_MEMORY_FRACTION = 0.9
_memory_limit: int | None = None  # None: the default (environment variable, else available)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _parse_bytes(text: str, name: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    number = t[: len(t) - len(unit)] if unit else t
    try:
        value = float(number)
    except ValueError:
        raise ValueError(
            f"{name} must be a number of bytes, optionally with a suffix K, M, G or T "
            f"(e.g. '8G'), got {text!r}") from None
    if not value > 0 or value != value:
        raise ValueError(f"{name} must be a positive number of bytes, got {text!r}")
    return int(value * _UNITS[unit])


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 2**63 - 1  # unknown: no limit


def _check_limit(n: object) -> int | None:
    if n is None:
        return None
    if isinstance(n, str):
        return _parse_bytes(n, "nbytes")
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"nbytes must be a positive int, a string such as '8G', or None, "
                        f"got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"nbytes must be >= 1 (or None for the default), got {n}")
    return n


def set_memory_limit(nbytes: int | str | None) -> None:
    """Set the process-wide memory limit of predictable work, in bytes.

    Parameters
    ----------
    nbytes : int >= 1, str such as ``"8G"``, or None
        The limit; None restores the default (``RML_FAST_MEMORY_LIMIT`` if set, else 90 % of
        the memory available at each check).

    Raises
    ------
    TypeError, ValueError
        If ``nbytes`` is not a positive int, a size string or None.

    Examples
    --------
    >>> from rml_fast.config import get_memory_limit, set_memory_limit
    >>> set_memory_limit("1G")
    >>> get_memory_limit()
    1073741824
    >>> set_memory_limit(None)
    """
    global _memory_limit
    value = _check_limit(nbytes)
    with _lock:
        _memory_limit = value


def get_memory_limit() -> int:
    """The memory limit in bytes that :func:`check_memory` applies now.

    The value set by :func:`set_memory_limit` / :func:`memory_limit`, else
    ``RML_FAST_MEMORY_LIMIT``, else ``0.9 *`` the available memory (read at each call).

    Examples
    --------
    >>> from rml_fast.config import get_memory_limit
    >>> get_memory_limit() > 0
    True
    """
    if _memory_limit is not None:
        return _memory_limit
    env = os.environ.get("RML_FAST_MEMORY_LIMIT")
    if env:
        return _parse_bytes(env, "RML_FAST_MEMORY_LIMIT")
    return max(1, int(DEFAULT_MEMORY_FRACTION * _available_bytes()))


@contextlib.contextmanager
def memory_limit(nbytes: int | str | None) -> Iterator[None]:
    """Context manager: the memory limit ``nbytes`` inside the block, the previous one after.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.config import memory_limit
    >>> from rml_fast.exceptions import ResourceLimitError
    >>> from rml_fast.kernels.nudft import FrequencyGrid, nudft_type1_reference
    >>> grid = FrequencyGrid(1, 4.0, 1.0)
    >>> x, v = torch.rand(2, 1000, 1), torch.rand(2, 1000, 3)
    >>> with memory_limit(1000):
    ...     try:
    ...         nudft_type1_reference(x, v, grid)
    ...     except ResourceLimitError as err:
    ...         print(err.limit)
    1000
    """
    global _memory_limit
    value = _check_limit(nbytes)
    with _lock:
        before = _memory_limit
        _memory_limit = value
    try:
        yield
    finally:
        with _lock:
            _memory_limit = before


def _fmt_bytes(n: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit} ({n} bytes)"
    return f"{n} bytes"


def check_memory(estimate: int, what: str, *, hint: str = "") -> None:
    """Raise :class:`~rml_fast.exceptions.ResourceLimitError` if ``estimate`` bytes exceed
    the memory limit; call it before allocating.

    Parameters
    ----------
    estimate : int
        Bytes the work will allocate (its predictable part).
    what : str
        What would be allocated, for the message (e.g. ``"the (B, N, F) phases"``).
    hint : str, optional
        How to avoid it other than raising the limit (e.g. ``"use backend='native'"``).

    Raises
    ------
    ResourceLimitError
        If ``estimate`` exceeds the limit.
    TypeError, ValueError
        If ``estimate`` is not a finite real number.

    Examples
    --------
    >>> from rml_fast.config import check_memory, memory_limit
    >>> with memory_limit(10):
    ...     try:
    ...         check_memory(100, "a test buffer")
    ...     except MemoryError as err:
    ...         print(str(err).split(" (")[0])
    a test buffer needs about 100 bytes, more than the memory limit of 10 bytes
    """
    if isinstance(estimate, bool) or not isinstance(estimate, numbers.Real):
        raise TypeError(f"estimate must be a number of bytes, got {type(estimate).__name__} "
                        f"{estimate!r}")
    if not math.isfinite(estimate):
        raise ValueError(f"estimate must be a finite number of bytes, got {estimate!r}")
    limit = get_memory_limit()
    estimate = int(estimate)
    if estimate <= limit:
        return
    from rml_fast.exceptions import ResourceLimitError

    source = ("set by rml_fast.config.set_memory_limit/memory_limit" if _memory_limit is not None
              else "from RML_FAST_MEMORY_LIMIT" if os.environ.get("RML_FAST_MEMORY_LIMIT")
              else f"{DEFAULT_MEMORY_FRACTION:.0%} of the available memory")
    raise ResourceLimitError(
        f"{what} needs about {_fmt_bytes(estimate)}, more than the memory limit of "
        f"{_fmt_bytes(limit)} ({source}); nothing was allocated. "
        + (f"{hint}; or raise " if hint else "Raise ")
        + "the limit with rml_fast.config.set_memory_limit(nbytes), the context manager "
        "rml_fast.config.memory_limit(nbytes) or the environment variable RML_FAST_MEMORY_LIMIT",
        estimate=estimate, limit=limit)
