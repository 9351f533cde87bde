"""Query Lens oracles: readouts equal brute-force Jacobians (autograd.functional.jacobian of the
model's own blocks, their explicit product, finite differences of the logits, autograd.grad to
the embeddings), the batched path equals the per-feature loop, the direct/indirect split is
consistent (no indirect effect when downstream modules are removed), subspace overlaps take
their closed forms, and a finding on a trained induction model that a random one lacks."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rml_fast.interp.query_lens import (
    QueryLens,
    SparseDict,
    fit_channel_maps,
    input_score,
    output_score,
    subspace_overlap,
)
from rml_fast.interp.sae import TopKSAE, train_topk_sae
from rml_fast.models import TinyConfig, TinyTransformer

ATOL = 1e-9


def _model(n_layers=3, d_mlp=32, ln=True, seed=0):
    cfg = TinyConfig(n_layers=n_layers, d_model=16, n_heads=2, d_mlp=d_mlp, n_ctx=8, d_vocab=11,
                     ln=ln)  # fmt: skip
    model = TinyTransformer(cfg, seed=seed).double().eval()
    with torch.no_grad():  # non-trivial LN parameters
        for name, p in model.named_parameters():
            if name.endswith((".w", ".b")):
                p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1),
                                         dtype=p.dtype))  # fmt: skip
    return model


def _sdict(layer, kind="sae", f=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return SparseDict(mk(16, f), mk(16, f), mk(f), mk(16), layer, kind)


TOKENS = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(2))


def _resid(model, name):
    _, cache = model.run_with_cache(TOKENS, names=[name])
    return cache[name]


def _jac(fn, x):
    n = x.numel()
    return torch.autograd.functional.jacobian(fn, x).reshape(n, n)


def _tile(v, x):  # v placed at every position, flattened
    return v.expand_as(x).reshape(-1)


def _token_mean(u, x):
    return u.reshape(x.shape).mean((0, 1))


def test_value_full_equals_product_of_block_jacobians():
    model = _model()
    ql = QueryLens(model, _sdict(0), final_ln="none", chunk_size=4).fit(TOKENS)
    h1 = _resid(model, "blocks.0.hook_resid_post")
    h2 = _resid(model, "blocks.1.hook_resid_post")
    J = _jac(model.blocks[2], h2) @ _jac(model.blocks[1], h1)  # explicit product
    J_full = _jac(lambda h: model.blocks[2](model.blocks[1](h)), h1)
    assert torch.allclose(J, J_full, atol=ATOL)
    V = ql.sdict.W_dec.T
    expect = torch.stack([_token_mean(J @ _tile(v, h1), h1) for v in V])
    assert torch.allclose(ql.value_transport(V), expect, atol=ATOL)
    assert torch.allclose(ql.value_scores(), expect @ model.W_U, atol=ATOL)


def test_value_first_order_equals_sum_of_single_hop_jacobians():
    model = _model(d_mlp=None)  # attention-only: block(h) - h is one sublayer
    ql = QueryLens(model, _sdict(0), transition="first_order", final_ln="none").fit(TOKENS)
    h1 = _resid(model, "blocks.0.hook_resid_post")
    h2 = _resid(model, "blocks.1.hook_resid_post")
    eye = torch.eye(h1.numel(), dtype=h1.dtype)
    J = eye + (_jac(model.blocks[1], h1) - eye) + (_jac(model.blocks[2], h2) - eye)
    V = ql.sdict.W_dec.T
    expect = torch.stack([_token_mean(J @ _tile(v, h1), h1) for v in V])
    assert torch.allclose(ql.value_transport(V), expect, atol=ATOL)


def test_value_jacobian_final_ln_equals_finite_difference_of_mean_logits():
    model = _model()
    sd = _sdict(1)
    ql = QueryLens(model, sd, final_ln="jacobian").fit(TOKENS)
    eps = 1e-5
    out = []
    for v in sd.W_dec.T[:3]:
        def run(e, v=v):  # clamp the feature: add e * v_i at every position of h^1_post
            return model(TOKENS, hooks=[("blocks.1.hook_resid_post", lambda x, h: x + e * v)])
        out.append((run(eps) - run(-eps)).mean((0, 1)) / (2 * eps))
    assert torch.allclose(ql.value_scores([0, 1, 2]), torch.stack(out), atol=1e-6)


@pytest.mark.parametrize("kind", ["sae", "transcoder"])
def test_key_equals_autograd_grad_to_embeddings(kind):
    model = _model()
    sd = _sdict(1, kind)
    ql = QueryLens(model, sd, readout_key="embed_dot").fit(TOKENS)
    expect = []
    for k in sd.W_enc.T:
        emb = (model.W_E[TOKENS] + model.W_pos[: TOKENS.shape[1]]).detach().requires_grad_(True)
        h = model.blocks[0](emb)
        if kind == "sae":
            h = model.blocks[1](h)
        else:  # transcoder: read after the attention of layer 1
            b = model.blocks[1]
            from rml_fast.models.transformer import attention_heads
            from rml_fast.models.transformer import layer_norm as ln
            x = ln(h, b.ln1.w, b.ln1.b)
            h = h + attention_heads(x, x, x, b.attn, None, hooked=False).sum(-2) + b.attn.b_O
        (g,) = torch.autograd.grad((h * k).sum(), emb)
        expect.append(g.mean((0, 1)))
    expect = torch.stack(expect)
    assert torch.allclose(ql.key_transport(sd.W_enc.T), expect, atol=ATOL)
    assert torch.allclose(ql.key_scores(), expect @ model.W_E.T, atol=ATOL)


def test_key_cosine_readout_against_explicit_formula():
    model = _model()
    sd = _sdict(0)
    ql = QueryLens(model, sd).fit(TOKENS)
    g = ql.key_transport(sd.W_enc.T)
    c = model.W_E[TOKENS].mean((0, 1))
    E = model.W_E - c
    expect = torch.nn.functional.cosine_similarity(g[:, None, :], E[None], dim=-1)
    assert torch.allclose(ql.key_scores(), expect, atol=1e-10)


@pytest.mark.parametrize("strategy", ["tangents", "operator"])
@pytest.mark.parametrize("transition", ["full", "first_order"])
@pytest.mark.parametrize("layer", [0, 1])
def test_batched_and_operator_equal_per_feature_loop(transition, strategy, layer):
    model = _model()
    ql = QueryLens(model, _sdict(layer, f=7), transition=transition, chunk_size=3,
                   strategy=strategy, final_ln="jacobian").fit(TOKENS)  # fmt: skip
    assert torch.allclose(ql.value_scores(), ql.value_scores(batched=False), atol=ATOL)
    assert torch.allclose(ql.key_scores(), ql.key_scores(batched=False), atol=ATOL)
    assert len(ql._operators) == (2 if strategy == "operator" else 0)


def test_auto_strategy_switches_to_the_operator_for_many_features():
    model = _model()
    ql = QueryLens(model, _sdict(0, f=40)).fit(TOKENS)  # 40 features > D = 16
    a = ql.key_scores()
    assert ("key", "full") in ql._operators
    ref = QueryLens(model, _sdict(0, f=40), strategy="tangents").fit(TOKENS).key_scores()
    assert torch.allclose(a, ref, atol=ATOL)
    ql.fit(TOKENS[:1])  # a new operating point drops the cached operators
    assert not ql._operators


def test_mask_and_context_batches():
    model = _model()
    mask = torch.ones_like(TOKENS, dtype=torch.bool)
    mask[1, 3:] = False
    ql1 = QueryLens(model, _sdict(0), batch_size=1, final_ln="none").fit(TOKENS, mask)
    ql2 = QueryLens(model, _sdict(0), batch_size=8, final_ln="none").fit(TOKENS, mask)
    assert torch.allclose(ql1.value_scores(), ql2.value_scores(), atol=ATOL)
    # a masked-out tail changes nothing before it (causal): equals fitting the prefix rows
    ql3 = QueryLens(model, _sdict(0), final_ln="none").fit(TOKENS[1:, :3])
    ql4 = QueryLens(model, _sdict(0), final_ln="none").fit(
        TOKENS[1:], mask[1:])  # fmt: skip
    assert torch.allclose(ql3.value_scores(), ql4.value_scores(), atol=ATOL)


def _zero_blocks(model, layers):
    m = copy.deepcopy(model)
    with torch.no_grad():
        for j in layers:
            b = m.blocks[j]
            b.attn.W_O.zero_()
            b.attn.b_O.zero_()
            if b.mlp is not None:
                b.mlp.W_out.zero_()
                b.mlp.b_out.zero_()
    return m


def test_removed_downstream_modules_leave_only_the_direct_effect():
    model = _model()
    sd = _sdict(0)
    # blocks after l zeroed => QL_VALUE == LL_VALUE; blocks <= l zeroed => QL_KEY == LL_KEY
    qv = QueryLens(_zero_blocks(model, [1, 2]), sd).fit(TOKENS)
    assert torch.allclose(qv.value_scores(), qv.value_scores(effect="direct"), atol=ATOL)
    assert float(qv.value_transport(sd.W_dec.T, transition="full").sub(sd.W_dec.T).abs().max()) \
        < ATOL  # fmt: skip
    qk = QueryLens(_zero_blocks(model, [0]), sd).fit(TOKENS)
    assert torch.allclose(qk.key_scores(), qk.key_scores(effect="direct"), atol=ATOL)
    # on the intact model the indirect effect is not zero, and with a linear readout
    # total == direct + indirect
    ql = QueryLens(model, sd, final_ln="none").fit(TOKENS)
    ind = ql.value_scores(effect="indirect")
    assert float(ind.abs().max()) > 1e-3
    assert torch.allclose(ql.value_scores(), ql.value_scores(effect="direct") + ind, atol=ATOL)


def test_mediators_equal_zeroing_the_excluded_modules():
    model = _model()
    sd = _sdict(0)
    keep = ["blocks.1.attn", "blocks.1.mlp"]  # block 2 excluded: held at its clean output
    a = QueryLens(model, sd, mediators=keep, final_ln="none").fit(TOKENS).value_scores()
    b = QueryLens(_zero_blocks(model, [2]), sd, final_ln="none").fit(TOKENS).value_scores()
    assert torch.allclose(a, b, atol=ATOL)
    c = QueryLens(model, sd, mediators=(), final_ln="none").fit(TOKENS)
    assert torch.allclose(c.value_scores(), c.value_scores(effect="direct"), atol=ATOL)


def test_include_ln_false_equals_exact_on_a_model_without_ln_and_differs_with_ln():
    no_ln = _model(ln=False)
    sd = _sdict(0)
    a = QueryLens(no_ln, sd, final_ln="none").fit(TOKENS).value_scores()
    b = QueryLens(no_ln, sd, final_ln="none", include_ln=False).fit(TOKENS).value_scores()
    assert torch.allclose(a, b, atol=ATOL)
    model = _model()
    a = QueryLens(model, sd).fit(TOKENS).key_scores()
    b = QueryLens(model, sd, include_ln=False).fit(TOKENS).key_scores()
    assert not torch.allclose(a, b, atol=1e-4)


def test_top_tokens_invariant_to_positive_rescaling():
    model = _model()
    sd = _sdict(0)
    sd3 = SparseDict(3.0 * sd.W_enc, 0.5 * sd.W_dec, sd.b_enc, sd.b_dec, 0)
    a, b = QueryLens(model, sd, k=4).fit(TOKENS), QueryLens(model, sd3, k=4).fit(TOKENS)
    assert torch.equal(a.top_tokens(a.value_scores()), b.top_tokens(b.value_scores()))
    assert torch.equal(a.top_tokens(a.key_scores()), b.top_tokens(b.key_scores()))


def test_channel_responses_are_single_block_jacobians():
    model = _model()
    ql = QueryLens(model, _sdict(0)).fit(TOKENS)
    h = _resid(model, "blocks.1.hook_resid_pre")
    J = _jac(model.blocks[1], h) - torch.eye(h.numel(), dtype=h.dtype)
    V = torch.randn(4, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    expect = torch.stack([_token_mean(J @ _tile(v, h), h) for v in V])
    assert torch.allclose(ql.channel_responses(V, 1), expect, atol=ATOL)


def test_subspace_overlap_closed_forms_and_channel_maps():
    g = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(8, 8, generator=g, dtype=torch.float64))
    Wa = Q[:, :3] @ torch.randn(3, 8, generator=g, dtype=torch.float64)
    Wb = Q[:, 3:6] @ torch.randn(3, 8, generator=g, dtype=torch.float64)
    assert subspace_overlap(Wa, Wa, 3) == pytest.approx(1.0)
    assert subspace_overlap(Wa, Wb, 3) == pytest.approx(0.0, abs=1e-12)
    # half-shared: span{q0, q1} vs span{q1, q2} -> mean cos^2 = 1/2
    assert subspace_overlap((Q[:, :2], None), (Q[:, 1:3], None), 2) == pytest.approx(0.5)
    V = torch.randn(200, 8, generator=g, dtype=torch.float64)
    maps = fit_channel_maps({0: V}, {(0, 1): V @ Wa.T, (0, 2): V @ Wb.T}, r=3)
    B, A = maps[(0, 1)]
    assert torch.allclose(B @ A, Wa, atol=1e-8)
    assert subspace_overlap(maps[(0, 1)], Wa, 3) == pytest.approx(1.0)
    assert subspace_overlap(maps[(0, 1)], maps[(0, 2)], 3) == pytest.approx(0.0, abs=1e-10)


def test_input_and_output_scores():
    assert input_score(torch.tensor([3, 4]), [3, 3, 4, 9]) == 0.75
    assert output_score([1, 2], np.array([2, 5])) == 0.5
    with pytest.raises(ValueError, match="activating_tokens"):
        input_score([1], [])


def test_bad_input_raises_clear_errors():
    model = _model()
    with pytest.raises(ValueError, match="d_model is 16"):
        QueryLens(model, SparseDict(torch.randn(8, 4), torch.randn(8, 4), torch.zeros(4),
                                    torch.zeros(8), 0))  # fmt: skip
    with pytest.raises(ValueError, match=r"layer must be in \[0, 3\)"):
        QueryLens(model, _sdict(3))
    with pytest.raises(ValueError, match="transpose"):
        SparseDict(torch.randn(16, 4), torch.randn(4, 16), torch.zeros(4), torch.zeros(16), 0)
    with pytest.raises(TypeError, match="from_sae"):
        QueryLens(model, TopKSAE(16, 4, k=1))
    with pytest.raises(ValueError, match="mediators"):
        QueryLens(model, _sdict(0), mediators=["blocks.9.attn"])
    with pytest.raises(ValueError, match="transition"):
        QueryLens(model, _sdict(0), transition="two_hop")
    with pytest.raises(ValueError, match="attention-only"):
        QueryLens(_model(d_mlp=None), _sdict(0, "transcoder"))
    ql = QueryLens(model, _sdict(0))
    with pytest.raises(RuntimeError, match="not fitted"):
        ql.value_scores()
    ql.fit(TOKENS)
    with pytest.raises(ValueError, match="n_features=6"):
        ql.value_scores([0, 6])
    with pytest.raises(ValueError, match="effect"):
        ql.key_scores(effect="both")
    with pytest.raises(ValueError, match="d_vocab"):
        ql.fit(torch.full((1, 3), 99))


# --- finding on a trained zoo model ---------------------------------------------------------


def _prev_token_study(model, task):
    """Key readouts of a layer-0 SAE: do QL's top tokens contain the feature's *previous*
    tokens (only reachable through a previous-token attention head), beyond the Logit Lens?"""
    toks, _, _ = task.train_batch(128, torch.Generator().manual_seed(0))
    h = model.run_with_cache(toks, names=["blocks.0.hook_resid_post"])[1][
        "blocks.0.hook_resid_post"]  # fmt: skip
    sae = train_topk_sae(h[:, 1:].reshape(-1, h.shape[-1]), n_features=96, k=4, steps=500,
                         lr=3e-3, batch_size=256, rng=0, eval_every=500)  # fmt: skip
    z = sae.encode(h).detach()
    ql = QueryLens(model, SparseDict.from_sae(sae, 0), k=5).fit(toks[:24])
    top_q = ql.top_tokens(ql.key_scores())
    top_l = ql.top_tokens(ql.key_scores(effect="direct"))
    q, ll = [], []
    for f in range(96):
        a = z[:, 1:, f].reshape(-1)
        if int((a > 0).sum()) < 20:
            continue
        idx = a.topk(20).indices
        b, p = idx // (toks.shape[1] - 1), idx % (toks.shape[1] - 1) + 1
        prev = toks[b, p - 1]
        q.append(input_score(top_q[f], prev))
        ll.append(input_score(top_l[f], prev))
    return float(np.mean(q)), float(np.mean(ll)), len(q)


def test_finding_key_readouts_see_the_previous_token_only_in_the_trained_model(induction_small):
    model, task = induction_small
    q, ll, n = _prev_token_study(model, task)
    rq, rll, rn = _prev_token_study(TinyTransformer(model.cfg, seed=1).eval(), task)
    assert n >= 30 and rn >= 30
    # trained: the previous-token head makes QL key readouts name the previous token of the
    # activating positions; the Logit Lens (direct path only) sees the current token only
    assert q > 0.35 and q - ll > 0.25
    # random weights: no previous-token head, the indirect key effect carries little
    assert rq < 0.3 and (q - ll) > 2 * (rq - rll)
