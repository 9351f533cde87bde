"""Batched non-uniform DFTs between scattered points and a half-space frequency grid.

The two transforms behind set-Fourier convolutions (SFConvCNP, arXiv 2606.01172):

* **type 1** (points -> frequencies), for every batch element ``b``, frequency ``f`` and
  channel ``c``::

      Zhat[b, f, c] = sum_n v[b, n, c] exp(-2 pi i xi_f . x[b, n])
      Dhat[b, f]    = sum_n exp(-2 pi i xi_f . x[b, n])          (density channel)

* **type 2, Hermitian** (frequencies -> points), the inverse transform of a spectrum that is
  Hermitian-symmetric and stored on the half space only::

      y[b, m, o] = 2 dV sum_f w_f Re(Yhat[b, f, o] exp(2 pi i xi_f . x[b, m]))

with ``w_f = 1/2`` on the ``xi_d = 0`` hyperplane and 1 elsewhere (:class:`FrequencyGrid`).

The native (C++/OpenMP) and Triton backends never materialise the ``[B, N, F]`` phase tensor:
phases are generated per tile of points from per-axis unit phases (range-reduced in cycles,
double precision) and contracted with a register-blocked GEMM. They are adjoint pairs, so
each serves as the other's backward; gradients with respect to the positions are computed
only when ``x.requires_grad``. The ``*_reference`` twins are plain torch einsums over the
materialised phases (float64 when given float64; use them as the ground truth).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from rml_fast._validation import Interval, check_scalar
from rml_fast.kernels._dispatch import Device, Kernel, device_of
from rml_fast.kernels._torch_ops import define_op

__all__ = [
    "FrequencyGrid",
    "NUDFTPlan",
    "nudft_type1",
    "nudft_type1_reference",
    "nudft_type2",
    "nudft_type2_hermitian",
    "nudft_type2_hermitian_reference",
    "nudft_type2_reference",
]


# --- the frequency grid ------------------------------------------------------------------


class FrequencyGrid:
    """A half-space grid of frequencies with its quadrature weights (immutable).

    Per axis ``i``: ``K_i = round(max_freq_i / resolution_i)`` and values ``k * resolution_i``;
    axes before the last take ``k in {-K_i..K_i}``, the last axis ``k in {0..K_d}``, so
    ``F = prod_{i<d}(2 K_i + 1) * (K_d + 1)`` frequencies, ordered row-major over the axes.
    The volume element is ``dV = prod_i resolution_i`` and the weight ``w_f = 1/2`` where
    ``xi_d = 0``, else 1. Outputs of a type-2 transform are periodic with period
    ``1 / resolution_i`` along axis ``i``.

    Parameters
    ----------
    dim : {1, 2}
        Input dimension ``d``.
    max_freq : float or sequence of float
        ``xi_max`` per axis (a scalar is used for every axis), > 0.
    resolution : float or sequence of float
        Spacing ``dxi`` per axis, ``0 < dxi <= max_freq``.

    Attributes
    ----------
    K : tuple of int
    n_freq : int
        ``F``.
    dV : float
    xi : torch.Tensor of shape (F, d), float64
    weights : torch.Tensor of shape (F,), float64

    Examples
    --------
    >>> g = FrequencyGrid(1, 4.9, 0.1)
    >>> g.n_freq, g.K, round(g.dV, 3), float(g.weights[0])
    (50, (49,), 0.1, 0.5)
    >>> FrequencyGrid(2, 4.8, 0.2).n_freq
    1225
    """

    __slots__ = ("K", "_weights", "_xi", "dV", "dim", "max_freq", "n_freq", "resolution")
    dim: int  # the slots' types (set once in __init__ through object.__setattr__)
    max_freq: tuple[float, ...]
    resolution: tuple[float, ...]
    K: tuple[int, ...]
    n_freq: int
    dV: float
    _xi: torch.Tensor
    _weights: torch.Tensor

    def __init__(self, dim: int, max_freq: Any, resolution: Any) -> None:
        dim, mf, res, K = _grid_args(dim, max_freq, resolution)
        object.__setattr__(self, "dim", dim)
        object.__setattr__(self, "max_freq", mf)
        object.__setattr__(self, "resolution", res)
        object.__setattr__(self, "K", tuple(K))
        ks = [torch.arange(-k, k + 1, dtype=torch.float64) for k in K[:-1]]
        ks.append(torch.arange(0, K[-1] + 1, dtype=torch.float64))
        mesh = torch.meshgrid(*ks, indexing="ij")
        xi = torch.stack([m.reshape(-1) * r for m, r in zip(mesh, res, strict=True)], dim=-1)
        w = torch.where(mesh[-1].reshape(-1) == 0, 0.5, 1.0).to(torch.float64)
        object.__setattr__(self, "_xi", xi)
        object.__setattr__(self, "_weights", w)
        object.__setattr__(self, "n_freq", int(xi.shape[0]))
        object.__setattr__(self, "dV", float(math.prod(res)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FrequencyGrid is immutable")

    @property
    def xi(self) -> torch.Tensor:
        """A copy of the frequencies, float64 tensor of shape (F, d), row-major over the axes."""
        return self._xi.clone()

    @property
    def weights(self) -> torch.Tensor:
        """A copy of the quadrature weights ``w_f`` (1/2 where ``xi_d = 0``, else 1), shape (F,)."""
        return self._weights.clone()

    def xi_as(self, like: torch.Tensor) -> torch.Tensor:
        """``xi`` of shape (F, d) with the dtype and device of ``like``.

        ``like`` must be a finite floating-point tensor holding values (not on the ``meta``
        device); a ValueError/TypeError naming ``like`` is raised otherwise.
        """
        _check_like(like)
        return self._xi.to(dtype=like.dtype, device=like.device)

    def _xi_like(self, like: torch.Tensor) -> torch.Tensor:
        """:meth:`xi_as` without the checks (internal callers, activations of any value)."""
        return self._xi.to(dtype=like.dtype, device=like.device)

    def weights_as(self, like: torch.Tensor) -> torch.Tensor:
        """``weights`` of shape (F,) with the dtype and device of ``like`` (checked as in
        :meth:`xi_as`)."""
        _check_like(like)
        return self._weights.to(dtype=like.dtype, device=like.device)

    @property
    def period(self) -> tuple[float, ...]:
        """Period ``1 / resolution_i`` of type-2 outputs along each axis."""
        return tuple(1.0 / r for r in self.resolution)

    def __repr__(self) -> str:
        return (
            f"FrequencyGrid(dim={self.dim}, max_freq={self.max_freq}, "
            f"resolution={self.resolution}, n_freq={self.n_freq})"
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FrequencyGrid)
            and self.K == other.K
            and self.resolution == other.resolution
        )

    def __hash__(self) -> int:
        return hash((self.K, self.resolution))


# largest number of frequencies per axis (2 K + 1): a larger grid cannot be allocated anyway
_MAX_K = 1 << 24


def _grid_args(
    dim: Any, max_freq: Any, resolution: Any,
    names: tuple[str, str, str] = ("dim", "max_freq", "resolution"),
) -> tuple[int, tuple[float, ...], tuple[float, ...], list[int]]:
    """Validated ``(dim, max_freq, resolution, K)`` of a :class:`FrequencyGrid`; errors name
    the caller's arguments ``names`` (e.g. a layer's ``spatial_dim`` / ``freq_resolution``)."""
    n_dim, n_mf, n_res = names
    d = int(check_scalar(dim, n_dim, Interval("int", 1, 2)))
    mf = _per_axis(max_freq, n_mf, d)
    res = _per_axis(resolution, n_res, d)
    K = []
    for i in range(d):
        if res[i] > mf[i]:
            raise ValueError(
                f"{n_res}[{i}]={res[i]} must not exceed {n_mf}[{i}]={mf[i]}"
            )
        k = mf[i] / res[i]
        if not k <= _MAX_K:
            raise ValueError(
                f"{n_mf}[{i}] / {n_res}[{i}] = {k:.3g} frequencies per axis exceeds "
                f"{_MAX_K}; got {n_mf}={mf[i]!r}, {n_res}={res[i]!r}"
            )
        K.append(round(k))
    return d, mf, res, K


def _check_like(like: Any) -> None:
    if not isinstance(like, torch.Tensor):
        raise TypeError(f"like must be a torch.Tensor, got {type(like).__name__}")
    if like.device.type == "meta":
        raise ValueError("like must hold values, got a tensor on the 'meta' device")
    if not like.is_floating_point():
        raise TypeError(f"like must have a real floating-point dtype, got {like.dtype}")
    _check_finite(like, "like")


def _per_axis(value: Any, name: str, dim: int) -> tuple[float, ...]:
    if isinstance(value, (list, tuple)):
        if len(value) != dim:
            raise ValueError(f"{name} must have {dim} entries (one per axis), got {len(value)}")
        vals = [
            check_scalar(v, f"{name}[{i}]", Interval("real", 0, None, "neither"))
            for i, v in enumerate(value)
        ]
    else:
        vals = [check_scalar(value, name, Interval("real", 0, None, "neither"))] * dim
    return tuple(float(v) for v in vals)


# --- validation --------------------------------------------------------------------------


def _check_tensor(t: Any, name: str, ndim: int, *, complex_ok: bool = False) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    if t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    ok = (torch.float32, torch.float64) + (
        (torch.complex64, torch.complex128) if complex_ok else ()
    )
    if t.dtype not in ok:
        raise TypeError(f"{name} must have dtype in {[str(d) for d in ok]}, got {t.dtype}")
    return t


def _tracing(t: torch.Tensor) -> bool:
    """True under ``torch.compile`` / ``torch.export`` tracing, where values are not known."""
    from torch._subclasses.fake_tensor import FakeTensor

    return (bool(torch.compiler.is_compiling()) or bool(torch.compiler.is_exporting())
            or isinstance(t, FakeTensor))


def _check_finite(t: torch.Tensor, name: str) -> None:
    """Raise ValueError if ``t`` holds NaN or +-inf.

    Skipped while ``torch.compile`` / ``torch.export`` trace (the values are unknown then; eager
    calls are checked). One summation pass (NaN and inf propagate into the sum; ~1 ms for 4M float32 on one thread,
    a tenth of ``isfinite(t).all()``, which allocates a mask); only a non-finite sum (also a sum
    of finite values that overflows) is confirmed with the exact elementwise test.
    """
    t = t.detach()
    if _tracing(t) or t.numel() == 0 or bool(torch.isfinite(t.sum())):
        return
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        first = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name} must be finite, got {int(bad.sum())} NaN/inf entries (first at index {first})"
        )


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def _check_grid(grid: Any) -> FrequencyGrid:
    if not isinstance(grid, FrequencyGrid):
        raise TypeError(f"grid must be a FrequencyGrid, got {type(grid).__name__}")
    return grid


def _check_points(x: Any, grid: FrequencyGrid, name: str) -> torch.Tensor:
    x = _check_tensor(x, name, 3)
    if x.shape[-1] != grid.dim:
        raise ValueError(
            f"{name} must have shape (B, N, {grid.dim}) for a {grid.dim}-D grid, got {tuple(x.shape)}"
        )
    return x


def _same(a: torch.Tensor, b: torch.Tensor, na: str, nb: str, *, real_dtype: bool = True) -> None:
    if a.device != b.device:
        raise ValueError(f"{na} and {nb} must be on the same device, got {a.device} and {b.device}")
    da = a.real.dtype if a.is_complex() else a.dtype
    db = b.real.dtype if b.is_complex() else b.dtype
    if real_dtype and da != db:
        raise TypeError(f"{na} and {nb} must have the same precision, got {a.dtype} and {b.dtype}")


# --- raw (non-differentiable) backends ---------------------------------------------------
# type1_raw(x, v, grid, sign, density) -> (re, im, dre | None, dim | None)
#     re + i im = sum_n v[b,n,c] e^{sign i theta};  dre + i dim = sum_n e^{sign i theta}
# type2_raw(x, re, im, w, grid, sign) -> y = sum_f w_f Re((re + i im) e^{sign i theta})


def _native_type1(x: torch.Tensor, v: torch.Tensor, grid: FrequencyGrid, sign: int, density: bool):
    from rml_fast._native import _C

    B, _, C = v.shape
    F = grid.n_freq
    re = torch.empty(B, F, C, dtype=x.dtype)
    im = torch.empty_like(re)
    dre = dim = None
    if density:
        dre = torch.empty(B, F, dtype=x.dtype)
        dim = torch.empty_like(dre)
    _C.nudft.type1(
        x.detach().contiguous().numpy(),
        v.detach().contiguous().numpy(),
        list(grid.K),
        list(grid.resolution),
        sign,
        re.numpy(),
        im.numpy(),
        None if dre is None else dre.numpy(),
        None if dim is None else dim.numpy(),
    )
    return re, im, dre, dim


def _native_type2(
    x: torch.Tensor,
    re: torch.Tensor,
    im: torch.Tensor,
    w: torch.Tensor,
    grid: FrequencyGrid,
    sign: int,
) -> torch.Tensor:
    from rml_fast._native import _C

    B, M, _ = x.shape
    y = torch.empty(B, M, re.shape[-1], dtype=x.dtype)
    _C.nudft.type2(
        x.detach().contiguous().numpy(),
        re.detach().contiguous().numpy(),
        im.detach().contiguous().numpy(),
        w.detach().to(x.dtype).contiguous().numpy(),
        list(grid.K),
        list(grid.resolution),
        sign,
        y.numpy(),
    )
    return y


def _triton_type1(x, v, grid, sign, density):
    from rml_fast.kernels.triton import nudft as tri

    return tri.type1(x.detach(), v.detach(), grid, sign, density)


def _triton_type2(x, re, im, w, grid, sign):
    from rml_fast.kernels.triton import nudft as tri

    return tri.type2(x.detach(), re.detach(), im.detach(), w.detach().to(x.dtype), grid, sign)


def _nufft_type1(x, v, grid, sign, density):
    from rml_fast.kernels._nufft import nufft_type1

    return nufft_type1(x, v, grid, sign, density)


def _nufft_type2(x, re, im, w, grid, sign):
    from rml_fast.kernels._nufft import nufft_type2

    return nufft_type2(x, re, im, w, grid, sign)


_RAW = {
    "native": (_native_type1, _native_type2),
    "triton": (_triton_type1, _triton_type2),
    "nufft": (_nufft_type1, _nufft_type2),
}


# --- torch custom operators -------------------------------------------------------------
# The raw backends are registered as ``torch.library`` custom operators (``rml_fast::nudft_type1``
# and ``rml_fast::nudft_type2``) with fake (meta) implementations and autograd formulas, so that
# ``torch.compile`` traces through them without graph breaks and ``torch.export`` captures them as
# single nodes. A grid crosses the operator boundary as (dim, max_freq, resolution).


@functools.lru_cache(maxsize=64)
def _grid_of(dim: int, max_freq: tuple[float, ...], resolution: tuple[float, ...]) -> FrequencyGrid:
    return FrequencyGrid(dim, list(max_freq), list(resolution))


def _xi_fresh(grid: FrequencyGrid, like: torch.Tensor) -> torch.Tensor:
    """``grid.xi_as(like)`` rebuilt from factory calls (the same float64 values), so that it is a
    fake tensor under fake-tensor tracing instead of a captured real constant."""
    ks = [torch.arange(-k, k + 1, dtype=torch.float64, device=like.device) for k in grid.K[:-1]]
    ks.append(torch.arange(0, grid.K[-1] + 1, dtype=torch.float64, device=like.device))
    mesh = torch.meshgrid(*ks, indexing="ij")
    xi = torch.stack([m.reshape(-1) * r for m, r in zip(mesh, grid.resolution, strict=True)], -1)
    return xi.to(like.dtype)


def _grid_key(grid: FrequencyGrid) -> tuple[int, list[float], list[float]]:
    return grid.dim, list(grid.max_freq), list(grid.resolution)


def _type1_impl(
    x: torch.Tensor, v: torch.Tensor, dim: int, max_freq: list[float], resolution: list[float],
    sign: int, density: bool, impl: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, v) -> (re, im, dre, dim); without ``density`` the last two are empty tensors."""
    grid = _grid_of(dim, tuple(max_freq), tuple(resolution))
    re, im, dre, dim_ = _RAW[impl][0](x, v, grid, sign, density)
    if not density:
        dre, dim_ = x.new_empty(0), x.new_empty(0)
    return re, im, dre, dim_


def _type1_fake(x, v, dim, max_freq, resolution, sign, density, impl):
    n_freq = _grid_of(dim, tuple(max_freq), tuple(resolution)).n_freq
    B, C = v.shape[0], v.shape[2]
    dshape = (B, n_freq) if density else (0,)
    return (x.new_empty(B, n_freq, C), x.new_empty(B, n_freq, C), x.new_empty(dshape),
            x.new_empty(dshape))


def _type2_impl(
    x: torch.Tensor, re: torch.Tensor, im: torch.Tensor, w: torch.Tensor, dim: int,
    max_freq: list[float], resolution: list[float], sign: int, impl: str,
) -> torch.Tensor:
    """(x, re, im) -> y with fixed weights ``w``."""
    grid = _grid_of(dim, tuple(max_freq), tuple(resolution))
    return _RAW[impl][1](x, re, im, w, grid, sign)


def _type2_fake(x, re, im, w, dim, max_freq, resolution, sign, impl):
    return x.new_empty(x.shape[0], x.shape[1], re.shape[2])


def _type1_setup(ctx, inputs, output):
    x, v, dim, max_freq, resolution, sign, density, impl = inputs
    ctx.save_for_backward(x, v)
    ctx.args = (dim, max_freq, resolution, sign, density, impl)


def _type1_backward(ctx, g_re, g_im, g_dre, g_dim):
    """The adjoint: type-2 transforms (one for ``v``, one per axis for ``x``)."""
    x, v = ctx.saved_tensors
    dim, mf, res, s, density, impl = ctx.args
    grid = _grid_of(dim, tuple(mf), tuple(res))
    ones_f = torch.ones(grid.n_freq, dtype=x.dtype, device=x.device)
    gx = gv = None
    if ctx.needs_input_grad[1]:
        # dL/dv = Re(sum_f (g_re + i g_im) e^{-s i theta})
        gv = _op_type2(x, g_re.contiguous(), g_im.contiguous(), ones_f, dim, mf, res, -s, impl)
    if ctx.needs_input_grad[0]:
        gr, gi, vv = g_re, g_im, v
        if density:  # the density is the transform of a channel of ones
            gr = torch.cat([gr, g_dre[..., None]], dim=-1)
            gi = torch.cat([gi, g_dim[..., None]], dim=-1)
            vv = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
        xi = _xi_fresh(grid, x)
        cols = []
        for i in range(grid.dim):
            # T = sum_f 2 pi xi_fi (-g_re sin + s g_im cos) = type2(s g_im, -s g_re; sign -s)
            t = _op_type2(x, (s * gi).contiguous(), (-s * gr).contiguous(),
                          2 * math.pi * xi[:, i], dim, mf, res, -s, impl)
            cols.append((vv * t).sum(-1))
        gx = torch.stack(cols, dim=-1)
    return gx, gv, None, None, None, None, None, None


def _type2_setup(ctx, inputs, output):
    x, re, im, w, dim, max_freq, resolution, sign, impl = inputs
    if ctx.needs_input_grad[0]:  # the coefficients are only needed for the position gradient
        ctx.save_for_backward(x, re, im, w)
    else:
        ctx.save_for_backward(x, None, None, w)
    ctx.args = (dim, max_freq, resolution, sign, impl)


def _type2_backward(ctx, g):
    """The adjoint: a type-1 transform for the coefficients, type 2 per axis for ``x``."""
    x, re, im, w = ctx.saved_tensors
    dim, mf, res, s, impl = ctx.args
    grid = _grid_of(dim, tuple(mf), tuple(res))
    g = g.contiguous()
    gx = gre = gim = None
    if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
        # dL/dre = w sum_m g cos, dL/dim = -s w sum_m g sin  (a type 1 with sign -s)
        r1, i1, _, _ = _op_type1(x, g, dim, mf, res, -s, False, impl)
        gre = r1.mul_(w[:, None])  # fresh outputs of the operator: scale in place
        gim = i1.mul_(w[:, None])
    if ctx.needs_input_grad[0]:
        xi = _xi_fresh(grid, x)
        cols = []
        for i in range(grid.dim):
            wi = w * (2 * math.pi) * xi[:, i]
            t = _op_type2(x, (-s * im).contiguous(), (s * re).contiguous(), wi, dim, mf, res, s,
                          impl)
            cols.append((g * t).sum(-1))
        gx = torch.stack(cols, dim=-1)
    return gx, gre, gim, None, None, None, None, None, None


_op_type1 = define_op(
    "nudft_type1",
    "(Tensor x, Tensor v, int dim, float[] max_freq, float[] resolution, int sign, bool density, "
    "str impl) -> (Tensor, Tensor, Tensor, Tensor)",
    _type1_impl, _type1_fake, _type1_backward, _type1_setup,
)
_op_type2 = define_op(
    "nudft_type2",
    "(Tensor x, Tensor re, Tensor im, Tensor w, int dim, float[] max_freq, float[] resolution, "
    "int sign, str impl) -> Tensor",
    _type2_impl, _type2_fake, _type2_backward, _type2_setup,
)


def _apply_type1(x, v, grid, sign, density, impl):
    re, im, dre, dim = _op_type1(x, v, *_grid_key(grid), sign, density, impl)
    return (re, im, dre, dim) if density else (re, im, None, None)


def _apply_type2(x, re, im, w, grid, sign, impl):
    return _op_type2(x, re, im, w, *_grid_key(grid), sign, impl)


# --- dispatch --------------------------------------------------------------------------------

_type1 = Kernel("nudft.type1")
_type2 = Kernel("nudft.type2")


def _theta(x: torch.Tensor, grid: FrequencyGrid) -> torch.Tensor:
    """theta[b, n, f] = 2 pi xi_f . x[b, n], range-reduced in cycles, shape (B, N, F)."""
    if not _tracing(x):  # the reference path materialises (B, N, F) three times (theta, cos, sin)
        from rml_fast.config import check_memory

        b, n, f = x.shape[0], x.shape[1], grid.xi.shape[0]
        check_memory(3 * b * n * f * x.element_size(),
                     f"the materialised (B, N, F) = ({b}, {n}, {f}) phases of the reference NUDFT",
                     hint="use backend='native' or 'auto', which never materialise them")
    cyc = torch.einsum("bnd,fd->bnf", x, grid._xi.to(dtype=x.dtype, device=x.device))
    cyc = cyc - torch.round(cyc).detach()
    return (2 * math.pi) * cyc


@_type1.register("reference")
def _type1_ref(x, v, grid, sign, density, *, device: Device):
    th = _theta(x, grid)
    c, s = torch.cos(th), sign * torch.sin(th)
    re = torch.einsum("bnf,bnc->bfc", c, v)
    im = torch.einsum("bnf,bnc->bfc", s, v)
    if density:
        return re, im, c.sum(1), s.sum(1)
    return re, im, None, None


@_type1.register("native")
def _type1_native(x, v, grid, sign, density, *, device: Device):
    return _apply_type1(x, v, grid, sign, density, "native")


@_type1.register("triton")
def _type1_triton(x, v, grid, sign, density, *, device: Device):
    return _apply_type1(x, v, grid, sign, density, "triton")


@_type2.register("reference")
def _type2_ref(x, re, im, w, grid, sign, *, device: Device):
    th = _theta(x, grid)
    return torch.einsum("bmf,bfo->bmo", torch.cos(th) * w, re) - sign * torch.einsum(
        "bmf,bfo->bmo", torch.sin(th) * w, im
    )


@_type2.register("native")
def _type2_native(x, re, im, w, grid, sign, *, device: Device):
    return _apply_type2(x, re, im, w, grid, sign, "native")


@_type2.register("triton")
def _type2_triton(x, re, im, w, grid, sign, *, device: Device):
    return _apply_type2(x, re, im, w, grid, sign, "triton")


def _check_backend(backend: Any) -> str:
    if backend not in ("auto", "native", "nufft", "triton", "reference"):
        raise ValueError(
            "backend must be 'auto', 'native', 'nufft', 'triton' or 'reference', "
            f"got {backend!r}"
        )
    return backend


def _use_nufft(x: torch.Tensor, backend: str, grid: FrequencyGrid, points: int, chans: int) -> bool:
    """"nufft" forces the CPU NUFFT path; "auto" takes it for CPU tensors where its cost model
    predicts a win over the direct sums (large ``points * F``)."""
    if backend == "nufft":
        if x.device.type != "cpu":
            raise ValueError(f"backend='nufft' runs on CPU tensors, got {x.device}")
        return True
    if backend != "auto" or x.device.type != "cpu" or torch.compiler.is_compiling():
        # traced graphs take the direct sums: the NUFFT cost model is NumPy work that Dynamo
        # cannot trace (the two paths agree to ~1e-6 relative in float32, 1e-14 in float64)
        return False
    from rml_fast.kernels._nufft import prefer_nufft

    return prefer_nufft(grid, points, chans, x.dtype)


def _dispatch1(x, v, grid, sign, density, *, device: Device, backend: str):
    if _use_nufft(x, backend, grid, x.shape[1], v.shape[-1] + int(density)):
        return _apply_type1(x, v, grid, sign, density, "nufft")
    return _type1(x, v, grid, sign, density, device=device, backend=backend)


def _dispatch2(x, re, im, w, grid, sign, *, device: Device, backend: str):
    if _use_nufft(x, backend, grid, x.shape[1], re.shape[-1]):
        return _apply_type2(x, re, im, w, grid, sign, "nufft")
    return _type2(x, re, im, w, grid, sign, device=device, backend=backend)


# --- public API --------------------------------------------------------------------------------


def nudft_type1(
    x: torch.Tensor,
    v: torch.Tensor,
    grid: FrequencyGrid,
    *,
    density: bool = True,
    sign: int = -1,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Type-1 NUDFT, batched: scattered points to the half-space frequency grid.

    .. math::

        \hat Z_{b,f,c} = \sum_n v_{b,n,c}\, e^{s\, 2\pi i\, \xi_f \cdot x_{b,n}}, \qquad
        \hat D_{b,f} = \sum_n e^{s\, 2\pi i\, \xi_f \cdot x_{b,n}}

    with ``s = sign`` (``-1``: the forward transform of the SFConv layer).

    Parameters
    ----------
    x : torch.Tensor of shape (B, N, d), float32 or float64
        Point positions (one set per batch element).
    v : torch.Tensor of shape (B, N, C), real or complex, same precision as ``x``
        Values at the points.
    grid : FrequencyGrid
        The ``d``-dimensional half-space grid (``F`` frequencies).
    density : bool, default=True
        Also return the density channel ``Dhat``.
    sign : {-1, 1}, default=-1
        Sign of the exponent.
    backend : {"auto", "native", "nufft", "triton", "reference"}, default="auto"
        "auto": Triton for CUDA tensors; for CPU tensors the C++ direct sums ("native") or,
        where its cost model predicts a win (large ``N * F``), the C++/FFT NUFFT path
        ("nufft": spreading with an exponential-of-semicircle kernel, FFT, deconvolution;
        about 1e-6 relative error in float32, 1e-14 in float64). "reference" materialises
        the ``(B, N, F)`` phases (einsum).

    Returns
    -------
    Zhat : torch.Tensor of shape (B, F, C), complex64 (complex128 for float64 inputs)
    Dhat : torch.Tensor of shape (B, F), complex, or None if ``density=False``

    Differentiable with respect to ``v`` and ``x``.

    Raises
    ------
    TypeError
        If an input is not a tensor of a supported dtype or ``grid`` is not a FrequencyGrid.
    ValueError
        On inconsistent shapes or devices, an unknown ``backend``/``sign``, or NaN/inf in
        ``x`` or ``v`` (checked before any work, on every backend; :func:`nudft_type2` checks
        ``x``, ``coeffs`` and ``weights`` likewise).

    References
    ----------
    arXiv 2606.01172 (set-Fourier convolution); arXiv 2404.13182 (spectral ConvCNP).

    Examples
    --------
    >>> import torch
    >>> g = FrequencyGrid(1, 4.9, 0.1)
    >>> x, v = torch.rand(2, 7, 1), torch.randn(2, 7, 3)
    >>> Z, D = nudft_type1(x, v, g)
    >>> Z.shape, D.shape, Z.dtype
    (torch.Size([2, 50, 3]), torch.Size([2, 50]), torch.complex64)
    >>> bool(torch.allclose(D[:, 0].real, torch.full((2,), 7.0)))
    True
    """
    grid = _check_grid(grid)
    x = _check_points(x, grid, "x")
    v = _check_tensor(v, "v", 3, complex_ok=True)
    if v.shape[:2] != x.shape[:2]:
        raise ValueError(
            f"v must have shape (B, N, C) = ({x.shape[0]}, {x.shape[1]}, C) like x, "
            f"got v of shape {tuple(v.shape)} and x of shape {tuple(x.shape)}"
        )
    _same(x, v, "x", "v")
    _check_bool(density, "density")
    if sign not in (-1, 1):
        raise ValueError(f"sign must be -1 or 1, got {sign!r}")
    backend = _check_backend(backend)
    _check_finite(x, "x")
    _check_finite(v, "v")
    dev = device_of(x)
    if v.is_complex():
        rr, ri, dre, dim = _dispatch1(x, v.real, grid, sign, density, device=dev, backend=backend)
        ir, ii, _, _ = _dispatch1(x, v.imag, grid, sign, False, device=dev, backend=backend)
        Z = torch.complex(rr - ii, ri + ir)
    else:
        re, im, dre, dim = _dispatch1(x, v, grid, sign, density, device=dev, backend=backend)
        Z = torch.complex(re, im)
    D = torch.complex(dre, dim) if density else None
    return Z, D


def nudft_type2(
    x: torch.Tensor,
    coeffs: torch.Tensor,
    grid: FrequencyGrid,
    weights: torch.Tensor,
    *,
    sign: int = 1,
    backend: str = "auto",
) -> torch.Tensor:
    r"""Type-2 NUDFT, real part, batched: frequencies to scattered points.

    .. math::

        y_{b,m,o} = \sum_f w_f\, \mathrm{Re}\big(\hat Y_{b,f,o}\, e^{s\, 2\pi i\, \xi_f\cdot x_{b,m}}\big)

    Parameters
    ----------
    x : torch.Tensor of shape (B, M, d), float32 or float64
    coeffs : torch.Tensor of shape (B, F, O), complex (same precision as ``x``)
    grid : FrequencyGrid
    weights : torch.Tensor of shape (F,)
        Real weights ``w_f`` (not differentiated).
    sign : {-1, 1}, default=1
    backend : {"auto", "native", "nufft", "triton", "reference"}, default="auto"

    Returns
    -------
    y : torch.Tensor of shape (B, M, O), real, dtype of ``x``

    Examples
    --------
    >>> import torch
    >>> g = FrequencyGrid(1, 1.0, 0.5)
    >>> y = nudft_type2(torch.zeros(1, 2, 1), torch.ones(1, 3, 1, dtype=torch.complex64), g, torch.ones(3))
    >>> y.squeeze().tolist()
    [3.0, 3.0]
    """
    grid = _check_grid(grid)
    return _type2_checked(x, coeffs, grid, weights, sign, backend, "coeffs")


def _type2_checked(x, coeffs, grid, weights, sign, backend, coeffs_name):
    """:func:`nudft_type2` after the grid check; errors about ``coeffs`` name ``coeffs_name``."""
    x = _check_points(x, grid, "x")
    coeffs = _check_tensor(coeffs, coeffs_name, 3, complex_ok=True)
    if coeffs.shape[0] != x.shape[0] or coeffs.shape[1] != grid.n_freq:
        raise ValueError(
            f"{coeffs_name} must have shape (B, F, O) = ({x.shape[0]}, {grid.n_freq}, O) with "
            f"B from x, got {coeffs_name} of shape {tuple(coeffs.shape)} and x of shape "
            f"{tuple(x.shape)}"
        )
    _same(x, coeffs, "x", coeffs_name)
    if not isinstance(weights, torch.Tensor) or weights.shape != (grid.n_freq,):
        raise ValueError(f"weights must be a tensor of shape ({grid.n_freq},)")
    if weights.device.type == "meta":
        raise ValueError("weights must hold values, got a tensor on the 'meta' device")
    if sign not in (-1, 1):
        raise ValueError(f"sign must be -1 or 1, got {sign!r}")
    backend = _check_backend(backend)
    _check_finite(x, "x")
    _check_finite(coeffs, coeffs_name)
    _check_finite(weights, "weights")
    re = coeffs.real if coeffs.is_complex() else coeffs
    im = coeffs.imag if coeffs.is_complex() else torch.zeros_like(coeffs)
    w = weights.detach().to(dtype=x.dtype, device=x.device)
    return _dispatch2(x, re, im, w, grid, sign, device=device_of(x), backend=backend)


def nudft_type2_hermitian(
    yhat: torch.Tensor, x: torch.Tensor, grid: FrequencyGrid, *, backend: str = "auto"
) -> torch.Tensor:
    r"""Inverse transform of a Hermitian spectrum stored on the half-space grid.

    .. math::

        y_{b,m,o} = 2\, dV \sum_f w_f\, \big[\mathrm{Re}\,\hat Y_{b,f,o} \cos\theta_{m,f}
        - \mathrm{Im}\,\hat Y_{b,f,o} \sin\theta_{m,f}\big], \quad \theta_{m,f} = 2\pi\,\xi_f\cdot x_{b,m}

    i.e. the Riemann sum of ``int Yhat(xi) e^{2 pi i xi.x} dxi`` over the full frequency
    box when ``Yhat(-xi) = conj(Yhat(xi))``.

    Parameters
    ----------
    yhat : torch.Tensor of shape (B, F, O), complex64 or complex128
    x : torch.Tensor of shape (B, M, d), float32 or float64
    grid : FrequencyGrid
    backend : {"auto", "native", "nufft", "triton", "reference"}, default="auto"

    Returns
    -------
    y : torch.Tensor of shape (B, M, O), dtype of ``x``

    Examples
    --------
    >>> import torch
    >>> g = FrequencyGrid(1, 4.9, 0.1)
    >>> x = torch.rand(1, 5, 1)
    >>> Z, D = nudft_type1(x, torch.ones(1, 5, 1), g)
    >>> y = nudft_type2_hermitian(D[..., None], x, g)
    >>> y.shape
    torch.Size([1, 5, 1])
    """
    grid = _check_grid(grid)
    x = _check_points(x, grid, "x")
    w = grid._weights.to(dtype=x.dtype, device=x.device) * (2.0 * grid.dV)
    return _type2_checked(x, yhat, grid, w, 1, backend, "yhat")


# --- reference twins ----------------------------------------------------------------------------


def nudft_type1_reference(
    x: torch.Tensor, v: torch.Tensor, grid: FrequencyGrid, *, density: bool = True, sign: int = -1
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Einsum twin of :func:`nudft_type1` over materialised ``(B, N, F)`` phases.

    Computed in the precision of ``x`` (pass float64 for a ground truth); differentiable.
    """
    return nudft_type1(x, v, grid, density=density, sign=sign, backend="reference")


def nudft_type2_reference(
    x: torch.Tensor,
    coeffs: torch.Tensor,
    grid: FrequencyGrid,
    weights: torch.Tensor,
    *,
    sign: int = 1,
) -> torch.Tensor:
    """Einsum twin of :func:`nudft_type2` over materialised ``(B, M, F)`` phases."""
    return nudft_type2(x, coeffs, grid, weights, sign=sign, backend="reference")


def nudft_type2_hermitian_reference(
    yhat: torch.Tensor, x: torch.Tensor, grid: FrequencyGrid
) -> torch.Tensor:
    """Einsum twin of :func:`nudft_type2_hermitian`."""
    return nudft_type2_hermitian(yhat, x, grid, backend="reference")


# --- plan ------------------------------------------------------------------------------------


class NUDFTPlan:
    """The positions of one SFConv forward pass, shared by all layers of a model.

    Holds the key/value (context) positions ``x_kv`` and the query positions ``x_q`` as
    contiguous tensors with the grid and backend, so that the blocks of a network reuse
    them. With ``backend="reference"`` it also caches the materialised phases (the
    reference implementation's strategy); the native and Triton backends regenerate phases
    on the fly and need no cache.

    Parameters
    ----------
    grid : FrequencyGrid
    x_kv : torch.Tensor of shape (B, N, d)
    x_q : torch.Tensor of shape (B, M, d), optional
    backend : {"auto", "native", "nufft", "triton", "reference"}, default="auto"

    Raises ``ValueError`` if ``x_kv`` or ``x_q`` holds NaN/inf. The per-layer methods
    (``type1``, ``type2``, ``*_planes``) do not re-check values (they run once per block on
    intermediate activations; a non-finite value gives non-finite outputs, never a wrong
    finite one).
    """

    def __init__(
        self,
        grid: FrequencyGrid,
        x_kv: torch.Tensor,
        x_q: torch.Tensor | None = None,
        *,
        backend: str = "auto",
    ) -> None:
        self.grid = _check_grid(grid)
        self.x_kv = _check_points(x_kv, grid, "x_kv").contiguous()
        self.x_q = None if x_q is None else _check_points(x_q, grid, "x_q").contiguous()
        if self.x_q is not None:
            _same(self.x_kv, self.x_q, "x_kv", "x_q")
            if self.x_q.shape[0] != self.x_kv.shape[0]:
                raise ValueError("x_kv and x_q must have the same batch size")
        self.backend = _check_backend(backend)
        _check_finite(self.x_kv, "x_kv")
        if self.x_q is not None:
            _check_finite(self.x_q, "x_q")
        self._w2 = self.grid._weights.to(dtype=self.x_kv.dtype, device=self.x_kv.device) * (
            2.0 * self.grid.dV
        )
        self._phase: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def _phases(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = id(x)
        if key not in self._phase:
            th = _theta(x, self.grid)
            self._phase[key] = (torch.cos(th), torch.sin(th))
        return self._phase[key]

    def type1(
        self, v: torch.Tensor, *, density: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:func:`nudft_type1` of values ``v`` of shape (B, N, C) at ``x_kv``."""
        re, im, dre, dim = self.type1_planes(v, density=density)
        return torch.complex(re, im), (torch.complex(dre, dim) if density else None)

    def type2(self, yhat: torch.Tensor, at: str = "q") -> torch.Tensor:
        """:func:`nudft_type2_hermitian` of ``yhat`` of shape (B, F, O) at ``x_q`` ("q") or ``x_kv`` ("kv")."""
        return self.type2_planes(yhat.real, yhat.imag, at)

    def type1_planes(self, v: torch.Tensor, *, density: bool = True):
        """Type 1 (sign -1) at ``x_kv`` as real planes ``(re, im, dens_re, dens_im)``, each
        differentiable; ``dens_*`` are None if ``density=False``. Saves the complex packing."""
        v = _check_tensor(v, "v", 3)
        _check_bool(density, "density")
        if v.shape[:2] != self.x_kv.shape[:2]:
            raise ValueError(f"v must have shape (B, N, C) matching x_kv, got {tuple(v.shape)}")
        if self.backend != "reference":
            return _dispatch1(
                self.x_kv,
                v,
                self.grid,
                -1,
                density,
                device=device_of(self.x_kv),
                backend=self.backend,
            )
        c, s = self._phases(self.x_kv)
        re, im = torch.einsum("bnf,bnc->bfc", c, v), -torch.einsum("bnf,bnc->bfc", s, v)
        if not density:
            return re, im, None, None
        return re, im, c.sum(1), -s.sum(1)

    def type2_planes(self, re: torch.Tensor, im: torch.Tensor, at: str = "q") -> torch.Tensor:
        """Hermitian type 2 of the spectrum ``re + i im`` (each of shape (B, F, O))."""
        re = _check_tensor(re, "re", 3)
        im = _check_tensor(im, "im", 3)
        if at not in ("q", "kv"):
            raise ValueError(f"at must be 'q' or 'kv', got {at!r}")
        x = self.x_kv if at == "kv" or self.x_q is None else self.x_q
        if self.backend != "reference":
            w = self._w2
            return _dispatch2(x, re, im, w, self.grid, 1, device=device_of(x), backend=self.backend)
        c, s = self._phases(x)
        w = self._w2
        return torch.einsum("bmf,bfo->bmo", c * w, re) - torch.einsum("bmf,bfo->bmo", s * w, im)
