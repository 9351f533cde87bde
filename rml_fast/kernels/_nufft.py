"""Non-uniform FFT path of the ``nudft`` kernel family (CPU): spreading + FFT + deconvolution.

The direct sums of :mod:`rml_fast.kernels.nudft` cost ``O(P F C)`` for ``P`` points, ``F``
frequencies and ``C`` channels. This path costs ``O(P w^d C + n log n C)`` instead, with a
kernel of width ``w`` nodes and an oversampled periodic grid of ``n = prod_i nf_i`` nodes:

* type 1: spread the values onto the fine grid with the exponential-of-semicircle (ES) kernel
  ``phi(z) = exp(beta (sqrt(1 - (2z/w)^2) - 1))`` (C++), real FFT (``torch.fft``), keep the
  half-space modes and divide by the kernel's Fourier transform ``phi_hat(k)`` (deconvolution);
* type 2 (Hermitian): the exact adjoint — deconvolve, place the modes on the fine grid, inverse
  real FFT, interpolate at the points with the same kernel (C++).

Because the two are exact adjoints of each other, the autograd functions of ``nudft`` (whose
backward of one transform is the other) give gradients that are exact for this approximation.
The grid phase of a point is ``u_i = frac(dxi_i x_i) nf_i``, so ``e^{-2 pi i k dxi x} =
e^{-2 pi i k u / nf}``: the modes ``k`` are integers on every axis and the FFT is exact up to the
kernel's aliasing error. Oversampling ``nf_i >= sigma (2 K_i + 1)`` with ``sigma = 2``,
``beta = 2.30 w`` gives a relative error of about ``10^{1-w}``: ``w = 7`` (float32, 1-D; the
float32 rounding floor, ~2e-6) and ``w = 16`` (float64); float32 2-D uses ``sigma = 1.5, w = 9``
(smaller FFTs, ~1e-6 error).
In float32 the C++ code evaluates the kernel from per-node polynomials (:func:`_kernel_poly`).
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.fft as _fft
import torch

__all__ = ["FineGridSetup", "nufft_type1", "nufft_type2", "prefer_nufft", "setup_for"]

# Fine-grid bytes per chunk of the batch: the spread grid, its FFT and the mode copy of one
# chunk stay in the L2 cache, and one grid buffer is reused by all chunks of a call (round 4:
# 1 MiB instead of 32 MiB made the 1-D type 1 / type 2 at B = 64, C = 128, N = 500 1.9x / 1.3x
# faster on one thread, and the 2-D transforms 1.1x-1.6x; fresh multi-MiB buffers page-fault
# and the FFT passes over them miss the cache).
_CHUNK_BYTES = 2**20


def _next_smooth(n: int) -> int:
    """The smallest even integer >= n whose only prime factors are 2, 3 and 5 (fast FFT sizes)."""
    m = max(2, n + (n % 2))
    while True:
        r = m
        for p in (2, 3, 5):
            while r % p == 0:
                r //= p
        if r == 1:
            return m
        m += 2


@dataclass(frozen=True)
class FineGridSetup:
    """Oversampled grid and kernel of one frequency grid and precision."""

    dim: int
    K: tuple[int, ...]
    dxi: tuple[float, ...]
    nf: tuple[int, ...]
    w: int
    beta: float
    inv_phihat: tuple[np.ndarray, ...]  # per axis, 1 / phi_hat(k) for k = -K..K (last: 0..K)
    poly: np.ndarray | None  # (degree + 1, w) piecewise-polynomial kernel, or None (exact)


def _phihat(k: np.ndarray, nf: int, w: int, beta: float) -> np.ndarray:
    """``integral phi(z) cos(2 pi k z / nf) dz`` over ``|z| < w/2`` (Gauss-Legendre, float64)."""
    nodes, weights = np.polynomial.legendre.leggauss(4 * w + 60)
    z = 0.5 * w * nodes
    phi = np.exp(beta * (np.sqrt(np.clip(1.0 - nodes**2, 0.0, None)) - 1.0))
    return (0.5 * w) * (np.cos(2 * np.pi * np.outer(k, z) / nf) @ (weights * phi))


def _kernel_poly(w: int, beta: float, degree: int) -> np.ndarray:
    """The ES kernel as one polynomial per stencil node, for the C++ spreader (Horner's rule).

    A point at fine-grid coordinate ``u`` touches nodes ``j0 + i`` (``i = 0..w-1``) with
    ``j0 = ceil(u - w/2)``; node ``i`` sits at offset ``s + i - w/2`` from ``u``, where
    ``s = j0 - (u - w/2)`` in ``[0, 1)``. Column ``i`` holds the power-basis coefficients
    (highest first) of a Chebyshev least-squares fit of ``phi`` at that node as a function of
    ``t = 2 s - 1``. Maximum absolute error ~3e-9 (w = 8, degree 10; the kernel's square-root
    edge at ``phi ~ e^-beta`` bounds it), far below the float32 NUFFT error; the C++ code then
    evaluates the ``w`` weights of a point with ``degree`` vectorised multiply-adds instead of
    ``w`` exponentials and square roots.
    """
    m = 4 * degree + 20
    t = np.cos(np.pi * (np.arange(m) + 0.5) / m)
    s = 0.5 * (t + 1.0)
    cols = []
    for i in range(w):
        z = (s + i - 0.5 * w) / (0.5 * w)
        val = np.exp(beta * (np.sqrt(np.clip(1.0 - z * z, 0.0, None)) - 1.0))
        c = np.polynomial.chebyshev.chebfit(t, val, degree)
        p = np.polynomial.chebyshev.cheb2poly(c)
        cols.append(np.pad(p, (0, degree + 1 - p.size))[::-1])
    return np.ascontiguousarray(np.array(cols).T, dtype=np.float64)


@functools.lru_cache(maxsize=64)
def _setup(K: tuple[int, ...], dxi: tuple[float, ...], w: int, sigma: float = 2.0) -> FineGridSetup:
    dim = len(K)
    nf = tuple(max(_next_smooth(math.ceil(sigma * (2 * k + 1))), 2 * w) for k in K)
    # ES shape of Barnett et al. (arXiv 1808.06736): beta = 0.97 pi (1 - 1 / (2 sigma)) w
    beta = 2.30 * w if sigma == 2.0 else 0.97 * math.pi * (1.0 - 0.5 / sigma) * w
    inv = []
    for i, (k, n) in enumerate(zip(K, nf, strict=True)):
        ks = np.arange(0 if i == dim - 1 else -k, k + 1, dtype=np.float64)
        inv.append(1.0 / _phihat(ks, n, w, beta))
    # float32 (w = 7 or 9): polynomial kernel; float64 (w = 16): exact exp/sqrt (1e-14 accuracy).
    poly = _kernel_poly(w, beta, 10) if w <= 12 else None
    return FineGridSetup(dim, K, dxi, nf, w, beta, tuple(inv), poly)


def setup_for(grid, dtype: torch.dtype) -> FineGridSetup:
    """The fine grid of ``grid`` (a :class:`~rml_fast.kernels.nudft.FrequencyGrid`) for ``dtype``.

    float64: oversampling 2, kernel width 16 (about 1e-14 relative error). float32: 1-D
    oversampling 2, width 7 (2.1e-6 relative error at B = 8, N = 500 against the float64
    reference; width 8 gave 1.3e-6 for 14% more spreading work, width 6 1.2e-5); 2-D
    oversampling 1.5, width 9 (about 1e-6; the smaller grid makes the FFT, which dominates
    there, 1.56x cheaper for 1.27x more spreading work).
    """
    K = tuple(int(k) for k in grid.K)
    res = tuple(float(r) for r in grid.resolution)
    if dtype == torch.float64:
        return _setup(K, res, 16)
    if len(K) == 2:
        return _setup(K, res, 9, 1.5)
    return _setup(K, res, 7)


def prefer_nufft(grid, n_points: int, channels: int, dtype: torch.dtype) -> bool:
    """Whether the NUFFT path is expected to beat the direct sums for one transform of
    ``n_points`` points per batch element.

    Cost model (per batch element and channel, in units of one direct-sum multiply-add):
    direct ``P F``; NUFFT ``a P w^d + c n log2 n`` for ``n`` fine-grid nodes. 2-D (spread, pocketfft,
    copy-out): ``a = 1.5`` with the polynomial kernel (float32), 4 with the exact one (float64),
    ``c = 5``; calibrated at B = 16, C = 256 on the image grid (crossover ~370 points). 1-D (the
    fused C++ pass): ``a = 2.0``, ``c = 0.6`` in float32 and ``a = 1.4``, ``c = 1.1`` in float64,
    calibrated from single-thread timings of both paths at B = 64, C = 128, F = 50 (round 5:
    crossover ~27 points in float32, ~60 in float64).
    """
    st = setup_for(grid, dtype)
    cells = math.prod(st.nf)
    direct = n_points * grid.n_freq
    if st.dim == 1:
        a, c = (2.0, 0.6) if st.poly is not None else (1.4, 1.1)
    else:
        a, c = (1.5 if st.poly is not None else 4.0), 5.0
    nufft = a * n_points * st.w**st.dim + c * cells * math.log2(cells)
    return direct > nufft


def _chunk(B: int, cells: int, C: int, itemsize: int) -> int:
    per = max(1, cells * max(C, 1) * itemsize)
    return max(1, min(B, _CHUNK_BYTES // per))


_NP = {torch.float32: np.float32, torch.float64: np.float64}


def _workers(t) -> int:
    """FFT threads (scipy's pocketfft): one for small grids, where a thread team costs more
    than it saves (and stalls on a busy machine), else torch's intra-op thread count."""
    return 1 if t.size < 2**21 else max(1, torch.get_num_threads())


def _deconv_flat(st: FineGridSetup) -> np.ndarray:
    """``1 / phi_hat`` on the half-space grid, flat (F,), float64."""
    if st.dim == 1:
        return np.ascontiguousarray(st.inv_phihat[0])
    return np.outer(st.inv_phihat[0], st.inv_phihat[1]).ravel()


def _last_axis_zero(st: FineGridSetup) -> np.ndarray:
    """Mask (F,) of the frequencies with ``k_d = 0`` (the real FFT's unpaired column)."""
    if st.dim == 1:
        return np.arange(st.K[0] + 1) == 0
    return (np.arange((2 * st.K[0] + 1) * (st.K[1] + 1)) % (st.K[1] + 1)) == 0


def _spectrum_shape(st: FineGridSetup) -> tuple[int, ...]:
    """The pruned 2-D spectrum of one batch element: all rows but only the ``K1 + 1`` mode
    columns."""
    return (st.nf[0], st.K[1] + 1)


def _fused_args(
    st: FineGridSetup,
) -> tuple[list[int], list[float], int, float, np.ndarray | None, int]:
    """The fine-grid arguments of the fused 1-D passes: ``nf, dxi, w, beta, poly, K``."""
    return list(st.nf), list(st.dxi), st.w, st.beta, st.poly, st.K[0]


def _forward_fft(g: np.ndarray, st: FineGridSetup, workers: int) -> np.ndarray:
    """2-D real FFT of the spread grid ``g`` (b, nf0, nf1, C), pruned to the columns holding
    modes: the c2c pass along the first axis runs on ``K1 + 1`` of the ``nf1 / 2 + 1`` real-FFT
    columns only (about half of its work). (1-D transforms use the fused C++ pass.)"""
    A = _fft.rfft(g, axis=2, workers=workers)[:, :, : st.K[1] + 1]
    return np.ascontiguousarray(_fft.fft(A, axis=1, workers=workers, overwrite_x=True))


def _inverse_fft(X: np.ndarray, st: FineGridSetup, workers: int | None = None) -> np.ndarray:
    """Inverse of :func:`_forward_fft` (up to the normalisation): ``irfftn`` of the pruned 2-D
    spectrum ``X`` (b, nf0, K1 + 1, C), zero-padded on the fly."""
    wk = _workers(X) if workers is None else workers
    T = _fft.ifft(X, axis=1, workers=wk, overwrite_x=True)
    return _fft.irfft(T, n=st.nf[1], axis=2, workers=wk, overwrite_x=True)


def nufft_type1(x: torch.Tensor, v: torch.Tensor, grid, sign: int, density: bool):
    """Raw type 1 (no autograd): ``(re, im, dre, dim)`` as the direct backends return them.

    1-D: one fused C++ pass per batch element (``_C.nudft.nufft1_1d``): gather-form spreading
    into the planes of a packed real FFT, the FFT along the grid rows on channel vectors
    (``RowFFT``, radix 2/3/4/5 Stockham) and the scaled pick-out of the modes; no grid array.
    2-D: spread (C++, the density as an extra grid channel), real FFT over the grid axes
    (scipy's pocketfft, pruned to the mode columns), then one C++ pass that picks the
    half-space modes, divides by the kernel's transform and writes the real/imaginary planes
    (no complex intermediate).
    """
    from rml_fast._native import _C

    B, _, C = v.shape
    dtype = x.dtype
    st = setup_for(grid, dtype)
    x = x.detach().contiguous()
    vv = v.detach().contiguous()
    Cp = C + int(density)
    Fn = grid.n_freq
    re = torch.empty(B, Fn, C, dtype=dtype)
    im = torch.empty(B, Fn, C, dtype=dtype)
    dre = torch.empty(B, Fn, dtype=dtype) if density else None
    dim = torch.empty(B, Fn, dtype=dtype) if density else None
    scale = _deconv_flat(st)
    if st.dim == 1:
        _C.nudft.nufft1_1d(
            x.numpy(),
            vv.numpy(),
            *_fused_args(st),
            scale,
            -sign,
            re.numpy(),
            im.numpy(),
            None if dre is None else dre.numpy(),
            None if dim is None else dim.numpy(),
        )
        return re, im, dre, dim
    cells = math.prod(st.nf)
    step = _chunk(B, cells, Cp, vv.element_size())
    nf, dxi, K = list(st.nf), list(st.dxi), list(st.K)
    gbuf = torch.empty(step, *st.nf, Cp, dtype=dtype)

    def chunks(starts: list[int], buf: torch.Tensor, workers: int | None) -> None:
        for b0 in starts:
            b1 = min(B, b0 + step)
            g = buf[: b1 - b0]
            _C.nudft.spread(
                x[b0:b1].numpy(),
                vv[b0:b1].numpy(),
                nf,
                dxi,
                st.w,
                st.beta,
                density,
                g.numpy(),
                st.poly,
            )
            wk = _workers(g.numpy()) if workers is None else workers
            S = _forward_fft(g.numpy(), st, wk)
            _C.nudft.modes_out(
                S,
                K,
                scale,
                -sign,
                re[b0:b1].numpy(),
                im[b0:b1].numpy(),
                None if dre is None else dre[b0:b1].numpy(),
                None if dim is None else dim[b0:b1].numpy(),
            )

    starts = list(range(0, B, step))
    nw = min(len(starts), max(1, torch.get_num_threads()))
    if step == 1 and nw > 1:
        # one batch element per chunk: spreading has no batch to parallelise over, so the
        # chunks run on nw Python threads (the C++ passes and pocketfft release the GIL), each
        # with its own grid buffer and single-threaded FFTs
        bufs = [gbuf] + [torch.empty_like(gbuf) for _ in range(nw - 1)]
        with ThreadPoolExecutor(nw) as pool:
            list(pool.map(chunks, [starts[k::nw] for k in range(nw)], bufs, [1] * nw))
    else:
        chunks(starts, gbuf, None)
    return re, im, dre, dim


def nufft_type2(x, re, im, w, grid, sign: int) -> torch.Tensor:
    """Raw type 2 (no autograd): ``y = sum_f w_f Re((re + i im) e^{sign i theta})``.

    One C++ pass places the weighted, deconvolved modes on the half-spectrum grid (zeros
    elsewhere), an inverse real FFT (pocketfft) gives the fine grid, and the C++ interpolation
    evaluates it at the points. In 1-D the three steps are one fused C++ pass per batch element
    (``_C.nudft.nufft2_1d``, the channel-vector FFT as in :func:`nufft_type1`).
    """
    from rml_fast._native import _C

    B, M, _ = x.shape
    n_out = re.shape[-1]
    dtype = x.dtype
    st = setup_for(grid, dtype)
    x = x.detach().contiguous()
    re = re.detach().contiguous()
    im = im.detach().contiguous()
    cells = math.prod(st.nf)
    # irfft(X) = (1/n) [Re X_0 + 2 sum_k Re(X_k e^{..})]: X = a n/2 with the k_d = 0 column
    # doubled gives Re sum a.
    scale = w.detach().double().cpu().numpy() * _deconv_flat(st) * (cells / 2.0)
    scale = np.where(_last_axis_zero(st), 2.0 * scale, scale)
    y = torch.empty(B, M, n_out, dtype=dtype)
    if st.dim == 1:
        _C.nudft.nufft2_1d(
            x.numpy(),
            re.numpy(),
            im.numpy(),
            *_fused_args(st),
            scale,
            sign,
            y.numpy(),
        )
        return y
    step = _chunk(B, cells, n_out, re.element_size())
    nf, dxi, K = list(st.nf), list(st.dxi), list(st.K)
    cdt = np.complex128 if dtype == torch.float64 else np.complex64
    # one batch element per chunk (2-D image grids): the FFT on all threads (the
    # interpolation is parallel over points already)
    fft_workers = max(1, torch.get_num_threads()) if step == 1 else None
    for b0 in range(0, B, step):
        b1 = min(B, b0 + step)
        X = np.empty((b1 - b0, *_spectrum_shape(st), n_out), dtype=cdt)
        _C.nudft.modes_in(re[b0:b1].numpy(), im[b0:b1].numpy(), K, scale, sign, X)
        g = np.ascontiguousarray(_inverse_fft(X, st, fft_workers), dtype=_NP[dtype])
        _C.nudft.interp(x[b0:b1].numpy(), g, nf, dxi, st.w, st.beta, y[b0:b1].numpy(), st.poly)
    return y
