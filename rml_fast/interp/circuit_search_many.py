"""Query-circuit search over many prompts, on any :func:`rml_fast.parallel.parallel_map` backend
(serial, a ``concurrent.futures`` executor, or Ray).

Each prompt (a query ``q`` with its corruption ``q'``) is an independent best-of-N search of
:class:`~rml_fast.interp.query_circuits.QueryCircuitSearch`; prompt ``i`` runs with
``random_state = s_i`` from :func:`rml_fast.parallel.item_seeds` (``random_state``, i), so the
circuits are the same on every backend and for any number of workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rml_fast.interp._checks import naming
from rml_fast.interp.edge_graph import EdgeGraph
from rml_fast.interp.query_circuits import QueryCircuitSearch
from rml_fast.parallel import _check_backend, item_seeds, parallel_map

__all__ = ["query_circuits_many"]


class _Search:
    """Picklable ``(clean, corrupt, metric, views), seed -> fitted QueryCircuitSearch``."""

    def __init__(self, model: Any, params: dict[str, Any]) -> None:
        self.model, self.params = model, params

    def __call__(self, item: Any, seed: int) -> QueryCircuitSearch:
        import torch

        clean, corrupt, metric, views = item
        with torch.random.fork_rng():  # no trace of the search on the caller's torch RNG
            return QueryCircuitSearch(**self.params, random_state=seed).fit(
                self.model, clean, corrupt, metric, views)


def query_circuits_many(
    model: Any,
    prompts: Sequence[Any],
    metric: Any = None,
    *,
    backend: Any = "serial",
    random_state: Any = None,
    progress: bool = False,
    **params: Any,
) -> list[QueryCircuitSearch]:
    """Run one :class:`~rml_fast.interp.query_circuits.QueryCircuitSearch` per prompt, in
    parallel.

    Parameters
    ----------
    model : TinyTransformer
        Sent to every worker once (Ray: one object in the store).
    prompts : sequence
        Per prompt ``(clean, corrupt)``, ``(clean, corrupt, metric)`` or
        ``(clean, corrupt, metric, views)``; ``clean``/``corrupt`` LongTensors of shape (1, P).
    metric : LogitDiff or callable, optional
        The task metric of prompts that do not carry their own.
    backend : {"serial", "ray"} or concurrent.futures.Executor, default="serial"
        See :func:`rml_fast.parallel.parallel_map`; one task per prompt.
    random_state : int, numpy Generator or None
        Root of the per-prompt seeds (:func:`rml_fast.parallel.item_seeds`).
    progress : bool, default=False
        A tqdm bar over the finished prompts.
    **params
        :class:`~rml_fast.interp.query_circuits.QueryCircuitSearch` parameters (``n_edges``
        is required; ``progress`` is set to False).

    Returns
    -------
    list of QueryCircuitSearch
        Fitted searches (``circuit_``, ``ndf_``, ...), in prompt order.

    Raises
    ------
    ValueError, TypeError
        On a bad backend, parameter or prompt entry, before any search.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> from rml_fast.interp import LogitDiff
    >>> from rml_fast.interp.circuit_search_many import query_circuits_many
    >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=10), seed=0)
    >>> prompts = [(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 4, 3]])),
    ...            (torch.tensor([[5, 2, 7]]), torch.tensor([[5, 4, 7]]))]
    >>> out = query_circuits_many(model, prompts, LogitDiff(-1, 2, (4,)), n_edges=3,
    ...                           n_samples=4, sampler="edge", random_state=0)
    >>> [s.circuit_.shape == out[0].graph_.real_edge_mask.shape for s in out]
    [True, True]
    """
    _check_backend(backend)
    for bad in ("random_state", "progress"):
        if bad in params:
            raise TypeError(f"query_circuits_many sets {bad!r} itself; do not pass it in params")
    if "n_edges" not in params:
        raise TypeError("query_circuits_many needs n_edges (a QueryCircuitSearch parameter)")
    params = {**params, "progress": False}
    # unknown parameters raise TypeError here, bad values ValueError/TypeError, before any search
    QueryCircuitSearch(**params)._validate(EdgeGraph.from_model(model))
    if not isinstance(random_state, np.random.Generator):
        with naming("random_state"):
            item_seeds(random_state, 0)  # checks the seed (a Generator is not drawn from here)
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of (clean, corrupt[, metric[, views]])")
    items = []
    for i, p in enumerate(prompts):
        if not isinstance(p, (list, tuple)) or len(p) not in (2, 3, 4):
            raise ValueError(f"prompts[{i}] must be (clean, corrupt[, metric[, views]])")
        m = p[2] if len(p) >= 3 and p[2] is not None else metric
        if m is None:
            raise ValueError(f"prompts[{i}] has no metric and metric= was not given")
        items.append((p[0], p[1], m, p[3] if len(p) == 4 else None))
    return parallel_map(_Search(model, params), items, backend=backend, rng=random_state,
                        seeds=True, progress=progress, desc="query circuits")
