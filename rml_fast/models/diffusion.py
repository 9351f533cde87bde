"""A tiny conditional DDPM: noise schedule, MLP noise predictor, toy concept mixture, sampler.

The project's one toy diffusion model (used by the f-divergence unlearning objectives of
:mod:`rml_fast.alignment.unlearning` and their demo). Everything is generated and trained
locally in seconds on a CPU:

* :class:`DDPMSchedule` -- linear betas (Ho et al. 2020, arXiv 2006.11239), the closed forms
  ``alpha_bar_t = prod_{s<=t}(1 - beta_s)`` and the posterior variance
  ``beta_tilde_t = (1 - alpha_bar_{t-1}) / (1 - alpha_bar_t) * beta_t``;
* :class:`ConceptMixture` -- a 2-D Gaussian mixture with one isotropic component per concept;
* :class:`ConditionalDenoiser` -- an MLP ``eps_theta(x_t, c, t)``;
* :func:`train_denoiser` and :func:`ddpm_sample` -- the simple DDPM loss and ancestral sampling.

Time steps are 0-based: ``t = 0 .. n_steps - 1``, ``x_t`` is the sample after ``t + 1`` noising
steps and ``alpha_bar_{-1} = 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from rml_fast._validation import Interval, check_scalar, check_tensor

__all__ = [
    "ConceptMixture",
    "ConditionalDenoiser",
    "DDPMSchedule",
    "concept_mixture",
    "ddpm_sample",
    "train_denoiser",
]


def _generator(seed: int | torch.Generator | None, name: str = "seed") -> torch.Generator:
    if isinstance(seed, torch.Generator):
        return seed
    if seed is None:
        return torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TypeError(f"{name} must be a non-negative int, a torch.Generator or None, got {seed!r}")
    return torch.Generator().manual_seed(seed)


class DDPMSchedule:
    r"""Linear-beta DDPM noise schedule with its closed forms (float64 buffers).

    ``beta_t`` is linear from ``beta_start`` to ``beta_end`` over ``n_steps`` steps;
    ``alpha_t = 1 - beta_t``, :math:`\bar\alpha_t = \prod_{s\le t}\alpha_s`,
    :math:`\tilde\beta_t = \frac{1-\bar\alpha_{t-1}}{1-\bar\alpha_t}\beta_t` (Ho et al. 2020,
    Eqs. 4, 6, 7). The defaults are the usual 1e-4 .. 0.02 over 1000 steps rescaled to
    100 steps (times 1000 / n_steps), so that ``alpha_bar`` at the last step is about 4e-5.

    Parameters
    ----------
    n_steps : int, default=100
        Number of diffusion steps ``T``.
    beta_start, beta_end : float, default=1e-3, 0.2
        First and last beta, ``0 < beta_start <= beta_end < 1``.

    Attributes
    ----------
    betas, alphas, alpha_bars, posterior_variance : Tensor of shape (n_steps,), float64

    Examples
    --------
    >>> s = DDPMSchedule(n_steps=100)
    >>> round(float(s.alpha_bars[0]), 6), float(s.posterior_variance[0])
    (0.999, 0.0)
    """

    def __init__(self, n_steps: int = 100, beta_start: float = 1e-3, beta_end: float = 0.2):
        n_steps = int(check_scalar(n_steps, "n_steps", Interval("int", 2, None)))
        b0 = check_scalar(beta_start, "beta_start", Interval("real", 0.0, 1.0, "neither"))
        b1 = check_scalar(beta_end, "beta_end", Interval("real", 0.0, 1.0, "neither"))
        if b1 < b0:
            raise ValueError(f"beta_end must be >= beta_start, got {b1!r} < {b0!r}")
        self.n_steps = n_steps
        self.beta_start, self.beta_end = float(b0), float(b1)
        self.betas = torch.linspace(b0, b1, n_steps, dtype=torch.float64)
        self.alphas = 1.0 - self.betas
        self.alpha_bars = torch.cumprod(self.alphas, 0)
        prev = torch.cat([torch.ones(1, dtype=torch.float64), self.alpha_bars[:-1]])
        self.alpha_bars_prev = prev
        self.posterior_variance = (1.0 - prev) / (1.0 - self.alpha_bars) * self.betas

    def __repr__(self) -> str:
        return f"DDPMSchedule(n_steps={self.n_steps}, beta_start={self.beta_start}, beta_end={self.beta_end})"

    def _check_t(self, t: Any, name: str = "t", batch: int | None = None) -> Tensor:
        """Steps: an integer tensor of shape (B,) with values in ``[0, n_steps)``."""
        check_tensor(t, name, ndim=1, floating=False)
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer (Long) tensor of steps, got {t.dtype}")
        if batch is not None and t.shape[0] != batch:
            raise ValueError(f"{name} must have shape ({batch},) (one step per sample), got {tuple(t.shape)}")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.n_steps):
            raise ValueError(f"{name} must hold steps in [0, {self.n_steps}), got values outside")
        return t

    @staticmethod
    def _check_x(x: Any, name: str, like: Tensor | None = None, like_name: str = "") -> Tensor:
        """Samples: a real floating tensor (B, ...) with values; non-finite values propagate."""
        check_tensor(x, name, finite=False)
        if x.ndim < 1:
            raise ValueError(f"{name} must have shape (B, ...), got a 0-d tensor")
        if like is not None and (x.shape != like.shape or x.device != like.device):
            raise ValueError(
                f"{name} must have the shape and device of {like_name} {tuple(like.shape)}, got "
                f"{tuple(x.shape)} on {x.device}"
            )
        return x

    def _at(self, values: Tensor, t: Tensor, like: Tensor) -> Tensor:
        """``values[t]`` shaped (B, 1, ..., 1) to broadcast against ``like``, in its dtype."""
        v = values.to(like.device)[t].to(like.dtype)
        return v.reshape(-1, *([1] * (like.dim() - 1)))

    def q_sample(self, x0: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        r"""Forward noising :math:`x_t = \sqrt{\bar\alpha_t} x_0 + \sqrt{1-\bar\alpha_t}\,\epsilon`.

        Parameters
        ----------
        x0 : Tensor of shape (B, ...)
            Clean samples.
        t : LongTensor of shape (B,)
            Steps in ``[0, n_steps)``.
        noise : Tensor of the shape of ``x0``
            Standard normal noise.

        Returns
        -------
        x_t : Tensor of the shape of ``x0``

        Examples
        --------
        >>> s = DDPMSchedule()
        >>> x = s.q_sample(torch.ones(1, 2), torch.tensor([99]), torch.zeros(1, 2))
        >>> bool(x.abs().max() < 0.01)
        True
        """
        self._check_x(x0, "x0")
        self._check_x(noise, "noise", x0, "x0")
        self._check_t(t, "t", x0.shape[0])
        ab = self._at(self.alpha_bars, t, x0)
        return ab.sqrt() * x0 + (1.0 - ab).sqrt() * noise

    def reverse_mean(self, x_t: Tensor, eps: Tensor, t: Tensor) -> Tensor:
        r"""Mean of the reverse kernel,
        :math:`\mu_\theta = (x_t - \beta_t/\sqrt{1-\bar\alpha_t}\,\epsilon_\theta)/\sqrt{\alpha_t}`.

        Parameters
        ----------
        x_t : Tensor of shape (B, ...)
        eps : Tensor of the shape of ``x_t``
            Predicted noise.
        t : LongTensor of shape (B,)

        Returns
        -------
        mean : Tensor of the shape of ``x_t``

        Examples
        --------
        >>> s = DDPMSchedule()
        >>> s.reverse_mean(torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([5])).tolist()
        [[0.0, 0.0]]
        """
        self._check_x(x_t, "x_t")
        self._check_x(eps, "eps", x_t, "x_t")
        self._check_t(t, "t", x_t.shape[0])
        b = self._at(self.betas, t, x_t)
        a = self._at(self.alphas, t, x_t)
        ab = self._at(self.alpha_bars, t, x_t)
        return (x_t - b / (1.0 - ab).sqrt() * eps) / a.sqrt()

    def kl_weight(self, t: Tensor, sigma2: str = "beta") -> Tensor:
        r"""The factor :math:`\kappa_t = \beta_t^2/(\alpha_t(1-\bar\alpha_t)\sigma_t^2)` with
        :math:`\|\Delta\mu\|^2/\sigma_t^2 = \kappa_t\|\Delta\epsilon\|^2` (f-DMU, arXiv 2509.21167).

        Parameters
        ----------
        t : LongTensor of shape (B,)
        sigma2 : {"beta", "posterior"}, default="beta"
            Reverse-kernel variance: ``beta_t`` or the posterior variance ``beta_tilde_t``
            (zero at ``t = 0``, where this factor is then infinite).

        Returns
        -------
        kappa : Tensor of shape (B,), float64

        Examples
        --------
        >>> s = DDPMSchedule()
        >>> round(float(s.kl_weight(torch.tensor([0]))), 9)  # beta_0 / (alpha_0 (1 - alpha_bar_0))
        1.001001001
        """
        if sigma2 not in ("beta", "posterior"):
            raise ValueError(f"sigma2 must be 'beta' or 'posterior', got {sigma2!r}")
        self._check_t(t, "t")
        var = self.betas if sigma2 == "beta" else self.posterior_variance
        t = t.cpu()
        return self.betas[t] ** 2 / (self.alphas[t] * (1.0 - self.alpha_bars[t]) * var[t])


def _timestep_embedding(t: Tensor, dim: int, n_steps: int) -> Tensor:
    """Sinusoidal embedding of integer steps, (B,) -> (B, dim), in float32."""
    half = dim // 2
    freqs = torch.exp(-math.log(1000.0) * torch.arange(half, dtype=torch.float32) / half)
    ang = (t.to(torch.float32) * (1000.0 / n_steps))[:, None] * freqs[None, :].to(t.device)
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=1)


class ConditionalDenoiser(nn.Module):
    r"""MLP noise predictor :math:`\epsilon_\theta(x_t, c, t)` for low-dimensional data.

    Input: ``x_t`` concatenated with a learned concept embedding and a sinusoidal step
    embedding; ``n_layers`` SiLU hidden layers of width ``hidden``; output of the shape of
    ``x_t``.

    Parameters
    ----------
    dim : int, default=2
        Data dimension.
    n_concepts : int, default=4
        Number of concept ids ``c`` in ``[0, n_concepts)``.
    hidden : int, default=128
    n_layers : int, default=3
    emb_dim : int, default=32
        Width of the step and concept embeddings.
    n_steps : int, default=100
        Length of the schedule the step embedding is scaled to.
    seed : int, default=0
        Seed of the weight initialisation.

    Examples
    --------
    >>> net = ConditionalDenoiser()
    >>> tuple(net(torch.zeros(5, 2), torch.zeros(5, dtype=torch.long),
    ...           torch.arange(5)).shape)
    (5, 2)
    """

    def __init__(self, dim: int = 2, n_concepts: int = 4, hidden: int = 128, n_layers: int = 3,
                 emb_dim: int = 32, n_steps: int = 100, seed: int = 0):
        super().__init__()
        for name, v in (("dim", dim), ("n_concepts", n_concepts), ("hidden", hidden),
                        ("n_layers", n_layers), ("n_steps", n_steps)):
            check_scalar(v, name, Interval("int", 1, None))
        check_scalar(emb_dim, "emb_dim", Interval("int", 2, None))
        if emb_dim % 2:
            raise ValueError(f"emb_dim must be even, got {emb_dim}")
        self.dim, self.n_concepts, self.n_steps, self.emb_dim = dim, n_concepts, n_steps, emb_dim
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.concept_emb = nn.Embedding(n_concepts, emb_dim)
            layers: list[nn.Module] = []
            width = dim + 2 * emb_dim
            for _ in range(n_layers):
                layers += [nn.Linear(width, hidden), nn.SiLU()]
                width = hidden
            layers.append(nn.Linear(width, dim))
            self.net = nn.Sequential(*layers)

    def forward(self, x_t: Tensor, c: Tensor, t: Tensor) -> Tensor:
        """Predicted noise.

        Parameters
        ----------
        x_t : Tensor of shape (B, dim)
            Noisy samples.
        c : LongTensor of shape (B,)
            Concept ids in ``[0, n_concepts)``.
        t : LongTensor of shape (B,)
            Steps in ``[0, n_steps)``.

        Returns
        -------
        eps : Tensor of shape (B, dim)

        Examples
        --------
        >>> net = ConditionalDenoiser(n_concepts=2)
        >>> tuple(net(torch.zeros(3, 2), torch.tensor([0, 1, 1]), torch.tensor([0, 5, 99])).shape)
        (3, 2)
        """
        check_tensor(x_t, "x_t", ndim=2, finite=False)
        if x_t.shape[1] != self.dim:
            raise ValueError(f"x_t must have shape (B, {self.dim}), got {tuple(x_t.shape)}")
        B = x_t.shape[0]
        for v, name, hi in ((c, "c", self.n_concepts), (t, "t", None)):
            check_tensor(v, name, ndim=1, floating=False)
            if v.is_floating_point() or v.is_complex() or v.dtype == torch.bool:
                raise TypeError(f"{name} must be an integer (Long) tensor, got {v.dtype}")
            if v.shape[0] != B:
                raise ValueError(f"{name} must have shape ({B},) like x_t's batch, got {tuple(v.shape)}")
            if v.device != x_t.device:
                raise ValueError(f"{name} must be on x_t's device {x_t.device}, got {v.device}")
            if hi is not None and v.numel() and (int(v.min()) < 0 or int(v.max()) >= hi):
                raise ValueError(f"{name} must hold concept ids in [0, {hi})")
        h = torch.cat([x_t, self.concept_emb(c).to(x_t.dtype),
                       _timestep_embedding(t, self.emb_dim, self.n_steps).to(x_t.dtype)], dim=1)
        return self.net(h)


@dataclass(frozen=True)
class ConceptMixture:
    """A Gaussian mixture with one isotropic component per concept (equal weights).

    Parameters
    ----------
    means : Tensor of shape (K, d), float32
        Component means, one per concept.
    std : float
        Common standard deviation of every component.

    Examples
    --------
    >>> mix = concept_mixture(4)
    >>> x, c = mix.sample(8, generator=0)
    >>> tuple(x.shape), bool((mix.assign(mix.means) == torch.arange(4)).all())
    ((8, 2), True)
    """

    means: Tensor
    std: float

    def __post_init__(self) -> None:
        check_tensor(self.means, "means", ndim=2, nonempty=True)
        check_scalar(self.std, "std", Interval("real", 0.0, None, "neither"))

    @property
    def n_concepts(self) -> int:
        """Number of concepts ``K``.

        Examples
        --------
        >>> concept_mixture(3).n_concepts
        3
        """
        return int(self.means.shape[0])

    def sample(self, n: int, concepts: Tensor | int | None = None,
               generator: torch.Generator | int | None = None) -> tuple[Tensor, Tensor]:
        """Draw ``n`` points and their concept ids.

        Parameters
        ----------
        n : int
            Number of points.
        concepts : LongTensor of shape (n,), int or None
            Concept of each point; an int gives them all that concept; None draws them uniformly.
        generator : torch.Generator, int seed or None

        Returns
        -------
        x : Tensor of shape (n, d), float32
        c : LongTensor of shape (n,)

        Examples
        --------
        >>> x, c = concept_mixture().sample(3, concepts=1, generator=0)
        >>> c.tolist()
        [1, 1, 1]
        """
        n = int(check_scalar(n, "n", Interval("int", 1, None)))
        g = _generator(generator, "generator")
        if concepts is None:
            c = torch.randint(0, self.n_concepts, (n,), generator=g)
        elif isinstance(concepts, int) and not isinstance(concepts, bool):
            if not 0 <= concepts < self.n_concepts:
                raise ValueError(f"concepts must be in [0, {self.n_concepts}), got {concepts}")
            c = torch.full((n,), concepts, dtype=torch.long)
        else:
            c = torch.as_tensor(concepts)
            if c.shape != (n,) or c.dtype != torch.long:
                raise ValueError(f"concepts must be a LongTensor of shape ({n},), got {c.dtype} {tuple(c.shape)}")
            if c.numel() and (c.min() < 0 or c.max() >= self.n_concepts):
                raise ValueError(f"concepts must lie in [0, {self.n_concepts})")
        x = self.means[c] + self.std * torch.randn(n, self.means.shape[1], generator=g)
        return x, c

    def assign(self, x: Tensor) -> Tensor:
        """Index of the nearest component mean (the mode a point lands in), (n, d) -> (n,).

        Examples
        --------
        >>> concept_mixture().assign(torch.tensor([[0.1, 1.9], [-2.2, 0.0]])).tolist()
        [1, 2]
        """
        check_tensor(x, "x", ndim=2)
        if x.shape[1] != self.means.shape[1]:
            raise ValueError(f"x must have shape (n, {self.means.shape[1]}), got {tuple(x.shape)}")
        return torch.cdist(x.to(self.means.dtype), self.means).argmin(dim=1)


def concept_mixture(n_concepts: int = 4, radius: float = 2.0, std: float = 0.3) -> ConceptMixture:
    """The toy mixture: ``n_concepts`` components evenly spaced on a circle in 2-D.

    Concept ``k`` has mean ``radius * (cos(2 pi k / K), sin(2 pi k / K))``.

    Parameters
    ----------
    n_concepts : int, default=4
    radius : float, default=2.0
    std : float, default=0.3

    Returns
    -------
    ConceptMixture

    Examples
    --------
    >>> concept_mixture(4).means.round().tolist()
    [[2.0, 0.0], [0.0, 2.0], [-2.0, 0.0], [-0.0, -2.0]]
    """
    k = int(check_scalar(n_concepts, "n_concepts", Interval("int", 1, None)))
    r = check_scalar(radius, "radius", Interval("real", 0.0, None, "neither"))
    s = check_scalar(std, "std", Interval("real", 0.0, None, "neither"))
    ang = 2 * math.pi * torch.arange(k, dtype=torch.float64) / k
    means = (r * torch.stack([torch.cos(ang), torch.sin(ang)], 1)).to(torch.float32)
    return ConceptMixture(means=means, std=float(s))


def train_denoiser(mixture: ConceptMixture, schedule: DDPMSchedule | None = None, *,
                   model: ConditionalDenoiser | None = None, steps: int = 2000,
                   batch_size: int = 256, lr: float = 2e-3, seed: int = 0,
                   progress: bool = True) -> ConditionalDenoiser:
    r"""Train a :class:`ConditionalDenoiser` on ``mixture`` with the simple DDPM loss.

    Minimises :math:`E_{x_0,c,t,\epsilon}\|\epsilon - \epsilon_\theta(x_t, c, t)\|^2` (Ho et al.
    2020, Eq. 14) with Adam and a cosine learning-rate decay; fresh mixture samples each step.

    Parameters
    ----------
    mixture : ConceptMixture
    schedule : DDPMSchedule, optional
        Default ``DDPMSchedule()``.
    model : ConditionalDenoiser, optional
        Trained in place; default a fresh one sized to the mixture and schedule.
    steps, batch_size : int, default=2000, 256
    lr : float, default=2e-3
    seed : int, default=0
        Seeds the initialisation (for a fresh model) and every draw.
    progress : bool, default=True
        Show a tqdm bar.

    Returns
    -------
    ConditionalDenoiser
        In eval mode.

    Examples
    --------
    >>> net = train_denoiser(concept_mixture(), steps=5, progress=False)
    >>> net.training
    False
    """
    if not isinstance(mixture, ConceptMixture):
        raise TypeError(f"mixture must be a ConceptMixture, got {type(mixture).__name__}")
    schedule = DDPMSchedule() if schedule is None else schedule
    steps = int(check_scalar(steps, "steps", Interval("int", 1, None)))
    batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
    lr = check_scalar(lr, "lr", Interval("real", 0.0, None, "neither"))
    g = _generator(seed)
    if model is None:
        model = ConditionalDenoiser(dim=mixture.means.shape[1], n_concepts=mixture.n_concepts,
                                    n_steps=schedule.n_steps, seed=int(seed) if isinstance(seed, int) else 0)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 0.05)
    from tqdm.auto import tqdm

    model.train()
    for _ in tqdm(range(steps), disable=not progress, desc="train denoiser"):
        x0, c = mixture.sample(batch_size, generator=g)
        t = torch.randint(0, schedule.n_steps, (batch_size,), generator=g)
        eps = torch.randn(x0.shape, generator=g)
        loss = (model(schedule.q_sample(x0, t, eps), c, t) - eps).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return model.eval()


@torch.no_grad()
def ddpm_sample(model: nn.Module, schedule: DDPMSchedule, concepts: Tensor, *,
                generator: torch.Generator | int | None = None, dim: int = 2,
                variance: str = "beta") -> Tensor:
    r"""Ancestral DDPM sampling (Ho et al. 2020, Algorithm 2).

    ``x_{T-1} ~ N(0, I)``; for ``t = T-1 .. 0``:
    ``x_{t-1} = mu_theta(x_t, c, t) + sigma_t z`` with no noise at ``t = 0``.

    Parameters
    ----------
    model : callable
        ``model(x_t, c, t) -> eps`` with shapes (B, dim), (B,), (B,) -> (B, dim).
    schedule : DDPMSchedule
    concepts : LongTensor of shape (B,)
        Concept of each sample.
    generator : torch.Generator, int seed or None
    dim : int, default=2
    variance : {"beta", "posterior"}, default="beta"
        ``sigma_t^2 = beta_t`` or the posterior variance ``beta_tilde_t``.

    Returns
    -------
    x0 : Tensor of shape (B, dim), float32

    Examples
    --------
    >>> s = DDPMSchedule(n_steps=10)
    >>> net = ConditionalDenoiser(n_steps=10)
    >>> tuple(ddpm_sample(net, s, torch.zeros(3, dtype=torch.long), generator=0).shape)
    (3, 2)
    """
    if variance not in ("beta", "posterior"):
        raise ValueError(f"variance must be 'beta' or 'posterior', got {variance!r}")
    if isinstance(concepts, torch.Tensor) and concepts.device.type == "meta":
        raise ValueError("concepts must hold values, got a tensor on the 'meta' device")
    c = torch.as_tensor(concepts)
    if c.dim() != 1 or c.dtype != torch.long:
        raise ValueError(f"concepts must be a 1-D LongTensor, got {c.dtype} of shape {tuple(c.shape)}")
    g = _generator(generator, "generator")
    var = schedule.betas if variance == "beta" else schedule.posterior_variance
    x = torch.randn(c.shape[0], dim, generator=g)
    for step in range(schedule.n_steps - 1, -1, -1):
        t = torch.full((c.shape[0],), step, dtype=torch.long)
        mean = schedule.reverse_mean(x, model(x, c, t), t)
        x = mean + (math.sqrt(float(var[step])) * torch.randn(x.shape, generator=g) if step else 0.0)
    return x

