"""TRL hook: against TRL's own GRPO where the objectives coincide (AIR with lambda = 0 is TRL's
loss; our grpo_loss / grpo_advantages reproduce TRL's loss and advantages; unit weights + the
identity map are TRL's reward aggregation), the AIR term added exactly, ARSPO weights written into
TRL's reward_weights, and a tiny end-to-end run with a random transformer built from a config.
Skipped without trl, except the import-without-trl check."""

from __future__ import annotations

import sys

import pytest
import torch

import rml_fast.alignment.trl_grpo as tg
from rml_fast.alignment.air import air_loss, context_risk, vrex_loss
from rml_fast.alignment.arspo import DynamicTaskWeights, arspo_rewards, reward_map
from rml_fast.alignment.grpo import grpo_advantages, grpo_loss, sequence_ratio

pytestmark = pytest.mark.filterwarnings(
    # transformers 5 deprecations triggered inside TRL / Trainer, not by rml_fast
    "ignore:.*is deprecated and will be removed in v6.*:FutureWarning",
)


def test_module_imports_and_explains_without_trl(monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)
    for name in ("AIRGRPOTrainer", "ARSPOGRPOTrainer"):
        monkeypatch.delitem(tg.__dict__, name, raising=False)
    f = tg.mapped_reward(lambda completions, **kw: [0.25] * len(completions), name="iou")
    assert f(completions=["x"]) == [0.5]
    with pytest.raises(ImportError, match=r"pip install 'rml_fast\[alignment\]'"):
        _ = tg.AIRGRPOTrainer
    with pytest.raises(AttributeError):
        _ = tg.NoSuchTrainer


def test_mapped_reward_validation():
    with pytest.raises(ValueError, match="kind"):
        tg.mapped_reward(lambda **kw: [], kind="log")
    with pytest.raises(TypeError, match="callable"):
        tg.mapped_reward(3)


# --------------------------------------------------------------------------- with TRL

WORDS = ["<pad>", "<eos>", "<unk>", "a", "b", "c", "d", "e", "f", "refuse", "comply"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("trl")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    ptok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    cfg = LlamaConfig(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                      pad_token_id=0, eos_token_id=1, bos_token_id=1)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    return str(path), ptok


def _dataset():
    from datasets import Dataset

    # 2 intents x (anchor, open); one prompt row per variant, ordered intent by intent
    return Dataset.from_dict({
        "prompt": ["a b", "c d", "e f", "a f"],
        "air_group": [0, 0, 1, 1],
        "air_variant": [0, 1, 0, 1],
        "air_anchor": [True, False, True, False],
    })


def r_refuse(completions, **kw):
    return [float(c.count("refuse") > 0) * 0.6 + 0.2 * (len(c) % 2) for c in completions]


def r_iou(completions, **kw):
    return [min(1.0, 0.1 * len(c.split())) for c in completions]


def _config(tmp_path, **kw):
    from trl import GRPOConfig

    base = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=16, num_generations=4,
                max_completion_length=5, max_steps=2, learning_rate=1e-2, logging_steps=1, report_to=[],
                use_cpu=True, save_strategy="no", seed=0, beta=0.0, shuffle_dataset=False, disable_tqdm=True,
                steps_per_generation=1, loss_type="grpo")
    base.update(kw)
    return GRPOConfig(**base)


def _raw_batch(trainer):
    return [dict(x) for x in _dataset() for _ in range(trainer.num_generations)]


def _logps(trainer, inputs):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    lp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, inputs["completion_ids"].size(1))
    return lp


def test_air_trainer_against_trl_loss_and_advantages(tiny, tmp_path):
    from trl import GRPOTrainer

    path, ptok = tiny
    tr = tg.AIRGRPOTrainer(model=path, reward_funcs=[r_refuse, r_iou], processing_class=ptok,
                           args=_config(tmp_path, beta=0.04, reward_weights=[0.5, 0.5]), train_dataset=_dataset(),
                           air_lambda=0.7)
    tr.current_gradient_accumulation_steps = 1  # set by Trainer's loop; we call the loss directly
    torch.manual_seed(1)
    with torch.no_grad():  # move the policy away from the reference so that the KL term is not 0
        for p in tr.model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    inputs = tr._generate_and_score_completions(_raw_batch(tr))
    rpf = tr._air_rewards_per_func
    total = 0.5 * rpf[:, 0] + 0.5 * rpf[:, 1]
    torch.testing.assert_close(inputs["air_reward"], total)
    # TRL's advantages are ours with per-prompt groups and eps = 1e-4
    prompt_group = torch.arange(4).repeat_interleave(4)
    torch.testing.assert_close(inputs["advantages"], grpo_advantages(total, prompt_group, eps=1e-4).float(),
                               rtol=1e-5, atol=1e-5)
    # TRL's loss (with its k3 KL) is our grpo_loss; the AIR trainer adds exactly lambda * air_loss
    tr.model.train()
    with torch.no_grad():
        trl_loss = GRPOTrainer._compute_loss(tr, tr.model, inputs)
        ours = tr._compute_loss(tr.model, inputs)
        lp = _logps(tr, inputs)
    mask = inputs["completion_mask"].bool()
    ref = grpo_loss(lp, lp, inputs["ref_per_token_logps"], inputs["advantages"], mask, clip_eps=0.2, kl_coef=0.04)
    assert abs(trl_loss.item() - ref.item()) < 1e-5
    no_kl = grpo_loss(lp, lp, None, inputs["advantages"], mask)
    assert abs(ref.item() - no_kl.item()) > 1e-4  # the KL term is exercised
    risk = context_risk(sequence_ratio(lp, lp, mask), total, inputs["air_group"], inputs["air_variant"])
    want = trl_loss + 0.7 * air_loss(risk, torch.tensor([True, False]))
    assert abs(ours.item() - want.item()) < 1e-5
    assert (want - trl_loss).item() > 1e-3  # this batch has an open variant riskier than its anchor
    # lambda = 0: exactly TRL's loss
    tr.air_lambda = 0.0
    with torch.no_grad():
        assert tr._compute_loss(tr.model, inputs).item() == trl_loss.item()
    # the AIR term's gradient reaches the model
    tr.air_lambda = 0.7
    tr.model.zero_grad()
    (tr._compute_loss(tr.model, inputs) - GRPOTrainer._compute_loss(tr, tr.model, inputs)).backward()
    gnorm = sum(float(p.grad.abs().sum()) for p in tr.model.parameters() if p.grad is not None)
    assert gnorm > 1e-6


def test_air_trainer_group_advantages_and_vrex(tiny, tmp_path):
    path, ptok = tiny
    tr = tg.AIRGRPOTrainer(model=path, reward_funcs=[r_refuse], processing_class=ptok, args=_config(tmp_path),
                           train_dataset=_dataset(), air_advantage="group", air_regulariser="vrex", air_lambda=2.0)
    tr.current_gradient_accumulation_steps = 1
    torch.manual_seed(2)
    inputs = tr._generate_and_score_completions(_raw_batch(tr))
    r = inputs["air_reward"]
    torch.testing.assert_close(inputs["advantages"], grpo_advantages(r, inputs["air_group"], eps=1e-4).float(),
                               rtol=1e-5, atol=1e-5)
    from trl import GRPOTrainer

    with torch.no_grad():
        base = GRPOTrainer._compute_loss(tr, tr.model, inputs)
        lp = _logps(tr, inputs)
        ours = tr._compute_loss(tr.model, inputs)
    mask = inputs["completion_mask"].bool()
    risk = context_risk(sequence_ratio(lp, lp, mask), r, inputs["air_group"], inputs["air_variant"])
    assert abs(ours.item() - (base + 2.0 * vrex_loss(risk)).item()) < 1e-5


def test_air_trainer_validation(tiny, tmp_path):
    from datasets import Dataset

    path, ptok = tiny
    with pytest.raises(ValueError, match="air_lambda"):
        tg.AIRGRPOTrainer(model=path, reward_funcs=[r_refuse], processing_class=ptok, args=_config(tmp_path),
                          train_dataset=_dataset(), air_lambda=-1.0)
    with pytest.raises(ValueError, match="air_reward"):
        tg.AIRGRPOTrainer(model=path, reward_funcs=[r_refuse], processing_class=ptok, args=_config(tmp_path),
                          train_dataset=_dataset(), air_reward="nope")
    tr = tg.AIRGRPOTrainer(model=path, reward_funcs=[r_refuse], processing_class=ptok, args=_config(tmp_path),
                           train_dataset=Dataset.from_dict({"prompt": ["a b"] * 4}))
    with pytest.raises(ValueError, match="air_group"):
        tr._generate_and_score_completions([{"prompt": "a b"}] * 4)


def test_arspo_trainer_weights_and_unit_weight_aggregation(tiny, tmp_path):
    path, ptok = tiny
    iou = tg.mapped_reward(r_iou, "power", name="iou")
    # unit weights + identity map: TRL's own aggregation equals arspo_rewards
    from trl import GRPOTrainer

    plain = GRPOTrainer(model=path, reward_funcs=[r_refuse, r_iou], processing_class=ptok, args=_config(tmp_path),
                        train_dataset=_dataset())
    torch.manual_seed(3)
    inp = plain._generate_and_score_completions(_raw_batch(plain))
    comps = {"r_refuse": torch.tensor(list(plain._logs["rewards"]["r_refuse"])),
             "r_iou": torch.tensor(list(plain._logs["rewards"]["r_iou"]))}
    total = arspo_rewards(comps, {"r_refuse": 1.0, "r_iou": 1.0}, {"r_iou": "identity"})
    prompt_group = torch.arange(4).repeat_interleave(4)
    torch.testing.assert_close(inp["advantages"], grpo_advantages(total, prompt_group, eps=1e-4).float(),
                               rtol=1e-5, atol=1e-5)
    # ARSPO: the dynamic weights are written into TRL's reward_weights before aggregation
    tw = DynamicTaskWeights(["r_refuse", "iou"])
    tr = tg.ARSPOGRPOTrainer(model=path, reward_funcs=[r_refuse, iou], processing_class=ptok,
                             args=_config(tmp_path), train_dataset=_dataset(), task_weights=tw)
    tr.model.train()
    torch.manual_seed(4)
    inp = tr._generate_and_score_completions(_raw_batch(tr))
    comps = {"r_refuse": torch.tensor(list(tr._logs["rewards"]["r_refuse"])),
             "iou": torch.tensor(list(tr._logs["rewards"]["iou"]))}
    raw_iou = torch.tensor(r_iou([tr.processing_class.decode(c, skip_special_tokens=True)
                                  for c in inp["completion_ids"]]), dtype=torch.float64)
    torch.testing.assert_close(comps["iou"].double(), reward_map(raw_iou), rtol=1e-6, atol=1e-6)
    assert tw.n_updates == 1
    assert abs(tw.mu["iou"] - comps["iou"].double().mean().item()) < 1e-6
    assert tr.reward_weights.tolist() == pytest.approx([tw.weights["r_refuse"], tw.weights["iou"]])
    assert abs(sum(tw.weights.values()) - 2.0) < 1e-9
    total = arspo_rewards(comps, tw.weights)
    torch.testing.assert_close(inp["advantages"], grpo_advantages(total.float(), prompt_group, eps=1e-4).float(),
                               rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="not reward functions"):
        tg.ARSPOGRPOTrainer(model=path, reward_funcs=[r_refuse], processing_class=ptok, args=_config(tmp_path),
                            train_dataset=_dataset(), task_weights=DynamicTaskWeights(["box"]))


def test_tiny_end_to_end_training(tiny, tmp_path):
    path, ptok = tiny
    tw = DynamicTaskWeights(["r_refuse", "iou"])
    tr = tg.ARSPOGRPOTrainer(model=path, reward_funcs=[r_refuse, tg.mapped_reward(r_iou, name="iou")],
                             processing_class=ptok, args=_config(tmp_path), train_dataset=_dataset(), task_weights=tw)
    before = [p.detach().clone() for p in tr.model.parameters()]
    tr.train()
    assert tw.n_updates == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.model.parameters(), strict=True))
    air = tg.AIRGRPOTrainer(model=path, reward_funcs=[r_refuse], processing_class=ptok, args=_config(tmp_path),
                            train_dataset=_dataset(), air_lambda=1.0)
    out = air.train()
    assert torch.isfinite(torch.tensor(out.training_loss))
    logged = [h for h in air.state.log_history if "air/air" in h]
    assert len(logged) == 2 and all(h["air/air"] >= 0 for h in logged)
