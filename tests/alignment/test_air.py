"""AIR: the oracles of spec np_alignment §2.3 (risk at theta_old, REINFORCE gradient, zero anchor
gradient, one-sided zero, V-REx = numpy variance, the exact AIR/V-REx relation), gradcheck in
float64, AIRObjective's reductions, metrics by brute force, validation, and the demo's effects."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rml_fast.alignment.air import AIRObjective, air_loss, context_metrics, context_risk, vrex_loss
from rml_fast.alignment.demos import air as air_demo
from rml_fast.alignment.grpo import grpo_advantages, grpo_loss, sequence_ratio


def _batch(seed=0, n_g=3, n_v=3, per=4, t=3):
    """Rollouts of a tabular softmax policy: one logit table per (intent, variant)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(n_g, n_v, t, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    g = torch.arange(n_g).repeat_interleave(n_v * per)
    v = torch.arange(n_v).repeat_interleave(per).repeat(n_g)
    b = g.numel()
    actions = torch.randint(0, 4, (b, t), generator=gen)
    reward = torch.rand(b, generator=gen, dtype=torch.float64)
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[::5, -1] = False

    def logp_fn(lg):
        lp = torch.log_softmax(lg[g, v], -1)  # (B, T, 4)
        return lp.gather(-1, actions[..., None])[..., 0]

    return logits, logp_fn, reward, g, v, mask


def test_risk_at_theta_old_is_one_minus_mean_reward():
    logits, logp_fn, reward, g, v, mask = _batch()
    lp = logp_fn(logits)
    risk = context_risk(sequence_ratio(lp, lp.detach(), mask), reward, g, v)
    for i, e in itertools.product(range(3), range(3)):
        sel = (g == i) & (v == e)
        assert abs(risk[i, e].item() - (1 - reward[sel].mean().item())) < 1e-14
    # an empty cell is NaN and the others are untouched
    keep = ~((g == 1) & (v == 2))
    r2 = context_risk(torch.ones(int(keep.sum()), dtype=torch.float64), reward[keep], g[keep], v[keep])
    assert torch.isnan(r2[1, 2]) and torch.isfinite(r2[torch.arange(3) != 1]).all()


def test_risk_gradient_is_reinforce():
    logits, logp_fn, reward, g, v, mask = _batch(seed=1)
    lp = logp_fn(logits)
    risk = context_risk(sequence_ratio(lp, lp.detach(), mask), reward, g, v)
    mf = mask.to(torch.float64)
    seq_mean_logp = (lp * mf).sum(1) / mf.sum(1)
    for i, e in [(0, 0), (2, 1)]:
        (grad,) = torch.autograd.grad(risk[i, e], logits, retain_graph=True)
        sel = (g == i) & (v == e)
        reinforce = -(reward[sel] * seq_mean_logp[sel]).mean()
        (want,) = torch.autograd.grad(reinforce, logits, retain_graph=True)
        torch.testing.assert_close(grad, want, rtol=1e-12, atol=1e-14)


def test_air_gives_anchor_logprobs_exactly_zero_gradient():
    logits, logp_fn, reward, g, v, mask = _batch(seed=2)
    lp = logp_fn(logits)
    lp_leaf = lp.detach().requires_grad_()
    # evaluate away from theta_old so that every term is active
    lp_old = lp.detach() + 0.3 * torch.randn(lp.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    risk = context_risk(sequence_ratio(lp_leaf, lp_old, mask), reward * 0.3, g, v)
    is_anchor = torch.tensor([True, False, False])
    loss = air_loss(risk, is_anchor, one_sided=False)
    (grad,) = torch.autograd.grad(loss, lp_leaf)
    anchor_rows = v == 0
    assert torch.all(grad[anchor_rows] == 0.0)
    assert grad[~anchor_rows].abs().max() > 1e-5  # open variants do get a gradient
    # V-REx does push on the anchors
    (grad_v,) = torch.autograd.grad(vrex_loss(context_risk(sequence_ratio(lp_leaf, lp_old, mask), reward, g, v)),
                                    lp_leaf)
    assert grad_v[anchor_rows].abs().max() > 1e-4


def _air_reference(risk, anchor, valid, one_sided):
    vals = []
    for i in range(risk.shape[0]):
        a = [risk[i, e] for e in range(risk.shape[1]) if valid[i, e] and anchor[i, e]]
        o = [risk[i, e] for e in range(risk.shape[1]) if valid[i, e] and not anchor[i, e]]
        if not a or not o:
            continue
        ra = np.mean(a)
        vals.append(np.mean([max(x - ra, 0.0) ** 2 if one_sided else (x - ra) ** 2 for x in o]))
    return np.mean(vals) if vals else 0.0


@pytest.mark.parametrize("one_sided", [True, False])
def test_air_loss_matches_reference(one_sided):
    rng = np.random.default_rng(4)
    risk = rng.random((6, 4))
    anchor = rng.random((6, 4)) < 0.4
    valid = rng.random((6, 4)) < 0.8
    risk_nan = np.where(valid, risk, np.nan)
    got = air_loss(torch.tensor(risk_nan), torch.tensor(anchor), one_sided=one_sided).item()
    assert abs(got - _air_reference(risk, anchor, valid, one_sided)) < 1e-14
    got2 = air_loss(torch.tensor(risk), torch.tensor(anchor), torch.tensor(valid), one_sided=one_sided).item()
    assert abs(got2 - got) < 1e-14


def test_one_sided_air_is_zero_when_open_not_worse():
    risk = torch.tensor([[0.5, 0.1, 0.5], [0.3, 0.2, 0.0]], dtype=torch.float64, requires_grad=True)
    is_anchor = torch.tensor([True, False, False])
    loss = air_loss(risk, is_anchor)
    assert loss.item() == 0.0
    (grad,) = torch.autograd.grad(loss, risk)
    assert torch.all(grad == 0)
    assert air_loss(risk, is_anchor, one_sided=False).item() > 0.05


def test_vrex_is_numpy_variance():
    rng = np.random.default_rng(5)
    risk = rng.random((5, 4))
    valid = rng.random((5, 4)) < 0.75
    valid[:, 0] = True
    got = vrex_loss(torch.tensor(np.where(valid, risk, np.nan))).item()
    want = np.mean([np.var(risk[i][valid[i]]) for i in range(5)])
    assert abs(got - want) < 1e-14


def test_air_equals_vrex_with_frozen_anchor_for_one_anchor_one_open():
    """What holds exactly: with one anchor and one open variant per intent, two-sided AIR is 4x V-REx
    (value, and gradient once the anchor is frozen); with two open variants it is not."""
    logits, logp_fn, reward, g, v, mask = _batch(seed=6, n_v=2)
    lp = logp_fn(logits)
    lp_old = lp.detach() + 0.2
    is_open = (v == 1)[:, None]
    lp_frozen = torch.where(is_open, lp, lp.detach())  # anchors carry no gradient
    risk = context_risk(sequence_ratio(lp_frozen, lp_old, mask), reward, g, v)
    l_air = air_loss(risk, torch.tensor([True, False]), one_sided=False)
    l_vrex = vrex_loss(risk)
    assert abs(l_air.item() - 4 * l_vrex.item()) < 1e-14
    (ga,) = torch.autograd.grad(l_air, logits, retain_graph=True)
    (gv,) = torch.autograd.grad(l_vrex, logits)
    torch.testing.assert_close(ga, 4 * gv, rtol=1e-12, atol=1e-15)
    # one-sided AIR equals it wherever the open variant is the worse one
    r = torch.tensor([[0.1, 0.6], [0.2, 0.9]], dtype=torch.float64)
    assert abs(air_loss(r, torch.tensor([True, False])).item() - 4 * vrex_loss(r).item()) < 1e-14
    # with two open variants the variance is about the mean of all three, not the anchor
    r3 = torch.tensor([[0.1, 0.2, 0.9]], dtype=torch.float64)
    ratio = air_loss(r3, torch.tensor([True, False, False]), one_sided=False) / vrex_loss(r3)
    assert abs(ratio.item() - 4.0) > 1.0  # 0.325 / 0.1267


def test_gradcheck_float64():
    rng = np.random.default_rng(7)
    risk = torch.tensor(rng.random((4, 3)), requires_grad=True)
    anchor = torch.tensor([True, False, False])
    anc = risk.detach()[:, :1]  # the stop-gradient target: a constant for the check

    def air_open(open_risk, one_sided):
        return air_loss(torch.cat([anc, open_risk], 1), anchor, one_sided=one_sided)

    open_risk = risk.detach()[:, 1:].clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda r: air_open(r, False), (open_risk,))
    assert torch.autograd.gradcheck(lambda r: air_open(r, True), (open_risk,))  # no open risk at the kink
    assert torch.autograd.gradcheck(vrex_loss, (risk,))
    ratio = torch.tensor(rng.uniform(0.5, 1.5, 12), requires_grad=True)
    rew = torch.tensor(rng.random(12))
    g = torch.arange(4).repeat_interleave(3)
    v = torch.arange(3).repeat(4)
    assert torch.autograd.gradcheck(lambda s: context_risk(s, rew, g, v), (ratio,))


def test_objective_reductions():
    logits, logp_fn, reward, g, v, mask = _batch(seed=8)
    lp = logp_fn(logits)
    lp_old = lp.detach() + 0.1
    is_anchor = v == 0
    batch = {"logp_new": lp, "logp_old": lp_old, "reward": reward, "group_id": g, "variant_id": v,
             "is_anchor": is_anchor, "mask": mask}
    out0 = AIRObjective(lam=0.0)(batch)
    plain = grpo_loss(lp, lp_old, None, grpo_advantages(reward, g), mask)
    assert abs(out0["loss"].item() - plain.item()) < 1e-14
    torch.testing.assert_close(out0["adv"], grpo_advantages(reward, g))
    out = AIRObjective(lam=2.5, normalize="variant")(batch)
    risk = context_risk(sequence_ratio(lp, lp_old, mask), reward, g, v)
    want_air = air_loss(risk, torch.tensor([True, False, False]))
    assert abs(out["air"].item() - want_air.item()) < 1e-14
    plain_v = grpo_loss(lp, lp_old, None, grpo_advantages(reward, g, "variant", variant_id=v), mask)
    assert abs(out["loss"].item() - (plain_v.item() + 2.5 * want_air.item())) < 1e-12
    outv = AIRObjective(lam=1.0, regulariser="vrex")(batch)
    assert abs(outv["air"].item() - vrex_loss(risk).item()) < 1e-14
    lref = lp.detach() - 0.2
    outk = AIRObjective(lam=0.5, kl_coef=0.1)({**batch, "logp_ref": lref})
    plain_k = grpo_loss(lp, lp_old, lref, grpo_advantages(reward, g), mask, kl_coef=0.1)
    assert abs(outk["loss"].item() - (plain_k.item() + 0.5 * outk["air"].item())) < 1e-12
    assert abs(plain_k.item() - plain.item()) > 1e-4
    with pytest.raises(ValueError, match="logp_ref"):
        AIRObjective(kl_coef=0.1)(batch)
    outn = AIRObjective(lam=1.0, regulariser="none")(batch)
    assert outn["air"].item() == 0.0 and abs(outn["loss"].item() - plain.item()) < 1e-14


def test_objective_validation():
    lp = torch.zeros(4, 2)
    base = {"logp_new": lp, "logp_old": lp, "reward": torch.tensor([1.0, 0.0, 1.0, 0.0]),
            "group_id": torch.tensor([0, 0, 0, 0]), "variant_id": torch.tensor([0, 0, 1, 1]),
            "is_anchor": torch.tensor([True, True, False, False])}
    obj = AIRObjective()
    obj(base)
    with pytest.raises(ValueError, match="missing"):
        obj({k: x for k, x in base.items() if k != "reward"})
    with pytest.raises(ValueError, match="reward must be finite"):
        obj({**base, "reward": torch.tensor([1.0, float("inf"), 0.0, 0.0])})
    with pytest.raises(ValueError, match="reward must have shape"):
        obj({**base, "reward": torch.zeros(5)})
    with pytest.raises(ValueError, match="logp_old"):
        obj({**base, "logp_old": torch.zeros(4, 3)})
    with pytest.raises(ValueError, match="same for every rollout"):
        obj({**base, "is_anchor": torch.tensor([True, False, False, False])})
    with pytest.raises(ValueError, match="lam"):
        AIRObjective(lam=-1.0)
    with pytest.raises(ValueError, match="kl_coef"):
        AIRObjective(kl_coef=-0.1)
    with pytest.raises(ValueError, match="regulariser"):
        AIRObjective(regulariser="irm")
    with pytest.raises(ValueError, match="is_anchor"):
        air_loss(torch.zeros(2, 3), torch.tensor([True, False]))
    with pytest.raises(ValueError, match="risk must be finite"):
        air_loss(torch.tensor([[0.0, float("nan")]]), torch.tensor([True, False]), torch.ones(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="reward must have shape"):
        context_risk(torch.ones(3), torch.ones(2), torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long))


def test_context_metrics_bruteforce():
    rng = np.random.default_rng(9)
    p = rng.random((5, 3))
    anchor = np.array([True, False, False])
    got = context_metrics(torch.tensor(p), torch.tensor(anchor))
    # enumerate all 2^15 joint outcomes would be large; enumerate per intent instead (independent variants)
    grp, cons = [], []
    for i in range(5):
        pg = pc = 0.0
        for outcome in itertools.product([0, 1], repeat=3):
            pr = np.prod([p[i, e] if o else 1 - p[i, e] for e, o in enumerate(outcome)])
            pg += pr * all(outcome)
            pc += pr * (len(set(outcome)) == 1)
        grp.append(pg)
        cons.append(pc)
    assert abs(got["anchor_accuracy"] - p[:, 0].mean()) < 1e-12
    assert abs(got["open_accuracy"] - p[:, 1:].mean()) < 1e-12
    assert abs(got["group_accuracy"] - np.mean(grp)) < 1e-12
    assert abs(got["consistency"] - np.mean(cons)) < 1e-12
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        context_metrics(torch.tensor([[1.5, 0.0]]), torch.tensor([True, False]))


# --------------------------------------------------------------------------- the demo's effects


def test_demo_exact_toy_effects():
    c = {m: air_demo.run_exact(m, steps=60) for m in air_demo.METHODS}
    start = c["grpo"]["anchor_acc"][0]
    # V-REx lowers anchor accuracy early; plain GRPO and AIR never do
    assert start - c["vrex"]["anchor_acc"][:21].min() > 0.15
    assert c["air"]["anchor_acc"].min() >= start - 1e-12
    assert c["grpo"]["anchor_acc"].min() >= start - 1e-12
    # AIR closes the anchor/open gap much faster than GRPO
    assert c["air"]["gap"][10] < 0.05 and c["grpo"]["gap"][10] > 0.5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_demo_stochastic_toy_effects(seed):
    c = {m: air_demo.run_stochastic(m, seed=seed, steps=15, n_intents=8) for m in air_demo.METHODS}
    start = c["grpo"]["anchor_acc"][0]
    assert c["vrex"]["anchor_acc"].min() < c["grpo"]["anchor_acc"].min() - 0.05
    assert c["air"]["anchor_acc"].min() >= start - 0.02
    assert c["air"]["gap"][15] < c["grpo"]["gap"][15] - 0.15


def test_demo_run_table_and_figure(tmp_path):
    res = air_demo.run(quick=True, progress=False, out=tmp_path)
    assert (tmp_path / "alignment_air.png").stat().st_size > 10_000
    s = res["stochastic"]["summary"]
    assert s["vrex"]["anchor_drop"] > 0.05 and s["air"]["anchor_drop"] < 0.02
    table = air_demo.format_table(res)
    assert len(table.splitlines()) == 7 and "vrex" in table
