"""GRPO core: advantages against a brute-force loop, the surrogate against a per-token reference,
its REINFORCE limit at theta = theta_old, gradcheck in float64, and input validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rml_fast.alignment.grpo import grpo_advantages, grpo_loss, sequence_ratio


def _adv_reference(r, g, v=None, normalize="group", eps=1e-6, ddof=1):
    r = np.asarray(r, dtype=np.float64)
    keys = list(zip(g, v, strict=True)) if normalize == "variant" else list(g)
    out = np.empty_like(r)
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        seg = r[idx]
        mean = seg.mean()
        std = seg.std(ddof=ddof) if len(seg) > 1 else 0.0
        out[idx] = (seg - mean) if normalize == "none" else (seg - mean) / (std + eps)
    return out


@pytest.mark.parametrize("normalize", ["group", "variant", "none"])
@pytest.mark.parametrize("unbiased", [True, False])
def test_advantages_match_bruteforce(normalize, unbiased):
    rng = np.random.default_rng(0)
    b = 60
    g = rng.integers(0, 5, b) * 7 - 3  # non-contiguous, negative ids
    v = rng.integers(0, 3, b)
    r = rng.random(b)
    got = grpo_advantages(torch.tensor(r), torch.tensor(g), normalize, 1e-6, torch.tensor(v), unbiased=unbiased)
    ref = _adv_reference(r, g, v, normalize, 1e-6, ddof=1 if unbiased else 0)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10, atol=1e-12)
    assert got.dtype == torch.float64


def test_advantages_affine_invariance_and_singletons():
    rng = np.random.default_rng(1)
    r = torch.tensor(rng.random(40))
    g = torch.tensor(rng.integers(0, 4, 40))
    a1 = grpo_advantages(r, g, eps=0.0)
    a2 = grpo_advantages(3.7 * r - 1.2, g, eps=0.0)
    torch.testing.assert_close(a1, a2, rtol=1e-10, atol=1e-10)
    # a group of one rollout, and a group with equal rewards, carry no signal
    adv = grpo_advantages(torch.tensor([0.3, 1.0, 1.0, 0.0]), torch.tensor([0, 1, 1, 2]))
    assert adv.abs().max() == 0.0


def _loss_reference(lnew, lold, lref, adv, mask, eps_lo, eps_hi, beta, reduction):
    b, t = lnew.shape
    per_seq, tot, cnt = [], 0.0, 0.0
    for j in range(b):
        s, n = 0.0, 0
        for k in range(t):
            if not mask[j, k]:
                continue
            rho = np.exp(lnew[j, k] - lold[j, k])
            a = adv[j]
            term = -min(rho * a, min(max(rho, 1 - eps_lo), 1 + eps_hi) * a)
            d = lref[j, k] - lnew[j, k]
            term += beta * (np.exp(d) - d - 1)
            s += term
            n += 1
        per_seq.append(s / max(n, 1))
        tot += s
        cnt += n
    return np.mean(per_seq) if reduction == "sequence" else tot / max(cnt, 1)


@pytest.mark.parametrize("reduction", ["sequence", "token"])
def test_loss_matches_per_token_reference(reduction):
    rng = np.random.default_rng(2)
    b, t = 7, 5
    lnew = np.log(rng.uniform(0.05, 1.0, (b, t)))
    lold = lnew + rng.normal(0, 0.4, (b, t))  # many ratios outside the clip range
    lref = lnew + rng.normal(0, 0.3, (b, t))
    adv = rng.normal(size=b)
    mask = rng.random((b, t)) < 0.8
    mask[0] = False  # an empty row
    got = grpo_loss(torch.tensor(lnew), torch.tensor(lold), torch.tensor(lref), torch.tensor(adv),
                    torch.tensor(mask), clip_eps=0.2, kl_coef=0.05, clip_eps_high=0.28, reduction=reduction)
    ref = _loss_reference(lnew, lold, lref, adv, mask, 0.2, 0.28, 0.05, reduction)
    assert abs(got.item() - ref) < 1e-12


def test_loss_reinforce_limit_and_gradient():
    """At theta = theta_old the loss is -mean A and its gradient the REINFORCE estimate."""
    torch.manual_seed(0)
    logits = torch.randn(6, 4, 3, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, 3, (6, 4))
    logp = torch.log_softmax(logits, -1).gather(-1, actions[..., None])[..., 0]
    adv = torch.randn(6, dtype=torch.float64)
    loss = grpo_loss(logp, logp.detach(), None, adv)
    assert abs(loss.item() + adv.mean().item()) < 1e-12
    (g,) = torch.autograd.grad(loss, logits, retain_graph=True)
    surrogate = -(adv[:, None] * logp).mean(1).mean()
    (g_ref,) = torch.autograd.grad(surrogate, logits)
    torch.testing.assert_close(g, g_ref, rtol=1e-12, atol=1e-14)


def test_loss_gradcheck_float64():
    rng = np.random.default_rng(3)
    b, t = 4, 3
    lold = torch.tensor(np.log(rng.uniform(0.1, 0.9, (b, t))))
    lref = lold + torch.tensor(rng.normal(0, 0.2, (b, t)))
    # ratios well inside or outside [0.8, 1.2], away from the kinks
    off = torch.tensor(rng.choice([-0.5, -0.05, 0.05, 0.5], (b, t)))
    lnew = (lold + off).requires_grad_()
    adv = torch.tensor(rng.normal(size=b))
    mask = torch.tensor(rng.random((b, t)) < 0.8)
    assert torch.autograd.gradcheck(
        lambda x: grpo_loss(x, lold, lref, adv, mask, kl_coef=0.1), (lnew,), eps=1e-6, atol=1e-8
    )
    assert torch.autograd.gradcheck(lambda x: sequence_ratio(x, lold, mask), (lnew,), eps=1e-6, atol=1e-8)


def test_sequence_ratio_value():
    lnew = torch.log(torch.tensor([[0.5, 0.2, 0.9]], dtype=torch.float64))
    lold = torch.log(torch.tensor([[0.25, 0.4, 0.1]], dtype=torch.float64))
    mask = torch.tensor([[True, True, False]])
    want = np.exp(0.5 * (np.log(2.0) + np.log(0.5)))
    assert abs(sequence_ratio(lnew, lold, mask).item() - want) < 1e-14


def test_validation_errors():
    r = torch.tensor([1.0, 0.0, 1.0])
    g = torch.tensor([0, 0, 1])
    with pytest.raises(ValueError, match="group_id"):
        grpo_advantages(r, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="reward must be finite"):
        grpo_advantages(torch.tensor([1.0, float("nan"), 0.0]), g)
    with pytest.raises(ValueError, match="normalize"):
        grpo_advantages(r, g, normalize="batch")
    with pytest.raises(ValueError, match="variant_id"):
        grpo_advantages(r, g, normalize="variant")
    with pytest.raises(TypeError, match="group_id"):
        grpo_advantages(r, torch.tensor([0.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="eps"):
        grpo_advantages(r, g, eps=-1.0)
    lp = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="kl_coef"):
        grpo_loss(lp, lp, lp, r, kl_coef=-0.1)
    with pytest.raises(ValueError, match="logp_ref"):
        grpo_loss(lp, lp, None, r, kl_coef=0.1)
    with pytest.raises(ValueError, match="clip_eps"):
        grpo_loss(lp, lp, None, r, clip_eps=0.0)
    with pytest.raises(ValueError, match="logp_old"):
        grpo_loss(lp, torch.zeros(3, 3), None, r)
    with pytest.raises(ValueError, match="adv"):
        grpo_loss(lp, lp, None, torch.zeros(4))
    with pytest.raises(ValueError, match="mask"):
        grpo_loss(lp, lp, None, r, torch.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="logp_new must be finite"):
        grpo_loss(torch.tensor([[0.0, float("inf")]] * 3), lp, None, r)
    # a non-finite value at a masked-out (padding) token is fine
    bad = torch.tensor([[0.0, float("-inf")]] * 3)
    out = grpo_loss(bad, lp, None, r, torch.tensor([[True, False]] * 3))
    assert torch.isfinite(out)
    with pytest.raises(ValueError, match="reduction"):
        grpo_loss(lp, lp, None, r, reduction="sum")
