"""TinyTransformer: hook points, caches, hook cleanup, split-qkv equivalence, validation."""

from __future__ import annotations

import math

import pytest
import torch

from rml_fast.models import TinyConfig, TinyTransformer

CFG = TinyConfig(n_layers=2, d_model=16, n_heads=4, d_mlp=32, n_ctx=12, d_vocab=11)
CFG_ATTN = TinyConfig(n_layers=2, d_model=16, n_heads=2, d_mlp=None, n_ctx=12, d_vocab=11, ln=False)


def _tokens(b=3, p=7, v=11, seed=0):
    return torch.randint(0, v, (b, p), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(params=[CFG, CFG_ATTN], ids=["mlp", "attn_only_noln"])
def model(request):
    return TinyTransformer(request.param, seed=0)


def test_cache_names_and_shapes(model):
    cfg = model.cfg
    b, p = 3, 7
    logits, cache = model.run_with_cache(_tokens(b, p))
    assert logits.shape == (b, p, cfg.d_vocab)
    d, h, dh = cfg.d_model, cfg.n_heads, cfg.d_head
    expected = {"hook_embed": (b, p, d), "hook_pos_embed": (p, d)}
    for layer in range(cfg.n_layers):
        pre = f"blocks.{layer}."
        expected.update({
            pre + "hook_resid_pre": (b, p, d), pre + "hook_resid_mid": (b, p, d),
            pre + "hook_resid_post": (b, p, d), pre + "hook_q_input": (b, p, h, d),
            pre + "attn.hook_q": (b, p, h, dh), pre + "attn.hook_z": (b, p, h, dh),
            pre + "attn.hook_pattern": (b, h, p, p), pre + "attn.hook_result": (b, p, h, d),
            pre + "hook_attn_out": (b, p, d),
        })  # fmt: skip
        if not cfg.attn_only:
            expected.update({
                pre + "hook_mlp_in": (b, p, d), pre + "hook_mlp_out": (b, p, d),
                pre + "mlp.hook_pre": (b, p, cfg.d_mlp), pre + "mlp.hook_post": (b, p, cfg.d_mlp),
            })  # fmt: skip
    for name, shape in expected.items():
        assert tuple(cache[name].shape) == shape, name


def test_activations_compose(model):
    """The residual stream is the sum of the source outputs; attention rows sum to one."""
    toks = _tokens()
    logits, cache = model.run_with_cache(toks)
    for layer, block in enumerate(model.blocks):
        pre = f"blocks.{layer}."
        torch.testing.assert_close(
            cache[pre + "attn.hook_result"].sum(2) + block.attn.b_O, cache[pre + "hook_attn_out"]
        )
        torch.testing.assert_close(
            cache[pre + "hook_resid_pre"] + cache[pre + "hook_attn_out"],
            cache[pre + "hook_resid_mid"],
        )
        pat = cache[pre + "attn.hook_pattern"]
        torch.testing.assert_close(pat.sum(-1), torch.ones_like(pat.sum(-1)))
        assert bool((pat.triu(1) == 0).all())  # causal
        if not model.cfg.attn_only:
            torch.testing.assert_close(
                cache[pre + "hook_resid_mid"] + cache[pre + "hook_mlp_out"],
                cache[pre + "hook_resid_post"],
            )
    torch.testing.assert_close(
        cache["blocks.0.hook_resid_pre"], cache["hook_embed"] + cache["hook_pos_embed"]
    )
    # the unembedding of the final residual reproduces the logits
    final = cache[f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"]
    if model.ln_final is not None:
        final = torch.nn.functional.layer_norm(
            final, (final.shape[-1],), model.ln_final.w, model.ln_final.b
        )
    torch.testing.assert_close(final @ model.unembed + model.b_U, logits)


def test_attention_matches_manual_computation():
    model = TinyTransformer(CFG_ATTN, seed=3)
    toks = _tokens(1, 5)
    _, cache = model.run_with_cache(toks)
    x = cache["blocks.0.hook_resid_pre"][0]
    attn = model.blocks[0].attn
    h = 1
    q = x @ attn.W_Q[h] + attn.b_Q[h]
    k = x @ attn.W_K[h] + attn.b_K[h]
    v = x @ attn.W_V[h] + attn.b_V[h]
    s = q @ k.T / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(5, 5).triu(1).bool(), float("-inf"))
    res = torch.softmax(s, -1) @ v @ attn.W_O[h]
    torch.testing.assert_close(cache["blocks.0.attn.hook_result"][0, :, h], res)


def test_split_qkv_path_equals_shared_path(model):
    toks = _tokens()
    plain = model(toks)
    noop = [(f"blocks.{layer}.hook_k_input", lambda x, hook: x) for layer in range(2)]
    torch.testing.assert_close(model(toks, hooks=noop), plain)


def test_patching_one_head_input_only_changes_that_head():
    model = TinyTransformer(CFG, seed=1)
    toks = _tokens()
    _, clean = model.run_with_cache(toks)

    def zero_head0(x, hook):
        x = x.clone()
        x[:, :, 0] = 0
        return x

    _, patched = model.run_with_cache(toks, hooks=[("blocks.1.hook_v_input", zero_head0)])
    r0, r1 = clean["blocks.1.attn.hook_result"], patched["blocks.1.attn.hook_result"]
    assert not torch.allclose(r0[:, :, 0], r1[:, :, 0])
    torch.testing.assert_close(r0[:, :, 1:], r1[:, :, 1:])


def test_hooks_are_removed_also_on_error(model):
    toks = _tokens()
    before = model(toks)
    with model.hooks([("blocks.0.hook_resid_pre", lambda x, hook: x * 0)]):
        assert not torch.allclose(model(toks), before)
    torch.testing.assert_close(model(toks), before)

    def boom(x, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        model(toks, hooks=[("blocks.1.hook_resid_pre", boom)])
    assert all(not hp._forward_hooks for hp in model.hook_points.values())
    torch.testing.assert_close(model(toks), before)
    with pytest.raises(ValueError, match="unknown hook point"):
        model(toks, hooks=[("blocks.9.hook_resid_pre", boom)])
    assert all(not hp._forward_hooks for hp in model.hook_points.values())


def test_seed_determinism_and_global_rng_untouched():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a, b = TinyTransformer(CFG, seed=5), TinyTransformer(CFG, seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    c = TinyTransformer(CFG, seed=6)
    assert not torch.equal(a.W_E, c.W_E)


def test_tied_unembedding():
    cfg = TinyConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=5, n_ctx=4, tie_unembed=True)
    m = TinyTransformer(cfg, seed=0)
    assert m.W_U is None and torch.equal(m.unembed, m.W_E.T)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_heads": 3}, "divide"),
        ({"n_layers": 0}, "n_layers"),
        ({"act": "tanh"}, "act"),
        ({"d_mlp": 0}, "d_mlp"),
    ],
)
def test_invalid_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TinyConfig(**{"d_model": 16, "n_heads": 4, **kwargs})


def test_invalid_tokens(model):
    with pytest.raises(TypeError, match="tokens"):
        model([[1, 2]])
    with pytest.raises(ValueError, match="tokens"):
        model(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="d_vocab"):
        model(torch.tensor([[1, 11]]))
    with pytest.raises(ValueError, match="n_ctx"):
        model(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(TypeError, match="TinyConfig"):
        TinyTransformer({"n_layers": 1})
