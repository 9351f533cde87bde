"""GTM (gradient-guided token masking): HSGN oracles, masking invariants, adapters, the attack
and the end-to-end defense on the trained TinyVLM (spec robust_media.md §1.4)."""

from __future__ import annotations

import math

import pytest
import torch

from rml_fast.models.digits_vlm import (
    DIGIT_WORDS,
    PROMPTS,
    TinyVLM,
    digit_of_token,
    digits_vlm_images,
    digits_vlm_split,
)
from rml_fast.security.gtm import (
    CallableVLMAdapter,
    GTMDefense,
    LlavaAdapter,
    TinyVLMAdapter,
    VLMInputs,
    adversarial_loss,
    attack_success_rate,
    hsgn_scores,
    image_hijack_pgd,
    n_masked,
    ranking_consistency,
    topk_mask,
)

TARGET = "seven <eos>"


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- HSGN oracles


def test_linear_toy_closed_form():
    """H_t = sum_i A_i E_i + c  =>  dJ/dE_i = A_i^T u with u = H_t / ||H_t|| (exact)."""
    g = _gen(1)
    n, d, big_d, t_len, t = 6, 5, 7, 4, 2
    A = torch.randn(n, big_d, d, generator=g, dtype=torch.float64)
    c = torch.randn(t_len, big_d, generator=g, dtype=torch.float64)
    other = torch.randn(t_len, n, big_d, d, generator=g, dtype=torch.float64)
    other[t] = A  # row t of H is the linear map of interest; other rows are other maps

    def forward(e):
        return torch.einsum("pnkd,nd->pk", other, e) + c

    e = torch.randn(n, d, generator=g, dtype=torch.float64)
    h_t = torch.einsum("nkd,nd->k", A, e) + c[t]
    u = h_t / h_t.norm()
    expected = torch.einsum("nkd,k->nd", A, u).norm(dim=-1)
    got = hsgn_scores(forward, e, t)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    # negative positions count from the end
    torch.testing.assert_close(hsgn_scores(forward, e, t - t_len), expected, rtol=1e-12, atol=1e-12)


def test_finite_differences_float64_on_tiny_vlm():
    model = TinyVLM(seed=3).double()
    ad = TinyVLMAdapter(model)
    x = torch.rand(1, 1, 16, 16, generator=_gen(2), dtype=torch.float64)
    inp = ad.prepare(x, PROMPTS[0])
    t = int(ad.target_index(inp, "first_text")[0])
    with torch.no_grad():
        e = ad.image_embeds(inp)[0]  # (N, D)

    def j(batch_e):  # (M, N, D) -> (M,)
        ids = inp.input_ids.expand(batch_e.shape[0], -1)
        return model.hidden(model.splice(ids, batch_e), final_norm=False)[:, t].norm(dim=-1)

    h = 1e-6
    n, dd = e.shape
    eye = torch.eye(n * dd, dtype=torch.float64).view(n * dd, n, dd)
    with torch.no_grad():
        fd = (j(e + h * eye) - j(e - h * eye)) / (2 * h)  # central differences, all entries
    fd_norms = fd.view(n, dd).norm(dim=-1)
    got = hsgn_scores(lambda z: ad.last_hidden(inp, ad.splice(inp, z[None]))[0], e, t)
    rel = float((got - fd_norms).norm() / fd_norms.norm())
    assert rel < 1e-6


def test_captum_saliency_row_norms_equal_hsgn():
    from captum.attr import Saliency

    model = TinyVLM(seed=4)
    ad = TinyVLMAdapter(model)
    x = torch.rand(3, 1, 16, 16, generator=_gen(3))
    inp = ad.prepare(x, PROMPTS[1])
    t = ad.target_index(inp, "first_text")
    with torch.no_grad():
        e = ad.image_embeds(inp)

    def objective(z):  # (B, N, D) -> J per sample (B,)
        h = ad.last_hidden(inp, ad.splice(inp, z))
        return h[torch.arange(h.shape[0]), t].norm(dim=-1)

    sal = Saliency(objective).attribute(e.clone().requires_grad_(True), abs=False)
    expected = sal.norm(dim=-1)
    got = GTMDefense(target="first_text").scores(ad, inp)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-7)


def test_batch_equals_per_sample_loop():
    model = TinyVLM(seed=5)
    ad = TinyVLMAdapter(model)
    x = torch.rand(4, 1, 16, 16, generator=_gen(4))
    inp = ad.prepare(x, PROMPTS[2])
    with torch.no_grad():
        e = ad.image_embeds(inp)
    t = torch.tensor([17, 19, 21, -1])

    def fwd(z):
        ids = inp.input_ids[: z.shape[0]]
        return model.hidden(model.splice(ids, z), final_norm=False)

    batched = hsgn_scores(fwd, e, t)
    for b in range(4):
        single = hsgn_scores(lambda z: fwd(z[None])[0], e[b], int(t[b]))
        torch.testing.assert_close(batched[b], single, rtol=1e-5, atol=1e-7)


def test_scaling_objective_keeps_ranking():
    model = TinyVLM(seed=6)
    ad = TinyVLMAdapter(model)
    inp = ad.prepare(torch.rand(2, 1, 16, 16, generator=_gen(5)), PROMPTS[0])
    with torch.no_grad():
        e = ad.image_embeds(inp)
    t = ad.target_index(inp, "last")

    def fwd(z, c=1.0):
        return c * model.hidden(model.splice(inp.input_ids, z), final_norm=False)

    s1 = hsgn_scores(fwd, e, t)
    s3 = hsgn_scores(lambda z: fwd(z, 3.0), e, t)
    torch.testing.assert_close(s3, 3.0 * s1, rtol=1e-5, atol=1e-8)
    assert torch.equal(torch.argsort(s1, dim=-1), torch.argsort(s3, dim=-1))


# --------------------------------------------------------------------------- masking invariants


@pytest.mark.parametrize(("n", "rate"), [(16, 0.0), (16, 5.0), (16, 12.5), (16, 100.0), (576, 5.0), (7, 33.3)])
def test_topk_mask_invariants(n, rate):
    g = _gen(n)
    e = torch.randn(2, n, 3, generator=g)
    s = torch.rand(2, n, generator=g)
    e_before = e.clone()
    masked, idx = topk_mask(e, s, rate, fill=-2.5)
    k = math.floor(n * rate / 100 + 1e-9)
    assert idx.shape == (2, k) and n_masked(n, rate) == k
    assert torch.equal(e, e_before)  # the caller's tensor is untouched
    for b in range(2):
        assert set(idx[b].tolist()) == set(torch.topk(s[b], k).indices.tolist())
        hit = torch.zeros(n, dtype=torch.bool)
        hit[idx[b]] = True
        assert bool((masked[b][hit] == -2.5).all())
        assert torch.equal(masked[b][~hit], e[b][~hit])  # bitwise unchanged


def test_zero_rate_gives_the_undefended_output(trained_vlm):
    ad = TinyVLMAdapter(trained_vlm.model)
    x, _ = digits_vlm_images()
    inp = ad.prepare(x[:6], PROMPTS[0])
    with torch.no_grad():
        plain = ad.splice(inp, ad.image_embeds(inp))
        plain_ids = ad.generate_from_embeds(inp, plain, 2)
    gtm = GTMDefense(mask_rate=0.0)
    emb, idx = gtm.defend(ad, inp, return_indices=True)
    assert idx.shape == (6, 0)
    assert torch.equal(emb, plain)
    assert torch.equal(gtm.generate(ad, inp, 2), plain_ids)


def test_defend_masks_exactly_the_top_scored_rows(trained_vlm):
    ad = TinyVLMAdapter(trained_vlm.model)
    x, _ = digits_vlm_images()
    inp = ad.prepare(x[10:13], PROMPTS[3])
    gtm = GTMDefense(mask_rate=25.0, target="last", fill=0.0)
    emb, idx = gtm.defend(ad, inp, return_indices=True)
    s = gtm.scores(ad, inp)
    assert bool((s > 0).all())
    with torch.no_grad():
        plain = ad.splice(inp, ad.image_embeds(inp))
    img_pos = (inp.input_ids[0] == inp.image_token_id).nonzero()[:, 0]
    for b in range(3):
        assert set(idx[b].tolist()) == set(torch.topk(s[b], 4).indices.tolist())
        rows = img_pos[idx[b]]
        assert bool((emb[b, rows] == 0).all())
        keep = torch.ones(emb.shape[1], dtype=torch.bool)
        keep[rows] = False
        assert torch.equal(emb[b, keep], plain[b, keep])


# --------------------------------------------------------------------------- bad input


def test_bad_input_raises_naming_the_argument():
    ad = TinyVLMAdapter(TinyVLM(seed=0))
    with pytest.raises(ValueError, match="pixel_values"):
        ad.prepare(torch.zeros(2, 3, 16, 16), PROMPTS[0])
    with pytest.raises(ValueError, match="image"):
        image_hijack_pgd(ad, torch.zeros(16, 16), PROMPTS[0], TARGET, steps=2, accum=1)
    with pytest.raises(ValueError, match="mask_rate"):
        GTMDefense(mask_rate=120.0)
    with pytest.raises(ValueError, match="mask_rate"):
        topk_mask(torch.zeros(4, 2), torch.zeros(4), mask_rate=-1.0)
    with pytest.raises(TypeError, match="mask_rate"):
        GTMDefense(mask_rate="5")
    with pytest.raises(ValueError, match="target"):
        GTMDefense(target="middle")
    with pytest.raises(TypeError, match="target"):
        GTMDefense(target=1.5)
    with pytest.raises(ValueError, match="scores"):
        topk_mask(torch.zeros(4, 2), torch.zeros(5))
    with pytest.raises(ValueError, match="mode"):
        attack_success_rate(["a"], "a", mode="exact")
    with pytest.raises(ValueError, match="target_index"):
        hsgn_scores(lambda e: e, torch.zeros(3, 2), 5)
    with pytest.raises(ValueError, match="eps"):
        image_hijack_pgd(ad, torch.zeros(1, 16, 16), PROMPTS[0], TARGET, eps=2.0)
    with pytest.raises(ValueError, match="patch"):
        image_hijack_pgd(ad, torch.zeros(1, 16, 16), PROMPTS[0], TARGET, patch="q4")
    with pytest.raises(TypeError, match="adapter"):
        GTMDefense().scores(object(), None)


def test_attack_success_rate_modes():
    outs = ["seven <eos>", " seven", "one seven", "sev"]
    assert attack_success_rate(outs, "seven") == 0.5
    assert attack_success_rate(outs, "seven", mode="contains") == 0.75
    assert attack_success_rate(outs, ["seven", "one", "one", "sev"]) == 0.75


# --------------------------------------------------------------------------- attack + defense


def _eval_split(n: int):
    x, y = digits_vlm_images()
    _, te = digits_vlm_split(0)
    sel = te[y[te] != 7][:n]
    return x[sel], y[sel]


def test_attack_respects_the_ball_and_the_patch(trained_vlm):
    ad = TinyVLMAdapter(trained_vlm.model)
    x, _ = _eval_split(3)
    adv = image_hijack_pgd(ad, x, PROMPTS[0], TARGET, eps=8 / 255, alpha=4 / 255, steps=6, accum=2)
    assert float((adv - x).abs().max()) <= 8 / 255 + 1e-6
    assert float(adv.min()) >= 0.0 and float(adv.max()) <= 1.0
    adv_p = image_hijack_pgd(ad, x, PROMPTS[0], TARGET, steps=4, accum=2, patch=(4, 2, 6),
                             generator=_gen(0))
    outside = torch.ones(16, 16, dtype=torch.bool)
    outside[2:6, 6:10] = False
    assert torch.equal(adv_p[..., outside], x[..., outside])
    inp = ad.prepare(x, PROMPTS[0], TARGET)
    loss0 = adversarial_loss(ad, inp)
    adv2 = image_hijack_pgd(ad, x, list(PROMPTS[:2]), TARGET, eps=16 / 255, alpha=2 / 255,
                            steps=16, accum=2)
    assert float(adversarial_loss(ad, inp.with_pixels(adv2)).mean()) < float(loss0.mean())


def test_gtm_defends_the_toy_vlm(trained_vlm):
    """Patch hijack ("seven") succeeds on the undefended toy; GTM (r = 6.25 %: one of 16
    tokens, target "last") cuts its success clearly and keeps clean accuracy within 7 points on
    the test split (measured: 5.3)."""
    ad = TinyVLMAdapter(trained_vlm.model)
    xs, _ = _eval_split(16)
    adv = image_hijack_pgd(ad, xs, list(PROMPTS), TARGET, patch="s8", alpha=0.05, steps=400,
                           accum=4, generator=_gen(0))
    undefended, defended = GTMDefense(0.0), GTMDefense(6.25, target="last")

    def asr(gtm):
        ids = gtm.generate(ad, ad.prepare(adv, PROMPTS[0]), 2)
        return attack_success_rate([ad.decode(r) for r in ids], "seven")

    asr_plain, asr_gtm = asr(undefended), asr(defended)
    assert asr_plain >= 0.7  # measured 0.81 (13 of 16)
    assert asr_gtm <= asr_plain - 0.4  # measured 0.125
    # the masked token lies in the patch (tokens 10, 11, 14, 15 of the 4 x 4 grid) mostly
    _, idx = defended.defend(ad, ad.prepare(adv, PROMPTS[0]), return_indices=True)
    in_patch = sum(i in {10, 11, 14, 15} for i in idx.flatten().tolist()) / idx.numel()
    assert in_patch >= 0.6  # measured 0.94

    x, y = digits_vlm_images()
    _, te = digits_vlm_split(0)
    inp = ad.prepare(x[te], PROMPTS[0])
    acc = {}
    for name, gtm in (("plain", undefended), ("gtm", defended)):
        first = gtm.generate(ad, inp, 1)[:, 0]
        acc[name] = float((digit_of_token(first) == y[te]).float().mean())
    assert acc["plain"] >= 0.85
    assert acc["gtm"] >= acc["plain"] - 0.07

    # the paper's ranking claim, on the attacked images (target "last")
    rc = ranking_consistency(ad, ad.prepare(adv, PROMPTS[0], TARGET), target="last", k=2)
    assert rc["spearman"] > 0.5


# --------------------------------------------------------------------------- adapters


def test_callable_adapter_matches_the_tiny_adapter():
    model = TinyVLM(seed=7)
    tiny = ad = TinyVLMAdapter(model)
    generic = CallableVLMAdapter(
        tiny.prepare,
        model.image_embeds,
        lambda ids: model.lm.W_E[ids],
        lambda e: model.hidden(e, final_norm=False),
        lambda h: model.lm.ln_final(h) @ model.lm.unembed + model.lm.b_U,
    )
    inp = ad.prepare(torch.rand(2, 1, 16, 16, generator=_gen(8)), PROMPTS[0])
    for target in ("first_text", "last", 3):
        a = GTMDefense(12.5, target=target)
        torch.testing.assert_close(a.scores(generic, inp), a.scores(tiny, inp))
        assert torch.equal(a.generate(generic, inp, 2), a.generate(tiny, inp, 2))


def _tiny_llava():
    transformers = pytest.importorskip("transformers")
    vc = transformers.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        image_size=16, patch_size=4, projection_dim=32,
    )
    tc = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=64, max_position_embeddings=64,
    )
    cfg = transformers.LlavaConfig(
        vision_config=vc, text_config=tc, image_token_id=5, vision_feature_layer=-1,
        vision_feature_select_strategy="default", projector_hidden_act="gelu",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.LlavaForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        # unit-gain final RMSNorm makes ||H_t|| ~ sqrt(D) flat: give it a trained-like gain
        model.model.language_model.norm.weight.copy_(torch.rand(32) + 0.5)
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def test_llava_adapter_on_a_random_tiny_config():
    model = _tiny_llava()
    ad = LlavaAdapter(model)
    pix = torch.rand(2, 3, 16, 16, generator=_gen(9))
    inp = ad.prepare(pix, [1, 5, 7, 8, 9])
    assert int((inp.input_ids[0] == 5).sum()) == 16
    with torch.no_grad():
        ref = model(input_ids=inp.input_ids, pixel_values=pix).logits
        ours = ad.logits(inp, ad.splice(inp, ad.image_embeds(inp)))
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)

    # oracle: gradient through the model's own forward, read by a hook on the projector
    t = int(ad.target_index(inp, "first_text")[0])
    assert t == 17
    grabbed = {}

    def hook(module, args, out):
        leaf = out.detach().clone().requires_grad_(True)
        grabbed["e"] = leaf
        return leaf

    handle = model.model.multi_modal_projector.register_forward_hook(hook)
    try:
        with torch.enable_grad():
            h = model.model(input_ids=inp.input_ids, pixel_values=pix).last_hidden_state
            j = h[:, t].norm(dim=-1).sum()
            (g,) = torch.autograd.grad(j, grabbed["e"])
    finally:
        handle.remove()
    expected = g.norm(dim=-1)
    gtm = GTMDefense(12.5)
    torch.testing.assert_close(gtm.scores(ad, inp), expected, rtol=1e-4, atol=1e-7)

    emb, idx = gtm.defend(ad, inp, return_indices=True)
    assert idx.shape == (2, 2)
    img_pos = (inp.input_ids[0] == 5).nonzero()[:, 0]
    assert bool((emb[0, img_pos[idx[0]]] == 0).all())
    # r = 0: the first generated token is the model's own greedy next token
    first = GTMDefense(0.0).generate(ad, inp, 3)[:, 0]
    assert torch.equal(first, ref[:, -1].argmax(-1))
    # the attack runs through the HF adapter as well
    adv = image_hijack_pgd(ad, pix, [[1, 5, 7, 8, 9]], [11, 12], eps=8 / 255, alpha=2 / 255,
                           steps=2, accum=1)
    assert float((adv - pix).abs().max()) <= 8 / 255 + 1e-6


def test_vlm_inputs_without_answer():
    ad = TinyVLMAdapter(TinyVLM(seed=0))
    inp = ad.prepare(torch.zeros(1, 1, 16, 16), PROMPTS[0], TARGET)
    assert inp.n_answer == 2
    bare = inp.without_answer()
    assert bare.input_ids.shape[1] == inp.input_ids.shape[1] - 2 and bare.n_answer == 0
    assert isinstance(bare, VLMInputs)
    assert ad.decode(inp.input_ids[0, -2:]) == TARGET
    assert DIGIT_WORDS[7] == "seven"


# --------------------------------------------------------------------------- demo


def test_demo_quick(trained_vlm, tmp_path):
    from rml_fast.security.demo import format_table, run

    png = tmp_path / "gtm.png"
    res = run(quick=True, progress=False, model=trained_vlm.model, out=str(png))
    assert png.stat().st_size > 10_000
    # r = 0 is the undefended model: its clean accuracy is the training run's held-out accuracy
    for tgt in ("first_text", "last"):
        assert res["clean_accuracy"][tgt][0.0] == pytest.approx(trained_vlm.test_accuracy)
    assert res["asr"]["patch"]["last"][6.25] < res["asr"]["patch"]["last"][0.0]
    table = format_table(res)
    assert "ASR patch" in table and "first_text" in table
