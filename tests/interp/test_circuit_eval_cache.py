"""The ablated-activation cache and the CPU workspace of evaluate_masks never give stale results."""

from __future__ import annotations

import pytest
import torch

import rml_fast.interp.circuit_eval as ce
from rml_fast.interp import EdgeGraph, LogitDiff, evaluate_masks, evaluate_masks_hooked
from rml_fast.models import TinyConfig, TinyTransformer

CFG = TinyConfig(n_layers=2, d_model=16, n_heads=4, d_mlp=32, n_ctx=10, d_vocab=13)


def _setup(seed=0):
    model = TinyTransformer(CFG, seed=seed)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    g = EdgeGraph.from_model(model)
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, 13, (1, 8), generator=gen)
    corrupt = clean.clone()
    corrupt[0, 1:4] = torch.randint(0, 13, (3,), generator=gen)
    masks = (torch.rand(6, g.n_fwd, g.n_bwd, generator=gen) < 0.3) & g.real_edge_mask
    masks[0] = False  # the empty circuit: its value is the metric on the corrupted prompt
    return model, g, clean, corrupt, masks, LogitDiff(pos=-1, answer=3, wrong=(5, 7))


def _fresh(model, g, clean, corrupt, masks, metric, **kw):
    return evaluate_masks(model, g, clean, corrupt, masks, metric, cache=False, **kw)


@pytest.fixture
def counted(monkeypatch):
    calls = []
    real = ce.source_activations

    def spy(model, tokens):
        calls.append(tokens.clone())
        return real(model, tokens)

    monkeypatch.setattr(ce, "source_activations", spy)
    return calls


def test_repeated_calls_hit_the_cache(counted):
    model, g, clean, corrupt, masks, metric = _setup()
    a = evaluate_masks(model, g, clean, corrupt, masks, metric)
    b = evaluate_masks(model, g, clean, corrupt, masks[1:], metric)
    c = evaluate_masks_hooked(model, g, clean, corrupt, masks, metric)
    assert len(counted) == 1  # one forward on the corrupted prompt for all three calls
    torch.testing.assert_close(b, a[1:])
    torch.testing.assert_close(c, a, atol=1e-5, rtol=1e-5)
    evaluate_masks(model, g, clean, corrupt, masks, metric, cache=False)
    assert len(counted) == 2


def test_in_place_weight_change_invalidates():
    model, g, clean, corrupt, masks, metric = _setup()
    before = evaluate_masks(model, g, clean, corrupt, masks, metric)
    with torch.no_grad():
        model.blocks[0].attn.W_O.mul_(-1.5)  # in place: same storage, new version
    after = evaluate_masks(model, g, clean, corrupt, masks, metric)
    want = _fresh(model, g, clean, corrupt, masks, metric)
    torch.testing.assert_close(after, want)
    assert not torch.allclose(after[0], before[0], atol=1e-3)  # the empty circuit moved
    torch.testing.assert_close(
        evaluate_masks_hooked(model, g, clean, corrupt, masks, metric), want, atol=1e-5, rtol=1e-5
    )


def test_replaced_weights_invalidate():
    model, g, clean, corrupt, masks, metric = _setup()
    other = TinyTransformer(CFG, seed=5)
    evaluate_masks(model, g, clean, corrupt, masks, metric)
    with torch.no_grad():  # new storages (no in-place op on the old ones)
        for p, q in zip(model.parameters(), other.parameters(), strict=True):
            p.data = q.detach().clone() * 2.0
    got = evaluate_masks(model, g, clean, corrupt, masks, metric)
    model2 = TinyTransformer(CFG, seed=5)
    with torch.no_grad():
        for p in model2.parameters():
            p.mul_(2.0)
    torch.testing.assert_close(got, _fresh(model2, g, clean, corrupt, masks, metric))
    # load_state_dict copies in place into the existing storages
    model.load_state_dict(_setup(seed=0)[0].state_dict())
    torch.testing.assert_close(
        evaluate_masks(model, g, clean, corrupt, masks, metric),
        _fresh(_setup(seed=0)[0], g, clean, corrupt, masks, metric),
    )


def test_dtype_change_invalidates():
    model, g, clean, corrupt, masks, metric = _setup()
    evaluate_masks(model, g, clean, corrupt, masks, metric)
    model.to(torch.float64)
    got = evaluate_masks(model, g, clean, corrupt, masks, metric)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, _fresh(model, g, clean, corrupt, masks, metric))


def test_prompt_and_ablation_changes_invalidate():
    model, g, clean, corrupt, masks, metric = _setup()
    first = evaluate_masks(model, g, clean, corrupt, masks, metric)
    corrupt[0, 5] = (corrupt[0, 5] + 1) % 13  # modified in place: same tensor, new content
    got = evaluate_masks(model, g, clean, corrupt, masks, metric)
    torch.testing.assert_close(got, _fresh(model, g, clean, corrupt, masks, metric))
    assert not torch.allclose(got[0], first[0], atol=1e-4)
    for ablation in ("zero", "mean", "patching"):
        torch.testing.assert_close(
            evaluate_masks(model, g, clean, corrupt, masks, metric, ablation=ablation),
            _fresh(model, g, clean, corrupt, masks, metric, ablation=ablation),
        )
    # another answer position keeps fewer positions of the corrupted run
    metric2 = LogitDiff(pos=4, answer=3, wrong=(5,))
    torch.testing.assert_close(
        evaluate_masks(model, g, clean, corrupt, masks, metric2),
        _fresh(model, g, clean, corrupt, masks, metric2),
    )
    # a second model does not see the first one's entry
    model_b = _setup(seed=1)[0]
    torch.testing.assert_close(
        evaluate_masks(model_b, g, clean, corrupt, masks, metric),
        _fresh(model_b, g, clean, corrupt, masks, metric),
    )


@pytest.mark.parametrize("path", ["dense", "sparse"])
def test_workspace_reuse_across_shapes(path):
    model, g, clean, corrupt, masks, metric = _setup()
    big = torch.cat([masks] * 5)  # a larger workspace first, then smaller views of it
    want = evaluate_masks_hooked(model, g, clean, corrupt, masks, metric, cache=False)
    for m, reps in ((big, 5), (masks, 1), (masks[:2], None), (big, 5)):
        got = evaluate_masks(model, g, clean, corrupt, m, metric, path=path, chunk=4)
        ref = want[:2] if reps is None else want.repeat(reps)
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    ce.clear_workspace()
    torch.testing.assert_close(
        evaluate_masks(model, g, clean, corrupt, masks, metric, path=path), want,
        atol=1e-5, rtol=1e-5,
    )  # fmt: skip
