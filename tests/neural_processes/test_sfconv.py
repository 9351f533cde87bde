"""SetFourierConv / SetFourierVolterraConv: closed forms (Gaussian set-convolution), invariances,
Volterra reductions, backends and gradients."""

from __future__ import annotations

import math

import pytest
import torch

from rml_fast.neural_processes.sfconv import (
    SetFourierConv,
    SetFourierConvBlock,
    SetFourierVolterraConv,
    SetFourierVolterraConvBlock,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _pts(B: int, N: int, d: int, lo: float, hi: float, seed: int) -> torch.Tensor:
    return torch.rand(B, N, d, generator=_gen(seed), dtype=torch.float64) * (hi - lo) + lo


def _identity_filter(conv: SetFourierConv, block: int = 0) -> None:
    """W[block] = identity: density -> density channels, feature -> feature channels."""
    with torch.no_grad():
        G = conv.groups
        w = conv.weight  # (nb * G, ci, co, F, 2)
        ci, co = w.shape[1], w.shape[2]
        eye = torch.eye(ci, co, dtype=w.dtype)
        w[block * G : (block + 1) * G] = 0
        w[block * G : (block + 1) * G, :, :, :, 0] = eye[None, :, :, None]


def _setconv(xq, xc, z, ell):
    """Gaussian SetConv: density and features, sum_j z_j exp(-|x - x_j|^2 / (2 ell^2))."""
    d2 = ((xq[:, :, None, :] - xc[:, None, :, :]) ** 2).sum(-1)
    k = torch.exp(-d2 / (2 * ell**2))
    return torch.cat([k.sum(-1, keepdim=True).expand(-1, -1, z.shape[-1]), k @ z], dim=-1)


@pytest.mark.parametrize(
    ("dim", "mf", "res", "lo", "hi"), [(1, 4.9, 0.1, -2.0, 2.0), (2, 4.8, 0.2, -1.2, 1.2)]
)
@pytest.mark.parametrize("backend", ["native", "reference"])
def test_identity_filter_is_gaussian_setconv(dim, mf, res, lo, hi, backend) -> None:
    C, ell = 3, 0.3
    conv = SetFourierConv(
        dim, C, 2 * C, mf, res, init_lengthscale=ell, learnable_lengthscale=False, backend=backend
    ).double()
    _identity_filter(conv)
    xc, xq = _pts(2, 11, dim, lo, hi, 0), _pts(2, 7, dim, lo, hi, 1)
    z = torch.randn(2, 11, C, generator=_gen(2), dtype=torch.float64)
    y = conv(z, xq, xc)
    expect = _setconv(xq, xc, z, float(conv.lengthscale[0, 0]))  # ell after the softplus round trip
    assert torch.allclose(y, expect, rtol=0, atol=1e-10 * float(expect.abs().max()))


def test_short_lengthscale_shows_truncation_error() -> None:
    """With ell = 0.05 the band limit xi_max = 4.9 truncates the Gaussian (the spec's caveat)."""
    C = 1
    conv = SetFourierConv(
        1, C, 2, 4.9, 0.1, init_lengthscale=0.05, learnable_lengthscale=False
    ).double()
    _identity_filter(conv)
    xc, xq = _pts(1, 5, 1, -2, 2, 0), _pts(1, 50, 1, -2, 2, 1)
    z = torch.ones(1, 5, 1, dtype=torch.float64)
    err = (conv(z, xq, xc) - _setconv(xq, xc, z, 0.05)).abs().max()
    assert err > 1e-3


@pytest.mark.parametrize("cls", [SetFourierConv, SetFourierVolterraConv])
@pytest.mark.parametrize("dim", [1, 2])
def test_translation_equivariance_and_permutation_invariance(cls, dim) -> None:
    torch.manual_seed(0)
    conv = cls(
        dim, 4, 6, 2.0, 0.25, groups=2, input_feature_mixing=True, output_feature_mixing=True
    ).double()
    xc, xq = _pts(2, 13, dim, -1, 1, 0), _pts(2, 9, dim, -1, 1, 1)
    z = torch.randn(2, 13, 4, generator=_gen(3), dtype=torch.float64)
    y = conv(z, xq, xc)
    shift = torch.tensor([0.37, -1.21][:dim], dtype=torch.float64)
    y_shift = conv(z, xq + shift, xc + shift)
    assert torch.allclose(y, y_shift, rtol=0, atol=1e-11 * float(y.detach().abs().max()))
    perm = torch.randperm(13, generator=_gen(4))
    y_perm = conv(z[:, perm], xq, xc[:, perm])
    assert torch.allclose(y, y_perm, rtol=0, atol=1e-11 * float(y.detach().abs().max()))


def test_native_matches_reference_backend_and_gradcheck() -> None:
    torch.manual_seed(1)
    kw = dict(groups=2, low_rank=True, rank=2, density_feature_pairing="interleaved")
    nat = SetFourierConv(1, 2, 4, 1.0, 0.25, backend="native", **kw).double()
    ref = SetFourierConv(1, 2, 4, 1.0, 0.25, backend="reference", **kw).double()
    ref.load_state_dict(nat.state_dict())
    xc, xq = _pts(2, 5, 1, -1, 1, 0), _pts(2, 4, 1, -1, 1, 1)
    z = torch.randn(2, 5, 2, dtype=torch.float64, requires_grad=True)
    assert torch.allclose(nat(z, xq, xc), ref(z, xq, xc), atol=1e-12)
    xc.requires_grad_()
    assert torch.autograd.gradcheck(lambda z, xc: nat(z, xq, xc), (z, xc))
    # parameter gradients agree too
    nat(z, xq, xc).square().sum().backward()
    ref(z, xq, xc).square().sum().backward()
    for (n1, p1), (_, p2) in zip(nat.named_parameters(), ref.named_parameters(), strict=True):
        assert torch.allclose(p1.grad, p2.grad, atol=1e-10), n1


@pytest.mark.parametrize(
    ("cls", "kw", "split"),
    [
        (SetFourierConv, dict(groups=4), (2, 4, False)),  # density-only, then feature-only groups
        (SetFourierConv, dict(groups=1), (0, 1, True)),  # one mixed group
        (SetFourierConv, dict(groups=2, density_feature_pairing="interleaved"), (0, 2, True)),
        (SetFourierConv, dict(groups=3), None),  # unequal feature counts: embedding path
        (SetFourierVolterraConv, dict(groups=2, volterra_rank=2), (1, 2, False)),
    ],
)
@pytest.mark.parametrize("dim", [1, 2])
def test_split_product_equals_embedding_path(cls, kw, split, dim) -> None:
    """The folded-envelope / rank-one-density product equals the embedding formulation
    (outputs and every gradient), for every group layout; layouts it cannot split fall back."""
    torch.manual_seed(0)
    conv = cls(dim, 6, 12, 1.5, 0.25, **kw).double()
    lay = conv._layout
    assert (lay is None) if split is None else ((lay["g0"], lay["g1"], lay["mixed"]) == split)
    x, q = _pts(3, 9, dim, -1.5, 1.5, 1), _pts(3, 5, dim, -1.5, 1.5, 2)
    z = torch.randn(3, 9, 6, generator=_gen(3), dtype=torch.float64, requires_grad=True)
    params = [z, *conv.parameters()]
    y1 = conv(z, q, x)
    g1 = torch.autograd.grad(y1.square().sum(), params)
    conv._layout = None
    y2 = conv(z, q, x)
    g2 = torch.autograd.grad(y2.square().sum(), params)
    assert float(y1.detach().abs().max()) > 1e-3
    torch.testing.assert_close(y1, y2, rtol=1e-12, atol=1e-13)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(
    ("cls", "kw"),
    [
        (SetFourierConv, dict(groups=4)),
        (SetFourierConv, dict(groups=2, output_feature_mixing=True)),
        (SetFourierVolterraConv, dict(groups=2, volterra_rank=2)),
        (SetFourierVolterraConv, dict(groups=4, volterra_rank=1)),
    ],
)
@pytest.mark.parametrize("dim", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_split_product_equals_graph_paths(cls, kw, dim, dtype, monkeypatch) -> None:
    """The one-node blocked split product (hand-written backward) equals the torch-graph split
    product and the embedding formulation: outputs and every gradient (inputs, filter,
    lengthscales, mixing), float64 to 1e-10 and float32 to 1e-5 (relative to the largest)."""
    from rml_fast.neural_processes import sfconv

    calls = []
    orig = sfconv._BlockedSplitProduct.apply
    monkeypatch.setattr(
        sfconv._BlockedSplitProduct, "apply", lambda *a: calls.append(1) or orig(*a)
    )
    torch.manual_seed(0)
    conv = cls(dim, 8, 8, 1.5, 0.25, **kw).to(dtype)
    assert conv._layout["blocked"]
    x, q = _pts(3, 9, dim, -1.5, 1.5, 1).to(dtype), _pts(3, 5, dim, -1.5, 1.5, 2).to(dtype)
    z = torch.randn(3, 9, 8, generator=_gen(3), dtype=dtype, requires_grad=True)
    params = [z, *conv.parameters()]
    outs = []
    for mode in ("fused", "graph", "embedding"):
        conv.fused_product = mode == "fused"
        if mode == "embedding":
            conv._layout = None
        y = conv(z, q, x)
        outs.append((y, torch.autograd.grad(y.square().sum(), params)))
    assert len(calls) == 1
    # several bin chunks (the cache-sized per-bin copies) give the same result
    monkeypatch.setattr(sfconv, "_BIN_CHUNK_BYTES", 1)
    conv.fused_product, conv._layout = True, conv._split_layout()
    y = conv(z, q, x)
    outs.append((y, torch.autograd.grad(y.square().sum(), params)))
    assert len(calls) == 2
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    y0, g0 = outs[0]
    for y, g in outs[1:]:
        torch.testing.assert_close(y0, y, rtol=0, atol=tol * float(y.detach().abs().max()))
        for a, b in zip(g0, g, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=tol * float(b.abs().max()))


def test_fused_split_product_gradcheck_and_fallbacks() -> None:
    """gradcheck of the fused layer (values, positions, filter, lengthscales) in float64; the
    layouts it does not cover (one group, interleaved pairing, low rank) keep the other paths."""
    torch.manual_seed(4)
    conv = SetFourierConv(1, 2, 4, 1.0, 0.25, groups=2).double()
    assert conv._layout["blocked"]
    xc, xq = _pts(2, 5, 1, -1, 1, 0).requires_grad_(), _pts(2, 4, 1, -1, 1, 1)
    z = torch.randn(2, 5, 2, dtype=torch.float64, requires_grad=True)
    w, r = conv.weight, conv.raw_lengthscale
    assert torch.autograd.gradcheck(lambda z, xc, w, r: conv(z, xq, xc), (z, xc, w, r))
    assert not SetFourierConv(1, 4, 4, groups=1)._layout["blocked"]
    itl = SetFourierConv(1, 4, 4, groups=2, density_feature_pairing="interleaved")
    assert not itl._layout["blocked"]
    assert SetFourierConv(1, 6, 6, groups=3)._layout is None


def test_low_rank_equals_full_filter_uv() -> None:
    torch.manual_seed(2)
    lr = SetFourierConv(1, 3, 4, 2.0, 0.2, groups=2, low_rank=True, rank=3).double()
    full = SetFourierConv(1, 3, 4, 2.0, 0.2, groups=2).double()
    with torch.no_grad():
        full.raw_lengthscale.copy_(lr.raw_lengthscale)
        full.weight.copy_(torch.view_as_real(lr.filter()))
    xc, xq = _pts(2, 8, 1, -2, 2, 0), _pts(2, 6, 1, -2, 2, 1)
    z = torch.randn(2, 8, 3, dtype=torch.float64)
    assert torch.allclose(lr(z, xq, xc), full(z, xq, xc), atol=1e-12)


def test_interleaved_equals_blocked_with_permuted_filter() -> None:
    torch.manual_seed(3)
    C = 3
    blk = SetFourierConv(1, C, 5, 2.0, 0.2, density_feature_pairing="blocked").double()
    itl = SetFourierConv(1, C, 5, 2.0, 0.2, density_feature_pairing="interleaved").double()
    perm = torch.tensor([c // 2 if c % 2 == 0 else C + c // 2 for c in range(2 * C)])
    with torch.no_grad():
        itl.raw_lengthscale.copy_(blk.raw_lengthscale)
        itl.weight.copy_(blk.weight[:, perm])
    xc, xq = _pts(1, 8, 1, -2, 2, 0), _pts(1, 6, 1, -2, 2, 1)
    z = torch.randn(1, 8, C, dtype=torch.float64)
    assert torch.allclose(blk(z, xq, xc), itl(z, xq, xc), atol=1e-12)


def test_volterra_with_zeroed_higher_order_equals_sfconv() -> None:
    torch.manual_seed(4)
    R, G, C, O = 3, 2, 4, 6  # noqa: E741
    vol = SetFourierVolterraConv(1, C, O, 4.9, 0.1, groups=G, volterra_rank=R).double()
    lin = SetFourierConv(1, C, O, 4.9, 0.1, groups=G).double()
    with torch.no_grad():
        vol.weight[G:] = 0
        vol.quadratic_mix.weight.zero_()
        vol.quadratic_mix.bias.zero_()
        lin.weight.copy_(vol.weight[:G])
        lin.raw_lengthscale.copy_(vol.raw_lengthscale)
    xc, xq = _pts(2, 10, 1, -3, 3, 0), _pts(2, 7, 1, -3, 3, 1)
    z = torch.randn(2, 10, C, dtype=torch.float64)
    assert torch.allclose(vol(z, xq, xc), lin(z, xq, xc), atol=1e-12)
    # order=1 is the linear layer itself
    o1 = SetFourierVolterraConv(1, C, O, 4.9, 0.1, groups=G, volterra_rank=R, order=1).double()
    o1.load_state_dict(lin.state_dict())
    assert torch.allclose(o1(z, xq, xc), lin(z, xq, xc), atol=1e-12)


def test_volterra_quadratic_term_is_squared_setconv() -> None:
    """a_1 = b_1 = identity filter, linear term zero: y = lambda * SetConv^2 (+ bias)."""
    C, ell, lam, bias = 2, 0.4, 0.7, -0.2
    vol = SetFourierVolterraConv(
        1, C, 2 * C, 4.9, 0.1, volterra_rank=1, init_lengthscale=ell, learnable_lengthscale=False
    ).double()
    with torch.no_grad():
        vol.weight.zero_()
        _identity_filter(vol, block=1)
        _identity_filter(vol, block=2)
        vol.weight[0] = 0
        vol.quadratic_mix.weight.fill_(lam)
        vol.quadratic_mix.bias.fill_(bias)
    xc, xq = _pts(1, 9, 1, -2, 2, 0), _pts(1, 8, 1, -2, 2, 1)
    z = torch.randn(1, 9, C, dtype=torch.float64)
    s = _setconv(xq, xc, z, float(vol.lengthscale[0, 0]))
    assert torch.allclose(vol(z, xq, xc), lam * s**2 + bias, atol=1e-9 * float(s.abs().max()) ** 2)


@pytest.mark.parametrize("cls", [SetFourierConvBlock, SetFourierVolterraConvBlock])
@pytest.mark.parametrize("norm_first", [True, False])
def test_blocks_shapes_and_equivariance(cls, norm_first) -> None:
    torch.manual_seed(5)
    blk = cls(
        8, 16, 0.0, norm_first, spatial_dim=1, groups=4, max_freq=2.0, freq_resolution=0.2
    ).double()
    xc, xq = _pts(2, 6, 1, -1, 1, 0), _pts(2, 5, 1, -1, 1, 1)
    zc, zq = torch.randn(2, 6, 8, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
    out = blk(zq, zc, xq, xc)
    assert out.shape == (2, 5, 8)
    assert torch.allclose(out, blk(zq, zc, xq + 0.5, xc + 0.5), atol=1e-11)
    expected_act = torch.nn.GELU if cls is SetFourierConvBlock else torch.nn.Identity
    assert isinstance(blk.ff[1], expected_act)


def test_lengthscale_parameterisation() -> None:
    conv = SetFourierConv(2, 3, 3, 1.0, 0.5, init_lengthscale=0.05)
    assert conv.lengthscale.shape == (2, 3)
    assert torch.allclose(conv.lengthscale, torch.full((2, 3), 0.05))
    assert isinstance(conv.raw_lengthscale, torch.nn.Parameter)
    fixed = SetFourierConv(1, 3, 3, 1.0, 0.5, learnable_lengthscale=False)
    assert "raw_lengthscale" not in dict(fixed.named_parameters())
    assert math.isclose(float(fixed.lengthscale[0, 0]), 0.1, rel_tol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(groups=4), ValueError, "groups"),
        (dict(density_feature_pairing="zigzag"), ValueError, "density_feature_pairing"),
        (dict(groups=6, density_feature_pairing="interleaved"), ValueError, "interleaved"),
        (dict(low_rank=True), ValueError, "rank"),
        (dict(init_lengthscale=0.0), ValueError, "init_lengthscale"),
        (dict(backend="gpu"), ValueError, "backend"),
        (dict(groups=1.5), TypeError, "groups"),
    ],
)
def test_bad_arguments(kwargs, exc, match) -> None:
    with pytest.raises(exc, match=match):
        SetFourierConv(1, 3, 6, 1.0, 0.5, **kwargs)


def test_bad_forward_inputs() -> None:
    conv = SetFourierConv(1, 3, 6, 1.0, 0.5)
    xc, xq = torch.rand(2, 5, 1), torch.rand(2, 4, 1)
    with pytest.raises(ValueError, match="zv"):
        conv(torch.randn(2, 5, 4), xq, xc)
    with pytest.raises(ValueError, match=r"^xq"):  # the argument's own name (issue 25)
        conv(torch.randn(2, 5, 3), torch.rand(2, 4, 2), xc)
    with pytest.raises(ValueError, match="volterra_rank"):
        SetFourierVolterraConv(1, 3, 6, 1.0, 0.5, volterra_rank=0)
    with pytest.raises(ValueError, match="order"):
        SetFourierVolterraConv(1, 3, 6, 1.0, 0.5, order=3)
