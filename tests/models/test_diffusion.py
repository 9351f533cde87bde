"""The toy DDPM: schedule closed forms, the mixture, training reproduces the modes, reproducibility."""

from __future__ import annotations

import math

import pytest
import torch

from rml_fast.models import (
    ConceptMixture,
    ConditionalDenoiser,
    DDPMSchedule,
    concept_mixture,
    ddpm_sample,
    train_denoiser,
)


def test_schedule_closed_forms():
    s = DDPMSchedule(n_steps=100, beta_start=1e-3, beta_end=0.2)
    betas = [1e-3 + (0.2 - 1e-3) * i / 99 for i in range(100)]
    assert torch.allclose(s.betas, torch.tensor(betas, dtype=torch.float64), rtol=0, atol=1e-15)
    prod, prev = 1.0, 1.0
    for t, b in enumerate(betas):
        prev, prod = prod, prod * (1 - b)
        assert math.isclose(float(s.alpha_bars[t]), prod, rel_tol=1e-12)
        assert math.isclose(float(s.posterior_variance[t]), (1 - prev) / (1 - prod) * b,
                            rel_tol=1e-12, abs_tol=1e-300)
    assert float(s.posterior_variance[0]) == 0.0
    assert float(s.alpha_bars[-1]) < 1e-4  # x_T is pure noise to 1e-2 in std
    assert bool((s.posterior_variance <= s.betas).all())


def test_q_sample_moments_and_reverse_mean_inverts_first_step():
    s = DDPMSchedule()
    g = torch.Generator().manual_seed(0)
    x0 = torch.tensor([[1.5, -0.5]], dtype=torch.float64).expand(200_000, 2)
    t = torch.full((200_000,), 30)
    xt = s.q_sample(x0, t, torch.randn(x0.shape, generator=g, dtype=torch.float64))
    ab = float(s.alpha_bars[30])
    assert torch.allclose(xt.mean(0), math.sqrt(ab) * x0[0], atol=0.01)
    assert torch.allclose(xt.var(0), torch.full((2,), 1 - ab, dtype=torch.float64), rtol=0.02)
    # with the true noise, the reverse mean at t = 0 recovers x0 exactly
    eps = torch.randn(5, 2, generator=g, dtype=torch.float64)
    x = torch.randn(5, 2, generator=g, dtype=torch.float64)
    t0 = torch.zeros(5, dtype=torch.long)
    assert torch.allclose(s.reverse_mean(s.q_sample(x, t0, eps), eps, t0), x, atol=1e-12)


def test_kl_weight_matches_reverse_mean_difference():
    s = DDPMSchedule()
    g = torch.Generator().manual_seed(1)
    t = torch.tensor([3, 40, 99])
    x = torch.randn(3, 2, generator=g, dtype=torch.float64)
    e1, e2 = (torch.randn(3, 2, generator=g, dtype=torch.float64) for _ in range(2))
    dmu2 = (s.reverse_mean(x, e1, t) - s.reverse_mean(x, e2, t)).pow(2).sum(1)
    for var, name in ((s.betas, "beta"), (s.posterior_variance, "posterior")):
        expected = dmu2 / var[t]
        got = s.kl_weight(t, sigma2=name) * (e1 - e2).pow(2).sum(1)
        assert torch.allclose(got, expected, rtol=1e-10)


def test_mixture_sampling_and_assignment():
    mix = concept_mixture(4, radius=2.0, std=0.3)
    x, c = mix.sample(40_000, generator=3)
    for k in range(4):
        assert torch.allclose(x[c == k].mean(0), mix.means[k], atol=0.02)
        assert torch.allclose(x[c == k].std(0), torch.full((2,), 0.3), atol=0.01)
    assert float((mix.assign(x) == c).float().mean()) > 0.99
    assert torch.equal(mix.sample(5, generator=3)[0], mix.sample(5, generator=3)[0])
    _, c2 = mix.sample(6, concepts=2, generator=0)
    assert bool((c2 == 2).all())


@pytest.fixture(scope="module")
def toy():
    mix = concept_mixture()
    s = DDPMSchedule()
    return mix, s, train_denoiser(mix, s, steps=1200, seed=0, progress=False)


def test_trained_toy_reproduces_the_modes(toy):
    mix, s, net = toy
    c = torch.arange(4).repeat_interleave(500)
    x = ddpm_sample(net, s, c, generator=11)
    assign = mix.assign(x)
    for k in range(4):
        xk = x[c == k]
        assert float((xk.mean(0) - mix.means[k]).norm()) < 0.15
        assert 0.2 < float(xk.std(0).mean()) < 0.45
        assert float((assign[c == k] == k).float().mean()) > 0.95
    # an untrained model does not: its samples are near N(0, I)-ish blobs
    raw = ddpm_sample(ConditionalDenoiser(), s, c, generator=11)
    assert float((mix.assign(raw) == c).float().mean()) < 0.6


def test_reproducible_from_seed(toy):
    mix, s, net = toy
    a = train_denoiser(mix, s, steps=20, seed=5, progress=False)
    b = train_denoiser(mix, s, steps=20, seed=5, progress=False)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    c = torch.zeros(7, dtype=torch.long)
    assert torch.equal(ddpm_sample(net, s, c, generator=4), ddpm_sample(net, s, c, generator=4))
    assert not torch.equal(ddpm_sample(net, s, c, generator=4), ddpm_sample(net, s, c, generator=5))


def test_bad_input():
    with pytest.raises(ValueError, match="beta_end"):
        DDPMSchedule(beta_start=0.1, beta_end=0.01)
    with pytest.raises(ValueError, match="beta_start"):
        DDPMSchedule(beta_start=0.0)
    with pytest.raises(ValueError, match="n_steps"):
        DDPMSchedule(n_steps=1)
    with pytest.raises(ValueError, match="std"):
        concept_mixture(std=0.0)
    with pytest.raises(ValueError, match="concepts"):
        concept_mixture().sample(3, concepts=7)
    with pytest.raises(ValueError, match="concepts"):
        ddpm_sample(ConditionalDenoiser(), DDPMSchedule(), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="mixture"):
        train_denoiser("mixture", steps=1)
    with pytest.raises(ValueError, match="sigma2"):
        DDPMSchedule().kl_weight(torch.tensor([1]), sigma2="x")
    with pytest.raises(ValueError, match="emb_dim"):
        ConditionalDenoiser(emb_dim=7)
    assert isinstance(concept_mixture(), ConceptMixture)
