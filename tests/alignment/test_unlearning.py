"""f-divergence unlearning objectives: closed forms vs Monte Carlo and quadrature, exact gradient
ratios, the alpha -> 1 limit, the variational bound, gradcheck, PCGrad, the unlearning effect on the
toy DDPM, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import ndtri
from scipy.stats import qmc

from rml_fast.alignment.unlearning import (
    DIVERGENCES,
    ConvCritic,
    MLPCritic,
    VariationalFDivergence,
    alpha_unlearn_loss,
    chi2_unlearn_loss,
    gaussian_f_divergence,
    hellinger_unlearn_loss,
    masked_mean_sq,
    mse_unlearn_loss,
    pcgrad_project,
    unlearn,
)
from rml_fast.models.diffusion import DDPMSchedule, concept_mixture, ddpm_sample, train_denoiser

F64 = torch.float64

# f(u) of each closed form, D_f(P||Q) = E_Q[f(p/q)]
F_OF_U = {
    "kl": lambda u: u * np.log(u),
    "reverse_kl": lambda u: -np.log(u),
    "hellinger": lambda u: 0.5 * (np.sqrt(u) - 1) ** 2,  # squared Hellinger 1 - BC
    "chi2": lambda u: (u - 1) ** 2,
    "tv": lambda u: 0.5 * np.abs(u - 1),
}


def _alpha_f(a):
    return lambda u: (1 - u**a) / (a * (1 - a))


@pytest.mark.parametrize(("kind", "alpha"), [("kl", None), ("reverse_kl", None), ("hellinger", None),
                                             ("chi2", None), ("tv", None), ("alpha", 0.3),
                                             ("alpha", -0.5), ("alpha", 1.7)])
def test_closed_forms_vs_monte_carlo_2d(kind, alpha):
    mu1, mu2, sigma = np.array([0.5, -0.3]), np.array([0.0, 0.1]), 0.8
    # randomised quasi-Monte Carlo (scrambled Sobol, 2^20 points) samples of Q: plain Monte Carlo
    # would need ~10^7 samples for 1e-2 at 4 standard errors (chi2, alpha = 1.7)
    xq = mu2 + sigma * ndtri(qmc.Sobol(2, scramble=True, seed=0).random_base2(20))
    log_r = (((xq - mu2) ** 2).sum(1) - ((xq - mu1) ** 2).sum(1)) / (2 * sigma**2)
    f = _alpha_f(alpha) if kind == "alpha" else F_OF_U[kind]
    mc = float(np.mean(f(np.exp(log_r))))
    exact = float(gaussian_f_divergence(torch.tensor(mu1), torch.tensor(mu2), sigma, kind, alpha=alpha))
    assert exact > 0.05
    assert abs(mc - exact) < 2e-3 * exact


@pytest.mark.parametrize("kind", ["kl", "hellinger", "chi2", "tv", "alpha"])
def test_closed_forms_vs_quadrature_1d(kind):
    x = np.linspace(-14, 14, 400_001)
    mu1, mu2, s = 1.1, -0.2, 0.9
    p = np.exp(-((x - mu1) ** 2) / (2 * s**2)) / math.sqrt(2 * math.pi * s**2)
    q = np.exp(-((x - mu2) ** 2) / (2 * s**2)) / math.sqrt(2 * math.pi * s**2)
    f = _alpha_f(2.5) if kind == "alpha" else F_OF_U[kind]
    quad = float(np.trapezoid(q * f(p / q), x))
    exact = float(gaussian_f_divergence([mu1], [mu2], s, kind, alpha=2.5 if kind == "alpha" else None))
    assert exact == pytest.approx(quad, rel=1e-6)


def test_special_alphas_and_limits():
    mu1, mu2 = torch.tensor([0.7, 0.2], dtype=F64), torch.zeros(2, dtype=F64)
    d = float((mu1 - mu2).pow(2).sum()) / 0.5**2
    h2 = float(gaussian_f_divergence(mu1, mu2, 0.5, "hellinger"))
    assert h2 == pytest.approx(1 - math.exp(-d / 8), rel=1e-12)
    assert float(gaussian_f_divergence(mu1, mu2, 0.5, "alpha", alpha=0.5)) == pytest.approx(4 * h2, rel=1e-12)
    chi2 = float(gaussian_f_divergence(mu1, mu2, 0.5, "chi2"))
    assert float(gaussian_f_divergence(mu1, mu2, 0.5, "alpha", alpha=2.0)) == pytest.approx(chi2 / 2, rel=1e-12)
    kl = float(gaussian_f_divergence(mu1, mu2, 0.5, "kl"))
    for a in (1 - 1e-7, 1 + 1e-7, 1e-7):
        assert float(gaussian_f_divergence(mu1, mu2, 0.5, "alpha", alpha=a)) == pytest.approx(kl, rel=1e-5)
    # the training losses: alpha -> 1 is MSE / 2, alpha = 1/2 and 2 are Hellinger and chi2
    g = torch.Generator().manual_seed(0)
    pred, target = torch.randn(6, 3, 4, generator=g, dtype=F64), torch.randn(6, 3, 4, generator=g, dtype=F64)
    mse = mse_unlearn_loss(pred, target)
    for a in (1 - 1e-7, 1 + 1e-7):
        assert float(alpha_unlearn_loss(pred, target, alpha=a)) == pytest.approx(float(mse) / 2, rel=1e-5)
    m = masked_mean_sq(pred, target)
    for sigma in (1.0, 1.7):
        h = hellinger_unlearn_loss(pred, target, sigma=sigma)
        assert float(alpha_unlearn_loss(pred, target, alpha=0.5, sigma=sigma)) == pytest.approx(
            4 * (1 + float(h)), rel=1e-12)
        c = chi2_unlearn_loss(pred, target, sigma=sigma)
        assert float(alpha_unlearn_loss(pred, target, alpha=2.0, sigma=sigma)) == pytest.approx(
            (float(c) - 1) / 2, rel=1e-12)
        assert float(c) == pytest.approx(float(torch.exp(m / sigma**2).mean()), rel=1e-12)


def test_masked_mean_sq():
    pred = torch.tensor([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]], dtype=F64)
    target = torch.zeros(2, 3, dtype=F64)
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]], dtype=F64)
    assert masked_mean_sq(pred, target, mask).tolist() == [5.0, 0.0]
    assert masked_mean_sq(pred, target).tolist() == pytest.approx([14 / 3, 1 / 3])
    # a (B, 1, ...) mask broadcasts over channels
    p4 = torch.arange(24, dtype=F64).reshape(2, 3, 2, 2)
    m4 = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=F64).reshape(1, 1, 2, 2).expand(2, 1, 2, 2)
    want = (p4.pow(2) * m4).sum((1, 2, 3)) / 6
    assert torch.allclose(masked_mean_sq(p4, torch.zeros_like(p4), m4), want)


@pytest.mark.parametrize("sigma", [1.0, 0.6])
def test_exact_gradient_ratios(sigma):
    g = torch.Generator().manual_seed(3)
    target = torch.randn(5, 2, 3, generator=g, dtype=F64)
    pred0 = target + 0.8 * torch.randn(5, 2, 3, generator=g, dtype=F64)
    mask = (torch.rand(5, 2, 3, generator=g) > 0.3).to(F64)
    mask[:, 0, 0] = 1.0
    m = masked_mean_sq(pred0, target, mask)

    def grad(fn, **kw):
        p = pred0.clone().requires_grad_(True)
        fn(p, target, mask, **kw).backward()
        return p.grad

    g_mse = grad(mse_unlearn_loss)
    d_el = mask.sum((1, 2))
    assert torch.allclose(g_mse, 2 * (pred0 - target) * mask / d_el[:, None, None] / 5)
    cases = {
        "hellinger": (grad(hellinger_unlearn_loss, sigma=sigma), torch.exp(-m / (8 * sigma**2)) / (8 * sigma**2)),
        "chi2": (grad(chi2_unlearn_loss, sigma=sigma), torch.exp(m / sigma**2) / sigma**2),
        "alpha": (grad(alpha_unlearn_loss, alpha=0.3, sigma=sigma),
                  torch.exp(-0.21 * m / (2 * sigma**2)) / (2 * sigma**2)),
    }
    on = mask.bool()
    for name, (g_obj, factor) in cases.items():
        ratio = g_obj / g_mse.where(on, torch.ones_like(g_mse))
        want = factor[:, None, None].expand_as(ratio)
        assert torch.allclose(ratio[on], want[on], rtol=1e-10), name
        assert bool((g_obj[~on] == 0).all()), name
    # the Hellinger factor is bounded, the chi2 factor grows with the deviation
    assert bool((cases["hellinger"][1] <= 1 / (8 * sigma**2)).all())
    assert bool((cases["chi2"][1] >= 1 / sigma**2).all())


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(4)
    pred = torch.randn(3, 4, generator=g, dtype=F64, requires_grad=True)
    target = torch.randn(3, 4, generator=g, dtype=F64)
    mask = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 1], [1, 0, 0, 0]], dtype=F64)
    omega = torch.tensor([1.0, 0.5, 2.0], dtype=F64)
    for fn, kw in ((mse_unlearn_loss, {}), (hellinger_unlearn_loss, {"sigma": 0.9}),
                   (chi2_unlearn_loss, {"sigma": 1.3}), (alpha_unlearn_loss, {"alpha": -0.4})):
        assert torch.autograd.gradcheck(lambda p, fn=fn, kw=kw: fn(p, target, mask, omega=omega, **kw), (pred,))
    mu = torch.randn(3, 2, generator=g, dtype=F64, requires_grad=True)
    for kind in ("kl", "hellinger", "chi2", "tv"):
        assert torch.autograd.gradcheck(lambda x, k=kind: gaussian_f_divergence(x, torch.zeros(2, dtype=F64), 0.7, k), (mu,))
    v_real = torch.randn(6, generator=g, dtype=F64, requires_grad=True)
    v_fake = torch.randn(6, generator=g, dtype=F64, requires_grad=True)
    for div in DIVERGENCES:
        vf = VariationalFDivergence(div)
        assert torch.autograd.gradcheck(vf.critic_loss, (v_real, v_fake))
        assert torch.autograd.gradcheck(vf.generator_loss, (v_fake,))
    ga = torch.tensor([1.0, -2.0, 0.5], dtype=F64, requires_grad=True)
    gb = torch.tensor([0.3, 1.0, -0.2], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: pcgrad_project(a, b, lam=0.5), (ga, gb))


# ----------------------------------------------------------------------- variational bound
def _fprime(div, u):
    return {
        "kl": 1 + np.log(u),
        "reverse_kl": -1 / u,
        "hellinger": 1 - 1 / np.sqrt(u),
        "js": np.log(2 * u / (1 + u)),
        "chi2": 2 * (u - 1),
        "tv": 0.5 * np.sign(u - 1),
    }[div]


def _logits_of_optimal(div, u):
    """v with g_f(v) = f'(u)."""
    return {
        "kl": 1 + np.log(u), "chi2": 2 * (u - 1), "reverse_kl": np.log(u), "js": np.log(u),
        "hellinger": 0.5 * np.log(u), "tv": 40.0 * np.sign(u - 1),
    }[div]


def _exact_divergence(div, mu1, mu2, s, x, p, q):
    if div == "js":  # 2 JS (f-GAN convention): quadrature of its f
        u = p / q
        return float(np.trapezoid(q * (u * np.log(u) - (u + 1) * np.log((u + 1) / 2)), x))
    scale = 2.0 if div == "hellinger" else 1.0  # f(u) = (sqrt u - 1)^2 gives 2 H^2
    return scale * float(gaussian_f_divergence([mu1], [mu2], s, div))


@pytest.mark.parametrize("div", DIVERGENCES)
def test_variational_bound_is_tight_at_the_optimal_critic(div):
    x = np.linspace(-12, 12, 200_001)
    mu1, mu2, s = 0.9, -0.1, 1.0
    p = np.exp(-((x - mu1) ** 2) / (2 * s**2)) / math.sqrt(2 * math.pi * s**2)
    q = np.exp(-((x - mu2) ** 2) / (2 * s**2)) / math.sqrt(2 * math.pi * s**2)
    u = p / q
    exact = _exact_divergence(div, mu1, mu2, s, x, p, q)
    vf = VariationalFDivergence(div)

    def bound_t(t):  # in T space: int p T - int q f*(T)
        t = torch.tensor(t, dtype=F64)
        return float(np.trapezoid(p * t.numpy() - q * vf.conjugate(t).numpy(), x))

    def bound_v(v):  # through the logits: int p g(v) - int q f*(g(v))
        v = torch.tensor(v, dtype=F64)
        return float(np.trapezoid(p * vf.activation(v).numpy() - q * vf.conjugate_of_logits(v).numpy(), x))

    t_opt = _fprime(div, u)
    assert bound_t(t_opt) == pytest.approx(exact, rel=1e-6)
    assert bound_v(_logits_of_optimal(div, u)) == pytest.approx(exact, rel=1e-6)
    # any other critic gives a strictly smaller value
    v_opt = _logits_of_optimal(div, u)
    others = ((0.6 * v_opt, v_opt + 0.3, v_opt - 0.2 * np.tanh(x)) if div != "tv"
              else (0.02 * v_opt, v_opt + 45.0, v_opt - 40.0 * (np.abs(x - 0.4) < 0.5)))
    for v in others:
        assert bound_v(v) < exact - 1e-4
    # Monte-Carlo value of VariationalFDivergence.bound on samples of P and Q
    rng = np.random.default_rng(1)
    xp, xq = mu1 + s * rng.standard_normal(400_000), mu2 + s * rng.standard_normal(400_000)

    def v_at(z):
        return torch.tensor(_logits_of_optimal(div, np.exp(((z - mu2) ** 2 - (z - mu1) ** 2) / (2 * s**2))))

    mc = float(vf.bound(v_at(xp), v_at(xq)))
    assert mc == pytest.approx(exact, rel=2e-2)
    assert float(vf.critic_loss(v_at(xp), v_at(xq))) == pytest.approx(-mc, rel=1e-12)


def test_trained_critic_approaches_the_closed_form():
    """A small MLP critic trained on samples reaches the KL between two 1-D Gaussians from below."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    mu1, mu2 = 1.0, 0.0
    exact = float(gaussian_f_divergence([mu1], [mu2], 1.0, "kl"))  # 0.5
    vf = VariationalFDivergence("kl")
    critic = MLPCritic(1, hidden=32, spectral_norm=False)
    opt = torch.optim.Adam(critic.parameters(), lr=1e-2)
    for _ in range(200):
        xp = mu1 + torch.randn(512, 1, generator=g)
        xq = mu2 + torch.randn(512, 1, generator=g)
        loss = vf.critic_loss(critic(xp), critic(xq))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        xp = mu1 + torch.randn(100_000, 1, generator=g)
        xq = mu2 + torch.randn(100_000, 1, generator=g)
        est = float(vf.bound(critic(xp), critic(xq)))
    assert 0.8 * exact < est < exact + 0.02


def test_conv_critic_shapes_and_mask_pooling():
    critic = ConvCritic(4, base=8)
    x = torch.randn(2, 4, 16, 16)
    mask = torch.zeros(2, 1, 16, 16)
    mask[:, :, :8] = 1
    logits = critic(x, mask)
    pooled = critic.pool_mask(mask)
    assert logits.shape == pooled.shape == (2, 1, 2, 2)
    assert pooled[:, :, 0].eq(1).all() and pooled[:, :, 1].eq(0).all()
    vf = VariationalFDivergence("chi2")
    # weights that are zero on the bottom half ignore it
    a = vf.generator_loss(logits, pooled).detach()
    b = vf.generator_loss(logits[:, :, :1], None).detach()
    assert float(a) == pytest.approx(float(b), rel=1e-6)


def test_pcgrad_project():
    ga, gb = torch.tensor([1.0, -2.0]), torch.tensor([0.0, 1.0])
    out = pcgrad_project(ga, gb, lam=0.0)
    assert torch.allclose(out, torch.tensor([1.0, 0.0]))  # conflicting part removed
    assert float(out @ gb) == pytest.approx(0.0, abs=1e-7)
    ga2 = torch.tensor([1.0, 2.0])  # no conflict: unchanged
    assert torch.allclose(pcgrad_project(ga2, gb, lam=0.5), ga2 + 0.5 * gb)
    assert torch.allclose(pcgrad_project(ga, gb, lam=2.0), torch.tensor([1.0, 2.0]))


# ----------------------------------------------------------------------- the toy effect
@pytest.fixture(scope="module")
def toy():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny MLPs; a thread pool only costs on busy 2-core machines
    mix, s = concept_mixture(), DDPMSchedule()
    net = train_denoiser(mix, s, steps=1000, seed=0, progress=False)
    x0 = ddpm_sample(net, s, torch.full((512,), 1), generator=1)
    yield mix, s, net, x0
    torch.set_num_threads(threads)


def _erasure(mix, s, model, gen=7):
    x = ddpm_sample(model, s, torch.zeros(256, dtype=torch.long), generator=gen)
    return float((mix.assign(x) != 0).float().mean()), float((mix.assign(x) == 1).float().mean())


def _damage(mix, s, model, ref):
    c = torch.tensor([2, 3]).repeat_interleave(256)
    x = ddpm_sample(model, s, c, generator=9)
    return max(float((x[c == k].mean(0) - ref[c == k].mean(0)).norm()) for k in (2, 3))


@pytest.mark.parametrize("objective", ["mse", "hellinger", "chi2"])
def test_unlearning_erases_the_target_concept(toy, objective):
    mix, s, net, x0 = toy
    before = [p.clone() for p in net.parameters()]
    assert _erasure(mix, s, net)[0] < 0.05  # the original draws c* in c*'s mode
    res = unlearn(net, s, x0, target_concept=0, anchor_concept=1, objective=objective, steps=60,
                  lr=1e-3, sigma=2.0, seed=0, progress=False)
    erased, to_anchor = _erasure(mix, s, res.model)
    assert erased > 0.85 and to_anchor > 0.8
    assert len(res.loss) == 60
    for p, q in zip(before, net.parameters(), strict=True):  # the input model is untouched
        assert torch.equal(p, q)


def test_prior_preservation_with_pcgrad_reduces_damage(toy):
    mix, s, net, x0 = toy
    ref = ddpm_sample(net, s, torch.tensor([2, 3]).repeat_interleave(256), generator=9)
    keep_x, keep_c = mix.sample(512, concepts=torch.tensor([1, 2, 3]).repeat(171)[:512], generator=2)
    plain = unlearn(net, s, x0, target_concept=0, anchor_concept=1, steps=60, lr=1e-3, seed=1, progress=False)
    kept = unlearn(net, s, x0, target_concept=0, anchor_concept=1, steps=60, lr=1e-3, seed=1, progress=False,
                   preserve=(keep_x, keep_c), prior_weight=1.0, pcgrad=True)
    assert len(kept.prior_loss) == 60
    assert _erasure(mix, s, kept.model)[0] > 0.85
    d_plain, d_kept = _damage(mix, s, plain.model, ref), _damage(mix, s, kept.model, ref)
    assert d_kept < 0.6 * d_plain


def test_variational_objective_runs_and_moves_towards_the_anchor(toy):
    mix, s, net, x0 = toy
    res = unlearn(net, s, x0, target_concept=0, anchor_concept=1, objective="variational",
                  divergence="chi2", steps=40, critic_warmup=20, lr=1e-3, seed=0, progress=False)
    assert len(res.loss) == 40 and len(res.critic_loss) == 60
    assert _erasure(mix, s, res.model)[0] > 0.5


def test_unlearn_is_reproducible(toy):
    _, s, net, x0 = toy
    a = unlearn(net, s, x0, target_concept=0, anchor_concept=1, steps=5, seed=3, progress=False)
    b = unlearn(net, s, x0, target_concept=0, anchor_concept=1, steps=5, seed=3, progress=False)
    assert a.loss == b.loss


# ----------------------------------------------------------------------- bad input
def test_bad_input():
    p, t = torch.zeros(2, 3), torch.zeros(2, 3)
    with pytest.raises(ValueError, match="mask"):
        masked_mean_sq(p, t, torch.ones(2, 4))
    with pytest.raises(ValueError, match="mask"):
        masked_mean_sq(p, t, torch.ones(3))
    with pytest.raises(ValueError, match="target"):
        mse_unlearn_loss(p, torch.zeros(2, 4))
    with pytest.raises(TypeError, match="pred"):
        mse_unlearn_loss(np.zeros((2, 3)), t)
    for a in (0, 1, 0.0, 1.0):
        with pytest.raises(ValueError, match="alpha"):
            alpha_unlearn_loss(p, t, alpha=a)
        with pytest.raises(ValueError, match="alpha"):
            gaussian_f_divergence(p, t, 1.0, "alpha", alpha=a)
    for sigma in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="sigma"):
            hellinger_unlearn_loss(p, t, sigma=sigma)
        with pytest.raises(ValueError, match="sigma"):
            chi2_unlearn_loss(p, t, sigma=sigma)
        with pytest.raises(ValueError, match="sigma"):
            gaussian_f_divergence(p, t, sigma, "kl")
    with pytest.raises(ValueError, match="kind"):
        gaussian_f_divergence(p, t, 1.0, "js")
    with pytest.raises(ValueError, match="alpha is required"):
        gaussian_f_divergence(p, t, 1.0, "alpha")
    with pytest.raises(ValueError, match="divergence"):
        VariationalFDivergence("wasserstein")
    with pytest.raises(ValueError, match="omega"):
        mse_unlearn_loss(p, t, omega=torch.ones(3))
    with pytest.raises(ValueError, match="g_b"):
        pcgrad_project(torch.zeros(3), torch.zeros(2))
    s, net = DDPMSchedule(n_steps=10), torch.nn.Linear(2, 2)
    x0 = torch.zeros(4, 2)
    kw = {"target_concept": 0, "anchor_concept": 1, "progress": False}
    with pytest.raises(ValueError, match="objective"):
        unlearn(net, s, x0, objective="kl2", **kw)
    with pytest.raises(ValueError, match="differ"):
        unlearn(net, s, x0, target_concept=1, anchor_concept=1)
    with pytest.raises(ValueError, match="t_range"):
        unlearn(net, s, x0, t_range=(5, 20), **kw)
    with pytest.raises(ValueError, match="alpha"):
        unlearn(net, s, x0, objective="alpha", alpha=1.0, **kw)
    with pytest.raises(ValueError, match="sigma"):
        unlearn(net, s, x0, sigma=0.0, **kw)
    with pytest.raises(ValueError, match="divergence"):
        unlearn(net, s, x0, objective="variational", divergence="x", **kw)
    with pytest.raises(ValueError, match="trainable"):
        unlearn(net, s, x0, trainable=lambda name: False, **kw)
    with pytest.raises(TypeError, match="model"):
        unlearn("net", s, x0, **kw)
