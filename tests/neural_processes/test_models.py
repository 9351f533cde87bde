"""SFConvCNP / SFVConvCNP: presets, invariances of the whole model, likelihood, backends."""

from __future__ import annotations

import pytest
import torch

from rml_fast.neural_processes import SFConvCNP, SFVConvCNP, nll_loss
from rml_fast.neural_processes.models import CONFIGS, gaussian_nll


def _task(B, N, M, dx, dy, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    xc = torch.rand(B, N, dx, generator=g, dtype=dtype) * 4 - 2
    yc = torch.randn(B, N, dy, generator=g, dtype=dtype)
    xq = torch.rand(B, M, dx, generator=g, dtype=dtype) * 4 - 2
    return xc, yc, xq


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_presets_match_the_reference_configs(name) -> None:
    # one layer keeps construction cheap; the rest of the preset is kept
    model = SFConvCNP.from_config(name, num_layers=1)
    cfg = CONFIGS[name]
    conv = model.context_blocks[0].conv
    assert conv.in_channels == cfg["embed_channels"]
    assert conv.groups == cfg["groups"]
    assert model.context_blocks[0].ff[0].out_features == cfg["feedforward_channels"]
    assert conv.grid.max_freq == (cfg["max_freq"],) * cfg["dim_x"]
    assert (conv.output_mixing is not None) == cfg["output_feature_mixing"]
    assert getattr(conv, "volterra_rank", None) == cfg.get("volterra_rank")
    assert model.dim_x == cfg["dim_x"]
    assert model.dim_y == cfg["dim_y"]


def test_reference_grid_sizes() -> None:
    assert SFConvCNP.from_config("sfconvcnp-1d", num_layers=1).grid.n_freq == 50
    assert SFConvCNP.from_config("sfconvcnp-2d", num_layers=1).grid.n_freq == 49 * 25
    assert SFConvCNP.from_config("sfvconvcnp-2d", num_layers=1).grid.n_freq == 39 * 20
    with pytest.raises(ValueError, match="name"):
        SFConvCNP.from_config("convcnp")


@pytest.mark.parametrize(
    ("name", "dx"),
    [("sfconvcnp-1d-small", 1), ("sfvconvcnp-1d-small", 1), ("sfconvcnp-2d-small", 2)],
)
def test_model_translation_equivariance_and_context_permutation(name, dx) -> None:
    torch.manual_seed(0)
    model = SFConvCNP.from_config(name, num_layers=2).double()
    xc, yc, xq = _task(2, 12, 7, dx, model.dim_y)
    d = model(xc, yc, xq)
    assert d.loc.shape == (2, 7, model.dim_y)
    assert bool((d.scale > 0).all())
    t = torch.tensor([1.3, -0.6][:dx], dtype=torch.float64)
    d_t = model(xc + t, yc, xq + t)
    assert torch.allclose(d.loc, d_t.loc, atol=1e-10)
    assert torch.allclose(d.scale, d_t.scale, atol=1e-10)
    perm = torch.randperm(12)
    d_p = model(xc[:, perm], yc[:, perm], xq)
    assert torch.allclose(d.loc, d_p.loc, atol=1e-10)
    # and each query is predicted independently of the other queries
    d_one = model(xc, yc, xq[:, 3:4])
    assert torch.allclose(d.loc[:, 3:4], d_one.loc, atol=1e-10)


def test_native_and_reference_backends_agree() -> None:
    torch.manual_seed(1)
    nat = SFConvCNP.from_config("sfconvcnp-1d-small", num_layers=2).double()
    ref = SFConvCNP.from_config("sfconvcnp-1d-small", num_layers=2, backend="reference").double()
    ref.load_state_dict(nat.state_dict())
    xc, yc, xq = _task(3, 9, 5, 1, 1)
    assert torch.allclose(nat(xc, yc, xq).loc, ref(xc, yc, xq).loc, atol=1e-10)


def test_share_params_and_volterra_class() -> None:
    shared = SFConvCNP(embed_channels=8, feedforward_channels=8, num_layers=2, share_params=True)
    assert shared.query_blocks is shared.context_blocks
    vol = SFVConvCNP(embed_channels=8, feedforward_channels=8, num_layers=1, volterra_rank=3)
    assert vol.context_blocks[0].conv.volterra_rank == 3
    assert vol.context_blocks[0].conv.output_mixing is None


def test_nll_matches_closed_form() -> None:
    torch.manual_seed(2)
    model = SFConvCNP.from_config("sfconvcnp-1d-small", num_layers=1).double()
    xc, yc, xq = _task(2, 5, 4, 1, 1)
    yq = torch.randn(2, 4, 1, dtype=torch.float64)
    d = model(xc, yc, xq)
    mu, s = d.loc, d.scale
    manual = 0.5 * torch.log(2 * torch.pi * s**2) + (yq - mu) ** 2 / (2 * s**2)
    assert torch.allclose(gaussian_nll(d, yq), manual.sum(-1))
    assert torch.allclose(nll_loss(d, yq), manual.mean())


def test_float32_model_accepts_float64_inputs_and_trains() -> None:
    torch.manual_seed(3)
    model = SFConvCNP.from_config("sfconvcnp-1d-small", num_layers=1)
    xc, yc, xq = _task(4, 10, 6, 1, 1)
    yq = torch.sin(xq)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = nll_loss(model(xc, yc, xq), yq.float())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_bad_inputs() -> None:
    model = SFConvCNP(embed_channels=8, feedforward_channels=8, num_layers=1)
    xc, yc, xq = _task(2, 5, 3, 1, 1, dtype=torch.float32)
    with pytest.raises(ValueError, match="yc"):
        model(xc, yc[:, :4], xq)
    with pytest.raises(ValueError, match="xq"):
        model(xc, yc, xq[..., None])
    with pytest.raises(TypeError, match="xc"):
        model(xc.numpy(), yc, xq)
    with pytest.raises(ValueError, match="dim_x"):
        SFConvCNP(dim_x=3)
