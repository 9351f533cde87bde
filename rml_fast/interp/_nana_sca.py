"""Private helpers of NaNA's Subspace Contribution Analysis: queries, frozen-norm maps, removals.

A *query* flattens "which token of which sequence, which logit difference" into index vectors
``bi, pi`` (length N) and the unembedding difference ``dW`` (N, D), so one code path serves a
single position per sequence and every position of a corpus.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from rml_fast.interp._checks import ids_like, not_meta
from rml_fast.interp._nana_adapters import Adapter, MLPWeights, RunRecord


def check_tokens(tokens: Any, name: str = "tokens") -> torch.Tensor:
    """An integer (batch, pos) tensor of token ids with values and at least one token."""
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.is_floating_point():
        raise ValueError(f"{name} must be an integer torch.Tensor of shape (batch, pos)")
    not_meta(tokens, name)
    if tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    if tokens.numel() == 0:
        raise ValueError(f"{name} must hold at least one token, got shape {tuple(tokens.shape)}")
    return tokens


def prepare_query(
    tokens: Any, pos_ids: Any, neg_ids: Any, position: Any, WU: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """Validate and flatten a query; returns ``(bi, pi, dW, shape)`` (shape: (B,) or (B, P))."""
    check_tokens(tokens)
    B, P = tokens.shape
    if isinstance(position, str):
        if position != "all":
            raise ValueError(f"position must be an int, (batch,) ints or 'all', got {position!r}")
        shape: tuple[int, ...] = (B, P)
        bi, pi = torch.arange(B).repeat_interleave(P), torch.arange(P).repeat(B)
    else:
        pos = ids_like(position, "position")
        pos = pos.expand(B) if pos.ndim == 0 else pos
        if pos.shape != (B,) or bool(((pos < -P) | (pos >= P)).any()):
            raise ValueError(
                f"position must be an int, (batch,) ints in [-{P}, {P}) or 'all', got {position!r}"
            )
        shape, bi, pi = (B,), torch.arange(B), pos % P
    N, V = bi.shape[0], WU.shape[1]
    yp = ids_like(pos_ids, "pos_ids")
    yp = yp.expand(shape) if yp.ndim == 0 else yp
    if tuple(yp.shape) != shape or bool(((yp < 0) | (yp >= V)).any()):
        raise ValueError(
            f"pos_ids must be an int or token ids in [0, {V}) of shape {shape}, got {pos_ids!r}"
        )
    if neg_ids is None:
        yn = torch.zeros(N, 0, dtype=torch.long)
    else:
        yn = ids_like(neg_ids, "neg_ids")
        yn = yn.reshape(1) if yn.ndim == 0 else yn
        yn = yn.expand(*shape, -1) if yn.ndim == 1 else yn
        if tuple(yn.shape[:-1]) != shape or bool(((yn < 0) | (yn >= V)).any()):
            raise ValueError(
                f"neg_ids must be ids in [0, {V}) of shape (k,) or {(*shape, 'k')}, got {neg_ids!r}"
            )
        yn = yn.reshape(N, -1)
    dW = WU[:, yp.reshape(N)].T  # (N, D)
    if yn.shape[1]:
        dW = dW - WU[:, yn].mean(-1).T
    return bi, pi, dW, shape


def metric(final: torch.Tensor, bi: torch.Tensor, pi: torch.Tensor, dW: torch.Tensor) -> torch.Tensor:
    """``L`` (N,) from the final normalised residual (the unembedding bias cancels in differences)."""
    return (final[bi, pi].to(dW.dtype) * dW).sum(-1)


def direct_grad(
    adapter: Adapter, rec: RunRecord, layer: int, bi: torch.Tensor, pi: torch.Tensor, dW: torch.Tensor
) -> torch.Tensor:
    """``g`` (N, D): the frozen-norm linear map from a write of MLP ``layer`` to the metric.

    Each norm on the way is ``x -> gamma * C(x) / s`` with ``s`` frozen at the clean run; its
    transpose applied to the cotangent, last norm first.
    """
    norms = adapter.norms()
    g = dW
    for name in reversed(adapter.chain(layer)):
        gain, eps = norms[name]
        x = rec.ln_in[name][bi, pi].to(dW.dtype)
        s = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
        g = g * gain.to(dW.dtype) / s
        g = g - g.mean(-1, keepdim=True)
    return g


def mlp_input(rec: RunRecord, layer: int, w: MLPWeights, fold_ln: bool, dtype: torch.dtype) -> torch.Tensor:
    """What the (folded or raw) ``W_in`` multiplies (B, P, D)."""
    x = rec.mlp_x[layer].to(dtype)
    if w.ln_w is not None:
        x = torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=w.ln_eps)
        if not fold_ln and w.ln_b is not None:
            x = x * w.ln_w.to(dtype) + w.ln_b.to(dtype)
    return x


def removal_deltas(
    rec: RunRecord,
    layer: int,
    U: torch.Tensor,
    S: torch.Tensor,
    V: torch.Tensor,
    kind: str,
    folded: tuple[torch.Tensor, torch.Tensor, MLPWeights] | None,
    fold_ln: bool,
    chunk: int,
    joint: bool = False,
) -> Iterator[torch.Tensor]:
    """Chunks (n, B, P, D) of ``mlp_out - mlp_out(with unit i removed from the weight)``.

    ``joint=True`` yields one (1, B, P, D) tensor for removing all the given units together.
    ``mlp_out`` removals are linear (``S_i (h.u_i) v_i``); ``mlp_in`` removals recompute the
    activation: ``act(pre) W_out - act(pre - S_i (x.u_i) v_i) W_out``.
    """
    dtype = U.dtype
    r = S.shape[0]
    if kind == "mlp_out":
        coef = (rec.post[layer].to(dtype) @ U.T) * S  # (B, P, r)
        if joint:
            yield (coef @ V)[None]
            return
        for s in range(0, r, chunk):
            yield torch.einsum("bpr,rd->rbpd", coef[..., s : s + chunk], V[s : s + chunk])
        return
    if folded is None:
        raise ValueError("kind='mlp_in' removals need the folded MLP weights")
    W_in, b_in, w = folded
    x = mlp_input(rec, layer, w, fold_ln, dtype)
    pre = x @ W_in + b_in
    W_out = w.W_out.to(dtype)
    y = w.act(pre) @ W_out
    proj = (x @ U.T) * S  # (B, P, r)
    if joint:
        yield (y - w.act(pre - proj @ V) @ W_out)[None]
        return
    for s in range(0, r, chunk):
        pre_i = pre[None] - torch.einsum("bpr,rf->rbpf", proj[..., s : s + chunk], V[s : s + chunk])
        yield y[None] - w.act(pre_i) @ W_out
