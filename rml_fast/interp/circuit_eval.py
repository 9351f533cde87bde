"""Evaluate many candidate circuits of one query in one batched forward.

A circuit is an edge mask ``m`` over :class:`~rml_fast.interp.EdgeGraph`. In the circuit run
destination ``d`` (a head's q/k/v input, an MLP input, or the final residual) reads

``x_d = sum_{s -> d} [m_sd a_s(run) + (1 - m_sd) a_s(abl)] + biases``

where ``a_s(abl)`` is the source's output on the corrupted query (``"patching"``), zero
(``"zero"``) or its mean over a batch of reference prompts (``"mean"``). :func:`evaluate_masks`
runs all ``N`` masks as the batch axis of one forward: per layer it mixes the source deltas
``a_s(run_n) - a_s(abl)`` into the destinations with :func:`rml_fast.kernels.circuits.masked_mix`
(dense GEMM or sparse C++/Triton path), runs every head on its own input, and computes only the
answer-position logits the metric needs. Positions after the answer position are dropped
(causal attention makes them irrelevant). Masks are processed in chunks to bound memory.

:func:`evaluate_masks_hooked` is the slow reference: one ordinary forward of the model per
mask, with hooks that rewrite each destination input (as EAP-IG's ``evaluate_graph``).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from typing import Any, cast

import torch

from rml_fast._validation import Interval, check_scalar
from rml_fast.interp._checks import not_meta
from rml_fast.interp.circuit_metrics import LogitDiff, _resolve_pos
from rml_fast.interp.edge_graph import EdgeGraph
from rml_fast.kernels.circuits import SPARSE_DENSITY, masked_mix
from rml_fast.models.transformer import layer_norm

_ABLATIONS = ("patching", "zero", "mean")
_BACKENDS = ("auto", "torch", "cpp", "triton")
_KERNEL_BACKEND = {"auto": "auto", "torch": "reference", "cpp": "native", "triton": "triton"}
DEFAULT_CHUNK_BYTES = 40 * 2**20  # working set of one chunk (deltas, q/k/v inputs, results)


def source_names(model: Any) -> list[str]:
    """Hook points whose outputs are the graph's source nodes (input, head results, MLPs)."""
    names = ["blocks.0.hook_resid_pre"]
    for layer in range(model.cfg.n_layers):
        names.append(f"blocks.{layer}.attn.hook_result")
        if not model.cfg.attn_only:
            names.append(f"blocks.{layer}.hook_mlp_out")
    return names


def stack_sources(model: Any, cache: dict[str, torch.Tensor]) -> torch.Tensor:
    """Source outputs ``[B, n_fwd, P, D]`` in forward-node order from a run_with_cache cache."""
    parts = [cache["blocks.0.hook_resid_pre"].unsqueeze(1)]
    for layer in range(model.cfg.n_layers):
        parts.append(cache[f"blocks.{layer}.attn.hook_result"].transpose(1, 2))
        if not model.cfg.attn_only:
            parts.append(cache[f"blocks.{layer}.hook_mlp_out"].unsqueeze(1))
    return torch.cat(parts, dim=1)


def source_activations(model: Any, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, sources [B, n_fwd, P, D])`` of a plain run on ``tokens``."""
    tokens = _check_tokens(model, tokens, "tokens", False)
    logits, cache = model.run_with_cache(tokens, names=source_names(model))
    return logits, stack_sources(model, cache)


def _check_tokens(model: Any, x: Any, name: str, batch_one: bool) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(x).__name__}")
    not_meta(x, name)
    if x.ndim != 2 or x.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be an integer tensor of shape (B, P), got {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"{name} must hold at least one prompt of one token, got {tuple(x.shape)}")
    if batch_one and x.shape[0] != 1:
        raise ValueError(f"{name} must have batch size 1 (one query), got {x.shape[0]}")
    if x.numel() and (int(x.min()) < 0 or int(x.max()) >= model.cfg.d_vocab):
        raise ValueError(f"{name} must hold token ids in [0, {model.cfg.d_vocab})")
    return x.long()


# Per-model cache of the ablated activations: repeated calls on the same query (as
# QueryCircuitSearch makes) skip the forward on the corrupted prompt. An entry is valid while
# every parameter and buffer of the model is the same storage (the entry holds a detached
# alias of each, so a replaced storage cannot come back at the same address) at the same
# in-place version counter, and the corrupted tokens, ablation, positions, dtype and device
# are equal; otherwise it is recomputed. One entry per model, dropped with the model.
_ABL_CACHE: weakref.WeakKeyDictionary[Any, tuple[Any, tuple[torch.Tensor, torch.Tensor]]] = (
    weakref.WeakKeyDictionary()
)


def _weights_state(model: Any) -> tuple[tuple[torch.Tensor, ...], tuple[int, ...]]:
    tensors = (*model.parameters(), *model.buffers())
    return tuple(t.detach() for t in tensors), tuple(t._version for t in tensors)


def _weights_unchanged(model: Any, state: tuple[tuple[torch.Tensor, ...], tuple[int, ...]]) -> bool:
    tensors = (*model.parameters(), *model.buffers())
    aliases, versions = state
    return len(tensors) == len(aliases) and all(
        a.data_ptr() == t.data_ptr() and a.dtype == t.dtype and a.shape == t.shape
        and v == t._version
        for a, v, t in zip(aliases, versions, tensors, strict=True)
    )  # fmt: skip


def _ablated(
    model: Any,
    corrupt: torch.Tensor,
    ablation: str,
    n_pos: int,
    like: torch.Tensor,
    cache: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a_s(abl) [n_fwd, P, D], its prefix sums over sources [n_fwd, P*D])``.

    ``like`` gives the dtype and device. With ``cache`` the result is memoised per model (see
    ``_ABL_CACHE``); callers must not modify the returned tensors.
    """
    n_fwd = len(source_names(model)) + (model.cfg.n_heads - 1) * model.cfg.n_layers
    shape = (n_fwd, n_pos, model.cfg.d_model)
    key: Any = None
    if cache:
        toks = corrupt[:, :n_pos] if ablation != "zero" else corrupt[:, :0]
        key = (
            ablation, n_pos, like.dtype, like.device, tuple(toks.shape),
            toks.cpu().numpy().tobytes(),
        )  # fmt: skip
        hit = _ABL_CACHE.get(model)
        if hit is not None and hit[0][0] == key and _weights_unchanged(model, hit[0][1]):
            return hit[1]
    if ablation == "zero":
        abl = torch.zeros(shape, dtype=like.dtype, device=like.device)
    else:
        _, src = source_activations(model, corrupt[:, :n_pos])
        abl = src.mean(0)  # patching: batch of one; mean: dataset mean per position
    abl_cum = abl.reshape(n_fwd, -1).clone()  # base terms: prefix sums of abl
    for i in range(1, n_fwd):  # (a row loop: cumsum along dim 0 is slow on CPU)
        abl_cum[i] += abl_cum[i - 1]
    if cache:
        _ABL_CACHE[model] = ((key, _weights_state(model)), (abl, abl_cum))
    return abl, abl_cum


# Per-thread CPU workspace of the batched forward (source deltas, mixed inputs), re-used across
# calls: a fresh multi-MB allocation is page-faulted on first touch, which cost about a third
# of a small call's time. Held until the thread ends or ``clear_workspace()``.
_WORKSPACE = threading.local()


def clear_workspace() -> None:
    """Free this thread's cached CPU workspace of :func:`evaluate_masks`."""
    _WORKSPACE.__dict__.clear()


def _buffer(name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor of ``shape``; on the CPU a view of a cached per-thread buffer."""
    if like.device.type != "cpu":
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    numel = math.prod(shape)
    buf = _WORKSPACE.__dict__.get(name)
    if buf is None or buf.dtype != like.dtype or buf.numel() < numel:
        buf = torch.empty(numel, dtype=like.dtype)
        _WORKSPACE.__dict__[name] = buf
    return buf[:numel].view(shape)


def _check_common(
    model: Any, graph: EdgeGraph, clean: Any, corrupt: Any, metric: Any, ablation: str
) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(graph, EdgeGraph):
        raise TypeError(f"graph must be an EdgeGraph, got {type(graph).__name__}")
    cfg = model.cfg
    if (graph.n_layers, graph.n_heads, graph.has_mlp) != (
        cfg.n_layers,
        cfg.n_heads,
        not cfg.attn_only,
    ):
        raise ValueError("graph does not match the model's shape")
    if ablation not in _ABLATIONS:
        raise ValueError(f"ablation must be one of {_ABLATIONS}, got {ablation!r}")
    clean = _check_tokens(model, clean, "clean", True)
    corrupt = _check_tokens(model, corrupt, "corrupt", ablation == "patching")
    if ablation != "zero" and corrupt.shape[1] != clean.shape[1]:
        raise ValueError(
            f"corrupt must have clean's {clean.shape[1]} positions, got {corrupt.shape[1]}"
        )
    if not callable(metric):
        raise TypeError("metric must be a LogitDiff or a callable logits -> Tensor[B]")
    return clean, corrupt


def evaluate_masks(
    model: Any,
    graph: EdgeGraph,
    clean: torch.Tensor,
    corrupt: torch.Tensor,
    masks: torch.Tensor,
    metric: LogitDiff | Callable[[torch.Tensor], torch.Tensor],
    *,
    ablation: str = "patching",
    chunk: int | None = None,
    backend: str = "auto",
    path: str = "auto",
    progress: bool = False,
    cache: bool = True,
) -> torch.Tensor:
    """The task metric of the circuit run of every mask, all masks in one batched forward.

    ``result[n] = L(C_n(q))`` where circuit ``C_n`` keeps the edges of ``masks[n]`` and the
    others carry their ablated values (see the module docstring).

    Parameters
    ----------
    model : TinyTransformer
    graph : EdgeGraph
        ``EdgeGraph.from_model(model)``.
    clean : LongTensor of shape (1, P)
        The query ``q``.
    corrupt : LongTensor of shape (1, P), or (B, P) for ``ablation="mean"``
        ``q'`` for patching; the reference prompts whose mean activations replace removed
        edges for mean ablation; ignored for zero ablation.
    masks : BoolTensor of shape (N, n_fwd, n_bwd)
    metric : LogitDiff or callable
        A :class:`LogitDiff` lets the kernel compute only its few answer-position logits; any
        other callable gets full logits ``[n, P, V]`` and must return ``[n]``.
    ablation : {"patching", "zero", "mean"}, default="patching"
    chunk : int or None, default=None
        Masks per batched forward (None: equal chunks of at most ~40 MB of working set, or of
        half the model's weight bytes if that is larger, so that weight traffic is amortised).
        An explicit chunk whose working set exceeds :func:`rml_fast.config.get_memory_limit`
        raises :class:`~rml_fast.exceptions.ResourceLimitError` before any forward.
    backend : {"auto", "torch", "cpp", "triton"}, default="auto"
        Backend of the masked mixing ("auto": C++ on CPU, Triton on CUDA).
    path : {"auto", "dense", "sparse"}, default="auto"
        Mixing path (see :func:`rml_fast.kernels.circuits.masked_mix`).
    progress : bool, default=False
        Show a tqdm bar over the chunks.
    cache : bool, default=True
        Reuse the ablated activations (the forward on ``corrupt``) of the previous call with
        the same model, ``corrupt``, ablation and answer position, as long as no parameter of
        the model was replaced or modified in place (checked by identity, storage and version
        counter). Set False when the model's forward changes otherwise (e.g. persistent hooks).

    Returns
    -------
    values : Tensor of shape (N,), float32 (the model's dtype), on the model's device

    Raises
    ------
    TypeError, ValueError
        On inputs of the wrong type, shape or value.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> from rml_fast.interp import EdgeGraph, LogitDiff, evaluate_masks
    >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=10), seed=0)
    >>> g = EdgeGraph.from_model(model)
    >>> clean, corrupt = torch.tensor([[1, 2, 3]]), torch.tensor([[1, 4, 3]])
    >>> metric = LogitDiff(pos=-1, answer=2, wrong=(4,))
    >>> masks = torch.stack([g.real_edge_mask, torch.zeros_like(g.real_edge_mask)])
    >>> vals = evaluate_masks(model, g, clean, corrupt, masks, metric)
    >>> bool(torch.allclose(vals, torch.cat([metric(model(clean)), metric(model(corrupt))]), atol=1e-5))
    True
    """
    clean, corrupt = _check_common(model, graph, clean, corrupt, metric, ablation)
    masks = graph._check_mask(masks, "masks")
    if masks.ndim != 3:
        raise ValueError(f"masks must have shape (N, n_fwd, n_bwd), got {tuple(masks.shape)}")
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    if chunk is not None:
        chunk = int(check_scalar(chunk, "chunk", Interval("int", 1, None)))
    cfg = model.cfg
    n_pos = clean.shape[1]
    fast = isinstance(metric, LogitDiff)
    pos = _resolve_pos(metric.pos, n_pos) if isinstance(metric, LogitDiff) else n_pos - 1
    keep = pos + 1 if fast else n_pos  # causal: later positions cannot affect position pos
    with torch.no_grad():
        # the circuit run needs only the clean input embedding (every other source is recomputed)
        emb = model.W_E[clean[0, :keep]] + model.W_pos[:keep]  # [P, D]
        src_clean = emb.expand(graph.n_fwd, keep, cfg.d_model)[None]  # shape/dtype/device only
        per_mask = (graph.n_fwd + 4 * cfg.n_heads) * keep * cfg.d_model
        per_mask *= src_clean.element_size()
        if chunk is not None:  # an explicit chunk: its working set must fit the memory limit
            from rml_fast.config import check_memory

            n_chunk = min(chunk, masks.shape[0])
            check_memory(n_chunk * per_mask,
                         f"a chunk of {n_chunk} circuits (the batched forward's working set)",
                         hint="pass a smaller chunk, or chunk=None (chunks of about 40 MB)")
        abl, abl_cum = _ablated(model, corrupt, ablation, keep, src_clean, cache)
        if chunk is None:
            # every chunk streams all weights once: a model whose weights dwarf the working set
            # (12L12H: 328 MB against 20 MB per mask) gets chunks of up to half its weight bytes
            weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
            chunk = max(1, max(DEFAULT_CHUNK_BYTES, weight_bytes // 2) // per_mask)
            n_chunks = max(1, -(-masks.shape[0] // chunk))
            chunk = max(1, -(-masks.shape[0] // n_chunks))  # balanced: no small last chunk
        masks = masks.to(src_clean.device) & graph.real_edge_mask.to(src_clean.device)
        if path == "auto" and masks.numel():  # one choice for all chunks and layers
            density = float(masks.sum()) / (masks.shape[0] * graph.n_edges)
            path = "sparse" if density < SPARSE_DENSITY else "dense"
        outs = []
        from tqdm.auto import tqdm

        starts = range(0, masks.shape[0], chunk)
        for start in tqdm(starts, desc="circuits", disable=not progress, leave=False):
            outs.append(
                _batched_forward(
                    model, graph, emb, abl, masks[start : start + chunk], metric,
                    pos if fast else None, _KERNEL_BACKEND[backend], path,
                    ablation == "patching", abl_cum,
                )
            )  # fmt: skip
        if not outs:
            return torch.zeros(0, dtype=src_clean.dtype, device=src_clean.device)
        return torch.cat(outs)


def _batched_forward(
    model: Any,
    graph: EdgeGraph,
    emb: torch.Tensor,
    abl: torch.Tensor,
    masks: torch.Tensor,
    metric: Any,
    pos: int | None,
    backend: str,
    path: str,
    patching: bool,
    abl_cum: torch.Tensor,
) -> torch.Tensor:
    """The metric of every mask of one chunk; ``abl_cum[s]`` = sum of ``abl[:s+1]`` as ``[n_fwd, P*D]``."""
    cfg = model.cfg
    n, n_fwd = masks.shape[0], graph.n_fwd
    n_pos, d = abl.shape[1], abl.shape[2]
    k = n_pos * d
    H = cfg.n_heads
    masks_u8 = masks.to(torch.uint8)
    # Source-first layout: delta[s] is the [n, P*D] matrix of source s over all runs, and the
    # mixed inputs come out destination-first, so that each head's q/k/v inputs over all runs
    # are one contiguous [n*P, D] matrix (one GEMM per head, no transposes).
    delta = _buffer("delta", (n_fwd, n, k), abl)
    delta[0] = (emb - abl[0]).reshape(k)
    bias = torch.zeros(k, dtype=abl.dtype, device=abl.device)

    # one output buffer per destination count, re-used by every layer
    buffers: dict[int, torch.Tensor] = {}

    def mix(
        limit: int, j0: int, j1: int, base_vec: torch.Tensor, ln: Any, need: Any = None
    ) -> torch.Tensor:
        m = masks_u8[:, :limit, j0:j1]
        base = base_vec.expand(j1 - j0, k).contiguous()
        if j1 - j0 not in buffers:
            buffers[j1 - j0] = _buffer(f"mix{j1 - j0}", (j1 - j0, n, k), abl)
        lnt = None if ln is None else (ln.w, ln.b, 1e-5)
        return masked_mix(
            delta, m, base, path=path, backend=backend, out=buffers[j1 - j0],
            source_first=True, ln=lnt, need=need,
        )  # fmt: skip

    # A node's output in run n matters only if some edge out of it is kept; under patching
    # it also differs from the ablated output only if some edge into it is kept. Only those
    # (run, node) pairs are computed; the others get delta = 0 (exact, see above).
    uses_out = masks.any(-1)  # [n, n_fwd]
    uses_in = masks.any(-2)  # [n, n_bwd]
    n_layers = len(model.blocks)
    dpos = delta[:, :, :d]  # replaced by the answer-position deltas before the last layer
    for layer, block in enumerate(model.blocks):
        start = graph.head_index(layer, 0)
        j0 = graph.qkv_index(layer, 0, "q")
        active = uses_out[:, start : start + H]
        if patching:
            active = active & uses_in[:, j0 : j0 + 3 * H].view(n, 3, H).any(1)
        # the q/k/v inputs of inactive (run, head) pairs are not needed: the kernel skips them
        need = active.repeat(1, 3)  # [n, 3H], columns (q|k|v, head)
        x = mix(start, j0, j0 + 3 * H, abl_cum[start - 1] + bias, block.ln1, need)  # [3H, n, k]
        act_t = active.T  # [H, n]
        # In the last layer a LogitDiff reads only the answer position (the last kept one):
        # the heads' queries, their results and the MLP are computed there only.
        last = pos is not None and layer == n_layers - 1
        if last:
            dpos = delta.view(n_fwd, n, n_pos, d)[:, :, pos].contiguous()  # [n_fwd, n, D]
            res = _heads_last(x.view(3, H, n, n_pos, d), block.attn)  # [H, n, D]
            out_h = dpos[start : start + H]
            torch.sub(res, abl[start : start + H, pos].unsqueeze(1), out=out_h)
            if not bool(act_t.all()):
                out_h[~act_t] = 0.0
        elif float(active.float().mean()) > 0.5:  # dense: every head of every run at once
            out_h = delta[start : start + H]  # [H, n, k]
            _heads_all(x.view(3, H, n * n_pos, d), block.attn, n, n_pos, out_h.view(H, -1, d))
            out_h.sub_(abl[start : start + H].reshape(H, 1, k))  # results written in place
            if not bool(act_t.all()):
                out_h[~act_t] = 0.0
        else:
            out_h = delta[start : start + H]
            out_h.zero_()
            rh, rn = torch.nonzero(act_t, as_tuple=True)
            if rn.numel():
                xin = x.view(3, H, n, n_pos, d)[:, rh, rn].transpose(0, 1)  # [A, 3, P, D]
                res = _head_pairs(xin, rh, block.attn, None)  # [A, P, D] (LN already applied)
                out_h[rh, rn] = (res - abl[start + rh]).reshape(-1, k)
        bias = bias + block.attn.b_O.repeat(n_pos)
        if block.mlp is not None:
            mi = graph.mlp_index(layer)
            jm = graph.mlp_in_index(layer)
            act_m = uses_out[:, mi] & (uses_in[:, jm] if patching else True)
            rows = torch.nonzero(act_m).flatten()
            out_m = dpos[mi] if last else delta[mi]  # [n, D] or [n, k]
            if rows.numel() < n:
                out_m.zero_()
            if rows.numel():
                if last:
                    lnt = None if block.ln2 is None else (block.ln2.w, block.ln2.b, 1e-5)
                    xm = masked_mix(
                        dpos, masks_u8[:, :mi, jm : jm + 1],
                        (abl_cum[mi - 1] + bias).view(n_pos, d)[pos : cast(int, pos) + 1],
                        path=path, backend=backend, source_first=True, ln=lnt,
                    )[0]  # [n, D]  # fmt: skip
                    a_m = abl[mi, pos]
                else:
                    xm = mix(mi, jm, jm + 1, abl_cum[mi - 1] + bias, block.ln2, act_m[:, None])
                    xm = xm[0]  # [n, k]
                    a_m = abl[mi].reshape(k)
                xm = xm if rows.numel() == n else xm[rows]
                width = xm.shape[-1]
                res_m = _mlp(block.mlp, xm.reshape(-1, d)).view(-1, width) - a_m
                if rows.numel() == n:
                    out_m.copy_(res_m)
                else:
                    out_m[rows] = res_m
    # final residual: only the answer position when the metric is a LogitDiff
    jl = graph.logits_index
    if pos is not None:
        base = (abl_cum[-1] + bias).view(n_pos, d)[pos]
        resid = masked_mix(
            dpos, masks_u8[:, :, jl : jl + 1], base[None], path=path, backend=backend,
            source_first=True,
        )[0]  # [n, D]  # fmt: skip
        if model.ln_final is not None:
            resid = layer_norm(resid, model.ln_final.w, model.ln_final.b)
        ids = metric.token_ids().to(resid.device)
        sel = resid @ model.unembed[:, ids] + model.b_U[ids]  # [n, len(ids)]
        rows = torch.full((n, cfg.d_vocab), float("nan"), dtype=sel.dtype, device=sel.device)
        rows[:, ids] = sel
        return metric._from_rows(rows)
    resid = mix(n_fwd, jl, jl + 1, abl_cum[-1] + bias, None)[0].view(n, n_pos, d)
    if model.ln_final is not None:
        resid = layer_norm(resid, model.ln_final.w, model.ln_final.b)
    return torch.as_tensor(metric(resid @ model.unembed + model.b_U))


def _mlp(mlp: Any, x: torch.Tensor) -> torch.Tensor:
    """The block's MLP on rows ``x [R, D]`` without hook points (same values as its forward).

    The hidden activations live in the workspace (the result is a fresh tensor).
    """
    h = _buffer("mlp_h", (x.shape[0], mlp.W_in.shape[1]), x)
    torch.addmm(mlp.b_in, x, mlp.W_in, out=h)
    if mlp.act == "gelu":
        torch.ops.aten.gelu_(h)
    else:
        torch.relu_(h)
    return torch.addmm(mlp.b_out, h, mlp.W_out)


def _heads_all(
    x: torch.Tensor, attn: Any, n: int, n_pos: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Every head of every run: ``x [3, H, n*P, D]`` (layer-normed q/k/v inputs, run-major rows).

    Returns the head results ``z_h W_O^h`` of shape ``[H, n*P, D]`` (no ``b_O``), written into
    ``out`` if given; the intermediates live in the workspace.
    """
    H = x.shape[1]
    dh = attn.W_Q.shape[-1]
    qkv = _buffer("heads_qkv", (3, H, x.shape[2], dh), x)
    torch.baddbmm(attn.b_Q[:, None], x[0], attn.W_Q, out=qkv[0])  # [H, n*P, dh]
    torch.baddbmm(attn.b_K[:, None], x[1], attn.W_K, out=qkv[1])
    torch.baddbmm(attn.b_V[:, None], x[2], attn.W_V, out=qkv[2])
    q, kk, v = (t.view(H * n, n_pos, dh) for t in qkv)
    causal = torch.full((n_pos, n_pos), float("-inf"), dtype=q.dtype, device=q.device).triu(1)
    scores = _buffer("heads_scores", (H * n, n_pos, n_pos), x)
    torch.baddbmm(
        causal.expand(H * n, n_pos, n_pos), q, kk.transpose(1, 2), alpha=1.0 / math.sqrt(dh),
        out=scores,
    )  # causal mask added in the GEMM's epilogue  # fmt: skip
    torch.ops.aten._softmax.out(scores, -1, False, out=scores)
    z = torch.bmm(scores, v, out=qkv[0].view(H * n, n_pos, dh)).view(H, n * n_pos, dh)
    if out is None:
        return torch.bmm(z, attn.W_O)
    return torch.bmm(z, attn.W_O, out=out)


def _heads_last(x: torch.Tensor, attn: Any) -> torch.Tensor:
    """Every head of every run at the last position only: ``x [3, H, n, P, D]`` (layer-normed).

    Returns the head results at the last position, ``[H, n, D]`` (no ``b_O``); the keys and
    values use all positions (no causal mask is needed for the last query).
    """
    _, H, n, n_pos, d = x.shape
    q = torch.baddbmm(attn.b_Q[:, None], x[0, :, :, -1], attn.W_Q)  # [H, n, dh]
    kk = torch.baddbmm(attn.b_K[:, None], x[1].reshape(H, n * n_pos, d), attn.W_K)
    v = torch.baddbmm(attn.b_V[:, None], x[2].reshape(H, n * n_pos, d), attn.W_V)
    dh = q.shape[-1]
    kk, v = kk.view(H * n, n_pos, dh), v.view(H * n, n_pos, dh)
    scores = torch.bmm(q.reshape(H * n, 1, dh), kk.transpose(1, 2)) / math.sqrt(dh)
    z = torch.bmm(torch.softmax(scores, dim=-1), v).view(H, n, dh)
    return torch.bmm(z, attn.W_O)


def _head_pairs(x: torch.Tensor, heads: torch.Tensor, attn: Any, ln: Any) -> torch.Tensor:
    """Attention of (run, head) pairs: ``x [A, 3, P, D]`` q/k/v inputs, ``heads [A]``.

    Returns the head results ``z_h W_O^h`` of shape ``[A, P, D]`` (no ``b_O``).
    """
    if ln is not None:
        x = layer_norm(x, ln.w, ln.b)
    q = torch.baddbmm(attn.b_Q[heads][:, None], x[:, 0], attn.W_Q[heads])
    k = torch.baddbmm(attn.b_K[heads][:, None], x[:, 1], attn.W_K[heads])
    v = torch.baddbmm(attn.b_V[heads][:, None], x[:, 2], attn.W_V[heads])
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    n_pos = q.shape[1]
    causal = torch.ones(n_pos, n_pos, dtype=torch.bool, device=q.device).tril()
    pattern = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    return (pattern @ v) @ attn.W_O[heads]


# --- the slow reference: one hooked forward per mask -------------------------------------


def evaluate_masks_hooked(
    model: Any,
    graph: EdgeGraph,
    clean: torch.Tensor,
    corrupt: torch.Tensor,
    masks: torch.Tensor,
    metric: LogitDiff | Callable[[torch.Tensor], torch.Tensor],
    *,
    ablation: str = "patching",
    cache: bool = True,
) -> torch.Tensor:
    """Reference for :func:`evaluate_masks`: one hooked forward of the model per mask.

    Hooks record each source's output in the current run and rewrite every destination input
    (``blocks.{l}.hook_{q,k,v}_input``, ``blocks.{l}.hook_mlp_in``, the last
    ``hook_resid_post``) as ``x_d - sum_s (1 - m_sd) (a_s(run) - a_s(abl))``.
    Same parameters and result as :func:`evaluate_masks` (``cache`` too: the ablated
    activations are shared with it).
    """
    clean, corrupt = _check_common(model, graph, clean, corrupt, metric, ablation)
    masks = graph._check_mask(masks, "masks")
    n_pos = clean.shape[1]
    with torch.no_grad():
        like = model.W_E[:0]  # dtype and device only
        abl, _ = _ablated(model, corrupt, ablation, n_pos, like, cache)  # [n_fwd, P, D]
        out = [_hooked_single(model, graph, clean, abl, m, metric) for m in masks]
        if not out:
            return torch.zeros(0)
        return torch.stack(out)


def _hooked_single(
    model: Any,
    graph: EdgeGraph,
    clean: torch.Tensor,
    abl: torch.Tensor,
    m: torch.Tensor,
    metric: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    cfg = model.cfg
    L, H = cfg.n_layers, cfg.n_heads
    removed = (~m & graph.real_edge_mask.to(m.device)).to(abl.dtype)  # [n_fwd, n_bwd]
    run: dict[int, torch.Tensor] = {}

    def record(idx: int) -> Callable[[torch.Tensor, Any], None]:
        def fn(x: torch.Tensor, hook: Any) -> None:
            if x.ndim == 4:  # head results [1, P, H, D]
                for h in range(H):
                    run[idx + h] = x[0, :, h]
            else:
                run[idx] = x[0]

        return fn

    def correction(j: int) -> torch.Tensor:
        lim = int(graph.src_limit[j])
        diff = torch.stack([run[s] - abl[s] for s in range(lim)])  # [lim, P, D]
        return torch.einsum("s,spd->pd", removed[:lim, j], diff)

    def patch_qkv(layer: int, which: str) -> Callable[[torch.Tensor, Any], torch.Tensor]:
        def fn(x: torch.Tensor, hook: Any) -> torch.Tensor:
            cols = [correction(graph.qkv_index(layer, h, which)) for h in range(H)]
            return x - torch.stack(cols, dim=1)[None]

        return fn

    def patch(j: int) -> Callable[[torch.Tensor, Any], torch.Tensor]:
        def fn(x: torch.Tensor, hook: Any) -> torch.Tensor:
            return x - correction(j)[None]

        return fn

    hooks: list[tuple[str, Any]] = [("blocks.0.hook_resid_pre", record(0))]
    for layer in range(L):
        for w in "qkv":
            hooks.append((f"blocks.{layer}.hook_{w}_input", patch_qkv(layer, w)))
        hooks.append((f"blocks.{layer}.attn.hook_result", record(graph.head_index(layer, 0))))
        if not cfg.attn_only:
            hooks.append((f"blocks.{layer}.hook_mlp_in", patch(graph.mlp_in_index(layer))))
            hooks.append((f"blocks.{layer}.hook_mlp_out", record(graph.mlp_index(layer))))
    hooks.append((f"blocks.{L - 1}.hook_resid_post", patch(graph.logits_index)))
    return torch.as_tensor(metric(model(clean, hooks=hooks))).reshape(-1)[0]


__all__ = [
    "clear_workspace",
    "evaluate_masks",
    "evaluate_masks_hooked",
    "source_activations",
    "stack_sources",
]
