"""SFConvCNP / SFVConvCNP: presets, invariances of the whole model, likelihood, backends."""

from __future__ import annotations

import warnings

import pytest
import torch

from rml_fast.kernels.nudft import NUDFTPlan
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
        loss = nll_loss(model(xc, yc, xq), yq)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize("cls", ["sfconvcnp-1d-small", "sfvconvcnp-1d-small"])
def test_float64_inputs_give_float64_predictions(cls) -> None:
    # float64 in used to give float32 out (the inputs were cast to the parameters' dtype)
    torch.manual_seed(4)
    model = SFConvCNP.from_config(cls, num_layers=2)
    xc, yc, xq = _task(2, 9, 5, 1, 1)
    d = model(xc, yc, xq)
    assert d.loc.dtype == d.scale.dtype == torch.float64
    # exactly the float64 model's predictions, not float32 ones cast up
    twin = SFConvCNP.from_config(cls, num_layers=2).double()
    twin.load_state_dict(model.state_dict())
    torch.testing.assert_close(d.loc, twin(xc, yc, xq).loc, rtol=0, atol=1e-12)
    d32 = model(xc.float(), yc.float(), xq.float())
    assert d32.loc.dtype == torch.float32
    assert float((d32.loc.double() - d.loc).detach().abs().max()) > 0  # float64 computed
    # a mixed call is computed in the widest dtype; the parameters stay float32
    assert model(xc.float(), yc, xq.float()).loc.dtype == torch.float64
    assert all(p.dtype == torch.float32 for p in model.parameters())
    # gradients reach the float32 parameters
    d.loc.sum().backward()
    assert model.decoder[2].weight.grad is not None
    assert model.decoder[2].weight.grad.dtype == torch.float32
    with pytest.raises(TypeError, match="xq must be a floating-point"):
        model(xc, yc, xq.long())


def test_inputs_spanning_the_grid_period_warn() -> None:
    # freq_resolution 0.5 -> the model is periodic with period 2 along x
    torch.manual_seed(5)
    model = SFConvCNP(embed_channels=8, feedforward_channels=8, num_layers=1, groups=2,
                      max_freq=2.0, freq_resolution=0.5)
    xc = torch.tensor([[[-0.5], [0.0], [0.4]]])
    yc = torch.randn(1, 3, 1)
    xq = torch.tensor([[[0.2], [0.7]]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        near = model(xc, yc, xq).loc  # span 1.2 < period 2: no warning
    # predictions repeat with the period outside the window: now with a warning
    with pytest.warns(UserWarning, match=r"span 3\.2 along axis 0, at least the period 2 "):
        far = model(xc, yc, xq + 2.0).loc
    torch.testing.assert_close(far, near, atol=1e-5, rtol=0)
    # the context alone spanning a period warns too
    with pytest.warns(UserWarning, match="period 2 "):
        model(torch.tensor([[[-1.0], [1.0]]]), yc[:, :2], xq)


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


def _naive_forward(model, xc, yc, xq):
    """The two-stream recursion with every context block evaluated (as the reference code)."""
    B, M = xq.shape[:2]
    plan = NUDFTPlan(model.grid, xc, xq, backend=model.backend)
    yc_aug = torch.cat([yc, torch.zeros_like(yc[..., :1])], dim=-1)
    yq_aug = torch.cat([torch.zeros(B, M, model.dim_y, dtype=xq.dtype), torch.ones(B, M, 1, dtype=xq.dtype)], -1)
    if model.raw_setconv_lengthscale is not None:
        fc, fq = model.setconv_features(yc, plan)
        yc_aug, yq_aug = torch.cat([yc_aug, fc], -1), torch.cat([yq_aug, fq], -1)
    zc, zq = model.y_encoder(yc_aug), model.y_encoder(yq_aug)
    for blk_c, blk_q in zip(model.context_blocks, model.query_blocks, strict=True):
        zc, zq = blk_c(zc, zc, xc, xc, plan), blk_q(zq, zc, xq, xc, plan)
    return model.decoder(zq)


@pytest.mark.parametrize("setconv", [None, (0.4, 0.8)])
def test_skipping_the_unused_last_context_block_changes_nothing(setconv) -> None:
    torch.manual_seed(1)
    model = SFConvCNP(
        embed_channels=8, feedforward_channels=16, num_layers=3, groups=4, setconv_features=setconv
    ).double()
    xc, yc, xq = _task(2, 9, 6, 1, 1)
    d = model(xc, yc, xq)
    out = _naive_forward(model, xc, yc, xq)
    torch.testing.assert_close(d.loc, out[..., :1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(d.scale, torch.nn.functional.softplus(out[..., 1:]) + 1e-6)
    nll_loss(d, torch.randn_like(d.loc)).backward()
    # the last context block feeds nothing: no gradient reaches it, every other block gets one
    assert all(p.grad is None for p in model.context_blocks[-1].parameters())
    assert all(p.grad is not None for p in model.context_blocks[0].parameters())
    assert all(p.grad is not None for p in model.query_blocks[-1].parameters())


def _setconv_brute_force(xc, yc, x, ell, eps):
    k = torch.exp(-((x[:, :, None, :] - xc[:, None, :, :]) ** 2).sum(-1)[..., None] / (2 * ell**2))
    dens = k.sum(2)  # (B, P, S)
    num = torch.einsum("bpns,bny->bpys", k, yc)
    m = num / (dens[:, :, None, :] + eps)
    return torch.cat([dens, m.reshape(*m.shape[:2], -1)], -1)


@pytest.mark.parametrize(("dx", "dy"), [(1, 1), (1, 2), (2, 3)])
def test_setconv_features_equal_the_gaussian_setconv(dx, dy) -> None:
    torch.manual_seed(2)
    grid = dict(max_freq=4.9, freq_resolution=0.1) if dx == 1 else dict(max_freq=4.8, freq_resolution=0.2)
    # ell * xi_max >= 1.7 (envelope truncation < 1e-20) and the periodic images of the kernels
    # (period 1 / dxi) at least 6 lengthscales away
    scales = (0.35, 0.7) if dx == 1 else (0.35, 0.5)
    model = SFConvCNP(
        dim_x=dx, dim_y=dy, embed_channels=8, feedforward_channels=16, num_layers=1, groups=4,
        setconv_features=scales, **grid,
    ).double()  # fmt: skip
    torch.testing.assert_close(model.setconv_lengthscale, torch.tensor(scales, dtype=torch.float64))
    xc, yc, xq = _task(3, 8, 5, dx, dy, seed=3)
    if dx == 2:  # keep the data and the kernels within half a period (1 / dxi = 5) of the 2-D grid
        xc, xq = xc / 2, xq / 2
    fc, fq = model.setconv_features(yc, NUDFTPlan(model.grid, xc, xq))
    ell, eps = model.setconv_lengthscale, model.setconv_epsilon
    assert fc.shape == (3, 8, 2 * (1 + dy)) and fq.shape == (3, 5, 2 * (1 + dy))
    torch.testing.assert_close(fc, _setconv_brute_force(xc, yc, xc, ell, eps), rtol=0, atol=1e-7)
    torch.testing.assert_close(fq, _setconv_brute_force(xc, yc, xq, ell, eps), rtol=0, atol=1e-7)


def test_setconv_features_keep_the_model_equivariant_and_train() -> None:
    torch.manual_seed(3)
    model = SFConvCNP(
        embed_channels=8, feedforward_channels=16, num_layers=2, groups=4, max_freq=2.45,
        setconv_features=(0.25, 0.5, 1.0),
    ).double()  # fmt: skip
    xc, yc, xq = _task(2, 11, 7, 1, 1)
    d = model(xc, yc, xq)
    d_t = model(xc + 0.9, yc, xq + 0.9)
    torch.testing.assert_close(d_t.loc, d.loc, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(d_t.scale, d.scale, rtol=1e-10, atol=1e-10)
    perm = torch.randperm(11)
    torch.testing.assert_close(model(xc[:, perm], yc[:, perm], xq).loc, d.loc)
    nll_loss(d, torch.randn_like(d.loc)).backward()
    g = model.raw_setconv_lengthscale.grad
    assert g is not None and bool(torch.isfinite(g).all()) and float(g.abs().sum()) > 0


def test_setconv_features_off_by_default_and_validated() -> None:
    assert SFConvCNP.from_config("sfconvcnp-1d-small").raw_setconv_lengthscale is None
    m = SFConvCNP(embed_channels=4, feedforward_channels=4, num_layers=1)
    xc, yc, xq = _task(1, 3, 2, 1, 1, dtype=torch.float32)
    plan = NUDFTPlan(m.grid, xc, xq)
    with pytest.raises(ValueError, match="without setconv_features"):
        m.setconv_features(yc, plan)
    with pytest.raises(ValueError, match="setconv_features"):
        SFConvCNP(embed_channels=4, feedforward_channels=4, num_layers=1, setconv_features=())
    with pytest.raises(ValueError, match="setconv_features"):
        SFConvCNP(embed_channels=4, feedforward_channels=4, num_layers=1, setconv_features=(0.0,))
