"""Kernels of the Spherical Generalized Gamma (SGG) mechanisms.

Sampling
    ``X = R U`` with ``U`` uniform on the sphere ``S^{dim-1}`` and ``R = sigma G^{1/p}``,
    ``G ~ Gamma(k/p, 1)``; ``U = Z / ||Z||``, ``Z ~ N(0, I)``. Row ``i`` uses the Philox
    counters ``offset + i*S + c`` for ``c < S = counters_per_row(dim)``: counter ``c <
    ceil(dim/4)`` gives normals ``4c .. 4c+3`` (Box-Muller, cos and sin, on word pairs
    (0,1) and (2,3), uniforms ``(w + 0.5) 2^-32``); counter ``ceil(dim/4)`` gives the
    shape-boost uniform (53 bits from words 0,1) used when ``k/p < 1``
    (``G = G_{a+1} U^{1/a}``); the next 16 counters are Marsaglia-Tsang attempts (normal
    from words 0,1, acceptance uniform from words 2,3). The output depends only on
    ``(seed, offset)`` and the row index: any thread count, and the Triton kernel, give
    the same numbers. If all 16 attempts of a row are rejected (probability
    < 0.05^16 < 2e-21) the last candidate is used, so the sampler's law differs from
    SGG by at most 2e-21 per row in total variation.

Privacy-loss CDF
    For neighbours at distance ``Delta`` the loss is ``L(x) = phi(||x - Delta e1||) -
    phi(||x||)``, ``phi(s) = (s/sigma)^p - (k - dim) ln s``. Given ``||X|| = r`` the angle
    ``Theta`` between ``X`` and ``e1`` has density ``c_T sin^{T-2}(theta)``, and
    ``{L <= l}`` is ``{r' <= b}`` (or ``{a <= r' <= b}`` when ``k > dim``) with
    ``r'^2 = r^2 - 2 r Delta cos(Theta) + Delta^2``; so
    ``F(l) = sum_j w_j H(theta*(r_j, l))`` with ``H`` the CDF of ``Theta``
    (``H(theta) = I_{sin^2(theta/2)}((T-1)/2, (T-1)/2)``) and radius nodes
    ``r_j = F_R^{-1}(Phi(z_j))`` on a composite Gauss-Legendre rule in ``z in [-9, 9]``.
    The native kernel tabulates ``H`` and interpolates it (cubic Hermite, exact
    derivative); the reference evaluates ``betainc`` directly.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import special

from rml_fast._validation import Interval, check_array, check_scalar
from rml_fast.kernels._dispatch import Device, Kernel, device_of, resolve_device
from rml_fast.kernels.random import MAX_COUNTER, philox4x32_reference

__all__ = [
    "GAMMA_ATTEMPTS",
    "angle_cdf_table",
    "counters_per_row",
    "fft_good_size",
    "pld_convolve",
    "pld_convolve_reference",
    "pld_delta_for_epsilon",
    "pld_delta_for_epsilon_reference",
    "pld_epsilon_for_delta",
    "pld_epsilon_for_delta_reference",
    "pld_self_convolve",
    "pld_self_convolve_reference",
    "radius_nodes",
    "sgg_loss_cdf",
    "sgg_loss_cdf_reference",
    "sgg_sample",
    "sgg_sample_reference",
]

GAMMA_ATTEMPTS = 16
Z_MAX = 9.0  # radius quadrature covers Phi(-9) .. Phi(9); the rest (2.3e-19) is accounted apart
_POS = Interval("real", 0.0, None, "neither")

_sample = Kernel("sgg.sample")
_loss_cdf = Kernel("sgg.loss_cdf")


def counters_per_row(dim: int) -> int:
    """Philox counters one sample of dimension ``dim`` (an int >= 1) consumes."""
    dim = int(check_scalar(dim, "dim", Interval("int", 1, None)))
    return (dim + 3) // 4 + 1 + GAMMA_ATTEMPTS


def _check_family(dim: Any, sigma: Any, k: Any, p: Any) -> tuple[int, float, float, float]:
    dim = int(check_scalar(dim, "dim", Interval("int", 1, None)))
    sigma = float(check_scalar(sigma, "sigma", _POS))
    k = float(check_scalar(k, "k", _POS))
    p = float(check_scalar(p, "p", _POS))
    return dim, sigma, k, p


# --- sampling ----------------------------------------------------------------------------


def sgg_sample(
    n: int,
    dim: int,
    sigma: float,
    k: float,
    p: float,
    seed: int,
    offset: int = 0,
    *,
    dtype: Any = np.float64,
    device: Any = None,
    backend: str = "auto",
) -> Any:
    """Draw ``n`` samples of SGG(sigma, k, p) in R^dim from the Philox stream ``seed``.

    Density ``f(x) ~ ||x||^{k-dim} exp(-(||x||/sigma)^p)``; ``X = sigma G^{1/p} Z/||Z||``.

    Parameters
    ----------
    n : int
        Number of samples, >= 0.
    dim : int
        Dimension T >= 1.
    sigma, k, p : float
        Scale, shape and power, all > 0.
    seed : int
        Stream key in [0, 2**63).
    offset : int, default=0
        First Philox counter; row i uses ``offset + i * counters_per_row(dim)`` onwards.
    dtype : {numpy.float64, numpy.float32} or the torch equivalents, default=float64
        Output dtype (computation is in float64).
    device : None, "numpy", "cpu", "cuda[:N]" or torch.device, default=None
        None gives a NumPy array, otherwise a torch tensor on that device.
    backend : {"auto", "native", "triton", "reference"}, default="auto"

    Returns
    -------
    out : ndarray or torch.Tensor of shape (n, dim)

    Examples
    --------
    >>> from rml_fast.kernels.sgg import sgg_sample
    >>> x = sgg_sample(1000, 3, sigma=1.0, k=3.0, p=2.0, seed=0)
    >>> x.shape, bool((sgg_sample(2, 3, 1.0, 3.0, 2.0, seed=0) == x[:2]).all())
    ((1000, 3), True)
    """
    n = int(check_scalar(n, "n", Interval("int", 0, None)))
    dim, sigma, k, p = _check_family(dim, sigma, k, p)
    seed = int(check_scalar(seed, "seed", Interval("int", 0, MAX_COUNTER)))
    stride = counters_per_row(dim)
    offset = int(check_scalar(offset, "offset", Interval("int", 0, MAX_COUNTER - n * stride)))
    is64 = _is_float(dtype, "64")
    if not (is64 or _is_float(dtype, "32")):
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}")
    return _sample(
        n, dim, sigma, k, p, seed, offset, is64, device=resolve_device(device), backend=backend
    )


def _is_float(dtype: Any, bits: str) -> bool:
    name = getattr(dtype, "__name__", None) or str(dtype)
    return name.replace("torch.", "").endswith("float" + bits)


def _uniform32(w: np.ndarray) -> np.ndarray:
    return (w.astype(np.float64) + 0.5) * 2.0**-32


def _uniform53(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return ((a >> np.uint32(5)).astype(np.float64) * 67108864.0 + (b >> np.uint32(6)) + 0.5) * 2.0**-53


def _log_gamma_reference(a: float, seed: int, first: np.ndarray) -> np.ndarray:
    boost = a < 1.0
    shape = a + 1.0 if boost else a
    d = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    log_g = np.full(first.shape, math.log(d))
    done = np.zeros(first.shape, dtype=bool)
    for t in range(GAMMA_ATTEMPTS):
        w = philox4x32_reference(seed, first + np.uint64(1 + t))
        x = np.sqrt(-2.0 * np.log(_uniform32(w[0]))) * np.cos(2.0 * math.pi * _uniform32(w[1]))
        v1 = 1.0 + c * x
        valid = v1 > 0.0
        v = np.where(valid, v1, 1.0) ** 3
        log_v = np.log(v)
        u = _uniform53(w[2], w[3])
        accept = valid & (np.log(u) < 0.5 * x * x + d - d * v + d * log_v)
        update = ~done & valid
        log_g = np.where(update, math.log(d) + log_v, log_g)
        done |= accept
    if boost:
        w = philox4x32_reference(seed, first)
        log_g = log_g + np.log(_uniform53(w[0], w[1])) / a
    return log_g


def sgg_sample_reference(
    n: int, dim: int, sigma: float, k: float, p: float, seed: int, offset: int = 0
) -> np.ndarray:
    """NumPy twin of :func:`sgg_sample` (same stream layout): ndarray (n, dim), float64."""
    n = int(check_scalar(n, "n", Interval("int", 0, None)))
    dim, sigma, k, p = _check_family(dim, sigma, k, p)
    stride, nq = counters_per_row(dim), (dim + 3) // 4
    base = np.uint64(offset) + np.arange(n, dtype=np.uint64) * np.uint64(stride)
    z = np.empty((n, 4 * nq))
    for q in range(nq):
        w = philox4x32_reference(seed, base + np.uint64(q))
        r0 = np.sqrt(-2.0 * np.log(_uniform32(w[0])))
        t0 = 2.0 * math.pi * _uniform32(w[1])
        r1 = np.sqrt(-2.0 * np.log(_uniform32(w[2])))
        t1 = 2.0 * math.pi * _uniform32(w[3])
        z[:, 4 * q : 4 * q + 4] = np.stack(
            [r0 * np.cos(t0), r0 * np.sin(t0), r1 * np.cos(t1), r1 * np.sin(t1)], axis=1
        )
    z = z[:, :dim]
    log_g = _log_gamma_reference(k / p, seed, base + np.uint64(nq))
    radius = np.exp(math.log(sigma) + log_g / p)
    return z * (radius / np.sqrt((z * z).sum(axis=1)))[:, None]


def _to_device(arr: np.ndarray, device: Device) -> Any:
    if not device.is_torch:
        return arr
    import torch

    return torch.from_numpy(arr).to(device.torch_device)


@_sample.register("reference")
def _sample_ref(n, dim, sigma, k, p, seed, offset, is64, *, device):  # type: ignore[no-untyped-def]
    out = sgg_sample_reference(n, dim, sigma, k, p, seed, offset)
    return _to_device(out if is64 else out.astype(np.float32), device)


@_sample.register("native")
def _sample_native(n, dim, sigma, k, p, seed, offset, is64, *, device):  # type: ignore[no-untyped-def]
    from rml_fast._native import _C

    out = np.empty(n * dim, dtype=np.float64 if is64 else np.float32)
    _C.sgg.sample(out, n, dim, sigma, k, p, seed, offset)
    return _to_device(out.reshape(n, dim), device)


@_sample.register("triton")
def _sample_triton(n, dim, sigma, k, p, seed, offset, is64, *, device):  # type: ignore[no-untyped-def]
    import torch

    from rml_fast.kernels.triton import sgg as triton_sgg

    dt = torch.float64 if is64 else torch.float32
    out = torch.empty((n, dim), dtype=dt, device=device.torch_device)
    triton_sgg.sample(out, sigma, k, p, seed, offset)
    return out


def noise_like(x: Any, sigma: float, k: float, p: float, seed: int, backend: str = "auto") -> Any:
    """SGG noise with the shape, dtype and device of ``x`` (NumPy array or torch tensor).

    ``x`` has shape (dim,) or (n, dim); float64 inputs get float64 noise, float32 inputs
    float32 noise (computed in float64).
    """
    shape = tuple(x.shape)
    n, dim = (1, shape[0]) if len(shape) == 1 else shape
    dev = device_of(x)
    dtype = x.dtype
    out = sgg_sample(n, dim, sigma, k, p, seed, dtype=dtype, device=dev.torch_device, backend=backend)
    return out.reshape(shape)


# --- radius quadrature and angle table ---------------------------------------------------


@lru_cache(maxsize=64)
def _gauss_legendre(npts: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(npts)


@dataclass(frozen=True)
class RadiusQuadrature:
    """Composite Gauss-Legendre rule for the radius ``R = sigma G^{1/p}``, ``G ~ Gamma(k/p)``.

    Attributes
    ----------
    edges : ndarray of shape (panels + 1,)
        Panel edges in r (images of equally spaced z in [-9, 9]).
    r, w : ndarray of shape (16 * panels,)
        Nodes ``r = F_R^{-1}(Phi(z))`` and weights ``w_GL phi(z)``.
    missing : float
        Mass of R outside [edges[0], edges[-1]]: ``2 Phi(-9)``.
    log_norm : float
        ``log p - log sigma - lgamma(k/p)``: ``f_R(r) = exp(log_norm + (k-1) log(r/sigma) - (r/sigma)^p)``.
    """

    edges: np.ndarray
    r: np.ndarray
    w: np.ndarray
    missing: float
    log_norm: float


def radius_nodes(
    dim: int, sigma: float, k: float, p: float, num_nodes: int = 1600
) -> RadiusQuadrature:
    """Quadrature for the radius law (cached; see :func:`_radius_nodes`)."""
    dim, sigma, k, p = _check_family(dim, sigma, k, p)
    num_nodes = int(check_scalar(num_nodes, "num_nodes", Interval("int", 16, 10**6)))
    return _radius_nodes(dim, sigma, k, p, num_nodes)


@lru_cache(maxsize=128)
def _radius_nodes(
    dim: int, sigma: float, k: float, p: float, num_nodes: int = 1600
) -> RadiusQuadrature:
    """Quadrature for the radius law (``gammaincinv`` for z < 0, ``gammainccinv`` for z >= 0).

    Parameters
    ----------
    dim : int
    sigma, k, p : float
    num_nodes : int, default=1600
        Rounded down to a multiple of 16 (one 16-point rule per panel).

    Returns
    -------
    RadiusQuadrature
    """
    panels = max(1, num_nodes // 16)
    x, wx = _gauss_legendre(16)
    edges_z = np.linspace(-Z_MAX, Z_MAX, panels + 1)
    half = 0.5 * (edges_z[1:] - edges_z[:-1])
    mid = 0.5 * (edges_z[1:] + edges_z[:-1])
    z = (mid[:, None] + half[:, None] * x[None, :]).ravel()
    wz = (half[:, None] * wx[None, :]).ravel() * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    a = k / p

    def r_of(zz: np.ndarray) -> np.ndarray:
        g = np.where(
            zz < 0,
            special.gammaincinv(a, special.ndtr(np.minimum(zz, 0.0))),
            special.gammainccinv(a, special.ndtr(-np.maximum(zz, 0.0))),
        )
        return sigma * np.exp(np.log(g) / p)

    r, edges = r_of(z), r_of(edges_z)
    for arr in (r, wz, edges):
        arr.setflags(write=False)
    if not (np.all(np.isfinite(r)) and np.all(r > 0) and np.all(np.diff(edges) > 0)):
        raise ValueError(
            f"the radius law of SGG(sigma={sigma}, k={k}, p={p}) is outside the range the "
            "quadrature can resolve in float64 (k/p or p too extreme)"
        )
    log_norm = math.log(p) - math.log(sigma) - float(special.gammaln(a))
    return RadiusQuadrature(edges, r, wz, 2.0 * float(special.ndtr(-Z_MAX)), log_norm)


def _angle_cdf(theta: np.ndarray, dim: int) -> np.ndarray:
    """CDF of the angle between a uniform direction in R^dim and e1 (dim >= 2)."""
    alpha = 0.5 * (dim - 1)
    s = np.sin(0.5 * theta) ** 2
    c = np.cos(0.5 * theta) ** 2
    return np.where(theta <= 0.5 * math.pi, special.betainc(alpha, alpha, s), special.betaincc(alpha, alpha, c))


@lru_cache(maxsize=32)
def angle_cdf_table(dim: int, size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``H(theta_i)`` and ``H'(theta_i)`` on ``theta_i = i pi/(size-1)`` for the kernel.

    ``H'(theta) = c_T sin^{T-2}(theta)``, ``c_T = Gamma(T/2) / (sqrt(pi) Gamma((T-1)/2))``.
    The default size grows like sqrt(dim) to keep the Hermite error below ~1e-14.
    """
    if not isinstance(dim, int) or dim < 2:
        raise ValueError(f"dim must be an int >= 2 for the angle table, got {dim!r}")
    if size is None:
        size = 65537 * max(1, math.ceil(math.sqrt(dim / 1000.0)))
    if size % 2 == 0:
        size += 1
    theta = np.linspace(0.0, math.pi, size)
    # H(pi - theta) = 1 - H(theta): evaluate the incomplete beta on the first half only.
    half = size // 2
    h = np.empty(size)
    h[: half + 1] = _angle_cdf(theta[: half + 1], dim)
    h[half + 1 :] = 1.0 - h[:half][::-1]
    log_c = special.gammaln(dim / 2) - 0.5 * math.log(math.pi) - special.gammaln((dim - 1) / 2)
    if dim == 2:
        dh = np.full(size, math.exp(log_c))
    else:
        with np.errstate(divide="ignore"):
            dh = np.exp(log_c + (dim - 2) * np.log(np.abs(np.sin(theta))))
        dh[0] = dh[-1] = 0.0
    h.setflags(write=False)
    dh.setflags(write=False)
    return h, dh


# --- loss CDF ----------------------------------------------------------------------------


def sgg_loss_cdf(
    losses: Any,
    dim: int,
    sigma: float,
    k: float,
    p: float,
    sensitivity: float = 1.0,
    *,
    num_nodes: int = 1600,
    backend: str = "auto",
) -> np.ndarray:
    """CDF ``P(L <= l)`` of the SGG privacy loss under ``X ~ SGG`` at each loss ``l``.

    ``L(x) = phi(||x - sensitivity e1||) - phi(||x||)``, ``phi(s) = (s/sigma)^p - (k-dim) ln s``.
    The radius mass outside the quadrature range (``2 Phi(-9)``) is not included, so the
    values are lower bounds of the CDF up to quadrature error (a pessimistic direction).

    Parameters
    ----------
    losses : array-like of shape (m,), float64
    dim : int
        Dimension, >= 2.
    sigma, k, p, sensitivity : float
        All > 0.
    num_nodes : int, default=1600
        Radius quadrature nodes.
    backend : {"auto", "native", "reference"}, default="auto"

    Returns
    -------
    cdf : ndarray of shape (m,), float64

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.kernels.sgg import sgg_loss_cdf
    >>> f = sgg_loss_cdf(np.array([-1.0, 0.0, 1.0]), dim=3, sigma=2.0, k=3.0, p=2.0)
    >>> bool(np.all(np.diff(f) > 0))
    True
    """
    ell = check_array(losses, "losses", dtypes=(np.float64,), ndim=1)
    dim, sigma, k, p = _check_family(dim, sigma, k, p)
    if dim < 2:
        raise ValueError(f"dim must be >= 2 for sgg_loss_cdf, got {dim}")
    sensitivity = float(check_scalar(sensitivity, "sensitivity", _POS))
    quad = radius_nodes(dim, sigma, k, p, num_nodes)
    return _loss_cdf(
        np.ascontiguousarray(ell), dim, sigma, k, p, sensitivity, quad,
        device=resolve_device(None), backend=backend,
    )


@lru_cache(maxsize=8)
def _smooth_rule(n: int) -> tuple[np.ndarray, np.ndarray]:
    t, w = _gauss_legendre(n)
    return np.ascontiguousarray(0.5 * (t + 1.0)), np.ascontiguousarray(0.5 * w)


@_loss_cdf.register("native")
def _loss_cdf_native(ell, dim, sigma, k, p, sens, quad, *, device):  # type: ignore[no-untyped-def]
    from rml_fast._native import _C

    h, dh = angle_cdf_table(dim)
    gl_t, gl_w = _smooth_rule(24)
    out = np.empty(ell.size)
    _C.sgg.loss_cdf(
        out, ell, quad.edges, quad.r, quad.w, gl_t, gl_w, h, dh, dim, sigma, k, p, sens,
        quad.log_norm,
    )
    return out


def _phi(s: np.ndarray, sigma: float, k: float, p: float, dim: int) -> np.ndarray:
    if k == dim:
        return (s / sigma) ** p
    with np.errstate(divide="ignore"):
        return (s / sigma) ** p - (k - dim) * np.log(s)


def _cond_le(x: np.ndarray, r: np.ndarray, sens: float, dim: int) -> np.ndarray:
    """P(||X - sens e1|| <= x | ||X|| = r) via the exact incomplete beta function."""
    lo, hi = np.abs(r - sens), r + sens
    with np.errstate(invalid="ignore"):
        s2 = np.clip((x - lo) * (x + lo) / (4 * r * sens), 0.0, 1.0)
    theta = 2.0 * np.arcsin(np.sqrt(s2))
    val = _angle_cdf(theta, dim)
    return np.where(np.isnan(x) | (x <= lo), 0.0, np.where(x >= hi, 1.0, val))


def sgg_loss_cdf_reference(
    losses: np.ndarray,
    dim: int,
    sigma: float,
    k: float,
    p: float,
    sensitivity: float,
    quad: RadiusQuadrature,
) -> np.ndarray:
    """SciPy twin of the native loss CDF: adaptive ``quad`` over r, exact ``betainc``.

    Independent of the kernel's node placement: integrates ``f_R(r) P(L <= l | r)`` over
    ``[edges[0], edges[-1]]`` with ``scipy.integrate.quad``, with break points at the radii
    where the conditional CDF has kinks (found by ``brentq``). Slow; for tests.
    """
    from scipy import integrate, optimize

    r_min, r_max = float(quad.edges[0]), float(quad.edges[-1])
    c = k - dim

    ls = math.log(sigma)

    def psi(t: float) -> float:
        return math.exp(p * (t - ls)) - c * t

    def roots(y: float) -> tuple[float, float]:
        """{s : phi(s) <= y} = [lo, hi] (scalar brentq in t = ln s); (nan, nan) if empty."""
        if c == 0.0:
            return (0.0, sigma * y ** (1 / p)) if y > 0 else (math.nan, math.nan)

        def right(t0: float) -> float:
            step = 1.0
            while psi(t0 + step) < y:
                step *= 2.0
            return optimize.brentq(lambda t: psi(t) - y, t0, t0 + step, xtol=1e-15, rtol=1e-15)

        if c < 0:
            step = 1.0
            while psi(-step) > y:
                step *= 2.0
            return 0.0, math.exp(right(-step))
        t0 = ls + math.log(c / p) / p
        if y <= psi(t0):
            return math.nan, math.nan
        step = 1.0
        while psi(t0 - step) < y:
            step *= 2.0
        left = optimize.brentq(lambda t: psi(t) - y, t0 - step, t0, xtol=1e-15, rtol=1e-15)
        return math.exp(left), math.exp(right(t0))

    def cond(r: float, ell: float) -> float:
        rr = np.array([r])
        lo, hi = roots(ell + float(_phi(rr, sigma, k, p, dim)[0]))
        diff = _cond_le(np.array([hi]), rr, sensitivity, dim) - _cond_le(np.array([lo]), rr, sensitivity, dim)
        return float(np.maximum(diff, 0.0)[0])

    def dens(r: float) -> float:
        x = r / sigma
        return math.exp(quad.log_norm + (k - 1) * math.log(x) - x**p)

    e_plus = lambda r, ell: _phi(np.array(r + sensitivity), sigma, k, p, dim) - _phi(np.array(r), sigma, k, p, dim) - ell  # noqa: E731
    e_minus = lambda r, ell: _phi(np.array(abs(r - sensitivity)), sigma, k, p, dim) - _phi(np.array(r), sigma, k, p, dim) - ell  # noqa: E731
    fns = [(e_plus, (r_min, r_max)), (e_minus, (r_min, min(sensitivity, r_max))),
           (e_minus, (max(sensitivity, r_min), r_max))]
    if c > 0:  # the set {phi(r') <= y} appears at y = min phi: phi(r) = min phi - ell
        t0 = math.log(sigma) + math.log(c / p) / p
        psi_min = math.exp(p * (t0 - math.log(sigma))) - c * t0
        r0 = math.exp(t0)
        e_zero = lambda r, ell: psi_min - _phi(np.array(r), sigma, k, p, dim) - ell  # noqa: E731
        fns += [(e_zero, (r_min, min(r0, r_max))), (e_zero, (max(r0, r_min), r_max))]
    out = np.empty(losses.size)
    for i, ell in enumerate(losses):
        pts = {sensitivity} if r_min < sensitivity < r_max else set()
        if c > 0 and r_min < r0 < r_max:
            pts.add(r0)
        for fn, (a, b) in fns:
            fa, fb = float(fn(a, ell)), float(fn(b, ell))
            if a < b and np.isfinite(fa) and np.isfinite(fb) and fa * fb < 0:
                pts.add(optimize.brentq(lambda r, fn=fn, ell=ell: float(fn(r, ell)), a, b, xtol=1e-14))
        grid = sorted({r_min, r_max, *pts, *np.quantile(quad.r, np.linspace(0, 1, 41))})
        total = 0.0
        for a, b in itertools.pairwise(grid):
            val, _ = integrate.quad(lambda r, ell=ell: dens(r) * cond(r, ell), a, b,
                                    epsabs=1e-14, epsrel=1e-12, limit=200)
            total += val
        out[i] = total
    return out


@_loss_cdf.register("reference")
def _loss_cdf_ref(ell, dim, sigma, k, p, sens, quad, *, device):  # type: ignore[no-untyped-def]
    return sgg_loss_cdf_reference(ell, dim, sigma, k, p, sens, quad)


# --- PLD read-out ------------------------------------------------------------------------

_pld_delta = Kernel("sgg.pld_delta_for_epsilon")


def _check_pld_query(pmf: Any, lower_index: Any, h: Any, infinity_mass: Any, q: Any,
                     q_name: str) -> tuple[np.ndarray, int, float, float, np.ndarray]:
    """Checks of the discrete-PLD queries: a NaN anywhere would give a finite, wrong answer."""
    pmf = check_array(pmf, "pmf", dtypes=(np.float64,), ndim=1)
    if isinstance(lower_index, (bool, np.bool_)) or not isinstance(
            lower_index, (int, np.integer, float, np.floating)) or not math.isfinite(lower_index):
        raise TypeError(f"lower_index must be a finite int, got {lower_index!r}")
    h = check_scalar(h, "h", Interval("real", 0, None, closed="neither"))
    infinity_mass = check_scalar(infinity_mass, "infinity_mass", Interval("real", 0, 1))
    q = check_array(q, q_name, dtypes=(np.float64,), ndim=1, finite=False)
    if np.isnan(q).any():
        raise ValueError(f"{q_name} must not contain NaN")
    return pmf, int(lower_index), float(h), float(infinity_mass), q


def pld_delta_for_epsilon(
    pmf: np.ndarray,
    lower_index: int,
    h: float,
    infinity_mass: float,
    epsilon: np.ndarray,
    *,
    backend: str = "auto",
) -> np.ndarray:
    """Vectorised ``delta(eps) = sum_{l_i > eps} p_i (1 - e^{eps - l_i}) + p_inf``.

    Parameters
    ----------
    pmf : ndarray of shape (n,), float64
        Masses at ``l_i = (lower_index + i) h``.
    lower_index : int
    h : float
    infinity_mass : float
    epsilon : ndarray of shape (q,), float64
    backend : {"auto", "native", "reference"}

    Returns
    -------
    delta : ndarray of shape (q,)
    """
    pmf, lower_index, h, infinity_mass, epsilon = _check_pld_query(
        pmf, lower_index, h, infinity_mass, epsilon, "epsilon")
    return _pld_delta(
        np.ascontiguousarray(pmf, dtype=np.float64), int(lower_index), float(h),
        float(infinity_mass), np.ascontiguousarray(epsilon, dtype=np.float64),
        device=resolve_device(None), backend=backend,
    )


def _pld_suffix_sums(
    pmf: np.ndarray, lower_index: int, h: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Losses ``l_i`` and the suffix sums that both read-outs use (each with a trailing 0):
    ``t_i = sum_{j>=i} p_j e^{l_i - l_j}`` and ``u_i = sum_{j>i} p_j (1 - e^{l_i - l_j})``.

    Both are relative to their own bucket (IIR filters ``t_i = p_i + e^{-h} t_{i+1}``,
    ``u_i = (1 - e^{-h}) s_{i+1} + e^{-h} u_{i+1}`` with ``s`` the suffix sums of ``p``), so
    nothing over- or underflows however wide the support, and sums of non-negative terms,
    so ``delta(l_i - y) = u_i + (1 - e^{-y}) t_i + p_inf`` does not cancel.
    """
    from scipy.signal import lfilter

    losses = (lower_index + np.arange(pmf.size)) * h
    decay = math.exp(-h)
    s = np.concatenate([np.cumsum(pmf[::-1])[::-1], [0.0]])
    t = np.concatenate([lfilter([1.0], [1.0, -decay], pmf[::-1])[::-1], [0.0]])
    u = np.concatenate([lfilter([1.0], [1.0, -decay], -math.expm1(-h) * s[:0:-1])[::-1], [0.0]])
    return losses, t, u


def pld_delta_for_epsilon_reference(
    pmf: np.ndarray, lower_index: int, h: float, infinity_mass: float, epsilon: np.ndarray
) -> np.ndarray:
    """NumPy twin of :func:`pld_delta_for_epsilon` (suffix sums + searchsorted)."""
    losses, t, u = _pld_suffix_sums(pmf, lower_index, h)
    j = np.searchsorted(losses, epsilon, side="right")
    jc = np.minimum(j, losses.size - 1)
    y = losses[jc] - epsilon  # > 0 where j < n
    val = u[j] - np.expm1(-np.maximum(y, 0.0)) * t[j]
    val = np.where(j >= losses.size, 0.0, val)
    return np.maximum(val, 0.0) + infinity_mass


@_pld_delta.register("reference")
def _pld_delta_ref(pmf, lower, h, inf_mass, eps, *, device):  # type: ignore[no-untyped-def]
    return pld_delta_for_epsilon_reference(pmf, lower, h, inf_mass, eps)


@_pld_delta.register("native")
def _pld_delta_native(pmf, lower, h, inf_mass, eps, *, device):  # type: ignore[no-untyped-def]
    from rml_fast._native import _C

    out = np.empty(eps.size)
    _C.sgg.pld_delta_for_eps(out, eps, pmf, lower, h, inf_mass)
    return out


_pld_eps = Kernel("sgg.pld_epsilon_for_delta")


def pld_epsilon_for_delta(
    pmf: np.ndarray,
    lower_index: int,
    h: float,
    infinity_mass: float,
    delta: np.ndarray,
    *,
    backend: str = "auto",
) -> np.ndarray:
    """Vectorised smallest ``eps >= 0`` with ``delta(eps) <= delta`` (``inf`` if none).

    Between lattice points ``delta(eps) = S1_k - e^eps S2_k + p_inf`` with fixed suffix sums,
    so the solution inside the cell is exact for the discrete PLD.

    Parameters
    ----------
    pmf : ndarray of shape (n,), float64
    lower_index : int
    h : float
    infinity_mass : float
    delta : ndarray of shape (q,), float64
    backend : {"auto", "native", "reference"}

    Returns
    -------
    epsilon : ndarray of shape (q,)
    """
    pmf, lower_index, h, infinity_mass, delta = _check_pld_query(
        pmf, lower_index, h, infinity_mass, delta, "delta")
    return _pld_eps(
        np.ascontiguousarray(pmf, dtype=np.float64), int(lower_index), float(h),
        float(infinity_mass), np.ascontiguousarray(delta, dtype=np.float64),
        device=resolve_device(None), backend=backend,
    )


def pld_epsilon_for_delta_reference(
    pmf: np.ndarray, lower_index: int, h: float, infinity_mass: float, delta: np.ndarray
) -> np.ndarray:
    """NumPy twin of :func:`pld_epsilon_for_delta`."""
    losses, t, u = _pld_suffix_sums(pmf, lower_index, h)
    d_grid = u[:-1] + infinity_mass  # delta(l_k), non-increasing
    out = np.empty(delta.shape, dtype=np.float64)
    for n, target in enumerate(delta.ravel()):
        if infinity_mass > target:
            out.flat[n] = math.inf
            continue
        # first k with d_grid[k] <= target: eps = l_k - y in [l_{k-1}, l_k] with
        # u_k + (1 - e^{-y}) t_k + p_inf = target
        k = min(int(np.searchsorted(-d_grid, -target, side="left")), losses.size - 1)
        r = (target - infinity_mass - u[k]) / t[k] if t[k] > 0.0 else 1.0
        if r >= 1.0:
            eps = losses[k] - h if k > 0 else -math.inf
        else:
            eps = losses[k] + math.log1p(-max(r, 0.0))
            if k > 0:
                eps = max(eps, losses[k] - h)
        # round up by a few ulps (delta falls steeply near an atom; see the C++ kernel)
        eps = min(eps + 4.0 * np.finfo(np.float64).eps * max(abs(losses[k]), 1.0), losses[k])
        out.flat[n] = max(eps, 0.0)
    return out


@_pld_eps.register("reference")
def _pld_eps_ref(pmf, lower, h, inf_mass, delta, *, device):  # type: ignore[no-untyped-def]
    return pld_epsilon_for_delta_reference(pmf, lower, h, inf_mass, delta)


@_pld_eps.register("native")
def _pld_eps_native(pmf, lower, h, inf_mass, delta, *, device):  # type: ignore[no-untyped-def]
    from rml_fast._native import _C

    out = np.empty(delta.size)
    _C.sgg.pld_epsilon_for_delta(out, delta, pmf, lower, h, inf_mass)
    return out



# --- FFT composition ---------------------------------------------------------------------

_convolve = Kernel("sgg.pld_convolve")
_self_convolve = Kernel("sgg.pld_self_convolve")


def fft_good_size(n: int) -> int:
    """Smallest even length ``f * 2^m >= n`` (``f`` in {1, 3, 5}) of the native real FFT."""
    n = int(check_scalar(n, "n", Interval("int", 1, None)))
    best = None
    for f in (1, 3, 5):
        s = 2 * f
        while s < n:
            s *= 2
        best = s if best is None else min(best, s)
    return int(best)  # type: ignore[arg-type]


def pld_convolve(a: np.ndarray, b: np.ndarray, *, backend: str = "auto") -> np.ndarray:
    """Linear (never circular) convolution ``c = a * b`` of two pmfs by real FFT.

    The transform length is ``fft_good_size(len(a) + len(b) - 1)``, so no output wraps.

    Parameters
    ----------
    a : ndarray of shape (na,), float64
    b : ndarray of shape (nb,), float64
    backend : {"auto", "native", "reference"}
        "native": our C++ FFT (radix-2 Stockham stages, one radix-3/5 pass, real-input
        packing; GIL released). "reference": ``numpy.fft``.

    Returns
    -------
    c : ndarray of shape (na + nb - 1,), float64

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.kernels.sgg import pld_convolve
    >>> np.round(pld_convolve(np.array([0.5, 0.5]), np.array([0.25, 0.75])), 12).tolist()
    [0.125, 0.5, 0.375]
    """
    a = check_array(a, "a", dtypes=(np.float64,), ndim=1)
    b = check_array(b, "b", dtypes=(np.float64,), ndim=1)
    if a.size == 0 or b.size == 0:
        raise ValueError("a and b must not be empty")
    return _convolve(
        np.ascontiguousarray(a), np.ascontiguousarray(b), device=resolve_device(None), backend=backend
    )


def pld_convolve_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``numpy.fft`` twin of :func:`pld_convolve`."""
    nc = a.size + b.size - 1
    size = fft_good_size(nc)
    return np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)[:nc]


@_convolve.register("reference")
def _convolve_ref(a, b, *, device):  # type: ignore[no-untyped-def]
    return pld_convolve_reference(a, b)


@_convolve.register("native")
def _convolve_native(a, b, *, device):  # type: ignore[no-untyped-def]
    from rml_fast._native import _C

    out = np.empty(a.size + b.size - 1)
    _C.sgg.pld_convolve(out, a, b)
    return out


def pld_self_convolve(
    pmf: np.ndarray, n: int, size: int, shift: int = 0, *, backend: str = "auto"
) -> np.ndarray:
    """Circular ``n``-fold self-convolution on ``size`` points, read out rotated by ``shift``.

    ``out[j] = (pmf_c^{*n})[(shift + j) mod size]`` where ``pmf_c`` is ``pmf`` folded modulo
    ``size``; computed as ``irfft(rfft(pmf_c)^n)`` (binary powers per bin). The caller
    chooses ``size`` and accounts for the mass that the circular transform folds (see
    ``rml_fast.privacy.pld``, ``self_compose``).

    Parameters
    ----------
    pmf : ndarray of shape (m,), float64
    n : int
        Number of compositions, >= 1.
    size : int
        Transform length: an even ``f * 2^k`` (``f`` in {1, 3, 5}); see :func:`fft_good_size`.
    shift : int, default=0
    backend : {"auto", "native", "reference"}

    Returns
    -------
    out : ndarray of shape (size,), float64

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.kernels.sgg import pld_self_convolve
    >>> np.round(pld_self_convolve(np.array([0.5, 0.5]), 2, 4), 12).tolist()
    [0.25, 0.5, 0.25, 0.0]
    """
    p = check_array(pmf, "pmf", dtypes=(np.float64,), ndim=1)
    if p.size == 0:
        raise ValueError("pmf must not be empty")
    n = int(check_scalar(n, "n", Interval("int", 1, None)))
    size = int(check_scalar(size, "size", Interval("int", 2, None)))
    if not _is_good(size):
        raise ValueError(f"size must be an even f * 2^k with f in (1, 3, 5), got {size}")
    return _self_convolve(
        np.ascontiguousarray(p), n, size, int(shift), device=resolve_device(None), backend=backend
    )


def _is_good(size: int) -> bool:
    if size < 2 or size % 2:
        return False
    h = size // 2
    while h % 2 == 0:
        h //= 2
    return h in (1, 3, 5)


def pld_self_convolve_reference(pmf: np.ndarray, n: int, size: int, shift: int = 0) -> np.ndarray:
    """``numpy.fft`` twin of :func:`pld_self_convolve`."""
    folded = np.bincount(np.arange(pmf.size) % size, weights=pmf, minlength=size)
    return np.roll(np.fft.irfft(np.fft.rfft(folded) ** n, size), -(shift % size))


@_self_convolve.register("reference")
def _self_convolve_ref(pmf, n, size, shift, *, device):  # type: ignore[no-untyped-def]
    return pld_self_convolve_reference(pmf, n, size, shift)


@_self_convolve.register("native")
def _self_convolve_native(pmf, n, size, shift, *, device):  # type: ignore[no-untyped-def]
    from rml_fast._native import _C

    out = np.empty(size)
    _C.sgg.pld_self_convolve(out, pmf, n, shift)
    return out
