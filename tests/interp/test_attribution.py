"""eap_ig_scores against finite-difference directional derivatives (float64)."""

from __future__ import annotations

import pytest
import torch

from rml_fast.interp import EdgeGraph, LogitDiff, eap_ig_scores
from rml_fast.interp.circuit_eval import source_activations
from rml_fast.models import TinyConfig, TinyTransformer

CFG = TinyConfig(n_layers=2, d_model=16, n_heads=2, d_mlp=24, n_ctx=10, d_vocab=13)


@pytest.fixture(scope="module")
def setup():
    model = TinyTransformer(CFG, seed=0).double()
    g = EdgeGraph.from_model(model)
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(0, 13, (1, 7), generator=gen)
    corrupt = clean.clone()
    corrupt[0, 1:4] = torch.randint(0, 13, (3,), generator=gen)
    return model, g, clean, corrupt, LogitDiff(pos=-1, answer=3, wrong=(5,))


def _dest_hook(model, g, d, vec):
    """(hook name, fn) adding ``vec`` [1, P, D] to destination ``d``'s input."""
    for layer in range(model.cfg.n_layers):
        for w in "qkv":
            for h in range(model.cfg.n_heads):
                if g.qkv_index(layer, h, w) == d:

                    def fn(x, hook, h=h):
                        x = x.clone()
                        x[:, :, h] += vec
                        return x

                    return f"blocks.{layer}.hook_{w}_input", fn
        if not model.cfg.attn_only and g.mlp_in_index(layer) == d:
            return f"blocks.{layer}.hook_mlp_in", lambda x, hook: x + vec
    return f"blocks.{model.cfg.n_layers - 1}.hook_resid_post", lambda x, hook: x + vec


def _fd_score(model, g, clean, corrupt, metric, s, d, alpha, eps=1e-4):
    """Central difference of L along a_s(q) - a_s(q') at destination d, input at alpha."""
    _, a_clean = source_activations(model, clean)
    _, a_corr = source_activations(model, corrupt)
    x0 = a_corr[:, 0] + alpha * (a_clean[:, 0] - a_corr[:, 0])
    diff = a_clean[:, s] - a_corr[:, s]
    vals = []
    for sign in (1, -1):
        name, fn = _dest_hook(model, g, d, sign * eps * diff)
        hooks = [("blocks.0.hook_resid_pre", lambda x, hook: x0), (name, fn)]
        with torch.no_grad():
            vals.append(float(metric(model(clean, hooks=hooks))))
    return (vals[0] - vals[1]) / (2 * eps)


def _some_edges(g):
    real = torch.nonzero(g.real_edge_mask).tolist()
    gen = torch.Generator().manual_seed(1)
    pick = torch.randperm(len(real), generator=gen)[:8].tolist()
    # always include an edge into a q, a k and a v input of the last layer and into the logits
    L = g.n_layers - 1
    extra = [(g.head_index(0, 1), g.qkv_index(L, 0, w)) for w in "qkv"] + [
        (g.head_index(L, 1), g.logits_index)
    ]
    return [tuple(real[i]) for i in pick] + extra


def test_eap_is_the_clean_point_gradient(setup):
    model, g, clean, corrupt, metric = setup
    scores = eap_ig_scores(model, g, clean, corrupt, metric, method="eap")
    for s, d in _some_edges(g):
        fd = _fd_score(model, g, clean, corrupt, metric, s, d, alpha=1.0)
        assert float(scores[s, d]) == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_ig_inputs_averages_the_interpolation_points(setup):
    model, g, clean, corrupt, metric = setup
    scores = eap_ig_scores(model, g, clean, corrupt, metric, method="inputs", steps=3)
    for s, d in _some_edges(g):
        fd = (
            sum(_fd_score(model, g, clean, corrupt, metric, s, d, alpha=k / 3) for k in range(3))
            / 3
        )
        assert float(scores[s, d]) == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_ig_activations_with_one_step_is_the_corrupted_gradient(setup):
    model, g, clean, corrupt, metric = setup
    a = eap_ig_scores(model, g, clean, corrupt, metric, method="activations", steps=1)
    b = eap_ig_scores(model, g, clean, corrupt, metric, method="inputs", steps=1)
    torch.testing.assert_close(a, b)
    a3 = eap_ig_scores(model, g, clean, corrupt, metric, method="activations", steps=3)
    b3 = eap_ig_scores(model, g, clean, corrupt, metric, method="inputs", steps=3)
    assert not torch.allclose(a3, b3)


def test_batch_scores_are_sums_and_off_edges_zero(setup):
    model, g, clean, corrupt, _ = setup
    clean2 = torch.cat([clean, clean.flip(1)])
    corrupt2 = torch.cat([corrupt, corrupt.flip(1)])
    metric2 = LogitDiff(pos=-1, answer=[3, 4], wrong=[[5], [6]])
    both = eap_ig_scores(model, g, clean2, corrupt2, metric2, steps=2)
    parts = [
        eap_ig_scores(
            model, g, clean2[i : i + 1], corrupt2[i : i + 1], LogitDiff(-1, a, (w,)), steps=2
        )
        for i, (a, w) in enumerate([(3, 5), (4, 6)])
    ]
    torch.testing.assert_close(both, parts[0] + parts[1])
    assert bool((both[~g.real_edge_mask] == 0).all())


def test_noise_views(setup):
    model, g, clean, corrupt, metric = setup
    base = eap_ig_scores(model, g, clean, corrupt, metric)
    torch.testing.assert_close(
        eap_ig_scores(model, g, clean, corrupt, metric, noise_std=0.0, seed=3), base
    )
    n1 = eap_ig_scores(model, g, clean, corrupt, metric, noise_std=0.1, seed=1)
    n1b = eap_ig_scores(model, g, clean, corrupt, metric, noise_std=0.1, seed=1)
    n2 = eap_ig_scores(model, g, clean, corrupt, metric, noise_std=0.1, seed=2)
    torch.testing.assert_close(n1, n1b)
    assert not torch.allclose(n1, n2) and not torch.allclose(n1, base)


def test_parameters_untouched(setup):
    model, g, clean, corrupt, metric = setup
    before = [p.detach().clone() for p in model.parameters()]
    eap_ig_scores(model, g, clean, corrupt, metric)
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_invalid_inputs(setup):
    model, g, clean, corrupt, metric = setup
    with pytest.raises(ValueError, match="method"):
        eap_ig_scores(model, g, clean, corrupt, metric, method="acdc")
    with pytest.raises(ValueError, match="steps"):
        eap_ig_scores(model, g, clean, corrupt, metric, steps=0)
    with pytest.raises(ValueError, match="noise_std"):
        eap_ig_scores(model, g, clean, corrupt, metric, noise_std=-1.0)
    with pytest.raises(ValueError, match="corrupt"):
        eap_ig_scores(model, g, clean, corrupt[:, :-1], metric)
    with pytest.raises(TypeError, match="graph"):
        eap_ig_scores(model, None, clean, corrupt, metric)


def test_eap_is_exact_for_logit_edges_without_final_layer_norm():
    """Without a final LN the logits are linear in the final residual, so removing the edge
    s -> logits changes L by exactly -score(s -> logits) (EAP at the clean point)."""
    from rml_fast.interp import evaluate_masks

    cfg = TinyConfig(n_layers=2, d_model=16, n_heads=2, d_mlp=24, n_ctx=10, d_vocab=13, ln=False)
    model = TinyTransformer(cfg, seed=1).double()
    g = EdgeGraph.from_model(model)
    clean = torch.tensor([[1, 4, 2, 9, 3, 7, 5]])
    corrupt = torch.tensor([[1, 8, 0, 9, 6, 7, 5]])
    metric = LogitDiff(-1, 3, (5,))
    scores = eap_ig_scores(model, g, clean, corrupt, metric, method="eap")
    masks = g.real_edge_mask.repeat(g.n_fwd, 1, 1)
    for s in range(g.n_fwd):
        masks[s, s, g.logits_index] = False
    vals = evaluate_masks(model, g, clean, corrupt, masks, metric)
    with torch.no_grad():
        l_clean = metric(model(clean))
    torch.testing.assert_close(vals - l_clean, -scores[:, g.logits_index], rtol=1e-9, atol=1e-10)
    assert float(scores[:, g.logits_index].abs().max()) > 1e-3
