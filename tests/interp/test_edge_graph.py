"""EdgeGraph: edge counts, upstream structure, topn / greedy / prune against naive references."""

from __future__ import annotations

import itertools

import pytest
import torch

from rml_fast.interp import EdgeGraph


def _formula(L, H, mlp=True):
    if not mlp:
        return sum(3 * H * (1 + layer * H) for layer in range(L)) + 1 + L * H
    return (
        sum(3 * H * (1 + layer * (H + 1)) + (1 + layer * (H + 1) + H) for layer in range(L))
        + 1
        + L * (H + 1)
    )


@pytest.mark.parametrize(
    ("L", "H", "mlp", "expected"),
    [(12, 12, True, 32491), (2, 4, True, 110), (4, 8, True, 1519), (6, 8, True, 3628),
     (2, 4, False, 81), (1, 4, False, 17)],
)  # fmt: skip
def test_edge_counts(L, H, mlp, expected):
    g = EdgeGraph.from_config(L, H, has_mlp=mlp)
    assert g.n_edges == expected == _formula(L, H, mlp) == int(g.real_edge_mask.sum())
    assert g.n_fwd == 1 + L * (H + mlp) and g.n_bwd == L * (3 * H + mlp) + 1
    assert len(g.fwd_names) == g.n_fwd and len(g.bwd_names) == g.n_bwd


def _layer_of(name):
    """(layer, stage) of a node name: stage 0 = attention, 1 = MLP; input/logits at the ends."""
    if name == "input":
        return (-1, 1)
    if name == "logits":
        return (10**9, 0)
    layer = int(name[1:].split(".")[0].split("<")[0])
    return (layer, 0 if name.startswith("a") else 1)


@pytest.mark.parametrize("mlp", [True, False])
def test_real_edges_are_exactly_the_upstream_pairs(mlp):
    g = EdgeGraph.from_config(3, 2, has_mlp=mlp)
    real = g.real_edge_mask
    for (s, sn), (d, dn) in itertools.product(enumerate(g.fwd_names), enumerate(g.bwd_names)):
        upstream = _layer_of(sn) < _layer_of(dn.split("<")[0])
        assert bool(real[s, d]) == upstream, (sn, dn)


def test_indices_match_names():
    g = EdgeGraph.from_config(2, 3)
    assert g.fwd_names[g.head_index(1, 2)] == "a1.h2"
    assert g.fwd_names[g.mlp_index(0)] == "m0"
    assert g.bwd_names[g.qkv_index(1, 0, "k")] == "a1.h0<k>"
    assert g.bwd_names[g.mlp_in_index(1)] == "m1"
    assert g.bwd_names[g.logits_index] == "logits"
    with pytest.raises(ValueError, match="MLP"):
        EdgeGraph.from_config(2, 3, has_mlp=False).mlp_index(0)


def _naive_prune(g, mask):
    """Remove nodes without inputs (input exempt) or outputs (logits exempt), one at a time."""
    mask = mask.clone() & g.real_edge_mask
    owner = g.owner.tolist()
    changed = True
    while changed:
        changed = False
        for s in range(1, g.n_fwd):
            dests = [d for d, o in enumerate(owner) if o == s]
            has_in = any(bool(mask[:, d].any()) for d in dests)
            has_out = bool(mask[s].any())
            if (not has_in and has_out) or (has_in and not has_out):
                mask[s] = False
                for d in dests:
                    mask[:, d] = False
                changed = True
    return mask


@pytest.mark.parametrize("mlp", [True, False])
def test_prune_matches_naive_and_is_idempotent(mlp):
    g = EdgeGraph.from_config(3, 3, has_mlp=mlp)
    gen = torch.Generator().manual_seed(0)
    masks = (
        torch.rand(40, g.n_fwd, g.n_bwd, generator=gen)
        < torch.linspace(0.02, 0.5, 40)[:, None, None]
    )
    pruned = g.prune(masks)
    for m, p in zip(masks, pruned, strict=True):
        assert torch.equal(p, _naive_prune(g, m))
    assert bool((pruned <= (masks & g.real_edge_mask)).all())
    assert torch.equal(g.prune(pruned), pruned)
    assert torch.equal(g.prune(g.real_edge_mask), g.real_edge_mask)


def test_topn_selects_top_real_edges():
    g = EdgeGraph.from_config(2, 4)
    gen = torch.Generator().manual_seed(1)
    scores = torch.randn(g.n_fwd, g.n_bwd, generator=gen)
    scores[~g.real_edge_mask] = 100.0  # never picked
    for n in (0, 1, 7, 50, g.n_edges):
        m = g.topn(scores, n, prune=False)
        assert int(m.sum()) == n and bool((m <= g.real_edge_mask).all())
        if 0 < n < g.n_edges:
            kept = scores.abs()[m]
            dropped = scores.abs()[g.real_edge_mask & ~m]
            assert float(kept.min()) >= float(dropped.max())
        assert torch.equal(g.topn(scores, n), g.prune(m))
    signed = g.topn(scores, 5, absolute=False, prune=False)
    assert float(scores[signed].min()) >= float(scores[g.real_edge_mask & ~signed].max())
    batched = g.topn(torch.stack([scores, -scores, 2 * scores]), 9, prune=False)
    assert torch.equal(batched[0], batched[1]) and torch.equal(batched[0], batched[2])


def test_greedy_grows_from_logits():
    g = EdgeGraph.from_config(2, 4)
    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(g.n_fwd, g.n_bwd, generator=gen)
    m = g.greedy(scores, 12, prune=False)
    assert int(m.sum()) == 12 and bool((m <= g.real_edge_mask).all())
    # the first edge is the best edge into the logits
    best_logit_src = int(scores[:, g.logits_index].abs().argmax())
    assert bool(m[best_logit_src, g.logits_index])
    # every edge's destination belongs to a node that has an out-edge (or is the logits)
    owner = g.owner.tolist()
    for _s, d in torch.nonzero(m).tolist():
        assert owner[d] == -1 or bool(m[owner[d]].any())
    # greedy over the full size reaches every edge reachable from the logits (all of them)
    assert int(g.greedy(scores, g.n_edges, prune=False).sum()) == g.n_edges
    assert torch.equal(g.greedy(scores, 12), g.prune(m))


def test_edges_and_nodes_listing():
    g = EdgeGraph.from_config(1, 2, has_mlp=False)
    m = torch.zeros(g.n_fwd, g.n_bwd, dtype=torch.bool)
    m[0, g.qkv_index(0, 1, "v")] = True
    m[g.head_index(0, 1), g.logits_index] = True
    assert g.edges(m) == [("input", "a0.h1<v>"), ("a0.h1", "logits")]
    assert g.nodes(m) == {"input", "a0.h1", "logits"}


def test_invalid_inputs():
    g = EdgeGraph.from_config(1, 2)
    with pytest.raises(ValueError, match="n_layers"):
        EdgeGraph.from_config(0, 2)
    with pytest.raises(ValueError, match="scores"):
        g.topn(torch.zeros(3, 3), 1)
    with pytest.raises(TypeError, match="scores"):
        g.topn(torch.zeros(g.n_fwd, g.n_bwd, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="n"):
        g.topn(torch.zeros(g.n_fwd, g.n_bwd), g.n_edges + 1)
    bad = torch.zeros(g.n_fwd, g.n_bwd)
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        g.topn(bad, 1)
    with pytest.raises(TypeError, match="bool"):
        g.prune(torch.zeros(g.n_fwd, g.n_bwd))


def test_draw_circuit(tmp_path):
    pytest.importorskip("matplotlib")
    from rml_fast.interp import draw_circuit

    g = EdgeGraph.from_config(2, 3)
    m = torch.zeros(g.n_fwd, g.n_bwd, dtype=torch.bool)
    m[0, g.qkv_index(0, 1, "k")] = True
    m[g.head_index(0, 1), g.mlp_in_index(1)] = True
    m[g.mlp_index(1), g.logits_index] = True
    ax = draw_circuit(g, m, scores=torch.ones(g.n_fwd, g.n_bwd), path=tmp_path / "c.png")
    arrows = [c for c in ax.get_children() if type(c).__name__ == "Annotation" and c.arrow_patch]
    assert len(arrows) == 3 and (tmp_path / "c.png").stat().st_size > 0
