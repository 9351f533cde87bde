"""Regression tests of the fuzz contract (issue 25 section 1) for the models,
neural_processes and kernels areas: bad input raises a ValueError/TypeError that names the
argument, before any work; valid calls are unchanged."""

from __future__ import annotations

import math
import re

import numpy as np
import torch


def _error(kinds: type | tuple[type, ...], call) -> Exception:
    """The exception ``call()`` raises, which must be one of ``kinds``."""
    try:
        call()
    except kinds as exc:
        return exc
    raise AssertionError(f"no {kinds} raised")


def _names(exc: Exception, name: str) -> bool:
    """Whether the message names the argument (as a word), as the fuzzer checks."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", str(exc)) is not None


def test_nudft_errors_name_the_argument() -> None:
    from rml_fast.kernels.nudft import (
        FrequencyGrid,
        NUDFTPlan,
        nudft_type1,
        nudft_type2,
        nudft_type2_hermitian,
    )

    g = FrequencyGrid(1, 4.9, 0.1)
    e = _error(ValueError, lambda: FrequencyGrid(1, 1e300, 0.1))
    assert _names(e, "max_freq")
    x, v = torch.rand(2, 7, 1), torch.randn(2, 7, 3)
    e = _error(ValueError, lambda: nudft_type1(x[:0], v, g))
    assert _names(e, "x")
    e = _error(TypeError, lambda: nudft_type1(x, v, g, density=None))
    assert _names(e, "density")
    yhat = torch.ones(1, 50, 1, dtype=torch.complex64)
    for bad in (yhat[:0], yhat.to("meta"), yhat[None]):
        e = _error(ValueError, lambda bad=bad: nudft_type2_hermitian(bad, torch.rand(1, 5, 1), g))
        assert _names(e, "yhat")
    e = _error(
        ValueError,
        lambda: nudft_type2(
            x, torch.ones(2, 50, 1, dtype=torch.complex64), g, torch.ones(50).to("meta")
        ),
    )
    assert _names(e, "weights")
    e = _error(ValueError, lambda: g.xi_as(torch.tensor([math.nan])))
    assert _names(e, "like")
    plan = NUDFTPlan(g, x)
    e = _error(
        TypeError, lambda: plan.type2_planes(np.zeros((2, 50, 1)), torch.zeros(2, 50, 1), "kv")
    )
    assert _names(e, "re")


def test_clip_ghost_norms_reject_meta_and_bad_shapes() -> None:
    from rml_fast.kernels.clip import ghost_norm_sq_blas, ghost_norm_sq_reference

    A, D = torch.randn(3, 5, 4, dtype=torch.float64), torch.randn(3, 5, 2, dtype=torch.float64)
    for f in (ghost_norm_sq_blas, ghost_norm_sq_reference):
        e = _error(ValueError, lambda f=f: f(A.to("meta"), D))
        assert _names(e, "A")
        e = _error(TypeError, lambda f=f: f(A, D.numpy()))
        assert _names(e, "D")
        e = _error(ValueError, lambda f=f: f(A, D[:0]))
        assert _names(e, "D")
    # valid input unchanged: the reference equals the explicit per-sample gradients
    G = torch.einsum("bsp,bsd->bpd", D, A)
    assert torch.allclose(ghost_norm_sq_reference(A, D), G.square().sum((1, 2)))


def test_gravitree_result_and_sgg_scalars() -> None:
    from rml_fast.kernels.gravitree import GraviTreeResult
    from rml_fast.kernels.sgg import counters_per_row

    kw = dict(
        optimal_objective=0.1,
        theta=0.2,
        n_trees=1,
        record_objectives=np.array([0.1]),
        record_counts=[1],
        getter=lambda i: {"i": i},
        complete=True,
        stats={},
        max_trees=10,
        n_features=3,
    )
    r = GraviTreeResult(**kw)
    assert r.tree(0) == {"i": 0}
    e = _error(IndexError, lambda: r.tree(5))
    assert isinstance(e, ValueError) and _names(e, "i")  # an IndexError and a ValueError
    e = _error(TypeError, lambda: r.tree(None))
    assert _names(e, "i")
    for name, bad in (
        ("n_trees", math.nan),
        ("theta", None),
        ("record_counts", None),
        ("record_objectives", np.array([math.nan])),
    ):
        e = _error(
            (ValueError, TypeError), lambda name=name, bad=bad: GraviTreeResult(**{**kw, name: bad})
        )
        assert _names(e, name)
    assert counters_per_row(4) > 0
    e = _error(TypeError, lambda: counters_per_row(math.nan))
    assert _names(e, "dim")


def test_sfconv_layers_name_their_arguments() -> None:
    from rml_fast.neural_processes import (
        SetFourierConv,
        SetFourierConvBlock,
        SetFourierVolterraConv,
    )

    for cls in (SetFourierConv, SetFourierVolterraConv):
        e = _error(TypeError, lambda cls=cls: cls(math.nan, 4, 4))
        assert _names(e, "spatial_dim")
        e = _error(ValueError, lambda cls=cls: cls(1, 4, 4, 4.9, 1e300))
        assert _names(e, "freq_resolution")
    conv = SetFourierConv(1, 4, 6, 4.9, 0.1, groups=2)
    zv, xq, xkv = torch.randn(3, 10, 4), torch.rand(3, 7, 1), torch.rand(3, 10, 1)
    bad = xq.clone()
    bad[0, 0, 0] = math.nan
    e = _error(ValueError, lambda: conv(zv, bad, xkv))
    assert _names(e, "xq")
    e = _error(ValueError, lambda: conv(zv, xq[:0], xkv))
    assert _names(e, "xq")
    e = _error(TypeError, lambda: conv(zv, xq, xkv.numpy()))
    assert _names(e, "xkv")
    blk = SetFourierConvBlock(8, 16, spatial_dim=1, groups=2)
    xc, xq2 = torch.rand(2, 5, 1), torch.rand(2, 3, 1)
    e = _error(ValueError, lambda: blk(torch.randn(0, 3, 8), torch.randn(2, 5, 8), xq2, xc))
    assert _names(e, "zq")
    e = _error(
        ValueError, lambda: blk(torch.randn(2, 3, 8), torch.randn(2, 5, 8).to("meta"), xq2, xc)
    )
    assert _names(e, "zkv")


def test_np_losses_and_data_reject_nan() -> None:
    from rml_fast.neural_processes import nll_loss
    from rml_fast.neural_processes.data import Batch, gp_kernel

    dist = torch.distributions.Normal(torch.zeros(2, 3, 1), torch.ones(2, 3, 1))
    yq = torch.zeros(2, 3, 1)
    assert math.isclose(float(nll_loss(dist, yq)), 0.5 * math.log(2 * math.pi), rel_tol=1e-6)
    yq[0, 0, 0] = math.nan
    for bad in (yq, torch.zeros(0, 3, 1), np.zeros((2, 3, 1)), torch.zeros(2, 3, 1).to("meta")):
        e = _error((ValueError, TypeError), lambda bad=bad: nll_loss(dist, bad))
        assert _names(e, "yq")
    t = torch.zeros(1, 2, 1)
    e = _error(ValueError, lambda: Batch(t, t, torch.full((1, 2, 1), math.nan), t))
    assert _names(e, "xq")
    x = np.zeros((3, 1))
    e = _error(TypeError, lambda: gp_kernel("rbf", x, torch.zeros(3, 1), 1.0))
    assert _names(e, "x2")
    e = _error(TypeError, lambda: gp_kernel("rbf", x, x, None))
    assert _names(e, "lengthscale")


def test_models_boundaries() -> None:
    from rml_fast.models import ConditionalDenoiser, DDPMSchedule, TinyTransformer, make_task
    from rml_fast.models.transformer import TinyConfig, activation, layer_norm

    s = DDPMSchedule()
    e = _error(
        TypeError,
        lambda: s.q_sample(np.ones((1, 2), dtype=np.float32), torch.tensor([3]), torch.zeros(1, 2)),
    )
    assert _names(e, "x0")
    e = _error(
        ValueError,
        lambda: s.reverse_mean(torch.zeros(1, 2), torch.zeros(1, 2).to("meta"), torch.tensor([5])),
    )
    assert _names(e, "eps")
    net = ConditionalDenoiser(n_concepts=2)
    e = _error(
        ValueError, lambda: net(torch.zeros(0, 2), torch.tensor([0, 1, 1]), torch.tensor([0, 5, 9]))
    )
    assert _names(e, "c") or _names(e, "x_t")
    e = _error(ValueError, lambda: make_task(None))
    assert _names(e, "name")
    e = _error(TypeError, lambda: make_task("induction").train_batch(2.5, torch.Generator()))
    assert _names(e, "batch")
    e = _error(TypeError, lambda: TinyTransformer(TinyConfig(), seed=math.nan))
    assert _names(e, "seed")
    e = _error(ValueError, lambda: layer_norm(torch.zeros(2, 4), torch.ones(0), torch.zeros(4)))
    assert _names(e, "w")
    x = torch.randn(3, 64) * 3
    strided = torch.repeat_interleave(x, 2, dim=-1)[..., ::2]
    assert torch.equal(activation(strided, "gelu"), activation(x, "gelu"))
    e = _error(ValueError, lambda: activation(x, "tanh"))
    assert _names(e, "act")


def test_digits_models_boundaries() -> None:
    from rml_fast.models.digits_diffusion import DigitsCNN
    from rml_fast.models.digits_vlm import TinyVLM, decode, digit_of_token, digits_vlm_split

    e = _error(TypeError, lambda: DigitsCNN()(np.zeros((3, 1, 8, 8), dtype=np.float32)))
    assert _names(e, "x")
    e = _error(TypeError, lambda: decode(None))
    assert _names(e, "ids")
    e = _error(TypeError, lambda: digit_of_token(np.array([29, 2])))
    assert _names(e, "ids")
    e = _error(ValueError, lambda: digits_vlm_split(-1))
    assert _names(e, "seed")
    vlm = TinyVLM(seed=0)
    e = _error(ValueError, lambda: vlm.input_ids("what digit is __nope__ ?"))
    assert _names(e, "prompt")
    x = torch.zeros(2, 1, 16, 16)
    x[0, 0, 0, 0] = math.nan
    e = _error(ValueError, lambda: vlm.predict_digit(x))
    assert _names(e, "pixels")
    ids = vlm.input_ids("what digit is this ?", batch=2)
    e = _error(ValueError, lambda: vlm(torch.zeros(0, 1, 16, 16), ids))
    assert _names(e, "pixels")
