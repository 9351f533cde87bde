"""Distributional feature visualisation: energy-guided diffusion posterior sampling (EnergyDPS).

Zhou, Luo, He, Jin, Ge, Shu, Meng & Qiu, "Distributional visual mechanistic interpretability"
(arXiv 2605.17504, ICML 2026). To explain a unit ``a(x)`` of a vision model, sample the
distribution closest in KL to the natural-image prior ``p`` under which the unit is active:

    min_q KL(q || p)  s.t.  E_q[a] >= tau   ->   q*(x) ∝ p(x) exp(-lambda E(x))

with an energy that saturates once the unit is active enough, ``E(x) = -min(a(x), c)`` (the
reference objective "capped / clip"; also ``"max"``: ``-a``, ``"capped_hinge"``:
``-a + rho relu(a - c)^2`` and ``"target"``: ``(a - c)^2``, see :func:`make_energy`).

``q`` is sampled with any epsilon-prediction diffusion prior by diffusion posterior sampling
(:class:`EnergyDPS`): at every step the energy of the Tweedie estimate
``x0_hat = (x_t - sqrt(1 - ab_t) eps(x_t, t)) / sqrt(ab_t)`` is differentiated through the
noise model and the feature extractor, and the unconditional DDIM or DDPM step is moved by
``-zeta_t grad_{x_t} E(x0_hat)``. ``scale_mode="constant"`` is the reference code's raw
gradient step (``zeta_t = guidance_scale``); ``scale_mode="calibrated"`` (PROPOSED in our spec)
uses ``zeta_t = lambda beta_t / sqrt(1 - beta_t)``, which for a DDPM sampler adds
``lambda grad log E[exp(-E(x_0)) | x_t]`` to the score and samples the exact tilt
``N(mu + lambda Sigma w, Sigma)`` for a Gaussian prior and a linear unit
(:class:`GaussianPriorEps`, the oracle). Units are read by :class:`UnitActivation` (any torch
model, any hook, spatial reductions, optional SAE encoder).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from rml_fast._validation import check_tensor
from rml_fast.interp._checks import int_arg, real_arg, real_tensor

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "EnergyDPS",
    "GaussianPriorEps",
    "UnitActivation",
    "center_mask",
    "make_energy",
    "reduce_map",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_REDUCE = ("mix", "max", "mean", "lse")
_ENERGIES = ("capped_clip", "max", "capped_hinge", "target")


def center_mask(h: int, w: int, frac: float) -> Tensor:
    """Boolean (h, w) mask of the centred ``round(h frac) x round(w frac)`` box (at least 1x1).

    Examples
    --------
    >>> center_mask(4, 6, 0.5).int().tolist()
    [[0, 0, 0, 0, 0, 0], [0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]]
    """
    h = int_arg(h, "h", 1)
    w = int_arg(w, "w", 1)
    frac = _check_frac(frac, "frac")
    mh, mw = max(1, round(h * frac)), max(1, round(w * frac))
    top, left = (h - mh) // 2, (w - mw) // 2
    m = torch.zeros(h, w, dtype=torch.bool)
    m[top : top + mh, left : left + mw] = True
    return m


def _check_frac(frac: Any, name: str) -> float:
    if isinstance(frac, bool) or not isinstance(frac, numbers.Real):
        raise TypeError(f"{name} must be a real number in (0, 1], got {type(frac).__name__}")
    if not 0 < float(frac) <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {frac!r}")
    return float(frac)


def reduce_map(
    A: Tensor,
    reduce: str = "mix",
    *,
    mix_alpha: float = 0.7,
    center_frac: float = 1.0,
    lse_temperature: float = 0.2,
) -> Tensor:
    """Reduce a unit's spatial map (B, h, w) to one activation per image (B,).

    ``"max"``: the maximum over the centre box; ``"mean"``: the mean of ``relu(A)`` there;
    ``"mix"``: ``mix_alpha * max + (1 - mix_alpha) * mean(relu)`` (the reference operator,
    alpha = 0.7); ``"lse"``: ``tau logsumexp(relu(A) / tau)`` over the box (tau = 0.2).

    Examples
    --------
    >>> A = torch.tensor([[[0.0, -1.0], [2.0, 1.0]]])
    >>> reduce_map(A, "max").item(), reduce_map(A, "mean").item(), round(reduce_map(A).item(), 3)
    (2.0, 0.75, 1.625)
    """
    if not isinstance(reduce, str) or reduce not in _REDUCE:
        raise ValueError(f"reduce must be one of {_REDUCE}, got {reduce!r}")
    check_tensor(A, "A", finite=False)
    if A.dim() != 3 or A.shape[1] < 1 or A.shape[2] < 1:
        raise ValueError(f"A must have shape (B, h, w) with h, w >= 1, got {tuple(A.shape)}")
    _check_frac(center_frac, "center_frac")
    real_arg(mix_alpha, "mix_alpha")
    real_arg(lse_temperature, "lse_temperature")
    mask = center_mask(A.shape[1], A.shape[2], center_frac).to(A.device)
    vals = A[:, mask]  # (B, n_center)
    if reduce == "max":
        return vals.amax(dim=1)
    if reduce == "mean":
        return torch.relu(vals).mean(dim=1)
    if reduce == "lse":
        tau = float(lse_temperature)
        if tau <= 0:
            raise ValueError(f"lse_temperature must be > 0, got {lse_temperature!r}")
        return tau * torch.logsumexp(torch.relu(vals) / tau, dim=1)
    if not 0.0 <= mix_alpha <= 1.0:
        raise ValueError(f"mix_alpha must be in [0, 1], got {mix_alpha!r}")
    return mix_alpha * vals.amax(dim=1) + (1.0 - mix_alpha) * torch.relu(vals).mean(dim=1)


class UnitActivation(nn.Module):
    """A differentiable unit ``a(x)`` of a vision model, for images ``x`` in [-1, 1].

    The image is mapped to [0, 1] and normalised by ``mean``/``std`` (skipped when they are
    None), run through ``model``, and the activation at ``hook`` is read: a spatial map
    (B, C, h, w) is reduced over space by :func:`reduce_map` after selecting channel (or SAE
    feature) ``unit``; a vector (B, C) is indexed by ``unit``.

    Parameters
    ----------
    model : torch.nn.Module
        The feature extractor (kept in eval mode; its weights are not trained).
    hook : str or callable
        Name of a submodule whose output is read (``""``: the model's output), or
        ``hook(model, x) -> Tensor`` computing the activation directly.
    unit : int
        Channel, logit or SAE feature index.
    reduce, mix_alpha, center_frac, lse_temperature
        Spatial reduction (:func:`reduce_map`).
    sae_encoder : callable, optional
        Maps activations (..., C) to SAE features (..., F), applied along channels.
    mean, std : sequence of float or None
        Per-channel normalisation after the [0, 1] mapping (ImageNet's by default).

    Examples
    --------
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.ReLU())
    >>> act = UnitActivation(net, "1", unit=0, reduce="max", mean=None, std=None)
    >>> act(torch.zeros(3, 1, 4, 4)).shape
    torch.Size([3])
    """

    model: nn.Module
    hook: str | Callable[[nn.Module, Tensor], Tensor]
    unit: int
    reduce: str
    mix_alpha: float
    center_frac: float
    lse_temperature: float
    sae_encoder: Callable[[Tensor], Tensor] | None
    mean: Tensor | None
    std: Tensor | None

    def __init__(
        self,
        model: nn.Module,
        hook: str | Callable[[nn.Module, Tensor], Tensor],
        unit: int,
        *,
        reduce: str = "mix",
        mix_alpha: float = 0.7,
        center_frac: float = 1.0,
        lse_temperature: float = 0.2,
        sae_encoder: Callable[[Tensor], Tensor] | None = None,
        mean: Any = IMAGENET_MEAN,
        std: Any = IMAGENET_STD,
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if isinstance(unit, bool) or not isinstance(unit, numbers.Integral) or unit < 0:
            raise ValueError(f"unit must be an int >= 0, got {unit!r}")
        if reduce not in _REDUCE:
            raise ValueError(f"reduce must be one of {_REDUCE}, got {reduce!r}")
        _check_frac(center_frac, "center_frac")
        if isinstance(hook, str) and hook:
            try:
                model.get_submodule(hook)
            except AttributeError as exc:
                raise ValueError(f"hook {hook!r} is not a submodule of the model") from exc
        elif not isinstance(hook, str) and not callable(hook):
            raise TypeError("hook must be a submodule name or a callable hook(model, x)")
        if (mean is None) != (std is None):
            raise ValueError("mean and std must both be given or both be None")
        self.model = model.eval()
        self.hook = hook
        self.unit = int(unit)
        self.reduce = reduce
        self.mix_alpha = float(mix_alpha)
        self.center_frac = float(center_frac)
        self.lse_temperature = float(lse_temperature)
        self.sae_encoder = sae_encoder
        self.mean = None if mean is None else torch.as_tensor(mean, dtype=torch.float32)
        self.std = None if std is None else torch.as_tensor(std, dtype=torch.float32)

    def _read(self, x: Tensor) -> Tensor:
        if callable(self.hook):
            return self.hook(self.model, x)
        if self.hook == "":
            return self.model(x)
        captured: list[Tensor] = []
        handle = self.model.get_submodule(self.hook).register_forward_hook(
            lambda _m, _i, out: captured.append(out)
        )
        try:
            self.model(x)
        finally:
            handle.remove()
        return captured[0]

    def forward(self, x: Tensor) -> Tensor:
        """Activation per image, shape (B,); ``x``: (B, C, H, W) in [-1, 1]."""
        check_tensor(x, "x", finite=False)
        if x.dim() != 4:
            raise ValueError(f"x must have shape (B, C, H, W), got {tuple(x.shape)}")
        z = (x + 1.0) / 2.0
        if self.mean is not None and self.std is not None:  # both or neither (checked)
            if self.mean.numel() != z.shape[1]:
                raise ValueError(
                    f"mean/std have {self.mean.numel()} channels, the images {z.shape[1]}"
                )
            z = (z - self.mean.to(z).view(1, -1, 1, 1)) / self.std.to(z).view(1, -1, 1, 1)
        A = self._read(z)
        if self.sae_encoder is not None:
            A = self.sae_encoder(A.movedim(1, -1)).movedim(-1, 1)
        if self.unit >= A.shape[1]:
            raise ValueError(f"unit {self.unit} is out of range for {A.shape[1]} channels/features")
        if A.dim() == 2:
            return A[:, self.unit]
        if A.dim() == 4:
            return reduce_map(
                A[:, self.unit],
                self.reduce,
                mix_alpha=self.mix_alpha,
                center_frac=self.center_frac,
                lse_temperature=self.lse_temperature,
            )
        raise ValueError(
            f"the hooked activation must be (B, C) or (B, C, h, w), got {tuple(A.shape)}"
        )


def make_energy(
    kind: str = "capped_clip", cap: float | None = None, hinge_penalty: float = 10.0
) -> Callable[[Tensor], Tensor]:
    """The energy ``E(a)`` of activations (B,) -> (B,), lower where the unit is active.

    Parameters
    ----------
    kind : {"capped_clip", "max", "capped_hinge", "target"}, default="capped_clip"
        ``-min(a, c)``; ``-a``; ``-a + rho relu(a - c)^2``; ``(a - c)^2``.
    cap : float, optional
        ``c``; required except for ``"max"``.
    hinge_penalty : float, default=10.0
        ``rho`` of ``"capped_hinge"``.

    Examples
    --------
    >>> E = make_energy("capped_clip", cap=2.0)
    >>> E(torch.tensor([1.0, 5.0])).tolist()
    [-1.0, -2.0]
    """
    if kind not in _ENERGIES:
        raise ValueError(f"kind must be one of {_ENERGIES}, got {kind!r}")
    if kind != "max" and (
        cap is None or not isinstance(cap, numbers.Real) or not math.isfinite(cap)
    ):
        raise ValueError(f"cap must be a finite real number for kind={kind!r}, got {cap!r}")
    c = math.nan if cap is None else float(cap)  # unused when cap is None (kind="max")
    rho = float(hinge_penalty)
    if kind == "max":
        return lambda a: -a
    if kind == "capped_clip":
        return lambda a: -torch.minimum(a, torch.full_like(a, c))
    if kind == "capped_hinge":
        return lambda a: -a + rho * torch.relu(a - c) ** 2
    return lambda a: (a - c) ** 2


class GaussianPriorEps(nn.Module):
    """The exact noise predictor of a Gaussian prior ``x_0 ~ N(mu, Sigma)`` (no network).

    ``x_t ~ N(sqrt(ab_t) mu, ab_t Sigma + (1 - ab_t) I)``, so
    ``eps(x_t, t) = sqrt(1 - ab_t) C_t^{-1} (x_t - sqrt(ab_t) mu)`` and the Tweedie estimate is
    the exact posterior mean. Inputs are (B, d) or (B, 1, 1, d) (an image of one row).

    Examples
    --------
    >>> import torch
    >>> eps = GaussianPriorEps(torch.zeros(2), torch.eye(2), torch.full((10,), 0.1))
    >>> eps(torch.ones(1, 2), torch.tensor([9])).shape
    torch.Size([1, 2])
    """

    mu: Tensor
    ab: Tensor
    Cinv: Tensor

    def __init__(self, mu: Tensor, Sigma: Tensor, betas: Tensor) -> None:
        super().__init__()
        mu = real_tensor(mu, "mu", nonempty=True)
        Sigma = real_tensor(Sigma, "Sigma")
        d = mu.numel()
        if Sigma.shape != (d, d):
            raise ValueError(f"Sigma must have shape ({d}, {d}), got {tuple(Sigma.shape)}")
        betas = real_tensor(betas, "betas", ndim=1, nonempty=True)
        if not bool(((betas > 0) & (betas < 1)).all()):
            raise ValueError("betas must hold values in (0, 1)")
        ab = torch.cumprod(1.0 - betas, 0)
        self.register_buffer("mu", mu)
        self.register_buffer("ab", ab)
        eye = torch.eye(d, dtype=torch.float64)
        self.register_buffer(
            "Cinv", torch.linalg.inv(ab[:, None, None] * Sigma + (1 - ab)[:, None, None] * eye)
        )

    def forward(self, x_t: Tensor, t: Tensor) -> Tensor:
        """Exact epsilon, the shape of ``x_t``."""
        check_tensor(x_t, "x_t", ndim=(2, 4), nonempty=True, finite=False)
        d = self.mu.numel()
        if x_t[0].numel() != d:
            raise ValueError(f"x_t must be (B, {d}) or (B, 1, 1, {d}), got {tuple(x_t.shape)}")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"t must be a LongTensor of steps, got {type(t).__name__}")
        if t.device.type == "meta" or t.is_floating_point() or t.is_complex():
            raise TypeError(f"t must be an integer tensor of steps with values, got {t.dtype}")
        if t.shape != (x_t.shape[0],):
            raise ValueError(f"t must have shape ({x_t.shape[0]},), got {tuple(t.shape)}")
        n_t = self.ab.numel()
        if bool(((t < 0) | (t >= n_t)).any()):
            raise ValueError(f"t must hold steps in [0, {n_t})")
        shape = x_t.shape
        x = x_t.reshape(shape[0], -1).to(torch.float64)
        ab = self.ab[t][:, None]
        r = x - ab.sqrt() * self.mu
        eps = (1 - ab).sqrt() * torch.einsum("bij,bj->bi", self.Cinv[t], r)
        return eps.to(x_t.dtype).reshape(shape)


class EnergyDPS:
    """Energy-guided diffusion posterior sampling from an epsilon-prediction prior.

    Parameters
    ----------
    eps_model : callable
        ``eps_model(x_t, t) -> eps`` with ``t`` a LongTensor (B,) of 0-based steps.
    betas : array-like of shape (T,)
        The prior's training schedule.
    energy : callable
        ``energy(a) -> E``, (B,) -> (B,) (:func:`make_energy`).
    activation : callable
        ``activation(x0_hat) -> a``, images -> (B,) (:class:`UnitActivation`).
    sampler : {"ddim", "ddpm"}, default="ddim"
        Deterministic DDIM (``eta`` adds noise) or DDPM ancestral steps.
    n_steps : int, optional
        Respaced number of steps (evenly spaced over ``T``); default all ``T``.
    eta : float, default=0.0
        DDIM stochasticity.
    guidance_scale : float, default=1.0
        ``zeta`` (constant) or ``lambda`` (calibrated).
    scale_mode : {"constant", "calibrated"}, default="constant"
        Raw gradient steps (reference code) or ``zeta_t = lambda beta_t / sqrt(1 - beta_t)``
        (PROPOSED; exact for a Gaussian prior with ``sampler="ddpm"``, ``variance="beta"``).
    clip_x0 : bool, default=True
        Clip the Tweedie estimate to [-1, 1] (images).
    variance : {"beta_tilde", "beta"}, default="beta_tilde"
        DDPM step variance: the posterior variance or ``beta_t``.

    Examples
    --------
    >>> import torch
    >>> betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)
    >>> prior = GaussianPriorEps(torch.zeros(2), torch.eye(2), betas)
    >>> w = torch.tensor([1.0, 0.0], dtype=torch.float64)
    >>> dps = EnergyDPS(prior, betas, energy=make_energy("max"), activation=lambda x: x.reshape(len(x), -1) @ w,
    ...                 sampler="ddpm", variance="beta", guidance_scale=2.0, scale_mode="calibrated",
    ...                 clip_x0=False)
    >>> out = dps.sample(2000, (2,), generator=torch.Generator().manual_seed(0))
    >>> [round(v, 1) for v in out["x"].mean(0).tolist()]  # the tilt N(lambda Sigma w, Sigma)
    [2.0, 0.0]
    """

    eps_model: Callable[[Tensor, Tensor], Tensor]
    energy: Callable[[Tensor], Tensor]
    activation: Callable[[Tensor], Tensor]
    betas: Tensor
    alpha_bars: Tensor
    timesteps: Tensor
    sampler: str
    eta: float
    variance: str
    guidance_scale: float
    scale_mode: str
    clip_x0: bool

    def __init__(
        self,
        eps_model: Callable[[Tensor, Tensor], Tensor],
        betas: Any,
        *,
        energy: Callable[[Tensor], Tensor],
        activation: Callable[[Tensor], Tensor],
        sampler: str = "ddim",
        n_steps: int | None = None,
        eta: float = 0.0,
        guidance_scale: float = 1.0,
        scale_mode: str = "constant",
        clip_x0: bool = True,
        variance: str = "beta_tilde",
    ) -> None:
        if not callable(eps_model) or not callable(energy) or not callable(activation):
            raise TypeError("eps_model, energy and activation must be callables")
        betas = real_tensor(betas, "betas", finite=False).reshape(-1)
        if betas.numel() < 2 or not torch.all((betas > 0) & (betas < 1)):
            raise ValueError("betas must be a 1-D schedule of at least 2 values in (0, 1)")
        if sampler not in ("ddim", "ddpm"):
            raise ValueError(f"sampler must be 'ddim' or 'ddpm', got {sampler!r}")
        if scale_mode not in ("constant", "calibrated"):
            raise ValueError(f"scale_mode must be 'constant' or 'calibrated', got {scale_mode!r}")
        if variance not in ("beta_tilde", "beta"):
            raise ValueError(f"variance must be 'beta_tilde' or 'beta', got {variance!r}")
        if not (isinstance(eta, numbers.Real) and eta >= 0):
            raise ValueError(f"eta must be a real number >= 0, got {eta!r}")
        if not (isinstance(guidance_scale, numbers.Real) and math.isfinite(guidance_scale)):
            raise ValueError(f"guidance_scale must be a finite real number, got {guidance_scale!r}")
        T = betas.numel()
        if n_steps is None:
            ts = torch.arange(T - 1, -1, -1)
        else:
            if (
                isinstance(n_steps, bool)
                or not isinstance(n_steps, numbers.Integral)
                or not 1 <= n_steps <= T
            ):
                raise ValueError(f"n_steps must be an int in [1, {T}], got {n_steps!r}")
            ts = torch.unique(torch.linspace(0, T - 1, int(n_steps)).round().long()).flip(0)
        self.eps_model, self.energy, self.activation = eps_model, energy, activation
        self.betas = betas
        self.alpha_bars = torch.cumprod(1.0 - betas, 0)
        self.timesteps = ts
        self.sampler, self.eta, self.variance = sampler, float(eta), variance
        self.guidance_scale, self.scale_mode, self.clip_x0 = (
            float(guidance_scale),
            scale_mode,
            bool(clip_x0),
        )

    def _ab(self, t: int) -> float:
        return 1.0 if t < 0 else float(self.alpha_bars[t])

    def step(self, x_t: Tensor, x0: Tensor, t: int, t_prev: int, noise: Tensor | None) -> Tensor:
        """The unconditional step ``x_t -> x'_{t_prev}`` given the (clipped) Tweedie ``x0``.

        Parameters
        ----------
        x_t, x0 : Tensor
            The current sample and its Tweedie estimate, of one shape.
        t : int
            The current step, in ``[0, T)``.
        t_prev : int
            The next step, in ``[-1, t)`` (``-1``: the final, noise-free step).
        noise : Tensor or None
            Standard normal noise of the shape of ``x_t``.

        Returns
        -------
        Tensor
            ``x'_{t_prev}``, the shape of ``x_t``. See :meth:`_step` for the formulas.
        """
        check_tensor(x_t, "x_t", finite=False)
        check_tensor(x0, "x0", finite=False)
        if x0.shape != x_t.shape:
            raise ValueError(
                f"x0 must have the shape of x_t {tuple(x_t.shape)}, got {tuple(x0.shape)}"
            )
        if noise is not None:
            check_tensor(noise, "noise", finite=False)
            if noise.shape != x_t.shape:
                raise ValueError(
                    f"noise must have the shape of x_t {tuple(x_t.shape)}, got {tuple(noise.shape)}"
                )
        T = self.betas.numel()
        t = int_arg(t, "t", 0, T - 1)
        t_prev = int_arg(t_prev, "t_prev", -1, T - 1)
        if t_prev >= t:
            raise ValueError(f"t_prev must be in [-1, t) with t = {t}, got {t_prev}")
        return self._step(x_t, x0, t, t_prev, noise)

    def _step(self, x_t: Tensor, x0: Tensor, t: int, t_prev: int, noise: Tensor | None) -> Tensor:
        """The unconditional step ``x_t -> x'_{t_prev}`` given the (clipped) Tweedie ``x0``.

        DDIM: ``sqrt(ab_prev) x0 + sqrt(1 - ab_prev - s^2) eps_tilde + s z`` with
        ``eps_tilde = (x_t / sqrt(ab_t) - x0) / sqrt(1 / ab_t - 1)``; DDPM: the posterior mean
        ``(sqrt(ab_prev) b / (1 - ab_t)) x0 + (sqrt(1 - b) (1 - ab_prev) / (1 - ab_t)) x_t``
        plus ``sqrt(var) z``, with ``b = 1 - ab_t / ab_prev`` (respaced beta).
        """
        ab_t, ab_p = self._ab(t), self._ab(t_prev)
        if self.sampler == "ddim":
            eps_t = (x_t / math.sqrt(ab_t) - x0) / math.sqrt(1.0 / ab_t - 1.0)
            sigma = self.eta * math.sqrt((1 - ab_p) / (1 - ab_t) * (1 - ab_t / ab_p))
            out = math.sqrt(ab_p) * x0 + math.sqrt(max(1 - ab_p - sigma**2, 0.0)) * eps_t
            if sigma > 0 and noise is not None:
                out = out + sigma * noise
            return out
        b = 1.0 - ab_t / ab_p
        mean = (math.sqrt(ab_p) * b / (1 - ab_t)) * x0 + (
            math.sqrt(1 - b) * (1 - ab_p) / (1 - ab_t)
        ) * x_t
        if t_prev < 0 or noise is None:
            return mean
        var = b if self.variance == "beta" else b * (1 - ab_p) / (1 - ab_t)
        return mean + math.sqrt(var) * noise

    def sample(
        self,
        n: int,
        shape: tuple[int, ...],
        *,
        generator: torch.Generator | None = None,
        return_trajectory: bool = False,
        progress: bool = False,
        dtype: torch.dtype = torch.float64,
    ) -> dict[str, Any]:
        """Draw ``n`` samples of shape ``shape`` from the energy-tilted prior.

        Returns
        -------
        dict
            ``x`` (n, *shape); ``activation`` (n,) of the final samples; ``energy_trace``
            (n_steps, n): the energy of each step's Tweedie estimate; with
            ``return_trajectory``, ``trajectory`` (n_steps + 1, n, *shape).
        """
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        gen = generator if generator is not None else torch.Generator().manual_seed(0)
        x = torch.randn((n, *shape), generator=gen, dtype=dtype)
        ts = self.timesteps.tolist()
        trace, traj = [], [x.detach().clone()] if return_trajectory else None
        it: Any = range(len(ts))
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(it, desc="EnergyDPS")
        for i in it:
            t = ts[i]
            t_prev = ts[i + 1] if i + 1 < len(ts) else -1
            x_in = x.detach().requires_grad_(True)
            with torch.enable_grad():
                tt = torch.full((n,), t, dtype=torch.long)
                eps = self.eps_model(x_in, tt)
                ab_t = self._ab(t)
                x0 = (x_in - math.sqrt(1 - ab_t) * eps) / math.sqrt(ab_t)
                if self.clip_x0:
                    x0 = x0.clamp(-1.0, 1.0)
                E = self.energy(self.activation(x0))
                if E.shape != (n,):
                    raise ValueError(
                        f"energy(activation(x)) must have shape ({n},), got {tuple(E.shape)}"
                    )
                grad = None
                if self.guidance_scale != 0.0:
                    (grad,) = torch.autograd.grad(E.sum(), x_in, allow_unused=True)
            noise = torch.randn(x.shape, generator=gen, dtype=dtype) if t_prev >= 0 else None
            x_next = self._step(x_in.detach(), x0.detach(), t, t_prev, noise)
            if grad is not None:
                x_next = x_next - self._zeta(t, t_prev) * grad
            x = x_next.detach()
            trace.append(E.detach())
            if traj is not None:
                traj.append(x.clone())
        with torch.no_grad():
            a = self.activation(x.clamp(-1, 1) if self.clip_x0 else x)
        out: dict[str, Any] = {"x": x, "activation": a.detach(), "energy_trace": torch.stack(trace)}
        if traj is not None:
            out["trajectory"] = torch.stack(traj)
        return out

    def _zeta(self, t: int, t_prev: int) -> float:
        if self.scale_mode == "constant":
            return self.guidance_scale
        b = 1.0 - self._ab(t) / self._ab(t_prev)
        return self.guidance_scale * b / math.sqrt(1.0 - b)
