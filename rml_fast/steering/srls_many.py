"""SRLS steering vectors for many concepts at once, on any :func:`rml_fast.parallel.parallel_map`
backend (serial, a ``concurrent.futures`` executor, or Ray).

Concept ``c`` with prompt-pair differences ``Delta_c`` (n_c, d) gets its own
:class:`~rml_fast.steering.srls.SRLS` fit on the shared decoder ``D`` (d, m): the concepts are
independent problems. Concept ``i`` is fitted with ``rng = s_i`` from
:func:`rml_fast.parallel.item_seeds` (``rng``, i), so the folds and subsamples, hence the
vectors, are the same on every backend and for any number of workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rml_fast._validation import check_rng
from rml_fast.parallel import _check_backend, parallel_map
from rml_fast.steering.srls import SRLS

__all__ = ["srls_many"]


class _Fit:
    """Picklable ``(deltas[, groups]), seed -> fitted SRLS`` for one concept."""

    def __init__(self, D: Any, params: dict[str, Any]) -> None:
        self.D, self.params = D, params

    def __call__(self, item: Any, seed: int) -> SRLS:
        deltas, groups = item
        return SRLS(**self.params, rng=seed).fit(self.D, deltas, groups)


def srls_many(
    D: Any,
    concepts: Any,
    *,
    backend: Any = "serial",
    rng: Any = None,
    progress: bool = False,
    **params: Any,
) -> Any:
    """Fit one :class:`~rml_fast.steering.srls.SRLS` per concept, in parallel.

    Parameters
    ----------
    D : array-like of shape (d, m) or an SAE decoder
        The shared decoder (as :meth:`SRLS.fit`); sent to every worker once (Ray: one object).
    concepts : mapping or sequence
        Per concept its ``deltas`` (n_pairs, d) or a tuple ``(deltas, groups)``; a mapping
        ``name -> ...`` or a sequence.
    backend : {"serial", "ray"} or concurrent.futures.Executor, default="serial"
        See :func:`rml_fast.parallel.parallel_map`; one task per concept.
    rng : int, numpy Generator or None
        Root of the per-concept seeds (:func:`rml_fast.parallel.item_seeds`); None: fresh.
    progress : bool, default=False
        A tqdm bar over the finished concepts.
    **params
        Other :class:`~rml_fast.steering.srls.SRLS` parameters (``support``, ``k``, ...).

    Returns
    -------
    dict or list of SRLS
        Fitted estimators, a dict with the mapping's keys (in its order) or a list.

    Raises
    ------
    ValueError, TypeError
        On a bad backend, parameter or concept entry, before any fit.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.steering.srls_many import srls_many
    >>> rng = np.random.default_rng(0)
    >>> D = rng.standard_normal((32, 64)); D /= np.linalg.norm(D, axis=0)
    >>> def pairs(atoms):
    ...     delta = np.zeros(64); delta[atoms] = 1.5
    ...     return D @ delta + 0.01 * rng.standard_normal((30, 32))
    >>> out = srls_many(D, {"a": pairs([3, 9]), "b": pairs([20, 41])}, support="fixed_k", k=2,
    ...                 rng=0)
    >>> {name: est.support_.tolist() for name, est in out.items()}
    {'a': [3, 9], 'b': [20, 41]}
    """
    _check_backend(backend)
    if "rng" in params:
        raise TypeError("srls_many derives each concept's rng from rng=; do not pass it twice")
    check_rng(rng, "rng")  # validation only: parallel_map derives the seeds from rng itself
    SRLS(**params).get_params()  # unknown parameters raise TypeError here, before any fit
    if isinstance(concepts, Mapping):
        names: list[Any] | None = list(concepts)
        entries = list(concepts.values())
    elif isinstance(concepts, (list, tuple)):
        names, entries = None, list(concepts)
    else:
        raise TypeError(f"concepts must be a mapping or a sequence, got {type(concepts).__name__}")
    if not entries:
        raise ValueError("concepts must not be empty")
    items = []
    for i, e in enumerate(entries):
        if isinstance(e, tuple):
            if len(e) != 2:
                raise ValueError(f"concepts[{i}] must be deltas or (deltas, groups), got a tuple "
                                 f"of length {len(e)}")
            items.append(e)
        else:
            items.append((e, None))
    fits = parallel_map(_Fit(D, params), items, backend=backend, rng=rng, seeds=True,
                        progress=progress, desc="SRLS concepts")
    return fits if names is None else dict(zip(names, fits, strict=True))
