"""SFConvCNP and SFVConvCNP: translation-equivariant conditional neural processes on scattered
points, built from set-Fourier (Volterra) convolution blocks (arXiv 2606.01172).

Two-stream architecture (TNP-like, no grid). With ``[y, flag]`` inputs (flag 0 for the
context, 1 for the queries, as in the reference code), ``y_encoder = MLP(Dy + 1 -> C)``;
for ``l = 1..L``::

    z_c <- Block^c_l(z_c <- (x_c, z_c))          (context stream, context -> context)
    z_q <- Block^q_l(z_q <- (x_c, z_c))          (query stream, context -> queries)

then ``MLP(C -> 2 Dy)`` gives ``mu`` and ``sigma = softplus(raw) + min_std`` of a factorised
Normal predictive. The positions enter only through the set-Fourier transforms, so the model is
translation equivariant and permutation invariant over the context.

``setconv_features`` (PROPOSED, not in the paper; off in every preset) appends ConvCNP-style
set-convolution features to the encoder input of every context and query point: for each of
``S`` learnable lengthscales ``l_s``, the Gaussian density ``d_s(x) = sum_n k_s(x - x_n)`` and the
density-normalised data ``m_s(x) = sum_n y_n k_s(x - x_n) / (max(d_s(x), 0) + 0.01)``,
``k_s(r) = exp(-|r|^2 / (2 l_s^2))``. They are computed through the model's own frequency grid
(type 1 of ``[1, y]``, Gaussian envelope, Hermitian type 2), so their cost is linear in the
numbers of points like the rest of the model; they equal the exact SetConv where
``l_s xi_max >~ 1.5`` (band-limited Gaussian otherwise).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, cast

import torch
from torch import nn
from torch.nn import functional as F_

from rml_fast._validation import Interval, check_scalar, check_tensor
from rml_fast.kernels.nudft import FrequencyGrid, NUDFTPlan
from rml_fast.neural_processes.sfconv import (
    SetFourierConvBlock,
    SetFourierVolterraConvBlock,
    gaussian_envelope,
)

__all__ = ["CONFIGS", "SFConvCNP", "SFVConvCNP", "gaussian_nll", "nll_loss"]

# Reference configurations (hyper-parameters read from the paper's code), plus small CPU ones.
CONFIGS: dict[str, dict[str, Any]] = {
    "sfconvcnp-1d": dict(
        dim_x=1, dim_y=1, embed_channels=288, feedforward_channels=1152, num_layers=6, groups=4,
        max_freq=4.9, freq_resolution=0.1, output_feature_mixing=True,
    ),
    "sfvconvcnp-1d": dict(
        dim_x=1, dim_y=1, embed_channels=128, feedforward_channels=512, num_layers=5, groups=4,
        max_freq=4.9, freq_resolution=0.1, volterra_rank=4, output_feature_mixing=False,
    ),
    "sfconvcnp-predprey": dict(
        dim_x=1, dim_y=2, embed_channels=288, feedforward_channels=1152, num_layers=6, groups=4,
        max_freq=4.9, freq_resolution=0.1, output_feature_mixing=True,
    ),
    "sfconvcnp-2d": dict(
        dim_x=2, dim_y=3, embed_channels=384, feedforward_channels=1536, num_layers=6, groups=128,
        max_freq=4.8, freq_resolution=0.2, output_feature_mixing=True,
    ),
    "sfvconvcnp-2d": dict(
        dim_x=2, dim_y=3, embed_channels=256, feedforward_channels=1024, num_layers=6, groups=128,
        max_freq=4.75, freq_resolution=0.25, volterra_rank=2, output_feature_mixing=False,
    ),
    # small models that train on a laptop CPU in minutes (tests, demo)
    "sfconvcnp-1d-small": dict(
        dim_x=1, dim_y=1, embed_channels=64, feedforward_channels=128, num_layers=3, groups=4,
        max_freq=4.9, freq_resolution=0.1, output_feature_mixing=True,
    ),
    "sfvconvcnp-1d-small": dict(
        dim_x=1, dim_y=1, embed_channels=48, feedforward_channels=96, num_layers=3, groups=4,
        max_freq=4.9, freq_resolution=0.1, volterra_rank=2, output_feature_mixing=False,
    ),
    "sfconvcnp-2d-small": dict(
        dim_x=2, dim_y=1, embed_channels=64, feedforward_channels=128, num_layers=3, groups=16,
        max_freq=4.8, freq_resolution=0.2, output_feature_mixing=True,
    ),
}  # fmt: skip


#: id of the model whose forward is running with its parameters cast to a wider input dtype
#: (the inner call skips the checks and the promotion, which the outer call did)
_PROMOTED_CALL: ContextVar[int | None] = ContextVar("sfconvcnp_promoted_call", default=None)


def _mlp(din: int, dhid: int, dout: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(din, dhid), nn.ReLU(), nn.Linear(dhid, dout))


class SFConvCNP(nn.Module):
    """Set-Fourier convolutional conditional neural process.

    Parameters
    ----------
    dim_x : {1, 2}, default=1
    dim_y : int, default=1
    embed_channels : int, default=128
        ``C``.
    feedforward_channels : int, default=512
    num_layers : int, default=4
        ``L`` (each layer has a context and a query block).
    groups : int, default=4
    max_freq, freq_resolution : float or tuple, default=4.9, 0.1
    init_lengthscale : float, default=0.05
    p_dropout : float, default=0.0
    norm_first : bool, default=True
    output_feature_mixing, input_feature_mixing : bool, default=True, False
    low_rank : bool, default=False
    rank : int, optional
    density_feature_pairing : {"blocked", "interleaved"}, default="blocked"
    volterra_rank : int, optional
        If given, Volterra blocks of this rank (:class:`SFVConvCNP`).
    order : {1, 2}, default=2
        Volterra order (with ``volterra_rank``).
    share_params : bool, default=False
        Use the same block for the context and the query stream.
    min_std : float, default=1e-6
    backend : {"auto", "native", "triton", "reference"}, default="auto"
    setconv_features : sequence of float, optional
        PROPOSED deviation from the paper (None, the default, is the paper's model): initial
        lengthscales ``l_s`` (learnable) of Gaussian set-convolution features — the density
        ``d_s`` and the density-normalised data ``m_s`` of ConvCNP's encoder, see the module
        docstring — appended to the ``[y, flag]`` input of the encoder at every context and
        query point. Computed through the model's frequency grid (linear cost); they are the
        exact Gaussian SetConv where ``l_s * max_freq >~ 1.5``. The equal-budget demo uses
        ``(0.25, 0.5, 1.0)``.

    Shapes
    ------
    ``forward(xc, yc, xq)``: ``xc`` (B, N, dim_x), ``yc`` (B, N, dim_y), ``xq`` (B, M, dim_x)
    -> ``torch.distributions.Normal`` with ``loc``/``scale`` (B, M, dim_y).

    Examples
    --------
    >>> import torch
    >>> model = SFConvCNP.from_config("sfconvcnp-1d-small")
    >>> xc, yc, xq = torch.rand(2, 10, 1), torch.randn(2, 10, 1), torch.rand(2, 4, 1)
    >>> model(xc, yc, xq).loc.shape
    torch.Size([2, 4, 1])
    """

    grid: FrequencyGrid

    def __init__(
        self,
        dim_x: int = 1,
        dim_y: int = 1,
        embed_channels: int = 128,
        feedforward_channels: int = 512,
        num_layers: int = 4,
        groups: int = 4,
        max_freq: Any = 4.9,
        freq_resolution: Any = 0.1,
        init_lengthscale: float = 0.05,
        p_dropout: float = 0.0,
        norm_first: bool = True,
        output_feature_mixing: bool = True,
        input_feature_mixing: bool = False,
        low_rank: bool = False,
        rank: int | None = None,
        density_feature_pairing: str = "blocked",
        volterra_rank: int | None = None,
        order: int = 2,
        share_params: bool = False,
        min_std: float = 1e-6,
        backend: str = "auto",
        setconv_features: Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        self.dim_x = int(check_scalar(dim_x, "dim_x", Interval("int", 1, 2)))
        self.dim_y = int(check_scalar(dim_y, "dim_y", Interval("int", 1, None)))
        C = int(check_scalar(embed_channels, "embed_channels", Interval("int", 1, None)))
        G = int(check_scalar(groups, "groups", Interval("int", 1, None)))
        if C % G:
            raise ValueError(
                f"groups={G} must divide embed_channels={C} (each SFConv layer splits its "
                f"2*embed_channels inputs and embed_channels outputs into groups)")
        L = int(check_scalar(num_layers, "num_layers", Interval("int", 1, None)))
        self.min_std = float(check_scalar(min_std, "min_std", Interval("real", 0.0, None)))
        conv = dict(
            spatial_dim=self.dim_x,
            max_freq=max_freq,
            freq_resolution=freq_resolution,
            groups=groups,
            init_lengthscale=init_lengthscale,
            low_rank=low_rank,
            rank=rank,
            input_feature_mixing=input_feature_mixing,
            output_feature_mixing=output_feature_mixing,
            density_feature_pairing=density_feature_pairing,
            backend=backend,
        )
        if volterra_rank is None:
            block_cls: type[SetFourierConvBlock] = SetFourierConvBlock
        else:
            block_cls = SetFourierVolterraConvBlock
            conv.update(volterra_rank=volterra_rank, order=order)

        def make() -> SetFourierConvBlock:
            return block_cls(C, feedforward_channels, p_dropout, norm_first, **conv)

        self.context_blocks = nn.ModuleList([make() for _ in range(L)])
        self.query_blocks = (
            self.context_blocks if share_params else nn.ModuleList([make() for _ in range(L)])
        )
        n_in = self.dim_y + 1
        if setconv_features is None:
            self.raw_setconv_lengthscale = None
        else:
            scales = [
                float(check_scalar(v, "setconv_features", Interval("real", 0.0, None, "neither")))
                for v in setconv_features
            ]
            if not scales:
                raise ValueError("setconv_features must hold at least one lengthscale")
            raw = torch.tensor([v + math.log(-math.expm1(-v)) for v in scales])  # softplus^-1
            self.raw_setconv_lengthscale = nn.Parameter(raw)
            n_in += len(scales) * (1 + self.dim_y)
        self.y_encoder = _mlp(n_in, C, C)
        self.decoder = _mlp(C, C, 2 * self.dim_y)
        self.grid = cast(SetFourierConvBlock, self.context_blocks[0]).conv.grid
        self.backend = backend

    @classmethod
    def from_config(cls, name: str, **overrides: Any) -> SFConvCNP:
        """Build a model from a named preset of :data:`CONFIGS`, e.g. ``"sfconvcnp-1d"``,
        ``"sfvconvcnp-1d"``, ``"sfconvcnp-2d"``, ``"sfvconvcnp-2d"`` or a ``*-small`` CPU
        variant; keyword ``overrides`` replace preset entries."""
        if name not in CONFIGS:
            raise ValueError(f"name must be one of {sorted(CONFIGS)}, got {name!r}")
        cfg = {**CONFIGS[name], **overrides}
        return cls(**cfg)

    def _check(self, xc, yc, xq) -> None:
        for t, n, last in ((xc, "xc", self.dim_x), (yc, "yc", self.dim_y), (xq, "xq", self.dim_x)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{n} must be a torch.Tensor, got {type(t).__name__}")
            if t.device.type == "meta":
                raise ValueError(f"{n} must hold values, got a tensor on the 'meta' device")
            if t.ndim != 3 or t.shape[-1] != last:
                raise ValueError(f"{n} must have shape (B, *, {last}), got {tuple(t.shape)}")
        if xc.shape[:2] != yc.shape[:2]:
            raise ValueError(
                f"xc and yc must agree in (B, N), got {tuple(xc.shape)} and {tuple(yc.shape)}"
            )
        if xq.shape[0] != xc.shape[0]:
            raise ValueError("xc and xq must have the same batch size")
        for t, n in ((xc, "xc"), (yc, "yc"), (xq, "xq")):
            if not t.is_floating_point():
                raise TypeError(f"{n} must be a floating-point tensor, got {t.dtype}")
        if xc.device != yc.device or xq.device != xc.device:
            raise ValueError(
                f"xc, yc and xq must be on the same device, got {xc.device}, {yc.device} and "
                f"{xq.device}"
            )
        for t, n in ((xc, "xc"), (yc, "yc"), (xq, "xq")):
            check_tensor(t, n)  # finite (skipped while torch.compile / export trace)

    def _warn_if_periodic(self, xc: torch.Tensor, xq: torch.Tensor) -> None:
        """Warn when a task's inputs span a period ``1 / freq_resolution`` or more on an axis.

        The frequency grid has spacing ``dxi``, so every set-Fourier transform (hence the
        model) is periodic with period ``T = 1 / dxi`` along that axis: inputs ``x`` and
        ``x + T`` are the same point to the model, and predictions repeat with period ``T``.
        Reading the span back is a device synchronisation: on CUDA it is checked in eval mode
        (predictions) only, not on every training step.
        """
        if self.training and xc.is_cuda:
            return
        parts = [t for t in (xc, xq) if t.shape[1] > 0]
        if not parts:
            return
        with torch.no_grad():
            lo = torch.stack([t.detach().amin(1) for t in parts]).amin(0)  # (B, d)
            hi = torch.stack([t.detach().amax(1) for t in parts]).amax(0)
            span = (hi - lo).amax(0).double().cpu()  # (d,) widest task per axis
        period = self.grid.period
        for axis, (s, p) in enumerate(zip(span.tolist(), period, strict=True)):
            if s >= p:
                warnings.warn(
                    f"the context and target inputs of a task span {s:.4g} along axis {axis}, "
                    f"at least the period {p:.4g} (= 1 / freq_resolution) of the model's "
                    f"frequency grid: the model treats x and x + {p:.4g} as the same point, so "
                    f"its predictions repeat with that period and are meaningless outside a "
                    f"window shorter than it; shift/rescale the inputs of each task, or build "
                    f"the model with a finer freq_resolution",
                    UserWarning,
                    stacklevel=3,
                )
                return

    #: ``eps`` of the density-normalised set-convolution features ``m_s = num / (d_s^+ + eps)``
    setconv_epsilon = 1e-2

    @property
    def setconv_lengthscale(self) -> torch.Tensor | None:
        """Lengthscales ``l_s`` of the set-convolution features (None if off)."""
        if self.raw_setconv_lengthscale is None:
            return None
        return F_.softplus(self.raw_setconv_lengthscale)

    def setconv_features(self, yc: torch.Tensor, plan: NUDFTPlan) -> tuple[torch.Tensor, ...]:
        """The set-convolution features at the context and at the query points.

        Returns ``(f_c, f_q)`` of shapes (B, N, S (1 + dim_y)) and (B, M, S (1 + dim_y)):
        the densities ``d_s`` then ``m_s`` per output dimension (``s`` fastest).
        """
        ell = self.setconv_lengthscale
        if ell is None:
            raise ValueError("the model was built without setconv_features")
        re, im, dre, dim = plan.type1_planes(yc.contiguous(), density=True)
        g = gaussian_envelope(self.grid._xi_like(re), ell.to(re.dtype).expand(self.dim_x, -1))
        B, Fn, S = re.shape[0], g.shape[0], g.shape[1]
        spec_re = torch.cat([dre[..., None] * g, (re[..., None] * g[:, None]).reshape(B, Fn, -1)], -1)
        spec_im = torch.cat([dim[..., None] * g, (im[..., None] * g[:, None]).reshape(B, Fn, -1)], -1)
        spec_re, spec_im = spec_re.contiguous(), spec_im.contiguous()
        out = []
        for at in ("kv", "q"):
            h = plan.type2_planes(spec_re, spec_im, at)
            dens, num = h[..., :S], h[..., S:]
            P = h.shape[1]
            m = num.reshape(B, P, self.dim_y, S) / (
                dens.clamp_min(0)[:, :, None, :] + self.setconv_epsilon
            )
            out.append(torch.cat([dens, m.reshape(B, P, -1)], -1))
        return out[0], out[1]

    def forward(
        self, xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor
    ) -> torch.distributions.Normal:
        """Predictive distribution at the query points.

        ``xc`` (B, N_c, dim_x) and ``yc`` (B, N_c, dim_y) are the context set, ``xq``
        (B, N_t, dim_x) the query inputs; returns a ``Normal`` whose ``loc`` and ``scale`` have
        shape (B, N_t, dim_y) (independent per point and output dimension).

        Computed in the wider of the inputs' and the parameters' dtypes, never downcast:
        float64 inputs to a float32 model give float64 predictions (the parameters are cast
        for the call, gradients still reach them). Warns (``UserWarning``) when a task's
        inputs span at least the period ``1 / freq_resolution`` of the frequency grid, where
        predictions repeat with that period. Under ``torch.compile`` / ``torch.export`` only
        the static checks run (no periodicity warning, no dtype promotion: inputs wider than the
        parameters raise ``TypeError``).
        """
        traced = torch.compiler.is_compiling() or torch.compiler.is_exporting()
        if traced:
            # traced by torch.compile / torch.export: static checks only (values are unknown),
            # and no dtype promotion: wider inputs than the parameters are refused
            self._check(xc, yc, xq)
            pdt = cast(nn.Linear, self.y_encoder[0]).weight.dtype
            for t, n in ((xc, "xc"), (yc, "yc"), (xq, "xq")):
                if torch.promote_types(t.dtype, pdt) != pdt:
                    raise TypeError(
                        f"{n} has dtype {t.dtype}, wider than the model's {pdt}: under "
                        f"torch.compile / torch.export, cast the model (e.g. model.double()) first"
                    )
        elif _PROMOTED_CALL.get() != id(self):  # not the inner call of a dtype promotion
            self._check(xc, yc, xq)
            self._warn_if_periodic(xc, xq)
            pdt = cast(nn.Linear, self.y_encoder[0]).weight.dtype
            wide = functools.reduce(torch.promote_types, (xc.dtype, yc.dtype, xq.dtype), pdt)
            if wide != pdt:
                state = {
                    k: v.to(wide) if v.is_floating_point() else v
                    for k, v in (*self.named_parameters(), *self.named_buffers())
                }
                token = _PROMOTED_CALL.set(id(self))
                try:
                    return torch.func.functional_call(self, state, (xc, yc, xq))
                finally:
                    _PROMOTED_CALL.reset(token)
        dt = cast(nn.Linear, self.y_encoder[0]).weight.dtype  # inputs of lower precision are upcast (exact)
        xc, yc, xq = xc.to(dt).contiguous(), yc.to(dt), xq.to(dt).contiguous()
        B, M = xq.shape[:2]
        plan = NUDFTPlan(self.grid, xc, xq, backend=self.backend)  # shared by all blocks
        yc_aug = torch.cat([yc, torch.zeros_like(yc[..., :1])], dim=-1)
        yq_aug = torch.zeros(B, M, self.dim_y + 1, dtype=dt, device=xq.device)
        yq_aug[..., -1] = 1.0
        if self.raw_setconv_lengthscale is not None:
            fc, fq = self.setconv_features(yc, plan)
            yc_aug, yq_aug = torch.cat([yc_aug, fc], -1), torch.cat([yq_aug, fq], -1)
        zc, zq = self.y_encoder(yc_aug), self.y_encoder(yq_aug)
        last = len(self.query_blocks) - 1
        for i, (blk_c, blk_q) in enumerate(zip(self.context_blocks, self.query_blocks, strict=True)):
            # the last context block's output feeds nothing (only z_q reaches the decoder):
            # skipping it leaves the outputs and every used gradient unchanged
            zc_new = blk_c(zc, zc, xc, xc, plan) if i < last else zc
            zq = blk_q(zq, zc, xq, xc, plan)
            zc = zc_new
        out = self.decoder(zq)
        mu, raw = out[..., : self.dim_y], out[..., self.dim_y :]
        # the scale is positive by construction; traced graphs cannot check values
        return torch.distributions.Normal(mu, F_.softplus(raw) + self.min_std,
                                          validate_args=False if traced else None)


class SFVConvCNP(SFConvCNP):
    """:class:`SFConvCNP` with second-order Volterra blocks (default ``volterra_rank=4``,
    identity feed-forward activation, no output mixing).

    Examples
    --------
    >>> import torch
    >>> model = SFVConvCNP.from_config("sfvconvcnp-1d-small")
    >>> model(torch.rand(1, 6, 1), torch.randn(1, 6, 1), torch.rand(1, 3, 1)).scale.shape
    torch.Size([1, 3, 1])
    """

    def __init__(
        self, *args: Any, volterra_rank: int = 4, output_feature_mixing: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(  # type: ignore[misc]  # args never repeat the two keywords
            *args,
            volterra_rank=volterra_rank,
            output_feature_mixing=output_feature_mixing,
            **kwargs,
        )


def _check_nll_args(dist: Any, yq: Any) -> None:
    if not isinstance(dist, torch.distributions.Normal):
        raise TypeError(f"dist must be a torch.distributions.Normal, got {type(dist).__name__}")
    check_tensor(yq, "yq")  # a torch tensor with values, real floating, finite
    batch = tuple(dist.batch_shape)
    try:
        ok = tuple(torch.broadcast_shapes(tuple(yq.shape), batch)) == batch
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"yq must broadcast to the shape of the predictions (B, M, dim_y) = {batch}, got "
            f"{tuple(yq.shape)}"
        )
    if yq.device != dist.loc.device:
        raise ValueError(f"yq must be on the predictions' device {dist.loc.device}, got {yq.device}")


def gaussian_nll(dist: torch.distributions.Normal, yq: torch.Tensor) -> torch.Tensor:
    """Per-point negative log-likelihood, summed over output dims: shape (B, M).

    ``yq`` (B, M, dim_y) must be a finite tensor of the predictions' shape (ValueError /
    TypeError naming ``yq`` otherwise).
    """
    _check_nll_args(dist, yq)
    return -dist.log_prob(yq).sum(-1)


def nll_loss(dist: torch.distributions.Normal, yq: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood over query points and batch (summed over ``dim_y``)."""
    return gaussian_nll(dist, yq).mean()
