"""evaluate_masks: full/empty circuits, batched == sequential == hook reference, every backend."""

from __future__ import annotations

import pytest
import torch

from rml_fast.interp import EdgeGraph, LogitDiff, evaluate_masks, evaluate_masks_hooked
from rml_fast.models import TinyConfig, TinyTransformer

CFGS = {
    "mlp": TinyConfig(n_layers=2, d_model=16, n_heads=4, d_mlp=32, n_ctx=10, d_vocab=13),
    "attn_only": TinyConfig(n_layers=2, d_model=16, n_heads=2, d_mlp=None, n_ctx=10, d_vocab=13),
    "noln_relu": TinyConfig(n_layers=3, d_model=12, n_heads=3, d_mlp=24, n_ctx=10, d_vocab=13, ln=False, act="relu"),
}  # fmt: skip


def _setup(name, seed=0, dtype=torch.float32):
    model = TinyTransformer(CFGS[name], seed=seed).to(dtype)
    with torch.no_grad():  # larger weights: the metric moves a lot between clean and corrupt
        for p in model.parameters():
            p.mul_(2.0)
    g = EdgeGraph.from_model(model)
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, 13, (1, 8), generator=gen)
    corrupt = clean.clone()
    corrupt[0, 1:4] = torch.randint(0, 13, (3,), generator=gen)
    metric = LogitDiff(pos=-1, answer=3, wrong=(5, 7))
    return model, g, clean, corrupt, metric


def _random_masks(g, n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    dens = torch.linspace(0.02, 0.9, n)[:, None, None]
    return (torch.rand(n, g.n_fwd, g.n_bwd, generator=gen) < dens) & g.real_edge_mask


@pytest.mark.parametrize("name", list(CFGS))
def test_full_and_empty_circuits(name):
    model, g, clean, corrupt, metric = _setup(name)
    full, empty = g.real_edge_mask, torch.zeros_like(g.real_edge_mask)
    vals = evaluate_masks(model, g, clean, corrupt, torch.stack([full, empty]), metric)
    with torch.no_grad():
        l_clean, l_corr = metric(model(clean)), metric(model(corrupt))
    torch.testing.assert_close(vals, torch.cat([l_clean, l_corr]), rtol=1e-5, atol=1e-5)
    assert abs(float(l_clean - l_corr)) > 0.1  # the check is not vacuous
    # the full circuit is the clean model under every ablation
    for ablation in ("zero", "mean"):
        ref = corrupt.repeat(3, 1) if ablation == "mean" else corrupt
        v = evaluate_masks(model, g, clean, ref, full[None], metric, ablation=ablation)
        torch.testing.assert_close(v, l_clean, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(CFGS))
@pytest.mark.parametrize("ablation", ["patching", "zero", "mean"])
def test_batched_equals_sequential_equals_hooks(name, ablation):
    model, g, clean, corrupt, metric = _setup(name, dtype=torch.float64)
    if ablation == "mean":
        corrupt = torch.cat([corrupt, clean.flip(1), (clean + 1) % 13])
    masks = _random_masks(g, 12)
    batched = evaluate_masks(model, g, clean, corrupt, masks, metric, ablation=ablation)
    single = torch.cat([
        evaluate_masks(model, g, clean, corrupt, m[None], metric, ablation=ablation) for m in masks
    ])  # fmt: skip
    hooked = evaluate_masks_hooked(model, g, clean, corrupt, masks, metric, ablation=ablation)
    assert batched.dtype == torch.float64  # no silent downcast
    torch.testing.assert_close(batched, single, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(batched, hooked, rtol=1e-9, atol=1e-9)
    assert float(batched.std()) > 1e-3  # different masks give different values


@pytest.mark.parametrize("backend", ["torch", "cpp", "triton"])
@pytest.mark.parametrize("path", ["dense", "sparse"])
def test_backends_and_paths_agree(backend, path):
    if backend == "triton":
        pytest.importorskip("triton")
    model, g, clean, corrupt, metric = _setup("mlp", seed=1)
    masks = _random_masks(g, 6, seed=1)
    ref = evaluate_masks_hooked(model, g, clean, corrupt, masks, metric)
    out = evaluate_masks(
        model, g, clean, corrupt, masks, metric, backend=backend, path=path, chunk=4
    )
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_generic_metric_and_chunking():
    model, g, clean, corrupt, metric = _setup("mlp", seed=2)
    masks = _random_masks(g, 9, seed=2)
    fast = evaluate_masks(model, g, clean, corrupt, masks, metric, chunk=2)
    generic = evaluate_masks(
        model, g, clean, corrupt, masks, lambda logits: metric(logits), chunk=100
    )
    torch.testing.assert_close(fast, generic, rtol=1e-5, atol=1e-5)


def test_pruning_does_not_change_patching_metric():
    model, g, clean, corrupt, metric = _setup("mlp", seed=3)
    masks = _random_masks(g, 10, seed=3)
    pruned = g.prune(masks)
    assert not torch.equal(pruned, masks)
    torch.testing.assert_close(
        evaluate_masks(model, g, clean, corrupt, masks, metric),
        evaluate_masks(model, g, clean, corrupt, pruned, metric),
        rtol=1e-5, atol=1e-5,
    )  # fmt: skip


def test_single_edge_effect_matches_direct_patch():
    """Removing one logits edge shifts the final residual by exactly a_s(q) - a_s(q')."""
    model, g, clean, corrupt, metric = _setup("attn_only", seed=4)
    s = g.head_index(1, 1)
    mask = g.real_edge_mask.clone()
    mask[s, g.logits_index] = False
    val = evaluate_masks(model, g, clean, corrupt, mask[None], metric)
    _, cc = model.run_with_cache(clean)
    _, ck = model.run_with_cache(corrupt)
    shift = cc["blocks.1.attn.hook_result"][:, :, 1] - ck["blocks.1.attn.hook_result"][:, :, 1]
    direct = metric(model(clean, hooks=[("blocks.1.hook_resid_post", lambda x, hook: x - shift)]))
    torch.testing.assert_close(val, direct.detach(), rtol=1e-5, atol=1e-5)


def test_invalid_inputs():
    model, g, clean, corrupt, metric = _setup("mlp")
    masks = g.real_edge_mask[None]
    with pytest.raises(ValueError, match="masks"):
        evaluate_masks(model, g, clean, corrupt, masks[:, :-1], metric)
    with pytest.raises(TypeError, match="masks"):
        evaluate_masks(model, g, clean, corrupt, masks.float(), metric)
    with pytest.raises(ValueError, match="clean"):
        evaluate_masks(model, g, clean.repeat(2, 1), corrupt, masks, metric)
    with pytest.raises(ValueError, match="corrupt"):
        evaluate_masks(model, g, clean, corrupt[:, :-1], masks, metric)
    with pytest.raises(ValueError, match="ablation"):
        evaluate_masks(model, g, clean, corrupt, masks, metric, ablation="resample")
    with pytest.raises(ValueError, match="backend"):
        evaluate_masks(model, g, clean, corrupt, masks, metric, backend="cuda")
    with pytest.raises(ValueError, match="chunk"):
        evaluate_masks(model, g, clean, corrupt, masks, metric, chunk=0)
    with pytest.raises(ValueError, match="graph"):
        evaluate_masks(model, EdgeGraph.from_config(3, 4), clean, corrupt, masks, metric)
    with pytest.raises(ValueError, match="clean"):
        evaluate_masks(model, g, clean + 100, corrupt, masks, metric)


@pytest.mark.parametrize("chunk", [1, 4, None])
@pytest.mark.parametrize("ablation", ["patching", "zero"])
def test_sparse_circuits_match_hooks(chunk, ablation):
    # 2-30% densities, one mask per chunk: the per-pair (sparse) head path, partial MLP rows
    model, g, clean, corrupt, metric = _setup("mlp", dtype=torch.float64)
    gen = torch.Generator().manual_seed(5)
    dens = torch.linspace(0.02, 0.3, 8)[:, None, None]
    masks = (torch.rand(8, g.n_fwd, g.n_bwd, generator=gen) < dens) & g.real_edge_mask
    batched = evaluate_masks(model, g, clean, corrupt, masks, metric, ablation=ablation, chunk=chunk)
    hooked = evaluate_masks_hooked(model, g, clean, corrupt, masks, metric, ablation=ablation)
    torch.testing.assert_close(batched, hooked, rtol=1e-9, atol=1e-9)
    assert len({round(v, 9) for v in batched.tolist()}) > 3  # the masks differ in effect
