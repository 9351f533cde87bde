"""Set-Fourier convolutions (SFConv) and their second-order Volterra extension (SFVConv).

A set-Fourier convolution maps features ``z_n`` on scattered points ``x_n`` to functions
evaluated at query points, without a discretisation grid (arXiv 2606.01172):

1. type-1 NUDFT of the features and of the density (a channel of ones),
   ``Zhat_c(xi) = sum_n z_{n,c} e^{-2 pi i xi.x_n}``, ``Dhat(xi) = sum_n e^{-2 pi i xi.x_n}``;
2. a Gaussian envelope per (axis, channel), the Fourier transform of
   ``exp(-|x|^2 / (2 ell^2))``: ``ghat_c(xi) = (2 pi)^{d/2} prod_i ell_{i,c}
   exp(-2 pi^2 sum_i ell_{i,c}^2 xi_i^2)``, ``ell = 1e-5 + softplus(p)``;
3. the embedding ``E = [Dhat ghat_1..Dhat ghat_C | Zhat_1 ghat_1..Zhat_C ghat_C]`` (``2C``
   channels, "blocked"; or "interleaved" density/feature pairs);
4. a learned complex filter per frequency bin, grouped (``G`` groups) and optionally low rank,
   ``Yhat_{g,o}(xi) = sum_i E_{g,i}(xi) W_{g,i,o}(xi)``;
5. the Hermitian type-2 inverse at the queries,
   ``y_o(x) = 2 dV sum_f w_f Re(Yhat_o(xi_f) e^{2 pi i xi_f.x})``.

The layer is exactly translation equivariant (phases cancel), permutation invariant over the
context, and linear in the numbers of context and query points. The transforms run in the
batched kernels of :mod:`rml_fast.kernels.nudft` (C++ on CPU, Triton on CUDA), which never
materialise the ``(B, N, F)`` phase tensor; ``backend="reference"`` uses the einsum
implementation of the reference code (materialised phases) instead.

The Volterra layer adds the separable second-order term of a Volterra series,
``sum_r lambda_r (a_r * f)(x) (b_r * f)(x)``, with every ``a_r``, ``b_r`` an SFConv filter
computed in the same transform: ``(2R + 1) G`` kernel groups, one type 1, one spectral
product, one type 2 producing ``(2R + 1) O`` channels, then
``y = y^(1) + Linear_{R -> 1}([a_r . b_r]_r)``.

References
----------
arXiv 2606.01172 (SFConvCNP / SFVConvCNP); arXiv 2404.13182 (spectral ConvCNP).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F_

from rml_fast._validation import Interval, check_scalar
from rml_fast.kernels.nudft import FrequencyGrid, NUDFTPlan, _check_finite, _grid_args

__all__ = [
    "SetFourierConv",
    "SetFourierConvBlock",
    "SetFourierVolterraConv",
    "SetFourierVolterraConvBlock",
    "gaussian_envelope",
]

_PAIRINGS = ("blocked", "interleaved")


def _inv_softplus(y: float) -> float:
    return y + math.log(-math.expm1(-y))


def _check_feat(t: Any, name: str, ndim: int) -> torch.Tensor:
    """A real floating tensor with values (not ``meta``) of ``ndim`` dimensions; values are
    not checked (non-finite features propagate into non-finite outputs)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    if not t.is_floating_point():
        raise TypeError(f"{name} must have a real floating-point dtype, got {t.dtype}")
    if t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    return t


def _check_positions(t: Any, name: str, d: int) -> torch.Tensor:
    """Positions (B, N, d), float32/float64, finite (checked once, at the layer boundary)."""
    _check_feat(t, name, 3)
    if t.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{name} must be float32 or float64, got {t.dtype}")
    if t.shape[-1] != d:
        raise ValueError(f"{name} must have shape (B, N, {d}), got {tuple(t.shape)}")
    _check_finite(t, name)
    return t


def _check_layer_inputs(
    zv: Any, xq: Any, xkv: Any, d: int, channels: int, zv_name: str = "zv"
) -> None:
    """Public-boundary checks of a layer's (features, queries, keys/values); errors name the
    layer's arguments (``zv``, ``xq``, ``xkv``)."""
    _check_feat(zv, zv_name, 3)
    _check_positions(xkv, "xkv", d)
    if xq is not xkv:
        _check_positions(xq, "xq", d)
        if xq.shape[0] != xkv.shape[0]:
            raise ValueError(
                f"xq and xkv must have the same batch size, got xq of shape {tuple(xq.shape)} "
                f"and xkv of shape {tuple(xkv.shape)}"
            )
        if xq.device != xkv.device:
            raise ValueError(f"xq and xkv must be on the same device, got {xq.device} and {xkv.device}")
    if zv.shape[:2] != xkv.shape[:2] or zv.shape[2] != channels:
        raise ValueError(
            f"{zv_name} must have shape (B, N, {channels}) with (B, N) from xkv, got "
            f"{zv_name} of shape {tuple(zv.shape)} and xkv of shape {tuple(xkv.shape)}"
        )
    if zv.device != xkv.device:
        raise ValueError(
            f"{zv_name} and xkv must be on the same device, got {zv.device} and {xkv.device}"
        )


def _cmatmul(ar, ai, br, bi):
    """(ar + i ai) @ (br + i bi) on real planes."""
    return ar @ br - ai @ bi, ar @ bi + ai @ br


def gaussian_envelope(xi: torch.Tensor, lengthscale: torch.Tensor) -> torch.Tensor:
    r"""Fourier transform of the unnormalised Gaussian ``exp(-|x|^2 / (2 ell^2))``.

    .. math::

        \hat g_c(\xi) = (2\pi)^{d/2} \prod_i \ell_{i,c}\, \exp\Big(-2\pi^2 \sum_i \ell_{i,c}^2 \xi_i^2\Big)

    Parameters
    ----------
    xi : torch.Tensor of shape (F, d)
    lengthscale : torch.Tensor of shape (d, C), positive

    Returns
    -------
    ghat : torch.Tensor of shape (F, C)
    """
    _check_feat(xi, "xi", 2)
    _check_feat(lengthscale, "lengthscale", 2)
    if lengthscale.shape[0] != xi.shape[-1]:
        raise ValueError(
            f"lengthscale must have shape (d, C) with d = {xi.shape[-1]} from xi, got "
            f"lengthscale of shape {tuple(lengthscale.shape)} and xi of shape {tuple(xi.shape)}"
        )
    if lengthscale.device != xi.device:
        raise ValueError(
            f"xi and lengthscale must be on the same device, got {xi.device} and "
            f"{lengthscale.device}"
        )
    d = xi.shape[-1]
    quad = torch.einsum("fd,dc->fc", xi.square(), lengthscale.square())
    return (2 * math.pi) ** (d / 2) * lengthscale.prod(0) * torch.exp(-2 * math.pi**2 * quad)


class _BlockedSplitProduct(torch.autograd.Function):
    r"""The split spectral product of the blocked group layout as one autograd node.

    Layout (``G = 2 g0`` groups of ``a = 2C / G`` inputs): groups ``0..g0-1`` hold only density
    inputs, groups ``g0..G-1`` only feature inputs, and input ``i`` of group ``g`` is channel
    ``(g mod g0) a + i``. Per frequency bin ``f`` and block ``n``:

    .. math::

        \hat Y_{n,g<g_0,o} = \hat D\, U_{n,g,o},\quad U_{n,g,o} = \sum_i \hat g_{c(g,i)} W_{n,g,i,o};
        \qquad \hat Y_{n,g_0+k,o} = \sum_i \hat Z_{c(k,i)}\, \hat g_{c(k,i)} W_{n,g_0+k,i,o}

    The feature term is one real GEMM per (bin, feature group) over the whole batch and all
    blocks: ``[Re Z, Im Z] (B, 2a)`` times the real block matrix ``[[Wr, Wi], [-Wi, Wr]]``
    ``(2a, nb 2b)``. The backward is written by hand (two GEMMs per bin and group, the rank-one
    density terms, the envelope gradient) so that the layout copies of the torch graph of
    :meth:`SetFourierConv._split_product` (weight permutes, index / cat / pad and their
    backward) are replaced by one copy into and one out of the per-bin layout each way.

    Inputs: ``re, im`` (B, F, C), ``dre, dim`` (B, F), the filter parameter ``weight``
    (nb G, a, b, F, 2) and the envelope ``gh`` (F, C); outputs ``(y_re, y_im)`` of shape
    (B, F, nb G b).
    """

    @staticmethod
    def forward(ctx, re, im, dre, dim, weight, gh, g0):  # type: ignore[override]
        B, Fn, _ = re.shape
        dt = re.dtype
        G, a, bo = 2 * g0, weight.shape[1], weight.shape[2]
        nb = weight.shape[0] // G
        X = nb * bo * 2  # columns of one (bin, group): (block, output, [re, im])
        # the filter once in the per-bin layout (F, G, a, nb, b, [re, im]): one copy of
        # complex elements (the parameter keeps its (nb G, a, b, F, 2) layout)
        wc = torch.view_as_complex(weight.to(dt).reshape(nb, G, a, bo, Fn, 2))
        wq = torch.view_as_real(wc.permute(4, 1, 2, 0, 3).contiguous())
        ghk = gh.reshape(Fn, g0, a)
        # block filter (F, g0, [re, im] inputs, a, nb, b, [re, im] outputs), envelope folded
        # in: rows Re Z -> (Wr, Wi), rows Im Z -> (-Wi, Wr) = i W
        wblk = torch.empty(Fn, g0, 2, a, nb, bo, 2, dtype=dt)
        top = torch.mul(wq[:, g0:], ghk[:, :, :, None, None, None], out=wblk[:, :, 0])
        torch.neg(top[..., 1], out=wblk[:, :, 1, ..., 0])
        wblk[:, :, 1, ..., 1] = top[..., 0]
        wblk = wblk.reshape(Fn * g0, 2 * a, X)
        # density: U (F, g0, nb, b, [re, im]) = sum_i ghat W
        u = torch.bmm(ghk.reshape(Fn * g0, 1, a), wq[:, :g0].reshape(Fn * g0, a, X))
        u = u.reshape(Fn, g0, nb, bo, 2)
        ur = u[..., 0].permute(0, 2, 1, 3)  # (F, nb, g0, b)
        ui = u[..., 1].permute(0, 2, 1, 3)
        y_re = torch.empty(B, Fn, nb, G, bo, dtype=dt)
        y_im = torch.empty_like(y_re)
        dr, di = dre[:, :, None, None, None], dim[:, :, None, None, None]
        torch.mul(dr, ur, out=y_re[:, :, :, :g0]).addcmul_(di, ui, value=-1)
        torch.mul(dr, ui, out=y_im[:, :, :, :g0]).addcmul_(di, ur)
        # feature term, a chunk of bins at a time (the per-bin copies stay cache-sized)
        for f0, f1, A in _bin_chunks(re, im, g0, a):
            yf = torch.bmm(A, wblk[f0 * g0 : f1 * g0]).reshape(f1 - f0, g0, B, nb, bo, 2)
            y_re[:, f0:f1, :, g0:] = yf[..., 0].permute(2, 0, 3, 1, 4)
            y_im[:, f0:f1, :, g0:] = yf[..., 1].permute(2, 0, 3, 1, 4)
        ctx.save_for_backward(re, im, wblk, dre, dim, wq, gh, u)
        ctx.g0, ctx.wshape, ctx.wdtype = g0, weight.shape, weight.dtype
        return y_re.reshape(B, Fn, -1), y_im.reshape(B, Fn, -1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_re, g_im):  # type: ignore[override]
        re, im, wblk, dre, dim, wq, gh, u = ctx.saved_tensors
        g0 = ctx.g0
        B, Fn = dre.shape
        dt = dre.dtype
        _, G, a, nb, bo, _ = wq.shape
        C, X = g0 * a, nb * bo * 2
        gr5 = g_re.reshape(B, Fn, nb, G, bo)
        gi5 = g_im.reshape(B, Fn, nb, G, bo)
        n_re, n_im, n_dr, n_di, n_w, n_gh, _ = ctx.needs_input_grad
        gre = gim = gdr = gdi = gw = ggh = None
        need_z, need_w = n_re or n_im, n_w or n_gh
        if need_z:
            gre = torch.empty(B, Fn, g0, a, dtype=dt)
            gim = torch.empty_like(gre)
        gtop = torch.empty(Fn, g0, a, nb, bo, 2, dtype=dt) if need_w else None
        # feature term, chunks of bins: gY (F g0, B, nb b 2) -> dL/dZ and dL/dWblk
        for f0, f1, A in _bin_chunks(re, im, g0, a, build=need_w):
            n = f1 - f0
            gY = torch.empty(n, g0, B, nb, bo, 2, dtype=dt)
            gY[..., 0] = gr5[:, f0:f1, :, g0:].permute(1, 3, 0, 2, 4)
            gY[..., 1] = gi5[:, f0:f1, :, g0:].permute(1, 3, 0, 2, 4)
            gY = gY.reshape(n * g0, B, X)
            if need_z:
                gA = torch.bmm(gY, wblk[f0 * g0 : f1 * g0].transpose(1, 2))
                gA = gA.reshape(n, g0, B, 2, a).permute(2, 0, 1, 3, 4)  # (B, n, g0, 2, a)
                gre[:, f0:f1] = gA[:, :, :, 0]
                gim[:, f0:f1] = gA[:, :, :, 1]
            if need_w:
                gWb = torch.bmm(A.transpose(1, 2), gY).reshape(n, g0, 2, a, nb, bo, 2)
                gt = gtop[f0:f1]
                gt.copy_(gWb[:, :, 0])
                gt[..., 0] += gWb[:, :, 1, ..., 1]
                gt[..., 1] -= gWb[:, :, 1, ..., 0]
        if need_z:
            gre, gim = gre.reshape(B, Fn, C), gim.reshape(B, Fn, C)
        ur = u[..., 0].permute(0, 2, 1, 3)  # (F, nb, g0, b)
        ui = u[..., 1].permute(0, 2, 1, 3)
        gdr_ = gr5[:, :, :, :g0]  # (B, F, nb, g0, b)
        gdi_ = gi5[:, :, :, :g0]
        if n_dr or n_di:
            gdr = torch.einsum("bfnko,fnko->bf", gdr_, ur) + torch.einsum("bfnko,fnko->bf", gdi_, ui)
            gdi = torch.einsum("bfnko,fnko->bf", gdi_, ur) - torch.einsum("bfnko,fnko->bf", gdr_, ui)
        if need_w:
            ghk = gh.reshape(Fn, g0, a)
            # density: dL/dU (F, g0, nb, b, [re, im])
            gu = torch.empty(Fn, g0, nb, bo, 2, dtype=dt)
            gu[..., 0].permute(0, 2, 1, 3).copy_(
                torch.einsum("bfnko,bf->fnko", gdr_, dre)
            ).add_(torch.einsum("bfnko,bf->fnko", gdi_, dim))
            gu[..., 1].permute(0, 2, 1, 3).copy_(
                torch.einsum("bfnko,bf->fnko", gdi_, dre)
            ).sub_(torch.einsum("bfnko,bf->fnko", gdr_, dim))
            gu = gu.reshape(Fn * g0, X, 1)
            if n_gh:
                gf = (gtop * wq[:, g0:]).sum((3, 4, 5))  # (F, g0, a)
                gd = torch.bmm(wq[:, :g0].reshape(Fn * g0, a, X), gu).reshape(Fn, g0, a)
                ggh = (gf + gd).reshape(Fn, C)
            if n_w:
                # written straight into the parameter layout (nb, G, a, b, F, 2) through a
                # permuted view in the per-bin order (F, G, a, nb, b, 2): no per-bin copy
                gw = torch.empty(nb, G, a, bo, Fn, 2, dtype=dt)
                gWq = gw.permute(4, 1, 2, 0, 3, 5)
                torch.mul(gtop, ghk[:, :, :, None, None, None], out=gWq[:, g0:])
                gWq[:, :g0] = torch.bmm(
                    ghk.reshape(Fn * g0, a, 1), gu.reshape(Fn * g0, 1, X)
                ).reshape(Fn, g0, a, nb, bo, 2)
                gw = gw.to(ctx.wdtype).reshape(ctx.wshape)
        return gre, gim, gdr, gdi, gw, ggh, None


# bytes of one chunk of the per-bin copy of the spectra in _BlockedSplitProduct
_BIN_CHUNK_BYTES = 4 * 2**20


def _bin_chunks(re: torch.Tensor, im: torch.Tensor, g0: int, a: int, build: bool = True):
    """Yield ``(f0, f1, A)`` over chunks of frequency bins, ``A`` of shape ((f1-f0) g0, B, 2a)
    the spectra of the feature channels in the per-bin layout ``[Re Z, Im Z]`` (None if not
    ``build``)."""
    B, Fn, _ = re.shape
    per_bin = max(1, g0 * B * 2 * a * re.element_size())
    step = max(1, min(Fn, _BIN_CHUNK_BYTES // per_bin))
    re4, im4 = re.reshape(B, Fn, g0, a), im.reshape(B, Fn, g0, a)
    for f0 in range(0, Fn, step):
        f1 = min(Fn, f0 + step)
        A = None
        if build:
            A = torch.empty(f1 - f0, g0, B, 2, a, dtype=re.dtype)
            A[:, :, :, 0] = re4[:, f0:f1].permute(1, 2, 0, 3)
            A[:, :, :, 1] = im4[:, f0:f1].permute(1, 2, 0, 3)
            A = A.reshape((f1 - f0) * g0, B, 2 * a)
        yield f0, f1, A

class SetFourierConv(nn.Module):
    """Set-Fourier convolution: scattered features at ``x_kv`` -> functions at ``x_q``.

    Parameters
    ----------
    spatial_dim : {1, 2}
        Input dimension ``d``.
    in_channels : int
        ``C``, feature channels of the key/value set.
    out_channels : int
        ``O``.
    max_freq, freq_resolution : float or tuple of float
        ``xi_max`` and ``dxi`` per axis of the :class:`FrequencyGrid` (1-D default of the
        paper: 4.9 / 0.1, i.e. ``F = 50`` and period 10).
    groups : int, default=1
        ``G``; ``2 C`` and ``O`` must be divisible by it.
    init_lengthscale : float, default=0.1
        Initial Gaussian envelope lengthscale ``ell`` (the reference configs use 0.05).
    learnable_lengthscale : bool, default=True
    low_rank : bool, default=False
        Factor the per-bin filter as ``W = U V`` with inner dimension ``rank``.
    rank : int, optional
        Required when ``low_rank``.
    input_feature_mixing, output_feature_mixing : bool, default=False
        ``Linear(C, C)`` before / ``Linear(O, O)`` after the layer.
    density_feature_pairing : {"blocked", "interleaved"}, default="blocked"
        Channel layout of the embedding; "interleaved" gives every group matched
        density/feature pairs (needs ``2 C / G`` even).
    backend : {"auto", "native", "nufft", "triton", "reference"}, default="auto"
        Transform backend (see :func:`rml_fast.kernels.nudft.nudft_type1`): "native" the C++
        direct sums, "nufft" the C++/FFT non-uniform FFT (CPU), "auto" picks per transform;
        "reference" materialises the phases (einsum).

    Shapes
    ------
    ``forward(zv, xq, xkv, plan=None)``: ``zv`` (B, N, C), ``xq`` (B, M, d), ``xkv`` (B, N, d)
    -> (B, M, O).

    Examples
    --------
    >>> import torch
    >>> conv = SetFourierConv(1, 4, 6, 4.9, 0.1, groups=2)
    >>> conv(torch.randn(3, 10, 4), torch.rand(3, 7, 1), torch.rand(3, 10, 1)).shape
    torch.Size([3, 7, 6])
    """

    _blocks = 1  # kernel-group blocks: 1 (linear) for SFConv, 2R + 1 for SFVConv
    #: Use the one-node split product (:class:`_BlockedSplitProduct`) where the group layout
    #: allows it (blocked pairing, even ``G``, CPU); False: the torch-graph split product.
    fused_product = True

    def __init__(
        self,
        spatial_dim: int,
        in_channels: int,
        out_channels: int,
        max_freq: Any = 4.9,
        freq_resolution: Any = 0.1,
        groups: int = 1,
        init_lengthscale: float = 0.1,
        learnable_lengthscale: bool = True,
        low_rank: bool = False,
        rank: int | None = None,
        input_feature_mixing: bool = False,
        output_feature_mixing: bool = False,
        density_feature_pairing: str = "blocked",
        backend: str = "auto",
    ) -> None:
        super().__init__()
        C = int(check_scalar(in_channels, "in_channels", Interval("int", 1, None)))
        O = int(check_scalar(out_channels, "out_channels", Interval("int", 1, None)))  # noqa: E741
        G = int(check_scalar(groups, "groups", Interval("int", 1, None)))
        ell0 = float(
            check_scalar(
                init_lengthscale, "init_lengthscale", Interval("real", 1e-5, 1e30, "neither")
            )
        )
        if (2 * C) % G or O % G:
            raise ValueError(f"groups={G} must divide 2*in_channels={2 * C} and out_channels={O}")
        if density_feature_pairing not in _PAIRINGS:
            raise ValueError(
                f"density_feature_pairing must be one of {_PAIRINGS}, got {density_feature_pairing!r}"
            )
        if density_feature_pairing == "interleaved" and (2 * C // G) % 2:
            raise ValueError(
                "density_feature_pairing='interleaved' needs 2*in_channels/groups to be even"
            )
        if backend not in ("auto", "native", "nufft", "triton", "reference"):
            raise ValueError(
                "backend must be 'auto', 'native', 'nufft', 'triton' or 'reference', "
                f"got {backend!r}"
            )
        # checked here so that errors name this layer's arguments, not the grid's
        _grid_args(spatial_dim, max_freq, freq_resolution,
                   ("spatial_dim", "max_freq", "freq_resolution"))
        self.grid = FrequencyGrid(spatial_dim, max_freq, freq_resolution)
        self.in_channels, self.out_channels, self.groups = C, O, G
        self.pairing = density_feature_pairing
        self.backend = backend
        d, Fn, nb = self.grid.dim, self.grid.n_freq, self._blocks
        raw = torch.full((d, C), _inv_softplus(ell0 - 1e-5))
        if learnable_lengthscale:
            self.raw_lengthscale = nn.Parameter(raw)
        else:
            self.register_buffer("raw_lengthscale", raw)
        ci, co = 2 * C // G, O // G
        self.low_rank = bool(low_rank)
        if self.low_rank:
            if rank is None:
                raise ValueError("rank is required when low_rank=True")
            r = int(check_scalar(rank, "rank", Interval("int", 1, None)))
            self.rank: int | None = r
            u = torch.randn(nb * G, ci, r, Fn, dtype=torch.cfloat) / math.sqrt(C)
            v = torch.randn(nb * G, r, co, Fn, dtype=torch.cfloat) / math.sqrt(r * O)
            self.weight_u = nn.Parameter(torch.view_as_real(u).contiguous())
            self.weight_v = nn.Parameter(torch.view_as_real(v).contiguous())
        else:
            self.rank = None
            w = torch.randn(nb * G, ci, co, Fn, dtype=torch.cfloat) / math.sqrt(C * O)
            self.weight = nn.Parameter(torch.view_as_real(w).contiguous())
        self.input_mixing = nn.Linear(C, C) if input_feature_mixing else None
        self.output_mixing = nn.Linear(O, O) if output_feature_mixing else None
        self._layout = self._split_layout()

    def _split_layout(self) -> dict[str, Any] | None:
        """Index maps of the density / feature inputs of every group for the split product
        (see :meth:`_split_product`), or None where the feature inputs are not laid out as equal
        contiguous channel ranges over consecutive groups (then the embedding path is used)."""
        C, G = self.in_channels, self.groups
        a = 2 * C // G
        chan = torch.empty(G, a, dtype=torch.long)
        dens = torch.zeros(G, a, dtype=torch.bool)
        for j in range(2 * C):
            if self.pairing == "blocked":
                is_d, c = j < C, j % C
            else:
                is_d, c = j % 2 == 0, j // 2
            chan[j // a, j % a], dens[j // a, j % a] = c, is_d
        feat_groups = [g for g in range(G) if not bool(dens[g].all())]
        rows = [torch.nonzero(~dens[g]).flatten() for g in feat_groups]
        L = int(rows[0].numel())
        g0 = feat_groups[0]
        if feat_groups != list(range(g0, g0 + len(feat_groups))) or any(
            not torch.equal(r, rows[0]) for r in rows
        ):
            return None
        fchan = torch.stack([chan[g, rows[0]] for g in feat_groups])
        if not torch.equal(fchan.flatten(), torch.arange(C)):
            return None
        mixed = bool(dens[g0 : g0 + len(feat_groups)].any())
        # the layout of _BlockedSplitProduct: density-only groups 0..G/2-1, feature-only groups
        # G/2..G-1, input i of group g = channel (g mod G/2) a + i
        blocked = G % 2 == 0 and not mixed and g0 == G // 2 and a == L
        if blocked:
            want = (torch.arange(G)[:, None] % (G // 2)) * a + torch.arange(a)[None, :]
            blocked = bool(torch.equal(chan, want)) and bool(dens[: G // 2].all())
        return {
            "chan": chan,  # (G, a): channel of every input
            "dens": dens,  # (G, a): whether the input is a density channel
            "dgroups": [g for g in range(G) if bool(dens[g].any())],  # groups with densities
            "g0": g0,
            "g1": g0 + len(feat_groups),
            "rows": rows[0],  # (L,): rows of the feature inputs within a group
            "L": L,
            "mixed": mixed,  # feature groups also hold density inputs
            "blocked": blocked,  # the layout of _BlockedSplitProduct
        }

    # -- pieces ---------------------------------------------------------------------------

    @property
    def lengthscale(self) -> torch.Tensor:
        """``ell`` of shape (d, C): ``1e-5 + softplus(raw)``."""
        return 1e-5 + F_.softplus(self.raw_lengthscale)

    def filter(self) -> torch.Tensor:
        """The complex filter ``W`` of shape (blocks * G, 2C/G, O/G, F) (``U V`` if low rank)."""
        if not self.low_rank:
            return torch.view_as_complex(self.weight)
        u, v = torch.view_as_complex(self.weight_u), torch.view_as_complex(self.weight_v)
        return torch.einsum("girf,grof->giof", u, v)

    def make_plan(self, xkv: torch.Tensor, xq: torch.Tensor | None = None) -> NUDFTPlan:
        """A :class:`NUDFTPlan` for this layer's grid and backend (share it across layers)."""
        _check_positions(xkv, "xkv", self.grid.dim)
        if xq is not None and xq is not xkv:
            _check_positions(xq, "xq", self.grid.dim)
            if xq.shape[0] != xkv.shape[0]:
                raise ValueError(
                    f"xq and xkv must have the same batch size, got xq of shape "
                    f"{tuple(xq.shape)} and xkv of shape {tuple(xkv.shape)}"
                )
        return NUDFTPlan(self.grid, xkv, xq, backend=self.backend)

    def embed(self, zv: torch.Tensor, plan: NUDFTPlan) -> tuple[torch.Tensor, torch.Tensor]:
        """Type 1, envelope and density channel: ``E`` of shape (B, F, 2C) as (real, imag) planes."""
        re, im, dre, dim = plan.type1_planes(zv, density=True)
        g = gaussian_envelope(self.grid._xi_like(self.raw_lengthscale), self.lengthscale).to(re.dtype)
        parts_re = (dre[..., None] * g, re * g)
        parts_im = (dim[..., None] * g, im * g)
        if self.pairing == "blocked":
            return torch.cat(parts_re, dim=-1), torch.cat(parts_im, dim=-1)
        return torch.stack(parts_re, dim=-1).flatten(-2), torch.stack(parts_im, dim=-1).flatten(-2)

    def _weight_planes(
        self, w: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(nb*G, a, b, F, 2) parameter -> planes of shape (F, nb, G, a, b)."""
        Fn, G = self.grid.n_freq, self.groups
        w = w.to(dtype).permute(3, 4, 0, 1, 2)  # (F, 2, nb*G, a, b)
        w = w.reshape(Fn, 2, self._blocks, G, *w.shape[-2:])
        return w[:, 0], w[:, 1]

    def spectral_product(
        self, E_re: torch.Tensor, E_im: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Grouped per-bin complex product on planes: (B, F, 2C) -> (B, F, blocks * O)."""
        B, Fn, _ = E_re.shape
        G = self.groups

        def to_bins(t: torch.Tensor) -> torch.Tensor:  # (B, F, 2C) -> (F, 1, G, B, 2C/G)
            return t.reshape(B, Fn, G, -1).permute(1, 2, 0, 3)[:, None]

        a_re, a_im = to_bins(E_re), to_bins(E_im)
        if self.low_rank:
            u_re, u_im = self._weight_planes(self.weight_u, E_re.dtype)
            v_re, v_im = self._weight_planes(self.weight_v, E_re.dtype)
            a_re, a_im = _cmatmul(a_re, a_im, u_re, u_im)
            y_re, y_im = _cmatmul(a_re, a_im, v_re, v_im)
        else:
            w_re, w_im = self._weight_planes(self.weight, E_re.dtype)
            y_re, y_im = _cmatmul(a_re, a_im, w_re, w_im)  # (F, nb, G, B, O/G)

        def from_bins(t: torch.Tensor) -> torch.Tensor:
            return t.permute(3, 0, 1, 2, 4).reshape(B, Fn, -1)

        return from_bins(y_re), from_bins(y_im)

    def _split_product(
        self, zv: torch.Tensor, plan: NUDFTPlan
    ) -> tuple[torch.Tensor, torch.Tensor]:
        r"""Type 1, envelope and spectral product without building the embedding ``E``.

        The envelope is real and per (frequency, input channel), so it folds into the filter,
        and the density inputs all carry the same spectrum ``Dhat``:

        .. math::

            \hat Y_{g,o} = \hat D\, U_{g,o} + \sum_{c \in g} \hat Z_c\, \hat g_c W_{g,c,o},
            \qquad U_{g,o} = \sum_{\text{density } i \in g} \hat g_{c(i)} W_{g,i,o}

        (per frequency bin). The feature term is a grouped complex matmul over ``C`` inputs
        instead of ``2C``; the density term a rank-one product. Same result as
        :meth:`spectral_product` of :meth:`embed` (to round-off) at about half the work.
        """
        lay = self._layout
        assert lay is not None  # the only caller, forward, checks it
        re, im, dre, dim = plan.type1_planes(zv, density=True)
        B, Fn, _ = re.shape
        G, L = self.groups, lay["L"]
        g0, g1 = lay["g0"], lay["g1"]
        gh = gaussian_envelope(self.grid._xi_like(self.raw_lengthscale), self.lengthscale).to(re.dtype)
        # the fused node writes into preallocated buffers (out=), which torch.compile cannot
        # trace; traced graphs take the equivalent unfused formulation below (Inductor fuses it)
        fused = self.fused_product and not torch.compiler.is_compiling()
        if lay["blocked"] and fused and re.device.type == "cpu":
            return _BlockedSplitProduct.apply(re, im, dre, dim, self.weight, gh, g0)
        w_re, w_im = self._weight_planes(self.weight, re.dtype)  # (F, nb, G, a, b)
        # density term: U (F, nb, G, b)
        dev = gh.device  # the index maps live on the CPU
        gd = gh[:, lay["chan"].to(dev)] * lay["dens"].to(device=dev, dtype=re.dtype)  # (F, G, a)
        dgroups = lay["dgroups"]
        d0, d1 = dgroups[0], dgroups[-1] + 1
        gd = gd[:, d0:d1]
        u_re = torch.einsum("fga,fngab->fngb", gd, w_re[:, :, d0:d1])
        u_im = torch.einsum("fga,fngab->fngb", gd, w_im[:, :, d0:d1])
        dr = dre.transpose(0, 1)[:, None, None, :, None]  # (F, 1, 1, B, 1)
        di = dim.transpose(0, 1)[:, None, None, :, None]
        yd_re = dr * u_re[:, :, :, None] - di * u_im[:, :, :, None]  # (F, nb, Gd, B, b)
        yd_im = dr * u_im[:, :, :, None] + di * u_re[:, :, :, None]
        # feature term: (F, 1, Gf, B, L) @ (F, nb, Gf, L, b)
        ghf = gh.reshape(Fn, 1, g1 - g0, L, 1)
        rows = lay["rows"].to(dev)
        wf_re = w_re[:, :, g0:g1][:, :, :, rows] * ghf
        wf_im = w_im[:, :, g0:g1][:, :, :, rows] * ghf

        def to_bins(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(B, Fn, g1 - g0, L).permute(1, 2, 0, 3)[:, None]

        # one real matmul per bin and group: [re, im] @ [[w_re, w_im], [-w_im, w_re]]
        # (a quarter of the matmul calls of the plane-wise complex product, larger blocks)
        a = torch.cat([to_bins(re), to_bins(im)], dim=-1)  # (F, 1, Gf, B, 2L)
        wblk = torch.cat(
            [torch.cat([wf_re, wf_im], dim=-1), torch.cat([-wf_im, wf_re], dim=-1)], dim=-2
        )  # (F, nb, Gf, 2L, 2b)
        yf = a @ wblk  # (F, nb, Gf, B, 2b)
        bo = wf_re.shape[-1]
        yf_re, yf_im = yf[..., :bo], yf[..., bo:]
        if lay["mixed"] or (d0, d1) != (0, g0) or g1 != G:
            # general: sum the two terms group-wise
            pad = (0, 0, 0, 0, d0, G - d1)
            y_re = F_.pad(yd_re, pad) + F_.pad(yf_re, (0, 0, 0, 0, g0, G - g1))
            y_im = F_.pad(yd_im, pad) + F_.pad(yf_im, (0, 0, 0, 0, g0, G - g1))
        else:  # blocked layout, G even: density-only groups, then feature-only groups
            y_re = torch.cat([yd_re, yf_re], dim=2)
            y_im = torch.cat([yd_im, yf_im], dim=2)

        def from_bins(t: torch.Tensor) -> torch.Tensor:
            return t.permute(3, 0, 1, 2, 4).reshape(B, Fn, -1)

        return from_bins(y_re), from_bins(y_im)

    def _evaluate(self, zv, xq, xkv, plan) -> torch.Tensor:
        _check_layer_inputs(zv, xq, xkv, self.grid.dim, self.in_channels)
        if plan is None:
            plan = self.make_plan(xkv, None if xq is xkv else xq)
        elif plan.grid != self.grid:
            raise ValueError("plan was built for another frequency grid")
        if plan.x_kv.shape[:2] != zv.shape[:2]:
            raise ValueError("zv and the key/value positions must agree in (B, N)")
        if self.input_mixing is not None:
            zv = self.input_mixing(zv)
        # plans of other transform providers (duck-typed, no backend) take the split product too
        reference = getattr(plan, "backend", None) == "reference"
        # Inductor (torch 2.13, CPU, vectorised) corrupts the heap in the backward of the split
        # product's graph (see docs/compat.md); traced graphs take the embedding formulation
        split = not (reference or torch.compiler.is_compiling())
        if self._layout is not None and not self.low_rank and split:
            y_re, y_im = self._split_product(zv, plan)
        else:  # the reference code's formulation: embedding E (2C channels), full product
            y_re, y_im = self.spectral_product(*self.embed(zv, plan))
        at = "kv" if (xq is xkv or xq is plan.x_kv) else "q"
        if at == "q" and plan.x_q is None:
            raise ValueError("plan has no query positions; build it with x_q or pass xq=xkv")
        return plan.type2_planes(y_re, y_im, at)

    def forward(
        self,
        zv: torch.Tensor,
        xq: torch.Tensor,
        xkv: torch.Tensor,
        plan: NUDFTPlan | None = None,
    ) -> torch.Tensor:
        """Features ``zv`` (B, N, C) at ``xkv`` (B, N, d) -> outputs (B, M, O) at ``xq`` (B, M, d).

        ``plan`` (a :class:`NUDFTPlan` over the same points) re-uses the transforms' phases
        across layers; without it one is built for this call.
        """
        y = self._evaluate(zv, xq, xkv, plan)
        if self.output_mixing is not None:
            y = self.output_mixing(y)
        return y


class SetFourierVolterraConv(SetFourierConv):
    """Second-order Volterra set-Fourier convolution.

    ``y = y^(1) + Linear_{R -> 1}([a_r * b_r]_{r = 1..R})`` where ``y^(1)``, ``a_r`` and ``b_r``
    are SFConv outputs with their own filters, all from one type-1 / spectral product /
    type-2 pass over ``(2R + 1) G`` kernel groups (block 0 the linear term, then
    ``a_1, b_1, a_2, b_2, ...``). The ``Linear`` (with bias) mixes the ``R`` products per
    output channel.

    Parameters
    ----------
    spatial_dim, in_channels, out_channels, max_freq, freq_resolution, groups, \
init_lengthscale, learnable_lengthscale, low_rank, rank, input_feature_mixing, \
output_feature_mixing, density_feature_pairing, backend
        As :class:`SetFourierConv`.
    volterra_rank : int, default=4
        ``R``, the separable rank of the second-order kernel.
    order : {1, 2}, default=2
        Truncation order of the Volterra series. Order 1 is an SFConv. Orders >= 3 are not in
        the paper's code (PROPOSAL: kept as an argument, only 1 and 2 supported).

    Examples
    --------
    >>> import torch
    >>> conv = SetFourierVolterraConv(1, 4, 4, 4.9, 0.1, volterra_rank=2)
    >>> conv(torch.randn(2, 9, 4), torch.rand(2, 5, 1), torch.rand(2, 9, 1)).shape
    torch.Size([2, 5, 4])
    """

    def __init__(
        self,
        spatial_dim: int,
        in_channels: int,
        out_channels: int,
        max_freq: Any = 4.9,
        freq_resolution: Any = 0.1,
        groups: int = 1,
        init_lengthscale: float = 0.1,
        learnable_lengthscale: bool = True,
        low_rank: bool = False,
        rank: int | None = None,
        input_feature_mixing: bool = False,
        output_feature_mixing: bool = False,
        density_feature_pairing: str = "blocked",
        backend: str = "auto",
        *,
        volterra_rank: int = 4,
        order: int = 2,
    ) -> None:
        R = int(check_scalar(volterra_rank, "volterra_rank", Interval("int", 1, None)))
        order = int(check_scalar(order, "order", Interval("int", 1, 2)))
        self.volterra_rank, self.order = R, order
        self._blocks = 2 * R + 1 if order == 2 else 1
        super().__init__(
            spatial_dim, in_channels, out_channels, max_freq, freq_resolution, groups,
            init_lengthscale, learnable_lengthscale, low_rank, rank, input_feature_mixing,
            output_feature_mixing, density_feature_pairing, backend,
        )
        self.volterra_rank, self.order = R, order
        self.quadratic_mix = nn.Linear(R, 1) if order == 2 else None

    def forward(
        self,
        zv: torch.Tensor,
        xq: torch.Tensor,
        xkv: torch.Tensor,
        plan: NUDFTPlan | None = None,
    ) -> torch.Tensor:
        """As :meth:`SetFourierConv.forward`: (B, N, C) at ``xkv`` -> (B, M, O) at ``xq``, with
        the second-order term ``Linear([a_r * b_r])`` added when ``order == 2``."""
        y = self._evaluate(zv, xq, xkv, plan)
        if self.quadratic_mix is not None:
            B, M, _ = y.shape
            y = y.reshape(B, M, self._blocks, self.out_channels)
            a, b = y[:, :, 1::2], y[:, :, 2::2]  # (B, M, R, O)
            quad = self.quadratic_mix((a * b).transpose(-1, -2)).squeeze(-1)
            y = y[:, :, 0] + quad
        if self.output_mixing is not None:
            y = self.output_mixing(y)
        return y


_ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "identity": nn.Identity}


class SetFourierConvBlock(nn.Module):
    """Residual block: a set-Fourier convolution then a feed-forward network.

    Pre-norm (default)::

        z_q <- z_q + Dropout(SFConv(LN1(z_kv); x_kv -> x_q))
        z_q <- z_q + FF(LN2(z_q)),   FF = Linear(C, FF) - act - Dropout - Linear(FF, C)

    post-norm: ``z_q = LN1(z_q + SFConv(z_kv))``, ``z_q = LN2(z_q + FF(z_q))``.

    Parameters
    ----------
    embed_channels : int
        ``C`` (conv in = out = C).
    feedforward_channels : int
    p_dropout : float, default=0.0
    norm_first : bool, default=True
    activation : {"gelu", "relu", "identity"}, default="gelu"
    **conv_kwargs
        Passed to the convolution (``spatial_dim``, ``max_freq``, ``freq_resolution``,
        ``groups``, ...).

    Examples
    --------
    >>> import torch
    >>> blk = SetFourierConvBlock(8, 16, spatial_dim=1, groups=2)
    >>> xc, xq = torch.rand(2, 5, 1), torch.rand(2, 3, 1)
    >>> blk(torch.randn(2, 3, 8), torch.randn(2, 5, 8), xq, xc).shape
    torch.Size([2, 3, 8])
    """

    _conv_cls: type[SetFourierConv] = SetFourierConv
    _default_activation = "gelu"

    def __init__(
        self,
        embed_channels: int,
        feedforward_channels: int,
        p_dropout: float = 0.0,
        norm_first: bool = True,
        activation: str | None = None,
        **conv_kwargs: Any,
    ) -> None:
        super().__init__()
        C = int(check_scalar(embed_channels, "embed_channels", Interval("int", 1, None)))
        FF = int(
            check_scalar(feedforward_channels, "feedforward_channels", Interval("int", 1, None))
        )
        p = float(check_scalar(p_dropout, "p_dropout", Interval("real", 0.0, 1.0, "left")))
        act = self._default_activation if activation is None else activation
        if act not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(_ACTIVATIONS)}, got {act!r}")
        self.conv = self._conv_cls(in_channels=C, out_channels=C, **conv_kwargs)
        self.norm1, self.norm2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.dropout = nn.Dropout(p)
        self.ff = nn.Sequential(
            nn.Linear(C, FF), _ACTIVATIONS[act](), nn.Dropout(p), nn.Linear(FF, C)
        )
        self.norm_first = bool(norm_first)

    def forward(
        self,
        zq: torch.Tensor,
        zkv: torch.Tensor,
        xq: torch.Tensor,
        xkv: torch.Tensor,
        plan: NUDFTPlan | None = None,
    ) -> torch.Tensor:
        """Update the query embeddings ``zq`` (B, M, C) at ``xq`` (B, M, d) from the key/value
        embeddings ``zkv`` (B, N, C) at ``xkv`` (B, N, d); returns (B, M, C)."""
        C = self.norm1.normalized_shape[0]
        _check_layer_inputs(zkv, xq, xkv, self.conv.grid.dim, C, zv_name="zkv")
        _check_feat(zq, "zq", 3)
        if zq.shape[:2] != xq.shape[:2] or zq.shape[2] != C:
            raise ValueError(
                f"zq must have shape (B, M, {C}) with (B, M) from xq, got zq of shape "
                f"{tuple(zq.shape)} and xq of shape {tuple(xq.shape)}"
            )
        if zq.device != zkv.device:
            raise ValueError(
                f"zq and zkv must be on the same device, got {zq.device} and {zkv.device}"
            )
        if self.norm_first:
            zq = zq + self.dropout(self.conv(self.norm1(zkv), xq, xkv, plan))
            return zq + self.ff(self.norm2(zq))
        zq = self.norm1(zq + self.dropout(self.conv(zkv, xq, xkv, plan)))
        return self.norm2(zq + self.ff(zq))


class SetFourierVolterraConvBlock(SetFourierConvBlock):
    """:class:`SetFourierConvBlock` with a :class:`SetFourierVolterraConv` and, by default, an
    identity feed-forward activation (as in the reference SFVConv blocks). Accepts
    ``volterra_rank`` and ``order`` among ``conv_kwargs``."""

    _conv_cls = SetFourierVolterraConv
    _default_activation = "identity"
