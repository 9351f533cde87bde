"""Task generators and the GP oracle: closed forms, brute-force densities, reproducibility."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from rml_fast.neural_processes.data import (
    DigitsCompletion,
    GPGenerator,
    LotkaVolterraGenerator,
    SawtoothGenerator,
    SquareWaveGenerator,
    batch_oracle_loglik,
    gp_kernel,
    gp_oracle_loglik,
)


def test_kernels_closed_forms() -> None:
    x = np.array([[0.0], [0.3], [1.1]])
    ell = 0.4
    r = np.abs(x - x.T)
    np.testing.assert_allclose(gp_kernel("rbf", x, x, ell), np.exp(-(r**2) / (2 * ell**2)))
    np.testing.assert_allclose(gp_kernel("matern12", x, x, ell), np.exp(-r / ell))
    u = math.sqrt(5) * r / ell
    np.testing.assert_allclose(
        gp_kernel("matern52", x, x, ell, outputscale=2.0), 2 * (1 + u + u**2 / 3) * np.exp(-u)
    )
    p = 0.7
    k1 = gp_kernel("periodic", x, x, ell, period=p)
    k2 = gp_kernel("periodic", x + p, x, ell, period=p)
    np.testing.assert_allclose(k1, k2, atol=1e-12)
    with pytest.raises(ValueError, match="kernel"):
        gp_kernel("cosine", x, x, ell)


def test_gp_oracle_matches_brute_force_chain_rule() -> None:
    rng = np.random.default_rng(0)
    xc, xq = rng.uniform(-2, 2, (7, 1)), rng.uniform(-2, 2, (5, 1))
    ell, sn = 0.5, 0.1
    x = np.concatenate([xc, xq])
    K = gp_kernel("matern52", x, x, ell) + sn**2 * np.eye(12)
    y = rng.multivariate_normal(np.zeros(12), K)
    yc, yq = y[:7], y[7:]
    # joint predictive: log p(yc, yq) - log p(yc)
    brute = multivariate_normal(np.zeros(12), K).logpdf(y) - multivariate_normal(
        np.zeros(7), K[:7, :7]
    ).logpdf(yc)
    joint = gp_oracle_loglik(xc, yc, xq, yq, "matern52", ell, sn, joint=True)
    assert math.isclose(joint, brute / 5, rel_tol=1e-9)
    # marginal: average of one-target predictives
    singles = [
        multivariate_normal(np.zeros(8), K[np.ix_([*range(7), 7 + m], [*range(7), 7 + m])]).logpdf(
            np.r_[yc, yq[m]]
        )
        - multivariate_normal(np.zeros(7), K[:7, :7]).logpdf(yc)
        for m in range(5)
    ]
    marg = gp_oracle_loglik(xc, yc[:, None], xq, yq[:, None], "matern52", ell, sn)
    assert math.isclose(marg, float(np.mean(singles)), rel_tol=1e-9)


def test_gp_generator_statistics_and_oracle() -> None:
    gen = GPGenerator(
        "rbf", batch_size=64, num_context=20, num_target=20, log10_lengthscale=(-0.3, -0.3), rng=0
    )
    b = gen.sample()
    assert b.xc.shape == (64, 20, 1)
    assert b.yq.shape == (64, 20, 1)
    assert b.xc.dtype == torch.float32
    y = torch.cat([b.yc, b.yq], 1).double()
    # marginal variance = outputscale + noise^2 = 1.01 (2560 correlated draws; generous bound)
    assert abs(float(y.var()) - 1.01) < 0.15
    # the true hyper-parameters beat wrong ones on average
    good = batch_oracle_loglik(b)
    info = dict(b.info)
    b.info = {**info, "lengthscale": np.full(64, 0.05)}
    bad = batch_oracle_loglik(b)
    assert good > bad + 0.1


def test_generators_are_reproducible() -> None:
    for cls in (GPGenerator, SawtoothGenerator, SquareWaveGenerator):
        a, b = cls(batch_size=3, rng=7).sample(), cls(batch_size=3, rng=7).sample()
        assert torch.equal(a.xc, b.xc)
        assert torch.equal(a.yq, b.yq)


@pytest.mark.parametrize("cls", [SawtoothGenerator, SquareWaveGenerator])
def test_waves_closed_form(cls) -> None:
    gen = cls(batch_size=5, noise_std=0.0, dtype=torch.float64, rng=3)
    b = gen.sample()
    f, dr, off = (
        torch.as_tensor(b.info[k])[:, None, None] for k in ("freq", "direction", "offset")
    )
    u = f * (b.xq * dr - off)
    frac = u - torch.floor(u)
    expect = (
        2 * frac - 1 if cls is SawtoothGenerator else torch.where(frac < 0.5, 1.0, -1.0).double()
    )
    assert torch.allclose(b.yq, expect, atol=1e-12)


def test_lotka_volterra() -> None:
    gen = LotkaVolterraGenerator(batch_size=4, num_context=30, num_target=40, rng=0)
    b = gen.sample()
    assert b.yc.shape == (4, 30, 2)
    assert bool((b.xq >= 0).all() and (b.xq <= 10).all())
    y = torch.cat([b.yc, b.yq], 1)
    assert bool((y >= 0).all() and (y <= 5).all())
    # populations move (not a constant series) and the two species differ
    assert float(y.std(1).min()) > 0
    t, pop = LotkaVolterraGenerator(rng=1).simulate(2, t_max=5.0)
    assert pop.shape == (2, t.shape[0], 2)


def test_digits_completion() -> None:
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_digits

    gen = DigitsCompletion(split="test", batch_size=3, rng=0)
    b = gen.sample()
    assert b.xq.shape == (3, 64, 2)
    assert b.xc.shape[1] >= 1
    img = load_digits().images[1500 + b.info["image_index"]] / 16.0 - 0.5
    # the target pixel at x = ((j - 3.5)/4, (3.5 - i)/4) is image[i, j]
    j = torch.round(b.xq[..., 0] * 4 + 3.5).long()
    i = torch.round(3.5 - b.xq[..., 1] * 4).long()
    expect = torch.as_tensor(img)[torch.arange(3)[:, None], i, j]
    assert torch.allclose(b.yq[..., 0].double(), expect, atol=1e-6)
    # every context pixel is one of the targets with the same value
    for k in range(3):
        d = (b.xc[k][:, None, :] - b.xq[k][None]).abs().sum(-1)
        idx = d.argmin(1)
        assert torch.allclose(b.yc[k, :, 0], b.yq[k, idx, 0])
    with pytest.raises(ValueError, match="split"):
        DigitsCompletion(split="val")


def test_bad_generator_arguments() -> None:
    with pytest.raises(ValueError, match="kernel"):
        GPGenerator("cosine")
    with pytest.raises(ValueError, match="batch_size"):
        GPGenerator(batch_size=0)
    with pytest.raises(TypeError, match="num_context"):
        GPGenerator(num_context="many")
    with pytest.raises(ValueError, match="x_range"):
        SawtoothGenerator(x_range=(1.0, -1.0))
    with pytest.raises(ValueError, match="noise_std"):
        gp_oracle_loglik(
            np.zeros((1, 1)), np.zeros(1), np.zeros((1, 1)), np.zeros(1), "rbf", 1.0, 0.0
        )


# --- real series ------------------------------------------------------------------------------


def test_series_tasks_lynx_random_split() -> None:
    from rml_fast.datasets import load_lynx
    from rml_fast.neural_processes.data import SeriesTasks

    years, counts = load_lynx()
    gen = SeriesTasks.lynx(batch_size=4, num_context=(10, 30), num_target=20, rng=0)
    logc = np.log10(counts)
    assert gen.y_mean == pytest.approx(logc.mean()) and gen.y_std == pytest.approx(logc.std())
    for _ in range(3):
        b = gen.sample()
        nc = b.xc.shape[1]
        assert 10 <= nc <= 30 and b.xq.shape[1] == 20
        ic, iq = b.info["index_c"], b.info["index_q"]
        for k in range(4):
            assert not set(ic[k]) & set(iq[k])  # context and targets disjoint
        # values are the standardised log10 counts at affinely mapped years
        np.testing.assert_allclose(b.yc[..., 0].numpy(), (logc[ic] - gen.y_mean) / gen.y_std, rtol=1e-6)
        np.testing.assert_allclose(b.xq[..., 0].numpy(), -3 + (years[iq] - 1821) * 6 / 113, rtol=1e-6)
    assert float(b.xc.min()) >= -3 and float(b.xc.max()) <= 3


def test_series_tasks_forecast_split_is_contiguous_and_ordered() -> None:
    from rml_fast.neural_processes.data import SeriesTasks

    gen = SeriesTasks.lynx(batch_size=3, split="forecast", num_context=15, num_target=5, rng=1)
    b = gen.sample()
    ic, iq = b.info["index_c"], b.info["index_q"]
    full = np.concatenate([ic, iq], axis=1)
    assert np.all(np.diff(full, axis=1) == 1)  # consecutive years, targets after the context
    assert np.all(full[:, -1] < 114)


def test_series_tasks_validation() -> None:
    from rml_fast.neural_processes.data import SeriesTasks

    t, y = np.arange(10.0), np.arange(1.0, 11.0)
    with pytest.raises(ValueError, match="strictly increasing"):
        SeriesTasks(t[::-1], y, num_context=2, num_target=2)
    with pytest.raises(ValueError, match="positive"):
        SeriesTasks(t, y - 5, transform="log10", num_context=2, num_target=2)
    with pytest.raises(ValueError, match="exceed"):
        SeriesTasks(t, y, num_context=8, num_target=5)
    with pytest.raises(ValueError, match="split"):
        SeriesTasks(t, y, split="future", num_context=2, num_target=2)
    with pytest.raises(ValueError, match="same length"):
        SeriesTasks(t, y[:5], num_context=2, num_target=2)
