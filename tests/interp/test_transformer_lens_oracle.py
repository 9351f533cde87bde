"""Oracle: circuit evaluation with TransformerLens split-qkv hooks on the converted model."""

from __future__ import annotations

import pytest
import torch

from rml_fast.interp import EdgeGraph, LogitDiff, evaluate_masks
from rml_fast.models import TinyConfig, TinyTransformer
from rml_fast.models.convert import to_transformer_lens

pytest.importorskip("transformer_lens")

CFGS = [
    TinyConfig(n_layers=2, d_model=16, n_heads=4, d_mlp=32, n_ctx=10, d_vocab=13),
    TinyConfig(n_layers=2, d_model=16, n_heads=2, d_mlp=None, n_ctx=10, d_vocab=13, ln=False),
]


def _sources(tl, tokens):
    _, cache = tl.run_with_cache(tokens)
    parts = [cache["blocks.0.hook_resid_pre"][0][None]]
    for layer in range(tl.cfg.n_layers):
        parts += list(cache[f"blocks.{layer}.attn.hook_result"][0].transpose(0, 1))
        if not tl.cfg.attn_only:
            parts.append(cache[f"blocks.{layer}.hook_mlp_out"][0])
    return torch.stack([p.reshape(tokens.shape[1], -1) for p in parts])


def tl_circuit_metric(tl, g, clean, corrupt, mask, metric):
    """EAP-IG-style evaluate_graph on TransformerLens: patch every destination input."""
    abl = _sources(tl, corrupt)
    removed = (~mask & g.real_edge_mask).to(abl.dtype)
    run = {}
    H, L = tl.cfg.n_heads, tl.cfg.n_layers

    def record(idx):
        def fn(x, hook):
            if x.ndim == 4:
                for h in range(H):
                    run[idx + h] = x[0, :, h]
            else:
                run[idx] = x[0]

        return fn

    def corr(j):
        lim = int(g.src_limit[j])
        return sum(removed[s, j] * (run[s] - abl[s]) for s in range(lim))

    def qkv(layer, w):
        def fn(x, hook):
            return x - torch.stack([corr(g.qkv_index(layer, h, w)) for h in range(H)], 1)[None]

        return fn

    def dest(j):
        return lambda x, hook: x - corr(j)[None]

    hooks = [("blocks.0.hook_resid_pre", record(0))]
    for layer in range(L):
        hooks += [(f"blocks.{layer}.hook_{w}_input", qkv(layer, w)) for w in "qkv"]
        hooks.append((f"blocks.{layer}.attn.hook_result", record(g.head_index(layer, 0))))
        if not tl.cfg.attn_only:
            hooks.append((f"blocks.{layer}.hook_mlp_in", dest(g.mlp_in_index(layer))))
            hooks.append((f"blocks.{layer}.hook_mlp_out", record(g.mlp_index(layer))))
    hooks.append((f"blocks.{L - 1}.hook_resid_post", dest(g.logits_index)))
    return float(metric(tl.run_with_hooks(clean, fwd_hooks=hooks))[0])


@pytest.mark.parametrize("cfg", CFGS, ids=["mlp", "attn_only_noln"])
def test_converted_model_and_circuits_match_transformer_lens(cfg):
    model = TinyTransformer(cfg, seed=0).double()
    tl = to_transformer_lens(model)
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(0, 13, (1, 8), generator=gen)
    corrupt = clean.clone()
    corrupt[0, 1:4] = torch.randint(0, 13, (3,), generator=gen)
    with torch.no_grad():
        torch.testing.assert_close(tl(clean), model(clean), rtol=1e-10, atol=1e-10)
        g = EdgeGraph.from_model(model)
        metric = LogitDiff(-1, 3, (5, 7))
        masks = (torch.rand(6, g.n_fwd, g.n_bwd, generator=gen) < 0.4) & g.real_edge_mask
        ours = evaluate_masks(model, g, clean, corrupt, masks, metric)
        oracle = torch.tensor([tl_circuit_metric(tl, g, clean, corrupt, m, metric) for m in masks])
    torch.testing.assert_close(ours, oracle.to(ours.dtype), rtol=1e-6, atol=1e-7)
    assert float(ours.std()) > 1e-2  # the masks give different values
