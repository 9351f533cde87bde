"""Edge attribution scores: EAP, EAP-IG-inputs and EAP-IG-activations, IG steps batched.

``score(s -> d) = sum_{b, p, i} (a_s(q) - a_s(q'))[b, p, i] * G_d[b, p, i]`` with

* ``"inputs"`` (EAP-IG, Hanna et al. 2024): ``G_d = (1/m) sum_{k=0}^{m-1} dL/dx_d`` at the input
  embedding ``e(q') + (k/m) (e(q) - e(q'))``;
* ``"activations"``: the same average, but every source output is set to
  ``a_s(q') + (k/m) (a_s(q) - a_s(q'))`` (values replaced, gradients passed straight through);
* ``"eap"`` (Syed et al. 2023): one gradient at the clean point.

The ``m`` interpolation points are stacked on the batch axis: one forward and one backward.
``noise_std > 0`` adds Gaussian noise ``N(0, noise_std^2)`` to the clean input embedding
(SmoothGrad-style view for the query-circuit ``noise`` sampler).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rml_fast._validation import Interval, check_scalar, check_tensor
from rml_fast.interp.circuit_eval import _check_tokens, source_names, stack_sources
from rml_fast.interp.edge_graph import EdgeGraph

__all__ = [
    "eap_ig_scores",
    "metric_rows",
]

_METHODS = ("inputs", "activations", "eap")


def _dest_names(model: Any) -> list[str]:
    names = []
    for layer in range(model.cfg.n_layers):
        names += [f"blocks.{layer}.hook_{w}_input" for w in "qkv"]
        if not model.cfg.attn_only:
            names.append(f"blocks.{layer}.hook_mlp_in")
    return [*names, f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"]


def _stack_dest_grads(model: Any, grads: dict[str, torch.Tensor]) -> torch.Tensor:
    """Destination gradients ``[n_bwd, B, P, D]`` in backward-node order."""
    parts = []
    for layer in range(model.cfg.n_layers):
        for w in "qkv":
            parts.append(grads[f"blocks.{layer}.hook_{w}_input"].permute(2, 0, 1, 3))
        if not model.cfg.attn_only:
            parts.append(grads[f"blocks.{layer}.hook_mlp_in"].unsqueeze(0))
    parts.append(grads[f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"].unsqueeze(0))
    return torch.cat(parts, dim=0)


def eap_ig_scores(
    model: Any,
    graph: EdgeGraph,
    clean: torch.Tensor,
    corrupt: torch.Tensor,
    metric: Callable[[torch.Tensor], torch.Tensor],
    *,
    steps: int = 5,
    method: str = "inputs",
    noise_std: float = 0.0,
    seed: int | None = None,
) -> torch.Tensor:
    """Edge scores of the EAP graph for ``(clean, corrupt)`` prompts (summed over the batch).

    Parameters
    ----------
    model : TinyTransformer
    graph : EdgeGraph
    clean, corrupt : LongTensor of shape (B, P)
    metric : callable
        ``logits [B, P, V] -> Tensor[B]`` (e.g. :class:`~rml_fast.interp.LogitDiff`); the
        gradients are of ``sum_b L_b``.
    steps : int, default=5
        IG interpolation points ``m`` (ignored for ``"eap"``).
    method : {"inputs", "activations", "eap"}, default="inputs"
    noise_std : float, default=0.0
        Standard deviation of Gaussian noise added to the clean input embedding.
    seed : int or None, default=None
        Seeds the noise.

    Returns
    -------
    scores : Tensor of shape (n_fwd, n_bwd), float32; zero off the real edges

    References
    ----------
    Hanna, Pezzelle & Belinkov, "Have Faith in Faithfulness", arXiv:2403.17806.
    Syed, Rager & Conmy, "Attribution Patching Outperforms Automated Circuit Discovery",
    arXiv:2310.10348.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> from rml_fast.interp import EdgeGraph, LogitDiff, eap_ig_scores
    >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=10), seed=0)
    >>> g = EdgeGraph.from_model(model)
    >>> s = eap_ig_scores(model, g, torch.tensor([[1, 2, 3]]), torch.tensor([[1, 4, 3]]),
    ...                   LogitDiff(-1, 2, (4,)))
    >>> tuple(s.shape), bool((s[~g.real_edge_mask] == 0).all())
    ((4, 8), True)
    """
    if not isinstance(graph, EdgeGraph):
        raise TypeError(f"graph must be an EdgeGraph, got {type(graph).__name__}")
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    steps = int(check_scalar(steps, "steps", Interval("int", 1, 10_000)))
    noise_std = float(check_scalar(noise_std, "noise_std", Interval("real", 0, None)))
    clean = _check_tokens(model, clean, "clean", False)
    corrupt = _check_tokens(model, corrupt, "corrupt", False)
    if corrupt.shape != clean.shape:
        raise ValueError(
            f"corrupt must have clean's shape {tuple(clean.shape)}, got {tuple(corrupt.shape)}"
        )
    if not callable(metric):
        raise TypeError("metric must be callable: logits -> Tensor[B]")
    if method == "eap":
        steps = 1
    b = clean.shape[0]

    noise_hooks: list[tuple[str, Any]] = []
    if noise_std > 0:
        gen = torch.Generator().manual_seed(0 if seed is None else int(seed))
        shape = (b, clean.shape[1], model.cfg.d_model)
        eps = (torch.randn(shape, generator=gen) * noise_std).to(model.W_E.dtype)
        noise_hooks = [("blocks.0.hook_resid_pre", lambda x, hook: x + eps.to(x.device))]
    with torch.no_grad():
        _, cache = model.run_with_cache(clean, names=source_names(model), hooks=noise_hooks)
        a_clean = stack_sources(model, cache)  # [B, n_fwd, P, D]
        _, cache = model.run_with_cache(corrupt, names=source_names(model))
        a_corr = stack_sources(model, cache)
    alphas = torch.tensor([1.0]) if method == "eap" else torch.arange(steps) / steps
    alphas = alphas.to(a_clean.dtype).to(a_clean.device)
    tokens = clean.repeat(steps, 1)  # [steps*B, P]; the input node is overridden below

    def interp(src: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
        # [B, ..] -> [steps*B, ..]: ref + alpha_k (src - ref), k-major
        a = alphas.view(-1, *([1] * src.ndim))
        return (ref.unsqueeze(0) + a * (src - ref).unsqueeze(0)).reshape(-1, *src.shape[1:])

    hooks: list[tuple[str, Any]] = []
    if method in ("inputs", "eap"):
        x0 = interp(a_clean[:, 0], a_corr[:, 0])
        hooks.append(("blocks.0.hook_resid_pre", lambda x, hook: x0))
    else:
        x0 = interp(a_clean[:, 0], a_corr[:, 0])
        hooks.append(("blocks.0.hook_resid_pre", lambda x, hook: x0))
        for layer in range(model.cfg.n_layers):
            hs = slice(graph.head_index(layer, 0), graph.head_index(layer, 0) + model.cfg.n_heads)
            res = interp(a_clean[:, hs], a_corr[:, hs]).transpose(1, 2)  # [sB, P, H, D]
            hooks.append((f"blocks.{layer}.attn.hook_result", lambda x, hook, r=res: _st(x, r)))
            if not model.cfg.attn_only:
                mi = graph.mlp_index(layer)
                mo = interp(a_clean[:, mi], a_corr[:, mi])
                hooks.append((f"blocks.{layer}.hook_mlp_out", lambda x, hook, r=mo: _st(x, r)))
    captured: dict[str, torch.Tensor] = {}

    def capture(x: torch.Tensor, hook: Any) -> torch.Tensor:
        y = x.view_as(x)  # its own autograd node
        captured[hook.name] = y
        return y

    hooks += [(n, capture) for n in _dest_names(model)]
    with torch.enable_grad():
        x0.requires_grad_(True)  # gradients flow from here; parameters are not differentiated
        logits = model(tokens, hooks=hooks)
        total = metric_rows(metric, logits, steps).sum()
        names = list(captured)
        grads = torch.autograd.grad(total, [captured[n] for n in names], allow_unused=True)
    gdict = {
        n: (g if g is not None else torch.zeros_like(captured[n]))
        for n, g in zip(names, grads, strict=False)
    }
    g = _stack_dest_grads(model, gdict)  # [n_bwd, steps*B, P, D]
    g = g.view(g.shape[0], steps, b, *g.shape[2:]).mean(1)  # average over IG steps
    diff = (a_clean - a_corr).transpose(0, 1)  # [n_fwd, B, P, D]
    scores = torch.einsum("sbpd,jbpd->sj", diff, g)
    return scores * graph.real_edge_mask.to(scores.device)


def _st(x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``value`` in the forward pass, identity gradient to ``x`` (straight-through)."""
    return x + (value - x).detach()


def metric_rows(
    metric: Callable[[torch.Tensor], torch.Tensor], logits: torch.Tensor, steps: int
) -> torch.Tensor:
    """Apply a per-row metric to logits whose batch is ``steps`` stacked copies of a batch."""
    steps = int(check_scalar(steps, "steps", Interval("int", 1, None)))
    check_tensor(logits, "logits", nonempty=True)
    if logits.ndim < 1 or logits.shape[0] % steps:
        raise ValueError(
            f"logits must have a batch that is a multiple of steps={steps}, got {tuple(logits.shape)}"
        )
    b = logits.shape[0] // steps
    return torch.cat([torch.as_tensor(metric(logits[k * b : (k + 1) * b])) for k in range(steps)])
