"""Query circuits: per-query circuit discovery scored by NDF, with Best-of-N sampling.

For one query ``q`` with corrupted counterpart ``q'``, :class:`QueryCircuitSearch` scores the
edges of the EAP graph (EAP-IG-inputs by default), builds ``N`` candidate circuits per size
from ``N`` sampled "views" and keeps the candidate with the best normalised deviation
faithfulness ``NDF(C) = 1 - min(|(L(M(q)) - L(C(q))) / (L(M(q)) - L(M(q')))|, 1)`` on the
original ``(q, q')``. All ``N * |sizes|`` candidates are evaluated in one batched call of
:func:`~rml_fast.interp.evaluate_masks`.

Samplers:

* ``"para"`` — paraphrase views ``(q_i, q_i')`` with the same answer (passed as ``views``;
  for the tiny IOI task :meth:`rml_fast.models.IOITask.paraphrases` gives the same names under
  other templates). BoN-Para is the paper's best variant.
* ``"noise"`` — SmoothGrad-style views: Gaussian noise (std ``noise_std``, default 0.1, i.e.
  variance 0.01 as in the reference code) on the clean input embedding before the IG path.
* ``"edge"`` — PROPOSED (not in the public paper text): one scoring pass, then ``N`` masks of
  ``n`` edges drawn from a Plackett-Luce distribution with logits ``|S| / T`` (Gumbel-top-n,
  ``T = std(|S|)`` by default). Candidate 0 is the deterministic top-n (so BoN never loses to
  the plain top-n circuit), also a PROPOSED detail.

Selection tie-break: higher NDF, then the smaller circuit, then the lower sample index.

References
----------
Wu & Barez, "Query Circuits: Explaining How Language Models Answer User Prompts",
arXiv:2509.24808.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from rml_fast._validation import Interval, check_rng, check_scalar
from rml_fast.interp.attribution import eap_ig_scores
from rml_fast.interp.circuit_eval import _check_tokens, evaluate_masks
from rml_fast.interp.circuit_metrics import (
    LogitDiff,
    _resolve_pos,
    logit_diff,
    ndf,
    nfs,
    sizes_from_densities,
)
from rml_fast.interp.edge_graph import EdgeGraph

logger = logging.getLogger(__name__)

_SAMPLERS = ("para", "noise", "edge")
_CONSTRUCT = ("topn", "greedy")
_NDF_EPS = 1e-6  # ndf()'s default eps: |L(M(q)) - L(M(q'))| below it makes NDF NaN

__all__ = [
    "EdgeGraph",
    "LogitDiff",
    "QueryCircuitSearch",
    "evaluate_masks",
    "logit_diff",
    "ndf",
    "nfs",
    "sample_edge_masks",
    "sizes_from_densities",
]


def sample_edge_masks(
    graph: EdgeGraph,
    scores: torch.Tensor,
    n: int,
    n_samples: int,
    *,
    temperature: float | None = None,
    rng: Any = None,
    include_topn: bool = True,
) -> torch.Tensor:
    """PROPOSED ``edge`` sampler: Gumbel-top-n masks of ``n`` edges, pruned.

    Each mask keeps the ``n`` real edges with the largest ``|S| / T + G`` (``G`` i.i.d.
    standard Gumbel), i.e. a draw of ``n`` edges without replacement from the Plackett-Luce
    distribution with logits ``|S| / T``; ``T = std(|S|)`` over real edges when None.

    Parameters
    ----------
    graph : EdgeGraph
    scores : Tensor of shape (n_fwd, n_bwd)
    n : int
    n_samples : int
    temperature : float or None, default=None
    rng : Generator, int or None, default=None
    include_topn : bool, default=True
        Make sample 0 the deterministic top-n.

    Returns
    -------
    masks : BoolTensor of shape (n_samples, n_fwd, n_bwd)
    """
    scores = graph._check_scores(scores)
    if scores.ndim != 2:
        raise ValueError(f"scores must have shape (n_fwd, n_bwd), got {tuple(scores.shape)}")
    n = graph._check_n(n)
    n_samples = int(check_scalar(n_samples, "n_samples", Interval("int", 1, None)))
    gen = check_rng(rng)
    real = graph.real_edge_mask
    mag = scores.detach().abs().cpu().double()
    if temperature is None:
        t = float(mag[real].std()) if int(real.sum()) > 1 else 1.0
        temperature = t if t > 0 else 1.0
    temperature = float(
        check_scalar(temperature, "temperature", Interval("real", 0, None, "neither"))
    )
    gumbel = torch.from_numpy(gen.gumbel(size=(n_samples, *mag.shape)))
    keys = mag / temperature + gumbel
    if include_topn:
        keys[0] = mag
    masks = graph.topn(keys.float(), n, absolute=False, prune=True)
    return masks.to(scores.device)


def _check_reference(l_full: float, l_ref: float, ablation: str) -> None:
    """Raise ValueError when NDF would be undefined (NaN) for every circuit of the query."""
    ref = "L(M(q')) on corrupt" if ablation == "patching" else f"the fully {ablation}-ablated L"
    if not (np.isfinite(l_full) and np.isfinite(l_ref)):
        raise ValueError(
            f"the metric must be finite on the query: L(M(q)) on clean = {l_full}, {ref} = {l_ref}"
        )
    if abs(l_full - l_ref) < _NDF_EPS:
        raise ValueError(
            f"NDF is undefined (NaN) for every circuit of this query: the metric gives "
            f"L(M(q)) = {l_full:.6g} on clean and {ref} = {l_ref:.6g}, less than {_NDF_EPS:g} "
            f"apart; check that corrupt changes the logits at the metric's answer position "
            f"(metric.pos) and that answer and wrong differ"
        )


def _check_view_position(i: int, view_clean: Any, metric: Any, *, shared: bool, n_query: int) -> None:
    """A LogitDiff's answer position must lie inside paraphrase view ``i`` (checked before any
    scoring). A view that reuses the query's metric with a non-negative ``pos`` must have the
    query's length: in a longer or shorter paraphrase that index is another token."""
    if not isinstance(metric, LogitDiff) or not isinstance(view_clean, torch.Tensor):
        return
    n_view = view_clean.shape[-1]
    if shared and metric.pos >= 0 and n_view != n_query:
        raise ValueError(
            f"views[{i}] has {n_view} positions and the query {n_query}: the shared metric's "
            f"pos={metric.pos} would read another token there; pass the view as "
            f"(clean, corrupt, metric) with its own answer position (e.g. "
            f"LogitDiff.from_query(view)), or use a negative pos (-1 = last)"
        )
    try:
        _resolve_pos(metric.pos, n_view)
    except ValueError as exc:
        raise ValueError(f"views[{i}]: {exc}") from None


class QueryCircuitSearch:
    """Best-of-N query-circuit search scored by NDF (Wu & Barez 2025).

    Parameters
    ----------
    n_edges : int or sequence of int
        Circuit size(s) in edges (before pruning); see :func:`sizes_from_densities`.
    n_samples : int, default=10
        ``N``: views (para/noise) or sampled masks (edge) per size.
    sampler : {"para", "noise", "edge"}, default="para"
    steps : int, default=5
        EAP-IG interpolation steps.
    construct : {"topn", "greedy"}, default="topn"
        Circuit construction from scores (para/noise samplers).
    method : {"inputs", "activations", "eap"}, default="inputs"
        Edge-scoring method.
    temperature : float or None, default=None
        Temperature of the edge sampler (None: std of |scores|).
    noise_std : float, default=0.1
        Noise of the noise sampler.
    ablation : {"patching", "zero", "mean"}, default="patching"
    random_state : Generator, int or None, default=None
    backend : {"auto", "torch", "cpp", "triton"}, default="auto"
        Backend of the batched circuit evaluation.
    progress : bool, default=True
        Progress bar over the scoring passes.

    Attributes
    ----------
    graph_ : EdgeGraph
    sizes_ : list of int
    circuit_ : BoolTensor of shape (n_fwd, n_bwd), or (len(sizes), n_fwd, n_bwd) for a sequence
    ndf_ : float, or ndarray of shape (len(sizes),)
    candidates_ : BoolTensor of shape (len(sizes), N, n_fwd, n_bwd)
    ndf_all_ : ndarray of shape (len(sizes), N)
    scores_ : Tensor of shape (N, n_fwd, n_bwd) (edge sampler: (1, n_fwd, n_bwd))
    l_full_, l_corr_ : float
        ``L(M(q))`` and ``L(M(q'))``.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> from rml_fast.interp import LogitDiff, QueryCircuitSearch
    >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=10), seed=0)
    >>> search = QueryCircuitSearch(n_edges=[3, 9], n_samples=4, sampler="edge", random_state=0,
    ...                             progress=False)
    >>> search = search.fit(model, torch.tensor([[1, 2, 3]]), torch.tensor([[1, 4, 3]]),
    ...                     LogitDiff(-1, 2, (4,)))
    >>> search.ndf_.shape, bool(search.ndf_[1] >= search.ndf_all_[1, 0])
    ((2,), True)
    """

    def __init__(
        self,
        n_edges: int | Sequence[int],
        n_samples: int = 10,
        sampler: str = "para",
        steps: int = 5,
        construct: str = "topn",
        method: str = "inputs",
        temperature: float | None = None,
        noise_std: float = 0.1,
        ablation: str = "patching",
        random_state: Any = None,
        backend: str = "auto",
        progress: bool = True,
    ) -> None:
        self.n_edges = n_edges
        self.n_samples = n_samples
        self.sampler = sampler
        self.steps = steps
        self.construct = construct
        self.method = method
        self.temperature = temperature
        self.noise_std = noise_std
        self.ablation = ablation
        self.random_state = random_state
        self.backend = backend
        self.progress = progress

    def _validate(self, graph: EdgeGraph) -> list[int]:
        if self.sampler not in _SAMPLERS:
            raise ValueError(f"sampler must be one of {_SAMPLERS}, got {self.sampler!r}")
        if self.construct not in _CONSTRUCT:
            raise ValueError(f"construct must be one of {_CONSTRUCT}, got {self.construct!r}")
        check_scalar(self.n_samples, "n_samples", Interval("int", 1, None))
        check_scalar(self.noise_std, "noise_std", Interval("real", 0, None))
        if isinstance(self.n_edges, (int, np.integer)):
            sizes = [self.n_edges]
        elif isinstance(self.n_edges, (list, tuple, np.ndarray, range)):
            sizes = list(self.n_edges)
        else:
            raise TypeError(
                f"n_edges must be an int or a non-empty sequence of ints, got "
                f"{type(self.n_edges).__name__} {self.n_edges!r}"
            )
        if not sizes:
            raise ValueError("n_edges must be an int or a non-empty sequence of ints")
        for s in sizes:
            check_scalar(s, "n_edges", Interval("int", 1, graph.n_edges))
        return [int(s) for s in sizes]

    def _score_views(
        self, model: Any, graph: EdgeGraph, clean: torch.Tensor, corrupt: torch.Tensor,
        metric: Callable[[torch.Tensor], torch.Tensor], views: Sequence[Any] | None,
        gen: np.random.Generator, checkpoint: Any = None,
    ) -> torch.Tensor:  # fmt: skip
        from tqdm.auto import tqdm

        n = int(self.n_samples)
        if self.sampler == "edge":
            jobs: list[tuple[Any, Any, Any, float, int | None]] = [
                (clean, corrupt, metric, 0.0, None)
            ]
        elif self.sampler == "noise":
            seeds = gen.integers(0, 2**62, size=n)
            jobs = [(clean, corrupt, metric, float(self.noise_std), int(sd)) for sd in seeds]
        else:
            if views is None or len(views) == 0:
                raise ValueError("sampler='para' needs views: a list of (clean, corrupt[, metric])")
            if len(views) < n:
                logger.warning("only %d paraphrase views for n_samples=%d", len(views), n)
            jobs = []
            for i, v in enumerate(list(views)[:n]):
                if len(v) not in (2, 3):
                    raise ValueError(
                        "each view must be (clean, corrupt) or (clean, corrupt, metric)"
                    )
                m = v[2] if len(v) == 3 else metric
                _check_view_position(i, v[0], m, shared=len(v) == 2, n_query=clean.shape[-1])
                jobs.append((v[0], v[1], m, 0.0, None))
        out: list[torch.Tensor] = []
        fingerprint: dict[str, Any] = {}
        if checkpoint is not None:
            from rml_fast._checkpoint import digest, load_checkpoint

            fingerprint = {
                "params": repr(sorted((k, repr(v)) for k, v in vars(self).items()
                                      if not k.startswith("_") and not k.endswith("_")
                                      and k not in ("progress", "random_state"))),
                "model": digest(*[p for p in model.parameters()]),
                "jobs": digest(*[x for c, k, _, sd, seed in jobs for x in (c, k, sd, seed)]),
            }
            out = list(load_checkpoint(checkpoint, kind="QueryCircuitSearch.scores",
                                       fingerprint=fingerprint) or [])
        for c, k, m, sd, seed in tqdm(
            jobs[len(out):], desc="EAP-IG views", disable=not self.progress, leave=False
        ):
            out.append(
                eap_ig_scores(model, graph, c, k, m, steps=self.steps, method=self.method,
                              noise_std=sd, seed=seed)
            )  # fmt: skip
            if checkpoint is not None:
                from rml_fast._checkpoint import save_checkpoint

                save_checkpoint(checkpoint, [t.detach().cpu() for t in out],
                                kind="QueryCircuitSearch.scores", fingerprint=fingerprint)
        return torch.stack([t.to(clean.device) for t in out])

    def _candidates(
        self, graph: EdgeGraph, scores: torch.Tensor, size: int, base_seed: int
    ) -> torch.Tensor:
        if self.sampler == "edge":
            # one stream per size: the first k samples do not depend on n_samples (BoN prefix)
            gen = np.random.default_rng([base_seed, size])
            return sample_edge_masks(
                graph, scores[0], size, int(self.n_samples), temperature=self.temperature, rng=gen
            )
        if self.construct == "greedy":
            return torch.stack([graph.greedy(s, size) for s in scores])
        return graph.topn(scores, size)

    def fit(
        self,
        model: Any,
        clean: torch.Tensor,
        corrupt: torch.Tensor,
        metric: LogitDiff | Callable[[torch.Tensor], torch.Tensor],
        views: Sequence[Any] | None = None,
        *,
        checkpoint: Any = None,
    ) -> QueryCircuitSearch:
        """Search circuits for the query ``clean`` (shape (1, P)) against ``corrupt``.

        Parameters
        ----------
        model : TinyTransformer
        clean, corrupt : LongTensor of shape (1, P)
        metric : LogitDiff or callable
            The task metric ``L``.
        views : list of (clean, corrupt) or (clean, corrupt, metric), optional
            Paraphrase views for ``sampler="para"``.
        checkpoint : str or path, optional
            A file rewritten atomically after each scored view (the EAP-IG passes, the
            long part of the search). A call whose ``checkpoint`` exists re-uses the views
            it holds and scores the rest, so an interrupted search (Ctrl-C, a killed
            process) ends with the result of an uninterrupted one. It is refused
            (``ValueError``) for another model, query, views or parameters, and needs a
            reproducible ``random_state`` (not None).

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Before any scoring, if the answer position ``metric.pos`` is outside the prompt,
            or if the query is degenerate: ``L(M(q))`` and the reference ``L(M(q'))`` (the
            fully ablated model for zero/mean ablation) are non-finite or less than 1e-6
            apart, which would make every NDF NaN.
        """
        graph = EdgeGraph.from_model(model)
        sizes = self._validate(graph)
        clean = _check_tokens(model, clean, "clean", True)
        _check_tokens(model, corrupt, "corrupt", False)
        if checkpoint is not None and self.random_state is None:
            raise ValueError("checkpoint needs a reproducible random_state (an int seed), "
                             "got random_state=None")
        gen = check_rng(self.random_state)
        with torch.no_grad():
            l_full = float(torch.as_tensor(metric(model(clean))).reshape(-1)[0])
            corr_logits = model(corrupt) if self.ablation == "patching" else None
            if corr_logits is not None:
                l_ref = float(torch.as_tensor(metric(corr_logits)).reshape(-1)[0])
            else:  # the fully ablated model: one masked forward
                none = torch.zeros_like(graph.real_edge_mask)[None]
                l_ref = float(
                    evaluate_masks(model, graph, clean, corrupt, none, metric,
                                   ablation=self.ablation, backend=self.backend)[0]
                )  # fmt: skip
        _check_reference(l_full, l_ref, self.ablation)
        scores = self._score_views(model, graph, clean, corrupt, metric, views, gen, checkpoint)
        self._base_seed = int(gen.integers(2**62))
        cands = torch.stack([self._candidates(graph, scores, s, self._base_seed) for s in sizes])
        n_per = cands.shape[1]
        flat = cands.reshape(-1, graph.n_fwd, graph.n_bwd)
        empty_full = torch.stack([torch.zeros_like(graph.real_edge_mask), graph.real_edge_mask])
        vals = evaluate_masks(
            model, graph, clean, corrupt, torch.cat([flat, empty_full.to(flat.device)]), metric,
            ablation=self.ablation, backend=self.backend,
        )  # fmt: skip
        # for patching L(M(q')) is the empty circuit; for zero/mean ablation it is the
        # fully ablated model (the reference point of the normalisation)
        l_corr = (
            float(vals[-2])
            if corr_logits is None
            else float(torch.as_tensor(metric(corr_logits)).reshape(-1)[0])
        )
        scores_circ = ndf(l_full, vals[:-2].cpu().double().numpy(), l_corr).reshape(
            len(sizes), n_per
        )
        n_kept = cands.flatten(-2).sum(-1).cpu().numpy()
        best = []
        for i in range(len(sizes)):
            key = np.nan_to_num(scores_circ[i], nan=-1.0)
            order = np.lexsort((np.arange(n_per), n_kept[i], -key))
            best.append(int(order[0]))
        self.graph_ = graph
        self.sizes_ = sizes
        self.scores_ = scores
        self.candidates_ = cands
        self.ndf_all_ = scores_circ
        self.l_full_, self.l_corr_ = l_full, l_corr
        self.circuit_values_ = vals[:-2].reshape(len(sizes), n_per)
        circuits = torch.stack([cands[i, b] for i, b in enumerate(best)])
        curve = np.array([scores_circ[i, b] for i, b in enumerate(best)])
        single = isinstance(self.n_edges, (int, np.integer))
        self.best_index_ = np.array(best)
        self.circuit_ = circuits[0] if single else circuits
        self.ndf_ = float(curve[0]) if single else curve
        self._fit_args = (model, clean, corrupt, metric)
        return self

    def ndf_curve(self, sizes: Sequence[int] | None = None) -> np.ndarray:
        """Best NDF per circuit size: the fitted sizes, or new ``sizes`` reusing the scores.

        Returns
        -------
        curve : ndarray of shape (len(sizes),)
        """
        if not hasattr(self, "scores_"):
            raise RuntimeError("call fit() first")
        if sizes is None:
            return np.atleast_1d(np.asarray(self.ndf_, dtype=float))
        model, clean, corrupt, metric = self._fit_args
        graph = self.graph_
        sizes = [int(check_scalar(s, "sizes", Interval("int", 1, graph.n_edges))) for s in sizes]
        cands = torch.stack(
            [self._candidates(graph, self.scores_, s, self._base_seed) for s in sizes]
        )
        vals = evaluate_masks(
            model, graph, clean, corrupt, cands.reshape(-1, graph.n_fwd, graph.n_bwd), metric,
            ablation=self.ablation, backend=self.backend,
        )  # fmt: skip
        nd = ndf(self.l_full_, vals.cpu().double().numpy(), self.l_corr_).reshape(len(sizes), -1)
        return np.nan_to_num(nd, nan=-np.inf).max(1)
