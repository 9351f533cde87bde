"""PreferenceDPOTrainer against TRL's own DPOTrainer loss where the objectives coincide, and a
tiny end-to-end TRL run with reward calibration. Skips cleanly without trl; the ImportError
message is checked without it."""

from __future__ import annotations

import copy
import math
import sys

import pytest
import torch

from rml_fast.alignment import trl_dpo
from rml_fast.alignment.preference import preference_step

needs_trl = pytest.mark.skipif(
    not trl_dpo.trl_available(), reason="trl is not installed (pip install 'rml_fast[alignment]')"
)
# transformers 5 deprecation warnings raised inside TRL (not ours)
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*deprecated and will be removed in v6:FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def test_import_error_names_the_extra(monkeypatch):
    trl_dpo._trainer_class.cache_clear()
    monkeypatch.setitem(sys.modules, "trl", None)
    try:
        with pytest.raises(ImportError, match=r"rml_fast\[alignment\]"):
            trl_dpo.preference_dpo_trainer_class()
    finally:
        trl_dpo._trainer_class.cache_clear()


def _setup(tmp_path):
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import DPOConfig

    words = [chr(97 + i) for i in range(20)]
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    g = torch.Generator().manual_seed(0)

    def text(n):
        return " ".join(words[j] for j in torch.randint(0, 20, (n,), generator=g).tolist())

    rows = [
        {"prompt": text(4), "chosen": " " + text(1 + i % 3), "rejected": " " + text(1 + (i * 2) % 5)}
        for i in range(8)
    ]
    ds = Dataset.from_list(rows)
    cfg = LlamaConfig(
        vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    ref = LlamaForCausalLM(cfg)
    policy = copy.deepcopy(ref)
    with torch.no_grad():  # the policy differs from the reference, so margins are non-zero
        for p in policy.parameters():
            p.add_(0.3 * torch.randn_like(p))

    def args(**kw):
        return DPOConfig(
            output_dir=str(tmp_path), per_device_train_batch_size=4, report_to=[],
            use_cpu=True, save_strategy="no", disable_tqdm=True, logging_steps=1,
            **{"bf16": False, **kw},  # bf16 autocast on CPU would make the two paths differ
        )

    return tok, ds, policy, ref, args


@pytest.fixture(scope="module")
def trl_env(tmp_path_factory):
    if not trl_dpo.trl_available():
        pytest.skip("trl is not installed")
    import warnings

    from trl import DPOTrainer

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        tok, ds, policy, ref, args = _setup(tmp_path_factory.mktemp("trl"))
        peer = DPOTrainer(model=policy, ref_model=ref, args=args(beta=0.3, max_steps=1),
                          train_dataset=ds, processing_class=tok)
        cls = trl_dpo.preference_dpo_trainer_class()
        ours = cls(model=policy, ref_model=ref, args=args(beta=0.3, max_steps=1),
                   train_dataset=ds, processing_class=tok)
        batch = next(iter(peer.get_train_dataloader()))
    return {"peer": peer, "ours": ours, "batch": batch, "setup": (tok, ds, args)}


def _loss_and_grad(trainer, batch):
    model = trainer.model
    model.zero_grad()
    loss = trainer.compute_loss(model, batch)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad()
    return loss.detach(), grads


@needs_trl
@pytest.mark.parametrize(
    ("trl_loss", "beta", "kind", "hp"),
    [
        ("sigmoid", 0.3, "dpo", {}),
        ("sigmoid", 2.0, "dpo", {}),
        ("sigmoid_norm", 0.3, "dpo", {"length_norm": True}),
        ("ipo", 0.3, "ipo", {"length_norm": True}),  # TRL's IPO: tau = beta, per-token average
        ("bco_pair", 1.0, "bce", {}),
    ],
)
def test_matches_trl_loss_and_gradient(trl_env, trl_loss, beta, kind, hp):
    peer, ours, batch = trl_env["peer"], trl_env["ours"], trl_env["batch"]
    peer.loss_types, peer.loss_weights, peer.beta = [trl_loss], [1.0], beta
    ours.args.beta = beta
    ours._setup_preference(kind, hp)
    l_peer, g_peer = _loss_and_grad(peer, batch)
    l_ours, g_ours = _loss_and_grad(ours, batch)
    assert abs(float(l_peer) - math.log(2)) > 1e-3  # a non-trivial point
    torch.testing.assert_close(l_ours, l_peer, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g_ours, g_peer, rtol=1e-4, atol=1e-6)
    assert float(g_peer.norm()) > 1e-4


@needs_trl
def test_bad_options(trl_env):
    tok, ds, args = trl_env["setup"]
    cls = trl_dpo.preference_dpo_trainer_class()
    with pytest.raises(ValueError, match="kind must be one of"):
        cls(model=trl_env["ours"].model, args=args(max_steps=1), train_dataset=ds,
            processing_class=tok, preference_loss="orpo")
    with pytest.raises(TypeError, match="unknown hyper-parameter"):
        trl_env["ours"]._setup_preference("dpo", {"tau": 1.0})


@needs_trl
def test_end_to_end_with_reward_calibration(trl_env):
    tok, ds, args = trl_env["setup"]
    from transformers import LlamaForCausalLM

    cfg = trl_env["ours"].model.config
    torch.manual_seed(1)
    model = LlamaForCausalLM(cfg)
    before = [p.detach().clone() for p in model.parameters()]
    cls = trl_dpo.preference_dpo_trainer_class()
    trainer = cls(
        model=model, ref_model=copy.deepcopy(model),
        args=args(max_steps=3, learning_rate=1e-2, beta=0.1),
        train_dataset=ds, processing_class=tok,
        preference_loss="dpo", reward_calibration=True,
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "rc/alpha" in h]
    assert len(logs) == 3
    first = logs[0]
    # first step: the EMAs start at the batch values, so alpha^2 = r* / r exactly
    want = math.exp(0.5 * (first["band/log_r_star"] - first["incentives/log_r"]))
    assert first["rc/alpha"] == pytest.approx(want, rel=1e-6)
    assert first["rc/alpha"] != pytest.approx(1.0, abs=1e-4)
    assert all(math.isfinite(h["loss"]) for h in logs)
    assert 0.0 <= first["band/inside"] <= 1.0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert trainer.preference_calibrator.state["steps"] == 3


@needs_trl
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("trl_loss", "kind", "hp"),
    [
        ("simpo", "simpo", {"beta": 2.0, "gamma": 0.8}),
        ("sigmoid", "cpo", {"beta": 0.3, "lam": 0.0}),  # CPO without its NLL term
        ("ipo", "ipo", {"tau": 0.3}),  # reference-free IPO (zero references)
    ],
)
def test_simpo_and_cpo_match_trl_cpo_loss(trl_loss, kind, hp):
    from types import SimpleNamespace

    try:
        from trl.experimental.cpo import CPOTrainer
    except ImportError:
        pytest.skip("this trl has no experimental CPOTrainer")
    g = torch.Generator().manual_seed(3)
    zw = (-20 + 3 * torch.randn(6, generator=g, dtype=torch.float64)).requires_grad_(True)
    zl = (-22 + 3 * torch.randn(6, generator=g, dtype=torch.float64)).requires_grad_(True)
    lw = torch.randint(3, 12, (6,), generator=g).double()
    ll = torch.randint(3, 12, (6,), generator=g).double()
    beta = hp.get("beta", hp.get("tau"))
    stub = SimpleNamespace(
        alpha=0.0, loss_type=trl_loss, beta=beta, simpo_gamma=hp.get("gamma", 0.0),
        label_smoothing=0.0, accelerator=SimpleNamespace(device=zw.device),
    )
    if kind == "simpo":  # TRL's SimPO takes average log-probs
        peer = CPOTrainer.cpo_loss(stub, zw / lw, zl / ll)[0]
        ours = preference_step(kind, zw, zl, len_w=lw, len_l=ll, **hp).losses
    else:
        zero = torch.zeros_like(lw)
        peer = CPOTrainer.cpo_loss(stub, zw, zl)[0]
        ours = preference_step(kind, zw, zl, zero, zero, **hp).losses
    torch.testing.assert_close(ours, peer, rtol=1e-12, atol=1e-12)
    g_peer = torch.autograd.grad(peer.sum(), [zw, zl])
    g_ours = torch.autograd.grad(ours.sum(), [zw, zl])
    for a, b in zip(g_ours, g_peer, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


@needs_trl
def test_closed_form_head_geometry_matches_autograd(trl_env):
    from rml_fast.alignment.preference import score_geometry

    ours, batch = trl_env["ours"], trl_env["batch"]
    ours._setup_preference("dpo", {}, band_diagnostic=True)
    assert ours._closed_form  # a plain untied Llama head
    model = ours.model
    ours._metrics["train"].clear()
    ours.compute_loss(model, batch)  # closed form, logged
    fast = ours._metrics["train"]
    # autograd reference on the same batch
    cm = batch["completion_mask"]
    labels = batch["input_ids"].masked_fill(cm.eq(0), -100)
    kw = {k: v for k, v in batch.items() if k != "completion_mask"}
    logps = model(**kw, use_cache=False, labels=labels, fused_lm_head=True).log_probs.sum(1)
    zw, zl = logps.chunk(2)
    geo = score_geometry(zw, zl, [model.get_output_embeddings().weight])
    assert fast["band/rho"][-1] == pytest.approx(float(geo["rho"]), rel=1e-4, abs=1e-6)
    want = 0.5 * math.log(float(geo["sl_sq"]) / float(geo["sw_sq"]))
    assert fast["band/log_r_star"][-1] == pytest.approx(want, rel=1e-4, abs=1e-6)
    ours._setup_preference("dpo", {}, band_diagnostic=True, fast_geometry=False)
    assert not ours._closed_form
    ours.compute_loss(model, batch)  # autograd path
    assert fast["band/rho"][-1] == pytest.approx(float(geo["rho"]), rel=1e-5, abs=1e-7)
    ours._setup_preference("dpo", {})
