"""EnergyDPS (arXiv 2605.17504): the exact Gaussian tilt, the capped-energy identities, the
reductions, the unguided steps against diffusers' schedulers, a guided digits unit, resumable
training of the digits prior, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rml_fast.interp.energy_dps import (
    EnergyDPS,
    GaussianPriorEps,
    UnitActivation,
    center_mask,
    make_energy,
    reduce_map,
)
from rml_fast.models.digits_diffusion import (
    linear_betas,
    train_digits_classifier,
    train_digits_ddpm,
)

MU = torch.tensor([0.5, -0.3], dtype=torch.float64)
SIGMA = torch.tensor([[1.0, 0.5], [0.5, 0.8]], dtype=torch.float64)
W = torch.tensor([1.0, -0.5], dtype=torch.float64)


def _gaussian_dps(lam, **kw):
    betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)
    opts = {"sampler": "ddpm", "variance": "beta", "scale_mode": "calibrated", "clip_x0": False}
    opts.update(kw)
    return EnergyDPS(
        GaussianPriorEps(MU, SIGMA, betas),
        betas,
        energy=make_energy("max"),
        activation=lambda x: x.reshape(len(x), -1) @ W,
        guidance_scale=lam,
        **opts,
    )


@pytest.mark.parametrize("lam", [0.0, 0.8])
def test_calibrated_ddpm_guidance_samples_the_exact_gaussian_tilt(lam):
    out = _gaussian_dps(lam).sample(4000, (2,), generator=torch.Generator().manual_seed(1))
    x = out["x"].numpy()
    target_mean = (MU + lam * SIGMA @ W).numpy()
    np.testing.assert_allclose(x.mean(0), target_mean, atol=0.05)
    np.testing.assert_allclose(np.cov(x.T), SIGMA.numpy(), atol=0.08)
    assert out["energy_trace"].shape == (1000, 4000)


def test_capped_energy_identities():
    gen = lambda: torch.Generator().manual_seed(2)  # noqa: E731
    kw = {"sampler": "ddim", "scale_mode": "constant", "n_steps": 50}
    base = _gaussian_dps(0.0, **kw).sample(64, (2,), generator=gen())["x"]
    maxed = _gaussian_dps(0.5, **kw)
    maxed.energy = make_energy("max")
    far_cap = _gaussian_dps(0.5, **kw)
    far_cap.energy = make_energy("capped_clip", cap=1e6)  # never reached: the same as "max"
    assert torch.equal(
        maxed.sample(64, (2,), generator=gen())["x"], far_cap.sample(64, (2,), generator=gen())["x"]
    )
    low_cap = _gaussian_dps(0.5, **kw)
    low_cap.energy = make_energy("capped_clip", cap=-1e6)  # always exceeded: no gradient
    assert torch.equal(low_cap.sample(64, (2,), generator=gen())["x"], base)
    assert not torch.equal(maxed.sample(64, (2,), generator=gen())["x"], base)


def test_energies_and_reductions():
    a = torch.tensor([-1.0, 0.5, 3.0])
    assert make_energy("target", cap=1.0)(a).tolist() == [4.0, 0.25, 4.0]
    assert make_energy("capped_hinge", cap=1.0, hinge_penalty=2.0)(a).tolist() == [1.0, -0.5, 5.0]
    A = torch.randn(5, 6, 6, generator=torch.Generator().manual_seed(0))
    mask = center_mask(6, 6, 0.5)
    assert int(mask.sum()) == 9 and bool(mask[1:4, 1:4].all())
    torch.testing.assert_close(
        reduce_map(A, "mix", mix_alpha=1.0, center_frac=0.5), A[:, mask].amax(1)
    )
    torch.testing.assert_close(reduce_map(A, "mean"), torch.relu(A).mean((1, 2)))
    lse = reduce_map(A, "lse", lse_temperature=1e-3)
    torch.testing.assert_close(lse, torch.relu(A).amax((1, 2)), atol=1e-2, rtol=0)


@pytest.mark.parametrize("variance", ["beta_tilde", "beta"])
def test_unguided_steps_match_diffusers(variance):
    diffusers = pytest.importorskip("diffusers")
    betas = linear_betas(100)
    T = 100
    gen = torch.Generator().manual_seed(3)
    x_t = torch.randn(4, 1, 8, 8, generator=gen)
    eps = torch.randn(4, 1, 8, 8, generator=gen)
    dps = EnergyDPS(
        lambda x, t: x,
        betas,
        energy=make_energy("max"),
        activation=lambda x: x.sum((1, 2, 3)),
        sampler="ddpm",
        variance=variance,
        clip_x0=False,
    )
    ddpm = diffusers.DDPMScheduler(
        num_train_timesteps=T,
        trained_betas=betas.numpy(),
        clip_sample=False,
        variance_type="fixed_small" if variance == "beta_tilde" else "fixed_large",
    )
    ddim = diffusers.DDIMScheduler(
        num_train_timesteps=T, trained_betas=betas.numpy(), clip_sample=False, set_alpha_to_one=True
    )
    ddim.set_timesteps(T)
    dps_ddim = EnergyDPS(
        lambda x, t: x,
        betas,
        energy=make_energy("max"),
        activation=lambda x: x.sum((1, 2, 3)),
        sampler="ddim",
        clip_x0=False,
    )
    for t in (57, 1):
        ab = float(dps.alpha_bars[t])
        x0 = (x_t - (1 - ab) ** 0.5 * eps) / ab**0.5
        noise = torch.randn(x_t.shape, generator=torch.Generator().manual_seed(t))
        ref = ddpm.step(eps, t, x_t, generator=torch.Generator().manual_seed(t)).prev_sample
        torch.testing.assert_close(dps.step(x_t, x0, t, t - 1, noise), ref, atol=2e-5, rtol=1e-5)
        ref = ddim.step(eps, t, x_t, eta=0.0).prev_sample
        torch.testing.assert_close(
            dps_ddim.step(x_t, x0, t, t - 1, None), ref, atol=2e-5, rtol=1e-5
        )


def test_training_the_digits_prior_resumes_to_the_same_weights(tmp_path):
    kw = {
        "steps": 12,
        "batch_size": 16,
        "channels": 8,
        "n_blocks": 1,
        "n_steps": 50,
        "checkpoint_every": 5,
    }
    full = train_digits_ddpm(**kw)
    ck = tmp_path / "ddpm.pt"
    train_digits_ddpm(**kw, checkpoint=ck, stop_after=7)
    resumed = train_digits_ddpm(**kw, checkpoint=ck)
    assert len(resumed.losses) == 12
    for p, q in zip(full.eps_model.parameters(), resumed.eps_model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="was made with"):
        train_digits_ddpm(**{**kw, "lr": 1e-3}, checkpoint=ck)


def test_guidance_raises_a_digits_classifier_logit():
    torch.manual_seed(0)
    prior = train_digits_ddpm(steps=400, batch_size=64, channels=16, n_blocks=2, n_steps=100)
    clf, acc = train_digits_classifier(steps=300)
    assert acc > 0.75
    unit = UnitActivation(clf, "fc", unit=3, mean=None, std=None)
    kw = {
        "sampler": "ddim",
        "n_steps": 25,
        "energy": make_energy("capped_clip", cap=20.0),
        "activation": unit,
    }
    gen = lambda: torch.Generator().manual_seed(4)  # noqa: E731
    plain = EnergyDPS(prior.eps_model, prior.betas, guidance_scale=0.0, **kw).sample(
        24, (1, 8, 8), generator=gen(), dtype=torch.float32
    )
    guided = EnergyDPS(prior.eps_model, prior.betas, guidance_scale=0.5, **kw).sample(
        24, (1, 8, 8), generator=gen(), dtype=torch.float32
    )
    assert guided["activation"].mean() > plain["activation"].mean() + 1.0
    pred = clf((guided["x"].clamp(-1, 1) + 1) / 2).argmax(1)
    assert (pred == 3).float().mean() > (
        clf((plain["x"].clamp(-1, 1) + 1) / 2).argmax(1) == 3
    ).float().mean()


def test_unit_activation_hooks_and_sae():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.ReLU())
    x = torch.rand(2, 3, 5, 5) * 2 - 1
    by_name = UnitActivation(net, "1", unit=2, reduce="mean")
    by_fn = UnitActivation(net, lambda m, z: m(z), unit=2, reduce="mean")
    torch.testing.assert_close(by_name(x), by_fn(x))
    sae = torch.nn.Linear(4, 6)
    feats = UnitActivation(net, "1", unit=5, reduce="max", sae_encoder=sae)
    z = ((x + 1) / 2 - torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)) / torch.tensor(
        [0.229, 0.224, 0.225]
    ).view(1, 3, 1, 1)
    torch.testing.assert_close(feats(x), sae(net(z).movedim(1, -1))[..., 5].amax((1, 2)))
    with pytest.raises(ValueError, match="out of range"):
        UnitActivation(net, "1", unit=9)(x)
    with pytest.raises(ValueError, match="is not a submodule"):
        UnitActivation(net, "nope", unit=0)
    with pytest.raises(ValueError, match=r"x must have shape \(B, C, H, W\)"):
        by_name(torch.zeros(3, 5, 5))


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="rescaled betas must stay below 1"):
        linear_betas(10)
    betas = linear_betas(100)[:10]
    ok = {"energy": make_energy("max"), "activation": lambda x: x.sum(1)}
    with pytest.raises(ValueError, match="sampler must be"):
        EnergyDPS(lambda x, t: x, betas, sampler="euler", **ok)
    with pytest.raises(ValueError, match="betas must be"):
        EnergyDPS(lambda x, t: x, torch.tensor([0.5]), **ok)
    with pytest.raises(ValueError, match=r"n_steps must be an int in \[1, 10\]"):
        EnergyDPS(lambda x, t: x, betas, n_steps=20, **ok)
    with pytest.raises(ValueError, match="cap must be a finite real number"):
        make_energy("capped_clip")
    with pytest.raises(ValueError, match="kind must be one of"):
        make_energy("huber", cap=1.0)
    with pytest.raises(ValueError, match=r"\bfrac must be in"):
        center_mask(4, 4, 0.0)
    with pytest.raises(ValueError, match="Sigma must have shape"):
        GaussianPriorEps(torch.zeros(2), torch.eye(3), betas)
    with pytest.raises(ValueError, match=r"energy.*must have shape"):
        EnergyDPS(lambda x, t: x, betas, energy=lambda a: a, activation=lambda x: x).sample(3, (2,))
