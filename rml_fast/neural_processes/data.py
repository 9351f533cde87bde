"""Meta-learning task generators for neural processes, and the exact GP oracle.

Synthetic 1-D generators follow the reference code of SFConvCNP (arXiv 2606.01172): inputs
``x ~ U[-3, 3]`` for context and targets, ``N_c ~ U{5..50}``, ``N_t ~ U{5..50}`` (held-out
sets use ``N_t = 128``); GP tasks with output scale 1, noise std 0.1 and
``log10 ell ~ U[-0.602, 0]``; sawtooth and square waves; Lotka-Volterra predator-prey series.
``DigitsCompletion`` turns scikit-learn's bundled 8x8 digits into 2-D image-completion tasks;
``SeriesTasks`` cuts context/target tasks from one real series (``SeriesTasks.lynx()``).

Every generator takes ``rng`` (Generator, int or None) and returns :class:`Batch` objects of
torch tensors; within a batch all tasks share ``N_c`` and ``N_t``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy.linalg import cho_factor, cho_solve

from rml_fast._validation import Interval, check_array, check_rng, check_scalar, check_tensor

__all__ = [
    "Batch",
    "DigitsCompletion",
    "GPGenerator",
    "LotkaVolterraGenerator",
    "SawtoothGenerator",
    "SeriesTasks",
    "SquareWaveGenerator",
    "TaskGenerator",
    "batch_oracle_loglik",
    "gp_kernel",
    "gp_oracle_loglik",
]

KERNELS = ("rbf", "matern12", "matern32", "matern52", "periodic")


@dataclass
class Batch:
    """A batch of regression tasks.

    Attributes
    ----------
    xc : torch.Tensor of shape (B, N_c, dim_x)
    yc : torch.Tensor of shape (B, N_c, dim_y)
    xq : torch.Tensor of shape (B, N_t, dim_x)
    yq : torch.Tensor of shape (B, N_t, dim_y)
    info : dict
        Per-task generating parameters (e.g. ``lengthscale`` of shape (B,)).
    """

    xc: torch.Tensor
    yc: torch.Tensor
    xq: torch.Tensor
    yq: torch.Tensor
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("xc", "yc", "xq", "yq"):
            # a tensor with values, real floating, 3-D and finite; raises naming the field
            check_tensor(getattr(self, name), name, ndim=3)
        if self.xc.shape[:2] != self.yc.shape[:2] or self.xq.shape[:2] != self.yq.shape[:2]:
            raise ValueError(
                f"xc/yc and xq/yq must agree in (B, N): got xc {tuple(self.xc.shape)}, "
                f"yc {tuple(self.yc.shape)}, xq {tuple(self.xq.shape)}, yq {tuple(self.yq.shape)}"
            )
        if self.xc.shape[0] != self.xq.shape[0]:
            raise ValueError(
                f"xc and xq must have the same batch size, got {tuple(self.xc.shape)} and "
                f"{tuple(self.xq.shape)}"
            )
        if not isinstance(self.info, dict):
            raise TypeError(f"info must be a dict, got {type(self.info).__name__}")

    def to(self, device: Any) -> Batch:
        """A copy with the four tensors moved to ``device`` (``info`` shared, not copied)."""
        return Batch(self.xc.to(device), self.yc.to(device), self.xq.to(device),
                     self.yq.to(device), self.info)


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def _int_range(v: Any, name: str) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        v = (int(v), int(v))
    if not isinstance(v, (tuple, list)) or len(v) != 2:
        raise TypeError(f"{name} must be an int or a (low, high) pair, got {v!r}")
    lo = int(check_scalar(v[0], f"{name}[0]", Interval("int", 0, None)))
    hi = int(check_scalar(v[1], f"{name}[1]", Interval("int", lo, None)))
    return lo, hi


class TaskGenerator:
    """Base class: draws ``N_c``, ``N_t`` and inputs, delegates the functions to :meth:`_sample_y`.

    Parameters
    ----------
    batch_size : int, default=16
    num_context : int or (int, int), default=(5, 50)
        ``N_c`` or its inclusive range (uniform).
    num_target : int or (int, int), default=(5, 50)
    x_range : (float, float), default=(-3.0, 3.0)
        Inputs are uniform on this interval (per axis).
    dtype : torch.dtype, default=torch.float32
    rng : numpy.random.Generator, int or None
    """

    dim_x = 1
    dim_y = 1

    def __init__(
        self,
        batch_size: int = 16,
        num_context: Any = (5, 50),
        num_target: Any = (5, 50),
        x_range: tuple[float, float] = (-3.0, 3.0),
        dtype: torch.dtype = torch.float32,
        rng: Any = None,
    ) -> None:
        self.batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
        self.num_context = _int_range(num_context, "num_context")
        self.num_target = _int_range(num_target, "num_target")
        if self.num_target[0] < 1:
            raise ValueError("num_target must be >= 1")
        lo, hi = (float(check_scalar(v, "x_range", Interval("real", None, None))) for v in x_range)
        if not lo < hi:
            raise ValueError(f"x_range must satisfy low < high, got {x_range!r}")
        self.x_range = (lo, hi)
        self.dtype = dtype
        self.rng = check_rng(rng)

    def _sample_y(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        raise NotImplementedError

    def sample(self) -> Batch:
        """One :class:`Batch` of ``batch_size`` tasks."""
        nc = int(self.rng.integers(self.num_context[0], self.num_context[1], endpoint=True))
        nt = int(self.rng.integers(self.num_target[0], self.num_target[1], endpoint=True))
        lo, hi = self.x_range
        x = self.rng.uniform(lo, hi, size=(self.batch_size, nc + nt, self.dim_x))
        y, info = self._sample_y(x)
        t = lambda a: torch.as_tensor(a, dtype=self.dtype)  # noqa: E731
        return Batch(t(x[:, :nc]), t(y[:, :nc]), t(x[:, nc:]), t(y[:, nc:]), info)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.sample()

    def batches(self, n: int) -> list[Batch]:
        """``n`` batches (a fixed validation/test set when the generator is seeded)."""
        return [self.sample() for _ in range(int(check_scalar(n, "n", Interval("int", 0, None))))]


# --- Gaussian processes -------------------------------------------------------------------------


def gp_kernel(
    kernel: str,
    x1: np.ndarray,
    x2: np.ndarray,
    lengthscale: float,
    *,
    period: float = 1.0,
    outputscale: float = 1.0,
) -> np.ndarray:
    r"""Stationary covariance ``k(x1_i, x2_j)`` for ``x1`` (n, d), ``x2`` (m, d) -> (n, m).

    ``rbf``: :math:`s^2 e^{-r^2/(2\ell^2)}`; ``matern12/32/52``: the Matern family with
    :math:`\nu = 1/2, 3/2, 5/2`; ``periodic``: :math:`s^2 \exp(-2 \sin^2(\pi r / p)/\ell^2)`.

    ``x1`` and ``x2`` must be finite real arrays with the same number of columns;
    ``lengthscale`` and ``period`` > 0, ``outputscale`` >= 0 (ValueError / TypeError naming
    the argument otherwise).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0], [1.0]])
    >>> np.round(gp_kernel("rbf", x, x, 1.0), 4).tolist()
    [[1.0, 0.6065], [0.6065, 1.0]]
    """
    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    x1 = check_array(x1, "x1", ndim=2)
    x2 = check_array(x2, "x2", ndim=2)
    if x1.shape[1] != x2.shape[1]:
        raise ValueError(
            f"x1 and x2 must have the same number of columns d, got x1 of shape {x1.shape} "
            f"and x2 of shape {x2.shape}"
        )
    lengthscale = check_scalar(lengthscale, "lengthscale", Interval("real", 0, None, "neither"))
    period = check_scalar(period, "period", Interval("real", 0, None, "neither"))
    outputscale = check_scalar(outputscale, "outputscale", Interval("real", 0, None))
    return _gp_kernel(kernel, x1, x2, lengthscale, period=period, outputscale=outputscale)


def _gp_kernel(kernel, x1, x2, lengthscale, *, period=1.0, outputscale=1.0):
    """:func:`gp_kernel` without the checks (the generators' inner loop)."""
    r = np.sqrt(np.maximum(((x1[:, None, :] - x2[None, :, :]) ** 2).sum(-1), 0.0))
    u = r / lengthscale
    if kernel == "rbf":
        k = np.exp(-0.5 * u**2)
    elif kernel == "matern12":
        k = np.exp(-u)
    elif kernel == "matern32":
        k = (1 + math.sqrt(3) * u) * np.exp(-math.sqrt(3) * u)
    elif kernel == "matern52":
        k = (1 + math.sqrt(5) * u + 5.0 / 3.0 * u**2) * np.exp(-math.sqrt(5) * u)
    else:
        k = np.exp(-2 * np.sin(np.pi * r / period) ** 2 / lengthscale**2)
    return outputscale * k


class GPGenerator(TaskGenerator):
    """Samples from a GP prior with per-task hyper-parameters, observed with Gaussian noise.

    Parameters
    ----------
    kernel : {"rbf", "matern12", "matern32", "matern52", "periodic"}, default="rbf"
    noise_std : float, default=0.1
    outputscale : float, default=1.0
    log10_lengthscale : (float, float), default=(-0.602, 0.0)
        ``log10 ell`` is uniform on this range (``ell`` in [0.25, 1]).
    log10_period : (float, float), default=(-0.301, 0.301)
        For ``kernel="periodic"``.
    **kwargs
        :class:`TaskGenerator` arguments.

    ``info`` holds ``lengthscale`` (and ``period``) of shape (B,), plus ``kernel``,
    ``noise_std`` and ``outputscale`` for :func:`gp_oracle_loglik`.

    Examples
    --------
    >>> gen = GPGenerator("matern52", batch_size=4, rng=0)
    >>> b = gen.sample()
    >>> b.xc.shape[0], b.yq.shape[-1], b.info["lengthscale"].shape
    (4, 1, (4,))
    """

    def __init__(
        self,
        kernel: str = "rbf",
        noise_std: float = 0.1,
        outputscale: float = 1.0,
        log10_lengthscale: tuple[float, float] = (-0.602, 0.0),
        log10_period: tuple[float, float] = (-0.301, 0.301),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        self.kernel = kernel
        self.noise_std = float(
            check_scalar(noise_std, "noise_std", Interval("real", 0, None, "neither"))
        )
        self.outputscale = float(
            check_scalar(outputscale, "outputscale", Interval("real", 0, None, "neither"))
        )
        self.log10_lengthscale = tuple(float(v) for v in log10_lengthscale)
        self.log10_period = tuple(float(v) for v in log10_period)

    def _sample_y(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        B, n, _ = x.shape
        (l_lo, l_hi), (p_lo, p_hi) = self.log10_lengthscale, self.log10_period
        ell = np.power(10.0, self.rng.uniform(l_lo, l_hi, size=B))  # = 10 ** u, typed
        per = np.power(10.0, self.rng.uniform(p_lo, p_hi, size=B))
        eps = self.rng.standard_normal((B, n))
        y = np.empty((B, n, 1))
        for b in range(B):
            K = _gp_kernel(
                self.kernel, x[b], x[b], ell[b], period=per[b], outputscale=self.outputscale
            )
            K[np.diag_indices(n)] += self.noise_std**2
            y[b, :, 0] = np.linalg.cholesky(K) @ eps[b]
        info = dict(
            kernel=self.kernel,
            lengthscale=ell,
            noise_std=self.noise_std,
            outputscale=self.outputscale,
        )
        if self.kernel == "periodic":
            info["period"] = per
        return y, info


def gp_oracle_loglik(
    xc: Any,
    yc: Any,
    xq: Any,
    yq: Any,
    kernel: str,
    lengthscale: float,
    noise_std: float,
    *,
    period: float = 1.0,
    outputscale: float = 1.0,
    joint: bool = False,
) -> float:
    r"""Exact GP predictive log-likelihood of ``yq`` given ``(xc, yc)``, per target point.

    With ``A = K_cc + sigma^2 I``: ``mu = K_qc A^{-1} y_c`` and
    ``Sigma = K_qq - K_qc A^{-1} K_cq + sigma^2 I`` (noisy targets). Returns
    ``(1/M) sum_m log N(y_m; mu_m, Sigma_mm)`` (the factorised predictive a CNP can reach), or
    ``(1/M) log N(y_q; mu, Sigma)`` with ``joint=True``.

    Parameters
    ----------
    xc : array of shape (N, d)
    yc : array of shape (N,) or (N, 1)
    xq : array of shape (M, d)
    yq : array of shape (M,) or (M, 1)
    kernel, lengthscale, noise_std, period, outputscale
        The true hyper-parameters (see :func:`gp_kernel`).
    joint : bool, default=False

    Returns
    -------
    loglik : float

    Examples
    --------
    >>> import numpy as np
    >>> x = np.linspace(-1, 1, 5)[:, None]
    >>> y = np.sin(3 * x[:, 0])
    >>> ll = gp_oracle_loglik(x[:3], y[:3], x[3:], y[3:], "rbf", 0.5, 0.1)
    >>> bool(np.isfinite(ll)), ll > gp_oracle_loglik(x[:3], -y[:3], x[3:], y[3:], "rbf", 0.5, 0.1)
    (True, True)
    >>> round(gp_oracle_loglik(x[:0], np.zeros(0), x[:1], np.zeros(1), "rbf", 0.5, 1.0), 4)
    -1.2655
    """
    xc = check_array(xc, "xc", ndim=2)
    xq = check_array(xq, "xq", ndim=2)
    yc = check_array(yc, "yc", ndim=(1, 2)).reshape(-1)
    yq = check_array(yq, "yq", ndim=(1, 2)).reshape(-1)
    if yc.shape[0] != xc.shape[0]:
        raise ValueError(
            f"xc and yc must have the same number of points, got xc of shape {xc.shape} and "
            f"yc with {yc.shape[0]} values"
        )
    if yq.shape[0] != xq.shape[0]:
        raise ValueError(
            f"xq and yq must have the same number of points, got xq of shape {xq.shape} and "
            f"yq with {yq.shape[0]} values"
        )
    if xc.shape[1] != xq.shape[1]:
        raise ValueError(
            f"xc and xq must have the same number of columns d, got {xc.shape} and {xq.shape}"
        )
    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    lengthscale = check_scalar(lengthscale, "lengthscale", Interval("real", 0, None, "neither"))
    period = check_scalar(period, "period", Interval("real", 0, None, "neither"))
    outputscale = check_scalar(outputscale, "outputscale", Interval("real", 0, None))
    _check_bool(joint, "joint")
    # bounded so that the variance noise_std**2 stays a finite float
    s2 = float(check_scalar(noise_std, "noise_std", Interval("real", 0, 1e150, "neither"))) ** 2
    kw = dict(period=period, outputscale=outputscale)
    Kqq = _gp_kernel(kernel, xq, xq, lengthscale, **kw)
    if xc.shape[0] > 0:
        Kcc = _gp_kernel(kernel, xc, xc, lengthscale, **kw) + s2 * np.eye(xc.shape[0])
        Kqc = _gp_kernel(kernel, xq, xc, lengthscale, **kw)
        cf = cho_factor(Kcc, lower=True)
        mu = Kqc @ cho_solve(cf, yc)
        cov = Kqq - Kqc @ cho_solve(cf, Kqc.T)
    else:
        mu, cov = np.zeros(xq.shape[0]), Kqq
    cov = cov + s2 * np.eye(xq.shape[0])
    M = xq.shape[0]
    if joint:
        L = np.linalg.cholesky(cov)
        alpha = np.linalg.solve(L, yq - mu)
        return float(
            (-0.5 * alpha @ alpha - np.log(np.diag(L)).sum() - 0.5 * M * math.log(2 * math.pi)) / M
        )
    var = np.diag(cov)
    return float(np.mean(-0.5 * ((yq - mu) ** 2 / var + np.log(2 * math.pi * var))))


def batch_oracle_loglik(batch: Batch, *, joint: bool = False) -> float:
    """Mean over the tasks of a :class:`GPGenerator` batch of :func:`gp_oracle_loglik`."""
    info = batch.info
    if "kernel" not in info:
        raise ValueError("batch was not drawn from a GPGenerator (no 'kernel' in info)")
    vals = []
    for b in range(batch.xc.shape[0]):
        vals.append(
            gp_oracle_loglik(
                batch.xc[b].double().numpy(),
                batch.yc[b].double().numpy(),
                batch.xq[b].double().numpy(),
                batch.yq[b].double().numpy(),
                info["kernel"],
                float(info["lengthscale"][b]),
                info["noise_std"],
                period=float(info["period"][b]) if "period" in info else 1.0,
                outputscale=info["outputscale"],
                joint=joint,
            )
        )
    return float(np.mean(vals))


# --- periodic waves -----------------------------------------------------------------------------


class SawtoothGenerator(TaskGenerator):
    """Sawtooth waves ``y = A (2 frac(f (x dir - offset)) - 1) + noise_std * eps``.

    ``f ~ U[freq_range]``, ``A = amplitude``, ``dir = +-1``, ``offset ~ U[0, 1) / f``.

    Parameters
    ----------
    freq_range : (float, float), default=(0.5, 5.0)
    amplitude : float, default=1.0
    noise_std : float, default=0.05
    **kwargs
        :class:`TaskGenerator` arguments.
    """

    def __init__(
        self,
        freq_range: tuple[float, float] = (0.5, 5.0),
        amplitude: float = 1.0,
        noise_std: float = 0.05,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.freq_range = tuple(float(v) for v in freq_range)
        self.amplitude = float(amplitude)
        self.noise_std = float(check_scalar(noise_std, "noise_std", Interval("real", 0, None)))

    def _phase(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        B = x.shape[0]
        f_lo, f_hi = self.freq_range
        f = self.rng.uniform(f_lo, f_hi, size=(B, 1, 1))
        direction = self.rng.choice([-1.0, 1.0], size=(B, 1, 1))
        offset = self.rng.uniform(0, 1, size=(B, 1, 1)) / f
        return f * (x * direction - offset), dict(
            freq=f[:, 0, 0], direction=direction[:, 0, 0], offset=offset[:, 0, 0]
        )

    def _wave(self, u: np.ndarray) -> np.ndarray:
        return 2 * (u - np.floor(u)) - 1

    def _sample_y(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        u, info = self._phase(x)
        y = self.amplitude * self._wave(u) + self.noise_std * self.rng.standard_normal(x.shape)
        return y, info


class SquareWaveGenerator(SawtoothGenerator):
    """Square waves ``y = A sign(sin(2 pi f (x dir - offset))) + noise_std * eps``
    (PROPOSAL: the spec calls it "analogous" to the sawtooth; same parameter draws)."""

    def _wave(self, u: np.ndarray) -> np.ndarray:
        return np.where(u - np.floor(u) < 0.5, 1.0, -1.0)


# --- predator-prey --------------------------------------------------------------------------------


class LotkaVolterraGenerator(TaskGenerator):
    """Stochastic Lotka-Volterra predator-prey series (``dim_y = 2``).

    Per task ``alpha ~ U[0.2, 0.8]``, ``beta ~ U[0.04, 0.08]``, ``gamma ~ U[0.8, 1.2]``,
    ``delta ~ U[0.04, 0.08]``, noise ``scale ~ U[1, 5]``; prey ``X`` and predators ``Y`` start
    at ``U[5, 100]`` and follow over ``[0, 100]`` the log-space SDE

    ``d log X = (alpha - beta Y) dt + 0.01 scale dW_1``,
    ``d log Y = (delta X - gamma) dt + 0.01 scale dW_2``,

    integrated by symplectic (semi-implicit) Euler-Maruyama with step ``dt`` (so the orbits of
    the deterministic system neither spiral out nor die out numerically) and capped at 500.
    Observations at random times; time is scaled by 0.1 (inputs in ``[0, 10]``) and
    populations by 0.01. PROPOSAL: the reference uses a stochastic simulator we could not
    reproduce exactly; this multiplicative-noise SDE replaces it. The 1-D default grid has
    period 10, equal to the input range: use ``freq_resolution <= 0.05`` for these tasks.

    Parameters
    ----------
    dt : float, default=0.01
    **kwargs
        :class:`TaskGenerator` arguments (``x_range`` is fixed to ``(0, 10)``).
    """

    dim_y = 2

    def __init__(self, dt: float = 0.01, **kwargs: Any) -> None:
        kwargs["x_range"] = (0.0, 10.0)
        super().__init__(**kwargs)
        self.dt = float(check_scalar(dt, "dt", Interval("real", 0, 1, "right")))

    def simulate(self, B: int, t_max: float = 100.0) -> tuple[np.ndarray, np.ndarray]:
        """Simulate ``B`` series: times (T,) and populations (B, T, 2) (unscaled)."""
        rng, dt = self.rng, self.dt
        a = rng.uniform(0.2, 0.8, B)
        b = rng.uniform(0.04, 0.08, B)
        g = rng.uniform(0.8, 1.2, B)
        d = rng.uniform(0.04, 0.08, B)
        sig = 0.01 * rng.uniform(1.0, 5.0, B)
        T = round(t_max / dt) + 1
        pop = np.empty((B, T, 2))
        lx, ly = np.log(rng.uniform(5, 100, B)), np.log(rng.uniform(5, 100, B))
        cap = math.log(500.0)
        sq = math.sqrt(dt)
        for i in range(T):
            pop[:, i, 0], pop[:, i, 1] = np.exp(lx), np.exp(ly)
            dW = rng.standard_normal((2, B)) * sq
            lx = np.minimum(lx + (a - b * np.exp(ly)) * dt + sig * dW[0], cap)
            ly = np.minimum(ly + (d * np.exp(lx) - g) * dt + sig * dW[1], cap)
        return np.arange(T) * dt, pop

    def _sample_y(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        B = x.shape[0]
        t, pop = self.simulate(B)
        idx = np.clip(np.rint(x[..., 0] * 10 / self.dt).astype(int), 0, t.shape[0] - 1)
        y = np.take_along_axis(pop, idx[..., None].repeat(2, -1), axis=1) * 0.01
        return y, {}


# --- a real series ---------------------------------------------------------------------------------


class SeriesTasks(TaskGenerator):
    """Context/target tasks cut from one observed series ``(t_i, y_i)``, e.g. the lynx counts.

    Times map affinely from ``[t_min, t_max]`` onto ``x_range``; values are optionally
    ``log10``-transformed, then standardised to zero mean and unit variance over the series
    (``y_mean``, ``y_std`` keep the constants). A task takes a window of ``window`` consecutive
    observations (random start) and splits it:

    * ``split="random"``: ``N_c`` random points are the context, ``N_t`` random others the targets
      (interpolation);
    * ``split="forecast"``: the first ``N_c`` points of a window of ``N_c + N_t`` points are the
      context, the next ``N_t`` the targets (extrapolation forward in time).

    ``info["index_c"]``, ``info["index_q"]`` (B, N) give the positions in the series.

    Parameters
    ----------
    t : array-like of shape (n,)
        Strictly increasing times.
    y : array-like of shape (n,)
        Observations (positive when ``transform="log10"``).
    transform : {"none", "log10"}, default="none"
    split : {"random", "forecast"}, default="random"
    window : int or None, default=None
        Window length for ``split="random"`` (None: the whole series).
    num_context : int or (int, int), default=(5, 40)
    num_target : int or (int, int), default=(5, 40)
    batch_size, x_range, dtype, rng
        As :class:`TaskGenerator`.

    Examples
    --------
    >>> gen = SeriesTasks.lynx(batch_size=2, num_context=20, num_target=10, rng=0)
    >>> b = gen.sample()
    >>> b.xc.shape, b.yq.shape
    (torch.Size([2, 20, 1]), torch.Size([2, 10, 1]))
    """

    def __init__(
        self,
        t: Any,
        y: Any,
        *,
        transform: str = "none",
        split: str = "random",
        window: int | None = None,
        num_context: Any = (5, 40),
        num_target: Any = (5, 40),
        **kwargs: Any,
    ) -> None:
        super().__init__(num_context=num_context, num_target=num_target, **kwargs)
        t = check_array(t, "t", ndim=1)
        y = check_array(y, "y", ndim=1)
        if t.shape != y.shape or t.shape[0] < 2:
            raise ValueError(f"t and y must have the same length >= 2, got {t.shape}, {y.shape}")
        if not np.all(np.diff(t) > 0):
            raise ValueError("t must be strictly increasing")
        if transform not in ("none", "log10"):
            raise ValueError(f"transform must be 'none' or 'log10', got {transform!r}")
        if split not in ("random", "forecast"):
            raise ValueError(f"split must be 'random' or 'forecast', got {split!r}")
        if transform == "log10":
            if np.any(y <= 0):
                raise ValueError("y must be positive for transform='log10'")
            y = np.log10(y)
        n = t.shape[0]
        self.window = n if window is None else int(check_scalar(window, "window", Interval("int", 2, n)))
        need = self.num_context[1] + self.num_target[1]
        if need > (self.window if split == "random" else n):
            raise ValueError(
                f"num_context + num_target (up to {need}) exceed the "
                f"{'window' if split == 'random' else 'series'} length"
            )
        lo, hi = self.x_range
        self.x = lo + (t - t[0]) * (hi - lo) / (t[-1] - t[0])
        self.y_mean, self.y_std = float(y.mean()), float(y.std())
        self.y = (y - self.y_mean) / self.y_std
        self.split = split

    @classmethod
    def lynx(cls, **kwargs: Any) -> SeriesTasks:
        """Tasks from the annual Canadian lynx trappings 1821-1934
        (:func:`rml_fast.datasets.load_lynx`), ``log10``-transformed by default."""
        from rml_fast.datasets import load_lynx

        years, counts = load_lynx()
        kwargs.setdefault("transform", "log10")
        return cls(years.astype(np.float64), counts, **kwargs)

    def sample(self) -> Batch:
        B, n, rng = self.batch_size, self.x.shape[0], self.rng
        nc = int(rng.integers(self.num_context[0], self.num_context[1], endpoint=True))
        nt = int(rng.integers(self.num_target[0], self.num_target[1], endpoint=True))
        width = self.window if self.split == "random" else nc + nt
        start = rng.integers(0, n - width, size=B, endpoint=True)
        if self.split == "random":
            pick = np.argsort(rng.random((B, width)), axis=1)[:, : nc + nt]
        else:
            pick = np.tile(np.arange(nc + nt), (B, 1))
        idx = start[:, None] + pick
        ic, iq = idx[:, :nc], idx[:, nc:]
        t = lambda a: torch.as_tensor(a[..., None], dtype=self.dtype)  # noqa: E731
        info = dict(index_c=ic, index_q=iq)
        return Batch(t(self.x[ic]), t(self.y[ic]), t(self.x[iq]), t(self.y[iq]), info)


# --- images ----------------------------------------------------------------------------------------


class DigitsCompletion(TaskGenerator):
    """Image completion on scikit-learn's bundled 8x8 digits (2-D inputs, ``dim_y = 1``).

    Pixel ``(i, j)`` sits at ``x = ((j - 3.5) / 4, (3.5 - i) / 4)`` (inside ``[-1, 1]^2``), the
    value is ``intensity / 16 - 0.5``. A task observes a random fraction ``U[context_fraction]``
    of the pixels as context and targets all 64 pixels (or ``num_target`` random ones).

    Parameters
    ----------
    split : {"train", "test"}, default="train"
        The first 1500 images or the remaining 297.
    context_fraction : (float, float), default=(0.05, 0.5)
    batch_size : int, default=16
    num_target : int or None, default=None
        None: all 64 pixels.
    dtype, rng
        As :class:`TaskGenerator`.
    """

    dim_x = 2

    def __init__(
        self,
        split: str = "train",
        context_fraction: tuple[float, float] = (0.05, 0.5),
        batch_size: int = 16,
        num_target: int | None = None,
        dtype: torch.dtype = torch.float32,
        rng: Any = None,
    ) -> None:
        from sklearn.datasets import load_digits

        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        super().__init__(
            batch_size=batch_size, num_context=(1, 64), num_target=64, dtype=dtype, rng=rng
        )
        imgs = load_digits().images.astype(np.float64) / 16.0 - 0.5
        self.images = imgs[:1500] if split == "train" else imgs[1500:]
        ii, jj = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
        self.coords = np.stack([(jj.ravel() - 3.5) / 4, (3.5 - ii.ravel()) / 4], axis=-1)
        lo, hi = (float(v) for v in context_fraction)
        if not 0 < lo <= hi < 1:
            raise ValueError(
                f"context_fraction must satisfy 0 < low <= high < 1, got {context_fraction!r}"
            )
        self.context_fraction = (lo, hi)
        self.n_target = (
            64
            if num_target is None
            else int(check_scalar(num_target, "num_target", Interval("int", 1, 64)))
        )

    def sample(self) -> Batch:
        B = self.batch_size
        nc = max(1, round(64 * self.rng.uniform(*self.context_fraction)))
        which = self.rng.integers(0, self.images.shape[0], size=B)
        vals = self.images[which].reshape(B, 64)
        perm = np.argsort(self.rng.random((B, 64)), axis=1)
        ci, ti = (
            perm[:, :nc],
            (perm[:, : self.n_target] if self.n_target < 64 else np.tile(np.arange(64), (B, 1))),
        )
        t = lambda a: torch.as_tensor(a, dtype=self.dtype)  # noqa: E731
        return Batch(
            t(self.coords[ci]),
            t(np.take_along_axis(vals, ci, 1)[..., None]),
            t(self.coords[ti]),
            t(np.take_along_axis(vals, ti, 1)[..., None]),
            dict(image_index=which),
        )
