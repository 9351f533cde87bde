"""Embarrassingly parallel maps on one machine or a Ray cluster, in deterministic order.

:func:`parallel_map` runs ``fn(item)`` (or ``fn(item, seed=s_i)``) for every item serially, on
a local ``concurrent.futures`` executor, or as Ray tasks (``backend="ray"``; the ``ray`` extra:
``pip install 'rml_fast[ray]'``), and returns the results in the order of the items whatever
order they finish in. The per-item seeds ``s_i`` are drawn from ``rng`` up front
(``numpy.random.SeedSequence(rng).spawn(n)``), so the results do not depend on the backend, the
number of workers or the scheduling: a Ray run equals the serial run.

The grid/many helpers built on it are :func:`rml_fast.trees.grid.rashomon_grid`,
:func:`rml_fast.steering.srls_many.srls_many` and
:func:`rml_fast.interp.circuit_search_many.query_circuits_many`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

__all__ = ["BACKENDS", "item_seeds", "parallel_map"]

BACKENDS = ("serial", "ray")
_RAY_HINT = "backend='ray' needs Ray: pip install 'rml_fast[ray]'"


def item_seeds(rng: Any, n: int) -> list[int]:
    """``n`` independent 63-bit seeds derived from ``rng`` (``SeedSequence.spawn``).

    Parameters
    ----------
    rng : int, sequence of int, numpy Generator or None
        The root; a Generator contributes one draw, None fresh entropy.
    n : int
        Number of items.

    Returns
    -------
    list of int
        ``seeds[i]`` depends only on ``rng`` and ``i`` (not on ``n``).

    Examples
    --------
    >>> from rml_fast.parallel import item_seeds
    >>> item_seeds(0, 3)[:2] == item_seeds(0, 2)
    True
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if isinstance(rng, np.random.Generator):
        rng = int(rng.integers(0, 2**63 - 1))
    elif rng is not None and not isinstance(rng, (int, np.integer, list, tuple)):
        raise TypeError(f"rng must be an int, a sequence of ints, a numpy Generator or None, "
                        f"got {type(rng).__name__}")
    elif rng is not None:
        entropy = rng if isinstance(rng, (list, tuple)) else [rng]
        for v in entropy:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"rng must be an int, a sequence of ints, a numpy Generator or "
                                f"None, got a sequence holding {type(v).__name__} {v!r}")
            if v < 0:
                raise ValueError(f"rng must be non-negative (a seed), got {rng!r}")
    root = np.random.SeedSequence(rng)
    return [int(s.generate_state(1, np.uint64)[0]) & (2**63 - 1) for s in root.spawn(int(n))]


def _check_backend(backend: Any) -> None:
    if isinstance(backend, concurrent.futures.Executor):
        return
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or a concurrent.futures.Executor, "
                         f"got {backend!r}")
    if backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError as exc:
            raise ImportError(_RAY_HINT) from exc


def _call(fn: Callable[..., Any], item: Any, kwargs: dict[str, Any]) -> Any:
    return fn(item, **kwargs)


def parallel_map(
    fn: Callable[..., Any],
    items: Iterable[Any],
    *,
    backend: Any = "serial",
    rng: Any = None,
    seeds: bool = False,
    progress: bool = False,
    desc: str = "parallel_map",
    ray_options: dict[str, Any] | None = None,
    on_result: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """``[fn(item) for item in items]`` serially, on an executor or on Ray, in item order.

    Parameters
    ----------
    fn : callable
        ``fn(item)``, or ``fn(item, seed=s_i)`` with ``seeds=True``. For a process pool or Ray
        it must be picklable (a module-level function or a ``functools.partial`` of one; Ray
        also takes closures). Under Ray, ``fn`` (with any data it holds) is put in the object
        store once and shared by all tasks.
    items : iterable
        The work items (materialised into a list first).
    backend : {"serial", "ray"} or concurrent.futures.Executor, default="serial"
        ``"ray"`` submits one Ray task per item to the running Ray instance (started by Ray
        on first use if there is none: call ``ray.init(...)`` yourself to choose where).
    rng : int, numpy Generator or None
        Root of the per-item seeds (:func:`item_seeds`); used with ``seeds=True``.
    seeds : bool, default=False
        Pass ``seed=s_i`` to ``fn``: the results are then reproducible and identical on every
        backend.
    progress : bool, default=False
        A tqdm bar over the finished items.
    desc : str, default="parallel_map"
        The bar's label.
    ray_options : dict, optional
        ``.options(...)`` of the Ray task (e.g. ``{"num_cpus": 2}``).
    on_result : callable, optional
        ``on_result(i, result)``, called in the calling thread as each item finishes (in
        completion order), e.g. to checkpoint finished work; an exception it raises stops the
        map.

    Returns
    -------
    list
        ``results[i] = fn(items[i][, seed=s_i])``.

    Raises
    ------
    ValueError
        On an unknown ``backend`` (before any work).
    ImportError
        For ``backend="ray"`` without Ray installed (``pip install 'rml_fast[ray]'``).

    Examples
    --------
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> from rml_fast.parallel import parallel_map
    >>> parallel_map(abs, [-3, 1, -2])
    [3, 1, 2]
    >>> def draw(scale, seed):
    ...     import numpy as np
    ...     return float(np.random.default_rng(seed).normal()) * scale
    >>> with ThreadPoolExecutor(2) as pool:
    ...     a = parallel_map(draw, [1.0, 2.0], backend=pool, rng=0, seeds=True)
    >>> a == parallel_map(draw, [1.0, 2.0], rng=0, seeds=True)
    True
    """
    from tqdm.auto import tqdm

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    _check_backend(backend)
    if not isinstance(seeds, bool):
        raise TypeError(f"seeds must be a bool, got {seeds!r}")
    if ray_options is not None and not isinstance(ray_options, dict):
        raise TypeError(f"ray_options must be a dict or None, got {type(ray_options).__name__}")
    if on_result is not None and not callable(on_result):
        raise TypeError(f"on_result must be callable or None, got {type(on_result).__name__}")
    try:
        iterator = iter(items)
    except TypeError:
        raise TypeError(f"items must be an iterable, got {type(items).__name__}") from None
    items = list(iterator)
    kwargs = [{"seed": s} for s in item_seeds(rng, len(items))] if seeds else [{}] * len(items)
    out: list[Any] = [None] * len(items)
    with tqdm(total=len(items), desc=desc, disable=not progress) as bar:
        if isinstance(backend, concurrent.futures.Executor):
            futures = {backend.submit(_call, fn, item, kw): i
                       for i, (item, kw) in enumerate(zip(items, kwargs, strict=True))}
            for fut in concurrent.futures.as_completed(futures):
                out[futures[fut]] = fut.result()
                if on_result is not None:
                    on_result(futures[fut], out[futures[fut]])
                bar.update(1)
        elif backend == "ray":
            import ray

            task = ray.remote(_call)
            if ray_options:
                task = task.options(**ray_options)
            fn_ref = ray.put(fn)
            refs = [task.remote(fn_ref, item, kw) for item, kw in zip(items, kwargs, strict=True)]
            index = {ref: i for i, ref in enumerate(refs)}
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    out[index[ref]] = ray.get(ref)
                    if on_result is not None:
                        on_result(index[ref], out[index[ref]])
                    bar.update(1)
        else:
            for i, (item, kw) in enumerate(zip(items, kwargs, strict=True)):
                out[i] = fn(item, **kw)
                if on_result is not None:
                    on_result(i, out[i])
                bar.update(1)
    return out
