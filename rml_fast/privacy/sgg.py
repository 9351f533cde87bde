"""Spherical Generalized Gamma (SGG) mechanisms with tight PLD accounting.

Release ``Q(D) + X`` for a query ``Q`` with l2 sensitivity ``Delta``, where
``X = R U``, ``U`` uniform on the unit sphere of ``R^dim`` and ``R`` generalized-gamma:

    f_R(r) = p / (sigma^k Gamma(k/p)) r^{k-1} exp(-(r/sigma)^p),
    f_X(x) ~ ||x||^{k-dim} exp(-(||x||/sigma)^p).

The family contains the Gaussian mechanism ``N(0, s^2 I)`` (``sigma = sqrt(2) s``,
``k = dim``, ``p = 2``), the l2 mechanism ``f ~ exp(-||x||/sigma)`` (``k = dim, p = 1``;
Joseph, Kulesza, Yu, arXiv 2502.15929) and, in one dimension, Laplace (``k = p = 1``).
Its mean squared error is ``E||X||^2 = sigma^2 Gamma((k+2)/p) / Gamma(k/p)``.

[PROPOSED] The parametrisation (sigma, k, p) is our reading of the SGG family of
Wei, Bienstock, Polychroniadou, "Asymptotic optimality of the high-dimensional Gaussian
mechanism and improved low-dimensional mechanisms for DP" (arXiv 2606.08681); the
paper's exact symbols were not available to us. Every SGG member is spherically symmetric,
so ``(law(X), law(X + Delta e1))`` is a dominating pair and its privacy-loss distribution
composes tightly (rml_fast.privacy.pld).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import special

from rml_fast._validation import Interval, check_array, check_scalar
from rml_fast.kernels import sgg as _k
from rml_fast.kernels.random import seed_from_rng
from rml_fast.privacy import _snapping
from rml_fast.privacy._pld_discretise import (
    _directions,
    _find_bound,
    _pmf_from_cdf,
    _symmetric_model,
)
from rml_fast.privacy._sgg_1d import loss_cdf_1d
from rml_fast.privacy.pld import PrivacyLossDistribution, _common_args

__all__ = ["SGGMechanism", "optimal_sgg"]

_POS = Interval("real", 0.0, None, "neither")
_EPS = Interval("real", 0.0, None, "neither")
_DELTA = Interval("real", 0.0, 1.0, "neither")
#: largest epsilon whose e^epsilon the single-release accountant can evaluate (float64 range)
_MAX_EXP = 700.0
_N = Interval("int", 1, None)
# The quadrature CDF is accurate to ~1e-15 absolute, so 1 - F cannot certify a smaller upper
# tail: the top bucket is placed where 1 - F <= 1e-13, and that (computed) mass goes to +inf.
QUADRATURE_TAIL = 1e-13
_BOUND_NODES = 480  # radius nodes of the quadrature that only places truncation bounds


@dataclass(frozen=True)
class SGGMechanism:
    """A Spherical Generalized Gamma additive-noise mechanism (frozen record).

    ``M(D) = Q(D) + X``, ``X = sigma G^{1/p} U``, ``G ~ Gamma(k/p, 1)``, ``U`` uniform on
    the sphere of ``R^dim``; ``f_X(x) ~ ||x||^{k-dim} exp(-(||x||/sigma)^p)``.

    Parameters
    ----------
    dim : int
        Dimension T of the query, >= 1.
    sigma : float
        Scale, > 0.
    k : float or None, default=None
        Shape, > 0; None means ``k = dim`` (the default member; ``k != dim`` puts a zero or
        a pole of the density at the origin and needs far more noise). Every k > 0 is
        supported for every dim; for ``dim = 1, k != 1`` the loss CDF comes from a NumPy
        monotone-piece inversion (``rml_fast.privacy._sgg_1d``), slower than the other members.
    p : float, default=2.0
        Power, > 0. ``p = 2`` is Gaussian, ``p = 1`` the l2 mechanism.
    sensitivity : float, default=1.0
        l2 sensitivity Delta of the query, > 0.
    granularity : "auto", float or None, default="auto"
        Floating-point-safe release ("snapping"). With a power of two ``g``,
        :meth:`randomize` releases ``g (rnd(x / g) + rnd(X / g))``, ``rnd(t) =
        floor(t + 1/2)``: every released value is an exact multiple of ``g`` and the
        release is a post-processing of the exact mechanism applied to the rounded input
        ``g rnd(x / g)`` (Mironov, CCS 2012, snapping; Google differential-privacy "Secure
        Noise Generation" granularity). ``"auto"``: the largest power of two <=
        ``Delta 2**-30 / sqrt(dim)``, but at least the smallest one >= ``std 2**-40``
        (``rml_fast.privacy._snapping.auto_granularity``). The accounting
        (:meth:`pld`, :meth:`delta_for_epsilon`, :meth:`epsilon_for_delta`,
        :meth:`calibrate`) then uses the sensitivity of the rounded query,
        :attr:`accounting_sensitivity`: ``g ceil(Delta / g)`` in one dimension (= Delta
        when Delta is a multiple of g) and ``Delta + g sqrt(dim)`` otherwise. An explicit
        float must be a power of two >= ``std * 2**-52`` (finer grids cannot hide the
        noise's own float64 resolution). ``None`` is the former exact-arithmetic-only
        behaviour: ``fl(x + X)``, NOT floating-point safe (its low bits leak ``x``).

    References
    ----------
    Wei, Bienstock, Polychroniadou, arXiv 2606.08681 (SGG family; parametrisation
    [PROPOSED]). Joseph, Kulesza, Yu, arXiv 2502.15929 (l2 mechanism). Balle & Wang,
    arXiv 1805.06530 (analytic Gaussian mechanism). Mironov, "On significance of the least
    significant bits for differential privacy", CCS 2012 (the low-bit attack and
    snapping); Holohan & Braghin, "Secure random sampling in differential privacy",
    ESORICS 2021.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.privacy import SGGMechanism
    >>> mech = SGGMechanism.gaussian(dim=10, std=2.0)
    >>> round(mech.mse(), 6)
    40.0
    >>> mech.sample(3, rng=0).shape
    (3, 10)
    >>> g = mech.grid                      # the snapping granularity, 2**-32 here
    >>> y = mech.randomize(np.zeros(10), rng=0)
    >>> bool(np.all(y / g == np.round(y / g)))   # every released value is a multiple of g
    True
    """

    dim: int
    sigma: float
    k: float | None = None
    p: float = 2.0
    sensitivity: float = 1.0
    granularity: float | str | None = "auto"

    def __post_init__(self) -> None:
        dim = int(check_scalar(self.dim, "dim", Interval("int", 1, None)))
        object.__setattr__(self, "dim", dim)
        object.__setattr__(self, "sigma", float(check_scalar(self.sigma, "sigma", _POS)))
        k = float(dim) if self.k is None else float(check_scalar(self.k, "k", _POS))
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "p", float(check_scalar(self.p, "p", _POS)))
        object.__setattr__(
            self, "sensitivity", float(check_scalar(self.sensitivity, "sensitivity", _POS))
        )
        gran = _snapping.check_granularity(self.granularity)
        object.__setattr__(self, "granularity", gran)
        if isinstance(gran, float) and gran < math.ldexp(self.std, -52):
            raise ValueError(
                f"granularity={gran!r} is below the float64 resolution of the noise "
                f"(std * 2**-52 = {math.ldexp(self.std, -52)!r}); use a power of two >= that, "
                "'auto' or None"
            )

    # -- members -----------------------------------------------------------------------
    @classmethod
    def gaussian(
        cls, dim: int, std: float, sensitivity: float = 1.0, *, granularity: float | str | None = "auto"
    ) -> SGGMechanism:
        """The Gaussian mechanism ``N(0, std^2 I_dim)``: ``sigma = sqrt(2) std, k = dim, p = 2``."""
        std = float(check_scalar(std, "std", _POS))
        return cls(dim, math.sqrt(2.0) * std, None, 2.0, sensitivity, granularity)

    @classmethod
    def l2(
        cls, dim: int, sigma: float, sensitivity: float = 1.0, *, granularity: float | str | None = "auto"
    ) -> SGGMechanism:
        """The l2 mechanism ``f(x) ~ exp(-||x|| / sigma)``: ``k = dim, p = 1``."""
        return cls(dim, sigma, None, 1.0, sensitivity, granularity)

    @property
    def grid(self) -> float | None:
        """The snapping granularity ``g`` in use (a power of two), or None when it is off.

        ``"auto"``: ``max(pow2_floor(Delta 2**-30 / sqrt(dim)), pow2_ceil(std 2**-40))``.
        """
        if self.granularity is None:
            return None
        if self.granularity == "auto":
            return _snapping.auto_granularity(self.sensitivity, self.dim, self.std)
        return float(self.granularity)  # type: ignore[arg-type]

    @property
    def accounting_sensitivity(self) -> float:
        """The l2 sensitivity the accountant uses: that of the rounded query ``g rnd(x/g)``.

        ``g ceil(Delta / g)`` for ``dim = 1`` (``< Delta + g``; equal to Delta when Delta is
        a multiple of g), ``Delta + g sqrt(dim)`` for ``dim >= 2``, Delta without snapping
        (see ``rml_fast.privacy._snapping.effective_sensitivity``).
        """
        return _snapping.effective_sensitivity(self.sensitivity, self.grid, self.dim)

    @property
    def _k(self) -> float:
        return float(self.k)  # type: ignore[arg-type]

    @property
    def is_gaussian(self) -> bool:
        """Whether this member is the Gaussian mechanism (p = 2, k = dim)."""
        return self.p == 2.0 and self._k == float(self.dim)

    @property
    def std(self) -> float:
        """Per-coordinate standard deviation ``sqrt(E||X||^2 / dim)``."""
        return math.sqrt(self.mse() / self.dim)

    def mse(self) -> float:
        """``E||X||^2 = sigma^2 Gamma((k+2)/p) / Gamma(k/p)``."""
        k, p = self._k, self.p
        return self.sigma**2 * math.exp(special.gammaln((k + 2) / p) - special.gammaln(k / p))

    # -- noise -------------------------------------------------------------------------
    def sample(self, n: int, rng: Any = None, *, device: Any = None, dtype: Any = np.float64) -> Any:
        """Draw ``n`` noise vectors.

        Parameters
        ----------
        n : int
        rng : numpy.random.Generator, int or None
            Source of the Philox stream key (same key -> same noise on CPU and GPU).
        device : None, "cpu", "cuda[:N]" or torch.device
            None returns NumPy; otherwise a torch tensor there (CUDA runs the Triton kernel).
        dtype : float64 or float32 (NumPy or torch), default=float64

        Returns
        -------
        ndarray or torch.Tensor of shape (n, dim)
        """
        return _k.sgg_sample(
            n, self.dim, self.sigma, self._k, self.p, seed_from_rng(rng), dtype=dtype, device=device
        )

    def randomize(self, x: Any, rng: Any = None) -> Any:
        """Release ``x + X`` (floating-point safe by default): NumPy array or torch tensor.

        With snapping (``granularity`` not None; ``g = self.grid``) the release is
        ``g (rnd(x / g) + rnd(X / g))``, ``rnd(t) = floor(t + 1/2)``, computed exactly in
        float64 and cast to the input's dtype: every value is a multiple of ``g`` and the
        release is a post-processing of the exact mechanism on the rounded input (see
        :attr:`accounting_sensitivity`). With ``granularity=None``: ``fl(x + X)``, not
        floating-point safe (Mironov 2012).

        Parameters
        ----------
        x : ndarray or torch.Tensor of shape (dim,) or (n, dim), float32 or float64
            Not modified. With snapping, ``|x| <= 2**1000 min(g, 1)`` is required. Released
            values equal ``g (K + R)`` exactly while ``|K + R| <= 2**53`` (float64) or
            ``2**24`` (float32); beyond, they are its correctly rounded value, still a
            function of ``K + R`` and a multiple of ``g`` (so still floating-point safe).
        rng : numpy.random.Generator, int or None
            Source of the Philox stream key.

        Returns
        -------
        ndarray or torch.Tensor
            Same shape, dtype and device as ``x`` (float64 is never downcast).

        Raises
        ------
        ValueError
            For a wrong shape, non-finite values, or ``|x| > 2**1000 min(g, 1)`` with snapping.

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.privacy import SGGMechanism
        >>> m = SGGMechanism.gaussian(1, std=1.0)
        >>> y = m.randomize(np.ones((4, 1)), rng=0)
        >>> g = m.grid
        >>> bool(np.all(np.floor(y / g) == y / g)), y.dtype
        (True, dtype('float64'))
        """
        is_torch = hasattr(x, "detach") and type(x).__module__.startswith("torch")
        if is_torch:
            if x.ndim not in (1, 2) or x.shape[-1] != self.dim:
                raise ValueError(f"x must have shape (dim,) or (n, dim) with dim={self.dim}, got {tuple(x.shape)}")
            if not x.dtype.is_floating_point or x.dtype not in _torch_float_dtypes():
                raise TypeError(f"x must be a float32 or float64 tensor, got {x.dtype}")
            if not bool(x.isfinite().all()):
                raise ValueError("x must be finite")
            arr = x
        else:
            arr = check_array(x, "x", ndim=(1, 2))
            if arr.shape[-1] != self.dim:
                raise ValueError(f"x must have shape (dim,) or (n, dim) with dim={self.dim}, got {arr.shape}")
        g = self.grid
        if g is None:
            noise = _k.noise_like(arr, self.sigma, self._k, self.p, seed_from_rng(rng))
            if is_torch:
                return noise.add_(arr)  # in place into the fresh noise buffer: no extra (n, dim) copy
            return np.add(noise, arr, out=noise)  # one (n, dim) buffer: the noise, then x added in place
        bound = _snapping.MAX_INPUT_UNITS * min(g, 1.0)
        amax = float(arr.abs().max()) if is_torch else float(np.max(np.abs(arr), initial=0.0))
        if amax > bound:
            raise ValueError(
                f"x has |x| up to {amax!r}, beyond 2**1000 * min(granularity, 1) = {bound!r} "
                f"(x / g would approach float64 overflow for g = {g!r}); rescale the query"
            )
        n = 1 if arr.ndim == 1 else int(arr.shape[0])
        if is_torch:
            import torch

            noise = _k.sgg_sample(
                n, self.dim, self.sigma, self._k, self.p, seed_from_rng(rng),
                dtype=torch.float64, device=arr.device,
            ).reshape(arr.shape)
        else:
            noise = _k.sgg_sample(
                n, self.dim, self.sigma, self._k, self.p, seed_from_rng(rng), dtype=np.float64
            ).reshape(arr.shape)
        return _snapping.snap_release(arr, noise, g, arr.dtype)

    def privacy_loss(self, x: Any) -> np.ndarray:
        """``L(x) = ln f(x) / f(x - Delta e1) = phi(||x - Delta e1||) - phi(||x||)``.

        ``phi(s) = (s/sigma)^p - (k - dim) ln s``; ``x`` of shape (n, dim) -> (n,).
        """
        arr = check_array(x, "x", dtypes=(np.float64,), ndim=2)
        if arr.shape[1] != self.dim:
            raise ValueError(f"x must have shape (n, {self.dim}), got {arr.shape}")
        shifted = arr.copy()
        shifted[:, 0] -= self.sensitivity
        r, r2 = np.linalg.norm(arr, axis=1), np.linalg.norm(shifted, axis=1)
        return self._phi(r2) - self._phi(r)

    def _phi(self, s: np.ndarray) -> np.ndarray:
        c = self._k - self.dim
        with np.errstate(divide="ignore"):
            return (s / self.sigma) ** self.p - (c * np.log(s) if c else 0.0)

    # -- accounting --------------------------------------------------------------------
    def pld(
        self,
        value_discretization_interval: float = 1e-4,
        *,
        sampling_prob: float = 1.0,
        relation: str = "add_or_remove",
        tail_mass_truncation: float = 1e-15,
        method: str = "auto",
        num_nodes: int | None = None,
        estimator: str = "connect_dots",
    ) -> PrivacyLossDistribution:
        """The pessimistic privacy-loss distribution of one release (optionally subsampled).

        Parameters
        ----------
        value_discretization_interval : float, default=1e-4
        sampling_prob : float, default=1.0
            Poisson sampling rate q in (0, 1].
        relation : {"add_or_remove", "remove", "add"}
        tail_mass_truncation : float, default=1e-15
        method : {"auto", "quadrature"}, default="auto"
            "auto" uses the exact Gaussian loss law for the Gaussian member and the
            quadrature kernel otherwise; "quadrature" always uses the kernel.
        estimator : {"connect_dots", "bucket"}, default="connect_dots"
            Pessimistic discretisation (see ``PrivacyLossDistribution.from_gaussian``).
        num_nodes : int, optional
            Radius quadrature nodes (default 1600, 6400 for dim 2; the kink-aware rule
            converges fast; dim 2 has the slowest, ~1e-9 at 1600).

        Returns
        -------
        PrivacyLossDistribution
        """
        h, q, relation, tail = _common_args(
            value_discretization_interval, sampling_prob, relation, tail_mass_truncation,
            h_name="value_discretization_interval",
        )
        if method not in ("auto", "quadrature"):
            raise ValueError(f"method must be 'auto' or 'quadrature', got {method!r}")
        if estimator not in ("connect_dots", "bucket"):
            raise ValueError(f"estimator must be 'connect_dots' or 'bucket', got {estimator!r}")
        if method == "auto" and self.is_gaussian:
            return PrivacyLossDistribution.from_gaussian(
                self.sigma / math.sqrt(2.0), self.accounting_sensitivity, h,
                sampling_prob=q, relation=relation, tail_mass_truncation=tail, estimator=estimator,
            )
        cdf = self._cdf_fn(num_nodes)
        nodes = num_nodes if num_nodes is not None else _default_nodes(self.dim)
        # dim >= 2: the loss law has no atoms (one CDF pass serves both directions), and a
        # light quadrature is enough to place the truncation bounds (see _pmf_from_cdf).
        continuous = self.dim >= 2
        bound_cdf = self._cdf_fn(_BOUND_NODES) if continuous and nodes > _BOUND_NODES else None
        model = _symmetric_model(
            cdf, lambda x: 1.0 - cdf(x), continuous=continuous, h=h, bound_cdf=bound_cdf
        )
        upper = max(tail, QUADRATURE_TAIL)
        return PrivacyLossDistribution(_directions(model, h, q, relation, tail, upper, estimator))

    def _cdf_fn(self, num_nodes: int | None) -> Any:
        """Vectorised loss CDF P(L <= l); -inf -> 0, +inf -> 1, NaN stays NaN.

        At the accounting sensitivity (the rounded query's, with snapping).
        """
        sens = self.accounting_sensitivity
        if self.dim == 1:
            def raw(ell: np.ndarray) -> np.ndarray:
                return loss_cdf_1d(ell, self.sigma, self._k, self.p, sens)
        else:
            nodes = num_nodes if num_nodes is not None else _default_nodes(self.dim)

            def raw(ell: np.ndarray) -> np.ndarray:
                return _k.sgg_loss_cdf(
                    ell, self.dim, self.sigma, self._k, self.p, sens, num_nodes=nodes
                )

        def cdf(ell: Any) -> np.ndarray:
            x = np.atleast_1d(np.asarray(ell, dtype=np.float64))
            out = np.where(x > 0, 1.0, 0.0)
            out[np.isnan(x)] = np.nan
            fin = np.isfinite(x)
            if fin.any():
                out[fin] = raw(np.ascontiguousarray(x[fin]))
            return out

        return cdf

    def _delta_single_cd(self, epsilon: float, h: float) -> float:
        """delta(eps) of one release as read from its connect-the-dots PLD.

        ``delta(eps_i) = P_A(L > eps_i) - e^{eps_i} P_A(L < -eps_i)`` (symmetric pair) at the
        two lattice points around eps, interpolated linearly in ``e^eps``: the chord of the
        convex hockey-stick curve, so an upper bound; four CDF values per call.
        """
        cdf = self._cdf_fn(None)
        j = math.floor(epsilon / h)
        grid = np.array([j * h, (j + 1) * h])
        f = cdf(np.concatenate([grid, -grid]))
        d = np.maximum(1.0 - f[:2] - np.exp(grid) * f[2:], 0.0)
        x0, x1, x = math.exp(grid[0]), math.exp(grid[1]), math.exp(epsilon)
        w = (x - x0) / (x1 - x0)
        return float(min(1.0, (1 - w) * d[0] + w * d[1]))

    def _delta_single_above(self, epsilon: float, h: float, tail: float) -> float:
        """delta(eps) of one release from the buckets above eps only (cheaper, same value)."""
        cdf = self._cdf_fn(None)
        lo = math.floor(epsilon / h) * h
        hi = _find_bound(
            lambda x: 1.0 - cdf(x), max(tail, QUADRATURE_TAIL), increasing=False, start=max(epsilon, 0.0)
        )
        if hi <= lo:
            return float(max(1.0 - cdf(np.array([lo]))[0], 0.0))
        pmf = _pmf_from_cdf(cdf, None, h, tail, bounds=(lo, hi))
        return float(pmf.delta(np.array([epsilon]))[0])

    def delta_for_epsilon(
        self,
        epsilon: float | np.ndarray,
        num_compositions: int = 1,
        value_discretization_interval: float = 1e-4,
    ) -> Any:
        """Tight (pessimistic) delta of ``num_compositions`` releases at ``epsilon``.

        Returns a float for a scalar ``epsilon``, else an ndarray of the same shape.
        """
        eps = check_array(epsilon, "epsilon", dtypes=(np.float64,), ndim=(0, 1))
        n = int(check_scalar(num_compositions, "num_compositions", _N))
        h = float(check_scalar(value_discretization_interval, "value_discretization_interval", Interval("real", 0, 1, "neither")))
        return _composed_pld(self, h, n).get_delta_for_epsilon(eps)

    def epsilon_for_delta(
        self, delta: float, num_compositions: int = 1, value_discretization_interval: float = 1e-4
    ) -> float:
        """Tight (pessimistic) epsilon of ``num_compositions`` releases at ``delta`` in (0, 1)."""
        delta = float(check_scalar(delta, "delta", _DELTA))
        n = int(check_scalar(num_compositions, "num_compositions", _N))
        h = float(check_scalar(value_discretization_interval, "value_discretization_interval", Interval("real", 0, 1, "neither")))
        return float(_composed_pld(self, h, n).get_epsilon_for_delta(delta))

    @classmethod
    def calibrate(
        cls,
        dim: int,
        epsilon: float,
        delta: float,
        k: float | None = None,
        p: float = 2.0,
        sensitivity: float = 1.0,
        num_compositions: int = 1,
        value_discretization_interval: float = 1e-4,
        rtol: float = 1e-6,
        method: str = "auto",
        estimator: str = "connect_dots",
        granularity: float | str | None = "auto",
    ) -> SGGMechanism:
        """The smallest-scale member (dim, k, p) that is (epsilon, delta)-DP after N releases.

        ``sigma* = min{sigma : delta_N(epsilon; sigma) <= delta}`` by bisection on
        ``log sigma`` (delta is decreasing in sigma) to relative width ``rtol``; the
        returned sigma is the upper end of the final bracket, so the guarantee holds for the
        pessimistic PLD. The Gaussian member uses the exact Balle-Wang formula with
        ``method="auto"`` (``"pld"`` forces the discretised accountant).

        Parameters
        ----------
        dim : int
        epsilon : float
            Target epsilon > 0.
        delta : float
            Target delta in (0, 1); must exceed 1e-11 when the PLD is used (the quadrature
            PLD of a non-Gaussian member carries up to ~1e-13 of tail mass at +inf).
        k, p, sensitivity
            As in :class:`SGGMechanism`.
        num_compositions : int, default=1
        value_discretization_interval : float, default=1e-4
        rtol : float, default=1e-6
        method : {"auto", "pld"}, default="auto"
        estimator : {"connect_dots", "bucket"}, default="connect_dots"
            Discretisation of the PLD (both pessimistic). With "connect_dots" and N = 1
            the target is checked from delta at the two lattice points around epsilon.
        granularity : "auto", float or None, default="auto"
            Snapping of the returned mechanism (see :class:`SGGMechanism`); the target is
            met at its :attr:`accounting_sensitivity` (with ``"auto"``, g depends on sigma).

        Returns
        -------
        SGGMechanism

        Raises
        ------
        ValueError
            For invalid targets, or when no sigma in [1e-8, 1e12] x sensitivity reaches them.

        Examples
        --------
        >>> from rml_fast.privacy import SGGMechanism
        >>> m = SGGMechanism.calibrate(dim=5, epsilon=1.0, delta=1e-5)
        >>> round(m.sigma / 2**0.5, 3)  # the analytic Gaussian mechanism's std
        3.731
        """
        dim = int(check_scalar(dim, "dim", Interval("int", 1, None)))
        epsilon = float(check_scalar(epsilon, "epsilon", _EPS))
        delta = float(check_scalar(delta, "delta", _DELTA))
        sensitivity = float(check_scalar(sensitivity, "sensitivity", _POS))
        n = int(check_scalar(num_compositions, "num_compositions", _N))
        h = float(check_scalar(value_discretization_interval, "value_discretization_interval", Interval("real", 0, 1, "neither")))
        rtol = float(check_scalar(rtol, "rtol", Interval("real", 1e-12, 0.5)))
        if method not in ("auto", "pld"):
            raise ValueError(f"method must be 'auto' or 'pld', got {method!r}")
        if estimator not in ("connect_dots", "bucket"):
            raise ValueError(f"estimator must be 'connect_dots' or 'bucket', got {estimator!r}")
        granularity = _snapping.check_granularity(granularity)
        template = cls(dim, 1.0, k, p, sensitivity, None)
        exact = method == "auto" and template.is_gaussian
        if not exact and n == 1 and estimator == "connect_dots" and epsilon > _MAX_EXP:
            raise ValueError(f"epsilon must be at most {_MAX_EXP} for a single non-Gaussian "
                             f"release (the accountant evaluates e^epsilon), got {epsilon!r}")
        if not exact and delta <= 1e-11:
            raise ValueError(
                f"delta={delta} is below what the SGG accountant resolves (the quadrature PLD "
                "carries up to ~1e-13 of tail mass); use delta > 1e-11"
            )

        def _member(sigma: float) -> SGGMechanism:
            if not isinstance(granularity, float):  # "auto" or None: the member itself
                return cls(dim, sigma, k, p, sensitivity, granularity)
            # An explicit g: its unsnapped twin at the snapped accounting sensitivity (the
            # bracket may probe sigmas for which g would be rejected as too fine).
            sens = _snapping.effective_sensitivity(sensitivity, granularity, dim)
            return cls(dim, sigma, k, p, sens, None)

        def delta_at(sigma: float, hh: float = h, nodes: int | None = None) -> float:
            mech = _member(sigma)
            if exact:
                return float(
                    _gaussian_delta(epsilon, sigma / math.sqrt(2.0 * n), mech.accounting_sensitivity)
                )
            if n == 1:
                if estimator == "connect_dots":
                    return mech._delta_single_cd(epsilon, hh)
                return mech._delta_single_above(epsilon, hh, 1e-15)
            pld = _composed_pld(mech, hh, n, estimator, nodes)
            return float(pld.get_delta_for_epsilon(epsilon))

        # Stage 1 (coarse lattice 10h and, for N > 1, a lighter radius quadrature): bracket
        # from the Gaussian solution with the same second moment, then solve roughly.
        coarse = h if exact else min(10.0 * h, 1e-2)
        light = None if n == 1 else 480
        s_g = _gaussian_std(epsilon, delta, sensitivity) * math.sqrt(n)
        scale = math.sqrt(template.mse() / dim)  # per-coordinate std at sigma = 1
        lo = hi = max(s_g / scale, 1e-300)
        d_lo = d_hi = delta_at(lo, coarse, light)
        if d_lo > delta:
            while d_hi > delta:
                lo, d_lo, hi = hi, d_hi, hi * 2.0
                if hi > 1e12 * sensitivity * max(1.0, 1.0 / scale):
                    raise ValueError("no sigma reaches the privacy target (check k, p)")
                d_hi = delta_at(hi, coarse, light)
        else:
            while d_lo <= delta:
                hi, d_hi, lo = lo, d_lo, lo / 2.0
                if lo < 1e-8 * sensitivity / max(scale, 1e-300):
                    return cls(dim, hi, k, p, sensitivity, granularity)
                d_lo = delta_at(lo, coarse, light)
        if exact:
            return cls(
                dim, _solve_log(delta_at, delta, lo, hi, rtol, d_lo, d_hi), k, p, sensitivity, granularity
            )
        sig_c = _solve_log(
            lambda s_: delta_at(s_, coarse, light), delta, lo, hi, max(rtol, 1e-4), d_lo, d_hi
        )
        # Stage 2 (the requested lattice and quadrature): make sure the upper end meets the
        # target, then find a lower end and solve to rtol.
        hi, d_hi = sig_c, delta_at(sig_c)
        grow = 1e-3
        while d_hi > delta:
            hi *= 1.0 + grow
            grow *= 4.0
            d_hi = delta_at(hi)
        sig_c = hi
        step = 1e-3
        lo = sig_c * (1 - step)
        d_lo = delta_at(lo)
        while d_lo <= delta:
            hi, d_hi = lo, d_lo
            step *= 4.0
            lo = sig_c * max(1 - step, 1e-3)
            d_lo = delta_at(lo)
        return cls(
            dim, _solve_log(delta_at, delta, lo, hi, rtol, d_lo, d_hi), k, p, sensitivity, granularity
        )


def _solve_log(
    fn: Any,
    target: float,
    lo: float,
    hi: float,
    rtol: float,
    f_lo: float | None = None,
    f_hi: float | None = None,
    max_evals: int = 200,
) -> float:
    """Smallest sigma in [lo, hi] with fn(sigma) <= target, to relative width rtol.

    ``fn`` is decreasing with ``fn(lo) > target >= fn(hi)``. Secant steps on
    ``log fn(sigma)`` against ``log sigma`` through the two latest points, kept inside the
    bracket (bisection otherwise, and while an end sits on the ~1e-15 floor of the
    accountant); once a step is below the tolerance it is pushed half a tolerance past the
    predicted root so that the bracket closes. Returns the bracket's upper end, which meets
    the target.
    """
    lt = math.log(target)
    tol = math.log1p(rtol)

    def g(x: float, val: float | None = None) -> float:
        v = fn(math.exp(x)) if val is None else val
        return math.log(max(v, 1e-300)) - lt

    x_lo, x_hi = math.log(lo), math.log(hi)
    g_lo, g_hi = g(x_lo, f_lo), g(x_hi, f_hi)
    floor = math.log(1e-13) - lt
    x0, g0, x1, g1 = x_lo, g_lo, x_hi, g_hi
    for _ in range(max_evals):
        width = x_hi - x_lo
        if width <= tol:
            break
        x = math.nan
        if g_hi > floor and g1 != g0:
            x = x1 - g1 * (x1 - x0) / (g1 - g0)
            if abs(x - x1) < 0.5 * tol:
                x = x1 + (0.5 * tol if g1 > 0 else -0.5 * tol)
        if not (x_lo < x < x_hi):
            x = 0.5 * (x_lo + x_hi)
        gx = g(x)
        if gx <= 0:
            x_hi, g_hi = x, gx
        else:
            x_lo, g_lo = x, gx
        x0, g0, x1, g1 = x1, g1, x, gx
    return math.exp(x_hi)


def _default_nodes(dim: int) -> int:
    return 6400 if dim == 2 else 1600


def _torch_float_dtypes() -> tuple[Any, ...]:
    import torch

    return (torch.float32, torch.float64)


def _gaussian_delta(eps: float, std: float, sens: float) -> float:
    """Balle & Wang (2018): delta(eps) = Phi(D/2s - eps s/D) - e^eps Phi(-D/2s - eps s/D)."""
    from rml_fast.privacy._pld_discretise import _gaussian_hockey

    # mu = (sens/std)^2 / 2: the same curve without e^eps overflowing past eps ~ 709 and
    # without the cancellation of the plain formula.
    return float(_gaussian_hockey(np.asarray([eps]), 0.5 * (sens / std) ** 2)[0])


def _gaussian_std(eps: float, delta: float, sens: float) -> float:
    """Smallest std of the analytic Gaussian mechanism (bisection on log std)."""
    lo, hi = 1e-6 * sens, 1e6 * sens
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if _gaussian_delta(eps, mid, sens) <= delta:
            hi = mid
        else:
            lo = mid
        if hi / lo - 1 < 1e-12:
            break
    return hi


@lru_cache(maxsize=64)
def _composed_pld(
    mech: SGGMechanism, h: float, n: int, estimator: str = "connect_dots", nodes: int | None = None
) -> PrivacyLossDistribution:
    return mech.pld(h, estimator=estimator, num_nodes=nodes).self_compose(n)


def optimal_sgg(
    dim: int,
    epsilon: float,
    delta: float,
    p_grid: tuple[float, ...] = (1.0, 1.25, 1.5, 1.75, 2.0),
    k_grid: tuple[float, ...] | None = None,
    num_compositions: int = 1,
    sensitivity: float = 1.0,
    value_discretization_interval: float = 1e-4,
    refine: bool = True,
    rtol: float = 1e-4,
) -> tuple[SGGMechanism, dict[str, np.ndarray]]:
    """The lowest-MSE SGG member at an (epsilon, delta, N) target.

    Calibrates every (k, p) of the grid, then refines p around the best grid point by a
    golden-section search (8 steps) when ``refine``.

    Parameters
    ----------
    dim : int
    epsilon, delta : float
    p_grid : tuple of float, default=(1.0, 1.25, 1.5, 1.75, 2.0)
    k_grid : tuple of float, optional
        Default ``(dim,)``.
    num_compositions : int, default=1
    sensitivity : float, default=1.0
    value_discretization_interval : float, default=1e-4
    refine : bool, default=True
    rtol : float, default=1e-4
        Calibration tolerance on sigma.

    Returns
    -------
    best : SGGMechanism
    table : dict of ndarray
        "k", "p", "sigma", "mse" of every calibrated member (grid then refinement), and
        "gaussian_mse", "l2_mse" (0-d arrays) for reference.

    Examples
    --------
    >>> from rml_fast.privacy import optimal_sgg
    >>> best, table = optimal_sgg(2, 1.0, 1e-5, p_grid=(1.0, 2.0), refine=False,
    ...                           value_discretization_interval=1e-3)
    >>> bool(best.mse() <= table["mse"].min() + 1e-12)
    True
    """
    dim = int(check_scalar(dim, "dim", Interval("int", 1, None)))
    for name, grid in (("p_grid", p_grid), ("k_grid", k_grid)):
        if not (grid is None and name == "k_grid") and (
                isinstance(grid, (str, bytes)) or not hasattr(grid, "__iter__")):
            raise TypeError(f"{name} must be a tuple of positive numbers, got "
                            f"{type(grid).__name__}")
    if not isinstance(refine, (bool, np.bool_)):
        raise TypeError(f"refine must be a bool, got {type(refine).__name__}")
    ks = (float(dim),) if k_grid is None else tuple(float(check_scalar(v, "k_grid", _POS)) for v in k_grid)
    ps = tuple(float(check_scalar(v, "p_grid", _POS)) for v in p_grid)
    if not ps:
        raise ValueError("p_grid must not be empty")
    rows: list[SGGMechanism] = []

    def cal(kk: float, pp: float) -> SGGMechanism:
        m = SGGMechanism.calibrate(
            dim, epsilon, delta, kk, pp, sensitivity, num_compositions,
            value_discretization_interval, rtol=rtol,
        )
        rows.append(m)
        return m

    for kk in ks:
        for pp in ps:
            cal(kk, pp)
    best = min(rows, key=lambda m: m.mse())
    if refine and len(ps) > 1:
        sorted_p = sorted(ps)
        i = sorted_p.index(best.p)
        a = sorted_p[max(i - 1, 0)]
        b = sorted_p[min(i + 1, len(sorted_p) - 1)]
        kk = float(best.k)  # type: ignore[arg-type]
        g = (math.sqrt(5) - 1) / 2
        x1, x2 = b - g * (b - a), a + g * (b - a)
        f1, f2 = cal(kk, x1).mse(), cal(kk, x2).mse()
        for _ in range(6):
            if f1 < f2:
                b, x2, f2 = x2, x1, f1
                x1 = b - g * (b - a)
                f1 = cal(kk, x1).mse()
            else:
                a, x1, f1 = x1, x2, f2
                x2 = a + g * (b - a)
                f2 = cal(kk, x2).mse()
        best = min(rows, key=lambda m: m.mse())
    gauss = SGGMechanism.calibrate(dim, epsilon, delta, None, 2.0, sensitivity, num_compositions)
    l2 = next((m for m in rows if m.p == 1.0 and m.k == dim), None)
    if l2 is None:
        l2 = SGGMechanism.calibrate(
            dim, epsilon, delta, None, 1.0, sensitivity, num_compositions,
            value_discretization_interval, rtol=rtol,
        )
    table = {
        "k": np.array([m.k for m in rows]),
        "p": np.array([m.p for m in rows]),
        "sigma": np.array([m.sigma for m in rows]),
        "mse": np.array([m.mse() for m in rows]),
        "gaussian_mse": np.array(gauss.mse()),
        "l2_mse": np.array(l2.mse()),
    }
    return best, table
