"""Fixed-budget 1-D Bayesian optimisation of the steering strength (SRLS step 4).

A Gaussian process with a Matérn-5/2 kernel, a constant mean and Gaussian noise is fitted by
maximising the marginal likelihood (L-BFGS-B with restarts); the next point maximises the
logarithm of expected improvement (log-EI, computed stably for very negative z) on a
2048-point grid followed by a bounded local polish. The best *observed* point is returned.

The budget split (3 scrambled-Sobol initial points + 9 GP steps), the min-max normalisation
of multi-metric objectives and the equal weights are **[PROPOSAL]** choices of
``specs/steering_eval.md`` §1.1 (the SRLS paper only states "fixed-budget BO").

References
----------
Ament et al., "Unexpected improvements to expected improvement for Bayesian optimization",
NeurIPS 2023 (arXiv:2310.20708). Rasmussen & Williams, "Gaussian Processes for Machine
Learning", MIT Press 2006, ch. 2 and 5.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import linalg, optimize, special

from rml_fast._validation import Interval, check_array, check_rng, check_scalar

__all__ = ["BOResult", "GaussianProcess1D", "bayes_opt_strength", "log_expected_improvement"]

log = logging.getLogger(__name__)

_SQRT5 = math.sqrt(5.0)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def matern52(a: np.ndarray, b: np.ndarray, length: float) -> np.ndarray:
    """Matérn-5/2 correlation ``(1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r)``, ``r = |a - b| / length``."""
    r = np.abs(a[:, None] - b[None, :]) / length
    return (1.0 + _SQRT5 * r + 5.0 / 3.0 * r * r) * np.exp(-_SQRT5 * r)


def _log_h(z: np.ndarray) -> np.ndarray:
    """``log(phi(z) + z Phi(z))`` without cancellation (the EI of a unit Gaussian)."""
    z = np.asarray(z, dtype=np.float64)
    out = np.empty_like(z)
    hi = z > -1.0
    zh = z[hi]
    out[hi] = np.log(np.exp(-0.5 * zh * zh - _LOG_SQRT_2PI) + zh * special.ndtr(zh))
    lo = ~hi
    zl = -z[lo]  # > 1
    mid = zl < 1e6
    # phi(z) + z Phi(z) = phi(z) (1 - |z| sqrt(pi/2) erfcx(|z|/sqrt2)) for z < 0
    t = np.empty_like(zl)
    t[mid] = np.log1p(-zl[mid] * math.sqrt(math.pi / 2) * special.erfcx(zl[mid] / math.sqrt(2)))
    t[~mid] = -2.0 * np.log(zl[~mid])  # asymptotic 1/z^2
    out[lo] = -0.5 * zl * zl - _LOG_SQRT_2PI + t
    return out


def log_expected_improvement(mean: np.ndarray, std: np.ndarray, best: float) -> np.ndarray:
    """``log EI(x) = log sigma + log h((mu - best) / sigma)`` for maximisation; ``-inf`` where sigma = 0.

    Parameters
    ----------
    mean, std : ndarray of shape (k,)
        Posterior mean and standard deviation.
    best : float
        Incumbent (largest observed value).

    Returns
    -------
    logei : ndarray of shape (k,)

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.steering.bayes_opt import log_expected_improvement
    >>> float(np.exp(log_expected_improvement(np.array([0.0]), np.array([1.0]), 0.0))[0])
    0.3989422804014327
    """
    mean = check_array(mean, "mean", ndim=1)
    std = check_array(std, "std", ndim=1)
    if std.shape != mean.shape:
        raise ValueError(f"std must have the shape of mean {mean.shape}, got {std.shape}")
    if (std < 0).any():
        raise ValueError("std must be >= 0 (a posterior standard deviation)")
    best = check_scalar(best, "best", Interval("real", None, None))
    mean = mean.astype(np.float64, copy=False)
    std = std.astype(np.float64, copy=False)
    out = np.full(mean.shape, -np.inf)
    pos = std > 0
    z = (mean[pos] - best) / std[pos]
    out[pos] = np.log(std[pos]) + _log_h(z)
    return out


class GaussianProcess1D:
    """GP regression on [0, 1] with Matérn-5/2 kernel, constant mean and Gaussian noise.

    ``y = c + f(x) + eps``, ``f ~ GP(0, s2 k_5/2(., .; l))``, ``eps ~ N(0, noise)``; targets
    are standardised internally. Hyper-parameters ``(log l, log s2, log noise, c)`` maximise
    the log marginal likelihood (L-BFGS-B, ``n_restarts`` starts).

    Parameters
    ----------
    noise_bounds : tuple of float, default=(1e-8, 1.0)
        Bounds of the (standardised) noise variance; ``(0, 0)`` fixes it to zero up to a
        ``1e-10`` jitter (noiseless interpolation).
    n_restarts : int, default=5
        Starts of the marginal-likelihood optimisation, ``>= 1``.
    lengthscale_prior : (shape, rate) or None, default=None
        Gamma prior on the length scale, both ``> 0``.
    rng : Generator, int or None
    """

    def __init__(self, noise_bounds: tuple[float, float] = (1e-8, 1.0), n_restarts: int = 5,
                 lengthscale_prior: tuple[float, float] | None = None, rng: Any = None) -> None:
        if not isinstance(noise_bounds, (tuple, list, np.ndarray)) or len(noise_bounds) != 2:
            raise ValueError(f"noise_bounds must be (lo, hi), got {noise_bounds!r}")
        lo = check_scalar(noise_bounds[0], "noise_bounds[0]", Interval("real", 0, None))
        hi = check_scalar(noise_bounds[1], "noise_bounds[1]", Interval("real", 0, None))
        if lo > hi:
            raise ValueError(f"noise_bounds must satisfy 0 <= lo <= hi, got {noise_bounds!r}")
        self.noise_bounds = (float(lo), float(hi))
        self.lengthscale_prior = _check_prior(lengthscale_prior)
        self.n_restarts = int(check_scalar(n_restarts, "n_restarts", Interval("int", 1, None)))
        self.rng = check_rng(rng)

    def _nll(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Negative log marginal likelihood (+ length-scale prior) and its gradient."""
        length, s2, noise, c = math.exp(theta[0]), math.exp(theta[1]), self._noise(theta), theta[3]
        r = np.abs(x[:, None] - x[None, :]) / length
        e = np.exp(-_SQRT5 * r)
        R = (1.0 + _SQRT5 * r + 5.0 / 3.0 * r * r) * e
        K = s2 * R + (noise + 1e-10) * np.eye(x.size)
        try:
            L = np.linalg.cholesky(K)
        except np.linalg.LinAlgError:
            return 1e25, np.zeros(4)
        Kinv = linalg.cho_solve((L, True), np.eye(x.size))
        a = Kinv @ (y - c)
        nll = 0.5 * (y - c) @ a + np.log(np.diag(L)).sum() + 0.5 * x.size * math.log(2 * math.pi)
        M = Kinv - np.outer(a, a)
        dR_dlog_l = 5.0 / 3.0 * r * r * (1.0 + _SQRT5 * r) * e
        grad = np.array([
            0.5 * np.sum(M * (s2 * dR_dlog_l)),
            0.5 * np.sum(M * (s2 * R)),
            0.0 if self.noise_bounds[1] == 0 else 0.5 * noise * np.trace(M),
            -a.sum(),
        ])
        if self.lengthscale_prior is not None:  # Gamma(k, rate) on the length scale
            k, rate = self.lengthscale_prior
            nll += -(k - 1.0) * theta[0] + rate * length
            grad[0] += -(k - 1.0) + rate * length
        return float(nll), grad

    def _noise(self, theta: np.ndarray) -> float:
        return 0.0 if self.noise_bounds[1] == 0 else math.exp(theta[2])

    def fit(self, x: np.ndarray, y: np.ndarray) -> GaussianProcess1D:
        """Fit to points ``x`` in [0, 1] of shape (k,) and values ``y`` of shape (k,)."""
        x = check_array(x, "x", ndim=1).astype(np.float64, copy=False)
        y = check_array(y, "y", ndim=1).astype(np.float64, copy=False)
        if x.size == 0 or y.shape != x.shape:
            raise ValueError(f"x and y must be non-empty of the same shape (k,), got {x.shape} "
                             f"and {y.shape}")
        self.y_mean_ = float(y.mean())
        self.y_std_ = float(y.std()) or 1.0
        ys = (y - self.y_mean_) / self.y_std_
        lo_n = math.log(max(self.noise_bounds[0], 1e-12))
        hi_n = math.log(max(self.noise_bounds[1], 1e-12))
        bounds = [(math.log(0.01), math.log(10.0)), (math.log(1e-2), math.log(1e2)), (lo_n, hi_n),
                  (-3.0, 3.0)]
        starts = [np.array([math.log(0.2), 0.0, max(lo_n, math.log(1e-4)), 0.0])]
        for _ in range(self.n_restarts - 1):
            starts.append(np.array([self.rng.uniform(lo, hi) for lo, hi in bounds]))
        best: Any = None  # an OptimizeResult after the loop (>= 1 start)
        for s in starts:
            res = optimize.minimize(self._nll, s, args=(x, ys), method="L-BFGS-B", jac=True,
                                    bounds=bounds)
            if best is None or res.fun < best.fun:
                best = res
        self.theta_ = best.x
        self.x_ = x
        length, s2, noise, c = (math.exp(best.x[0]), math.exp(best.x[1]), self._noise(best.x),
                                best.x[3])
        K = s2 * matern52(x, x, length) + (noise + 1e-10) * np.eye(x.size)
        self.L_ = linalg.cholesky(K, lower=True)
        self.alpha_ = linalg.cho_solve((self.L_, True), ys - c)
        self.params_ = {"length_scale": length, "signal_var": s2 * self.y_std_**2,
                        "noise_var": noise * self.y_std_**2, "mean": c * self.y_std_ + self.y_mean_,
                        "nll": float(best.fun)}
        return self

    def predict(self, xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the latent ``f + c`` at ``xq`` (k,)."""
        xq = check_array(xq, "xq", ndim=1).astype(np.float64, copy=False)
        length, s2, c = math.exp(self.theta_[0]), math.exp(self.theta_[1]), self.theta_[3]
        Ks = s2 * matern52(xq, self.x_, length)
        mean = c + Ks @ self.alpha_
        v = linalg.solve_triangular(self.L_, Ks.T, lower=True)
        var = np.maximum(s2 - (v * v).sum(0), 0.0)
        return mean * self.y_std_ + self.y_mean_, np.sqrt(var) * self.y_std_


@dataclass
class BOResult:
    """Result of :func:`bayes_opt_strength`.

    Attributes
    ----------
    x_best, y_best : float
        Best observed strength and its objective value (after normalisation, if any).
    X, Y : ndarray of shape (T,)
        Evaluated strengths in order and their (normalised, weighted) objective values.
    metrics : ndarray of shape (T, p) or None
        Raw metric values when the objective returns several.
    gp_params : dict
        Hyper-parameters of the last GP fit.
    """

    x_best: float
    y_best: float
    X: np.ndarray
    Y: np.ndarray
    metrics: np.ndarray | None = None
    gp_params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.x_best = check_scalar(self.x_best, "x_best", Interval("real", None, None))
        self.y_best = check_scalar(self.y_best, "y_best", Interval("real", None, None))
        self.X = check_array(self.X, "X", ndim=1)
        self.Y = check_array(self.Y, "Y", ndim=1)
        if self.Y.shape != self.X.shape:
            raise ValueError(f"Y must have the shape of X {self.X.shape}, got {self.Y.shape}")
        if self.metrics is not None:
            self.metrics = check_array(self.metrics, "metrics", ndim=2)
            if self.metrics.shape[0] != self.X.shape[0]:
                raise ValueError(f"metrics must have one row per entry of X ({self.X.shape[0]}), "
                                 f"got shape {self.metrics.shape}")
        if not isinstance(self.gp_params, dict):
            raise TypeError(f"gp_params must be a dict, got {type(self.gp_params).__name__}")


def _check_prior(prior: Any) -> tuple[float, float] | None:
    """Validate a Gamma(shape, rate) length-scale prior (None: no prior)."""
    if prior is None:
        return None
    if not isinstance(prior, (tuple, list, np.ndarray)) or len(prior) != 2:
        raise ValueError(f"lengthscale_prior must be (shape, rate) or None, got {prior!r}")
    k = check_scalar(prior[0], "lengthscale_prior[0] (shape)", Interval("real", 0, None, "neither"))
    rate = check_scalar(prior[1], "lengthscale_prior[1] (rate)", Interval("real", 0, None, "neither"))
    return float(k), float(rate)


def _scalarise(raw: list[np.ndarray], weights: np.ndarray | None) -> np.ndarray:
    M = np.asarray(raw, dtype=np.float64)
    if M.shape[1] == 1:
        return M[:, 0]
    lo, hi = M.min(0), M.max(0)
    span = np.where(hi > lo, hi - lo, 1.0)
    Z = (M - lo) / span
    w = np.full(M.shape[1], 1.0 / M.shape[1]) if weights is None else weights
    return Z @ w


def bayes_opt_strength(
    objective: Callable[[float], Any],
    bounds: Sequence[float] = (0.0, 1.0),
    budget: int = 12,
    n_init: int = 3,
    rng: Any = None,
    acq: str = "logei",
    *,
    weights: Sequence[float] | None = None,
    n_grid: int = 2048,
    noise: bool = True,
    lengthscale_prior: tuple[float, float] | None = (3.0, 6.0),
) -> BOResult:
    """Maximise a black-box ``objective(alpha)`` over ``alpha`` in ``bounds`` with ``budget`` calls.

    ``n_init`` scrambled-Sobol points, then ``budget - n_init`` steps that each fit the GP
    (:class:`GaussianProcess1D`) and evaluate ``argmax log EI`` (grid of ``n_grid`` points +
    bounded polish). If ``objective`` returns several metrics (a sequence), they are min-max
    normalised over the evaluations so far and combined with ``weights`` (default equal,
    **[PROPOSAL]**), and the whole history is re-scalarised after each call.

    Parameters
    ----------
    objective : callable float -> float or sequence of float
        To be maximised.
    bounds : (float, float), default=(0, 1)
        Search interval ``[lo, hi]``, ``lo < hi``.
    budget : int, default=12
        Total number of objective calls.
    n_init : int, default=3
        Initial space-filling points, ``1 <= n_init <= budget``.
    rng : Generator, int or None
    acq : {"logei", "ei"}, default="logei"
        Acquisition (``"ei"`` maximises plain EI, for comparison).
    weights : sequence of float, optional
        Weights of the normalised metrics: non-negative with a positive sum (checked before
        any call); their number must equal the number of metrics (checked at the first call).
    n_grid : int, default=2048
    noise : bool, default=True
        Fit a noise variance (False: noiseless interpolation).
    lengthscale_prior : (shape, rate) or None, default=(3, 6)
        Gamma prior on the length scale (in units of the search interval), as BoTorch's
        default; it keeps a GP fitted to a handful of points from over-smoothing
        (**[PROPOSAL]**; None gives plain marginal-likelihood fitting).

    Returns
    -------
    result : BOResult

    References
    ----------
    SRLS (ICML 2026, poster 63749; no arXiv id found): fixed-budget BO of the strength.

    Examples
    --------
    >>> from rml_fast.steering.bayes_opt import bayes_opt_strength
    >>> res = bayes_opt_strength(lambda a: -(a - 0.3) ** 2, budget=8, rng=0)
    >>> abs(res.x_best - 0.3) < 0.05
    True
    """
    if not callable(objective):
        raise TypeError(f"objective must be callable, got {type(objective).__name__}")
    if len(bounds) != 2:
        raise ValueError(f"bounds must be (lo, hi), got {bounds!r}")
    lo = check_scalar(bounds[0], "bounds[0]", Interval("real", None, None))
    hi = check_scalar(bounds[1], "bounds[1]", Interval("real", None, None))
    if not lo < hi:
        raise ValueError(f"bounds must satisfy lo < hi, got {bounds!r}")
    budget = int(check_scalar(budget, "budget", Interval("int", 1, 10_000)))
    n_init = int(check_scalar(n_init, "n_init", Interval("int", 1, budget)))
    n_grid = int(check_scalar(n_grid, "n_grid", Interval("int", 16, 10**7)))
    if acq not in ("logei", "ei"):
        raise ValueError(f"acq must be 'logei' or 'ei', got {acq!r}")
    if not isinstance(noise, (bool, np.bool_)):
        raise TypeError(f"noise must be a bool, got {type(noise).__name__}")
    lengthscale_prior = _check_prior(lengthscale_prior)
    w = None
    if weights is not None:
        w = check_array(weights, "weights", ndim=1).astype(np.float64, copy=False)
        if w.size == 0 or (w < 0).any() or not w.sum() > 0:
            raise ValueError(f"weights must be non-negative with a positive sum, got {w!r}")
    gen = check_rng(rng)
    from scipy.stats import qmc

    n_pow2 = max(1, math.ceil(math.log2(n_init)))
    u0 = qmc.Sobol(d=1, scramble=True, seed=gen).random_base2(n_pow2)[:n_init, 0]
    xs: list[float] = []
    raw: list[np.ndarray] = []

    def evaluate(u: float) -> None:
        val = np.atleast_1d(np.asarray(objective(lo + (hi - lo) * u), dtype=np.float64)).ravel()
        if raw and val.shape != raw[0].shape:
            raise ValueError("objective must return the same number of metrics on every call")
        if not np.isfinite(val).all():
            raise ValueError(f"objective returned a non-finite value {val!r}")
        if w is not None and w.shape != val.shape:
            raise ValueError(f"weights must have {val.size} entries, got {w.size}")
        xs.append(float(u))
        raw.append(val)

    for u in u0:
        evaluate(float(u))
    grid = np.linspace(0.0, 1.0, n_grid)
    gp = GaussianProcess1D(noise_bounds=(1e-8, 1.0) if noise else (0.0, 0.0),
                           lengthscale_prior=lengthscale_prior, rng=gen)
    while len(xs) < budget:
        y = _scalarise(raw, w)
        gp.fit(np.array(xs), y)
        best = float(y.max())

        def score(u: np.ndarray, best: float = best) -> np.ndarray:
            mu, sd = gp.predict(u)
            le = log_expected_improvement(mu, sd, best)
            return le if acq == "logei" else np.exp(le)

        s = score(grid)
        i = int(np.argmax(s))
        a, b = grid[max(i - 1, 0)], grid[min(i + 1, n_grid - 1)]
        u_next = float(grid[i])
        if np.isfinite(s[i]) and b > a:
            res = optimize.minimize_scalar(lambda u: -score(np.array([u]))[0], bounds=(a, b),
                                           method="bounded", options={"xatol": 1e-6})
            if res.success and -res.fun > s[i]:
                u_next = float(res.x)
        if np.min(np.abs(np.array(xs) - u_next)) < 1e-9:  # already observed: explore instead
            u_next = float(gen.random())
        evaluate(u_next)
        log.debug("BO step %d: alpha=%.6g", len(xs), lo + (hi - lo) * u_next)
    y = _scalarise(raw, w)
    k = int(np.argmax(y))
    X = lo + (hi - lo) * np.array(xs)
    M = np.asarray(raw)
    params = dict(gp.params_) if hasattr(gp, "params_") else {}
    return BOResult(float(X[k]), float(y[k]), X, y, M if M.shape[1] > 1 else None, params)
