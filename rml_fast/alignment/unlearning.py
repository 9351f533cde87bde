r"""f-divergence concept unlearning for diffusion models (f-DMU, arXiv 2509.21167).

Unlearning a target concept ``c*`` makes a fine-tuned denoiser, prompted with ``c*``, behave like
the frozen original prompted with an anchor concept ``c``. Both reverse kernels are Gaussians with
the same covariance, ``p(x_{t-1}|x_t, c) = N(mu, sigma_t^2 I)``, and
``||Delta mu||^2 / sigma_t^2 = kappa_t ||Delta eps||^2``, so every f-divergence between them is a
function of ``D = ||Delta mu||^2 / sigma^2`` alone:

* KL: ``D / 2`` (the MSE objective of concept ablation);
* alpha-divergence: ``(1 - exp(-alpha (1 - alpha) D / 2)) / (alpha (1 - alpha))``;
* squared Hellinger (alpha = 1/2 up to a factor 4): ``1 - exp(-D / 8)``;
* Pearson chi^2 (alpha = 2 up to a factor 1/2): ``exp(D) - 1``.

The training losses use the per-sample masked mean ``m`` of ``Delta eps^2`` in place of ``D``
(sigma = 1, omega_t = 1 as in the reference code). For a general f without a closed form,
:class:`VariationalFDivergence` gives the f-GAN bound
``D_f(P || Q) >= sup_T E_P[T] - E_Q[f*(T)]``; :func:`unlearn` runs the whole fine-tuning loop
with any of these objectives, optionally with a prior-preservation loss combined by
:func:`pcgrad_project`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rml_fast._validation import Interval, check_scalar

__all__ = [
    "DIVERGENCES",
    "ConvCritic",
    "MLPCritic",
    "UnlearnResult",
    "VariationalFDivergence",
    "alpha_unlearn_loss",
    "chi2_unlearn_loss",
    "gaussian_f_divergence",
    "hellinger_unlearn_loss",
    "masked_mean_sq",
    "mse_unlearn_loss",
    "pcgrad_project",
    "unlearn",
]

#: the f-divergences of :class:`VariationalFDivergence` (f-GAN conventions, Nowozin et al. 2016)
DIVERGENCES = ("kl", "reverse_kl", "hellinger", "js", "chi2", "tv")
_CLOSED_FORMS = ("kl", "reverse_kl", "hellinger", "chi2", "alpha", "tv")
_OBJECTIVES = ("mse", "hellinger", "chi2", "alpha", "variational")


# --------------------------------------------------------------------------- checks
def _check_tensor(x, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    _not_meta(x, name)
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def _not_meta(x: Tensor, name: str) -> None:
    if x.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")


def _check_pair(pred, target, mask) -> tuple[Tensor, Tensor, Tensor]:
    pred = _check_tensor(pred, "pred")
    target = _check_tensor(target, "target")
    if pred.dim() < 1 or pred.shape[0] == 0:
        raise ValueError(f"pred must have a non-empty batch dimension, got shape {tuple(pred.shape)}")
    if target.shape != pred.shape:
        raise ValueError(f"target must have pred's shape {tuple(pred.shape)}, got {tuple(target.shape)}")
    if mask is None:
        mask = torch.ones((), dtype=pred.dtype, device=pred.device)
    elif not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    _not_meta(mask, "mask")
    if mask.is_complex():
        raise TypeError(f"mask must hold real weights, got dtype {mask.dtype}")
    if mask.dim() and (mask.dim() != pred.dim() or mask.shape[0] != pred.shape[0]):
        raise ValueError(
            f"mask must have pred's number of dimensions {pred.dim()} and batch size {pred.shape[0]} "
            f"(other dimensions may be 1 to broadcast), got shape {tuple(mask.shape)}"
        )
    try:
        mask = torch.broadcast_to(mask.to(pred.dtype), pred.shape)
    except RuntimeError as exc:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to pred's shape {tuple(pred.shape)}"
        ) from exc
    return pred, target, mask


def _check_sigma_omega(sigma, omega, batch: int, like: Tensor) -> tuple[float, Tensor | float]:
    sigma = check_scalar(sigma, "sigma", Interval("real", 0.0, None, "neither"))
    if isinstance(omega, Tensor):
        _not_meta(omega, "omega")
        if omega.shape not in ((), (batch,)):
            raise ValueError(f"omega must be a scalar or of shape ({batch},), got {tuple(omega.shape)}")
        omega = omega.to(like.dtype)
    else:
        omega = check_scalar(omega, "omega", Interval("real", 0.0, None, "left"))
    return float(sigma), omega


# --------------------------------------------------------------------------- losses
def masked_mean_sq(pred: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
    r"""Per-sample masked mean of squared differences, ``m_b = sum(mask (pred - target)^2) / sum(mask)``.

    ``target`` is treated as a constant (stop-gradient, the frozen model's output).

    Parameters
    ----------
    pred : Tensor of shape (B, ...)
        Fine-tuned model's output on the target concept, :math:`\hat\epsilon_\theta(x_t, c^*, t)`.
    target : Tensor of shape (B, ...)
        Frozen model's output on the anchor concept, :math:`\epsilon(x_t, c, t)`.
    mask : Tensor broadcastable to (B, ...) with the same number of dims, or None
        Non-negative weights (1 = counted); None counts every element. A sample whose mask
        sums to zero gets ``m_b = 0``.

    Returns
    -------
    m : Tensor of shape (B,)

    Examples
    --------
    >>> masked_mean_sq(torch.tensor([[1.0, 2.0]]), torch.zeros(1, 2), torch.tensor([[1.0, 0.0]]))
    tensor([1.])
    """
    pred, target, mask = _check_pair(pred, target, mask)
    dims = tuple(range(1, pred.dim()))
    diff2 = (pred - target.detach()).pow(2) * mask
    if not dims:
        return diff2
    return diff2.sum(dims) / mask.sum(dims).clamp_min(torch.finfo(pred.dtype).tiny)


def mse_unlearn_loss(pred: Tensor, target: Tensor, mask: Tensor | None = None,
                     omega: float | Tensor = 1.0) -> Tensor:
    r"""KL / MSE objective :math:`L_{MSE} = \mathrm{mean}_b\,\omega_b m_b` (f-DMU, KL = D/2 up to 2).

    Gradient w.r.t. ``pred`` per element: ``omega 2 Delta eps / (B D_el)``.

    Parameters
    ----------
    pred, target : Tensor of shape (B, ...)
    mask : Tensor or None
        See :func:`masked_mean_sq`.
    omega : float or Tensor of shape (B,), default=1.0
        Per-sample (per-step) weight ``omega_t``.

    Returns
    -------
    loss : Tensor of shape ()

    Examples
    --------
    >>> mse_unlearn_loss(torch.ones(2, 3), torch.zeros(2, 3))
    tensor(1.)
    """
    m = masked_mean_sq(pred, target, mask)
    _, omega = _check_sigma_omega(1.0, omega, m.shape[0], m)
    return (omega * m).mean()


def hellinger_unlearn_loss(pred: Tensor, target: Tensor, mask: Tensor | None = None,
                           sigma: float = 1.0, omega: float | Tensor = 1.0) -> Tensor:
    r"""Squared-Hellinger objective :math:`L_H = \mathrm{mean}_b[-\omega_b \exp(-m_b/(8\sigma^2))]`.

    :math:`H^2 = 1 - \exp(-D/8)` between equal-covariance Gaussians; the constant is dropped.
    Its gradient is the MSE gradient times :math:`\exp(-m/(8\sigma^2))/(8\sigma^2)`: bounded and
    vanishing for large deviations (gentler updates, better preservation).

    Parameters
    ----------
    pred, target : Tensor of shape (B, ...)
    mask : Tensor or None
        See :func:`masked_mean_sq`.
    sigma : float, default=1.0
        Reverse-kernel scale, > 0.
    omega : float or Tensor of shape (B,), default=1.0

    Returns
    -------
    loss : Tensor of shape ()

    Examples
    --------
    >>> hellinger_unlearn_loss(torch.zeros(2, 3), torch.zeros(2, 3))
    tensor(-1.)
    """
    m = masked_mean_sq(pred, target, mask)
    sigma, omega = _check_sigma_omega(sigma, omega, m.shape[0], m)
    return (-omega * torch.exp(-m / (8.0 * sigma**2))).mean()


def chi2_unlearn_loss(pred: Tensor, target: Tensor, mask: Tensor | None = None,
                      sigma: float = 1.0, omega: float | Tensor = 1.0) -> Tensor:
    r"""Pearson chi^2 objective :math:`L_{\chi^2} = \mathrm{mean}_b[\omega_b \exp(m_b/\sigma^2)]`.

    :math:`\chi^2 = e^D - 1` between equal-covariance Gaussians; the constant is dropped. Its
    gradient is the MSE gradient times :math:`\exp(m/\sigma^2)/\sigma^2`: it grows without bound
    with the deviation (aggressive erasure). Overflows to inf for ``m / sigma^2`` above ~88 in
    float32 (~709 in float64): choose ``sigma`` on the scale of the deviations.

    Parameters
    ----------
    pred, target : Tensor of shape (B, ...)
    mask : Tensor or None
        See :func:`masked_mean_sq`.
    sigma : float, default=1.0
        Reverse-kernel scale, > 0.
    omega : float or Tensor of shape (B,), default=1.0

    Returns
    -------
    loss : Tensor of shape ()

    Examples
    --------
    >>> chi2_unlearn_loss(torch.zeros(2, 3), torch.zeros(2, 3))
    tensor(1.)
    """
    m = masked_mean_sq(pred, target, mask)
    sigma, omega = _check_sigma_omega(sigma, omega, m.shape[0], m)
    return (omega * torch.exp(m / sigma**2)).mean()


def _check_alpha(alpha) -> float:
    alpha = check_scalar(alpha, "alpha", Interval("real", None, None))
    if alpha in (0.0, 1.0):
        raise ValueError(
            f"alpha must not be 0 or 1 (the alpha-divergence is 0/0 there; both limits are the KL "
            f"divergence D/2: use mse_unlearn_loss / kind='kl'), got {alpha!r}"
        )
    return float(alpha)


def alpha_unlearn_loss(pred: Tensor, target: Tensor, mask: Tensor | None = None, alpha: float = 0.5,
                       sigma: float = 1.0, omega: float | Tensor = 1.0) -> Tensor:
    r"""Alpha-divergence objective
    :math:`L_\alpha = \mathrm{mean}_b\,\omega_b\,\frac{1 - \exp(-\alpha(1-\alpha) m_b/(2\sigma^2))}{\alpha(1-\alpha)}`.

    The closed-form alpha-divergence between equal-covariance Gaussians with ``D = m/sigma^2``
    (computed with ``expm1``, accurate near alpha = 1). As alpha -> 1 (or 0) it tends to
    ``m / (2 sigma^2)``: half the MSE objective. ``alpha = 1/2`` is ``4 H^2``, ``alpha = 2`` is
    ``chi^2 / 2``. Its gradient is the MSE gradient times
    :math:`\exp(-\alpha(1-\alpha)m/(2\sigma^2))/(2\sigma^2)`.

    Parameters
    ----------
    pred, target : Tensor of shape (B, ...)
    mask : Tensor or None
        See :func:`masked_mean_sq`.
    alpha : float, default=0.5
        Any finite real except 0 and 1.
    sigma : float, default=1.0
    omega : float or Tensor of shape (B,), default=1.0

    Returns
    -------
    loss : Tensor of shape ()

    Examples
    --------
    >>> p, q = torch.ones(1, 4), torch.zeros(1, 4)
    >>> round(float(alpha_unlearn_loss(p, q, alpha=1 - 1e-6)), 5)  # -> MSE / 2
    0.5
    """
    alpha = _check_alpha(alpha)
    m = masked_mean_sq(pred, target, mask)
    sigma, omega = _check_sigma_omega(sigma, omega, m.shape[0], m)
    a = alpha * (1.0 - alpha)
    return (omega * (-torch.expm1(-a * m / (2.0 * sigma**2)) / a)).mean()


def gaussian_f_divergence(mu1, mu2, sigma, kind: str = "kl", alpha: float | None = None) -> Tensor:
    r"""Closed-form f-divergence between ``N(mu1, sigma^2 I)`` and ``N(mu2, sigma^2 I)``.

    With :math:`D = \|\mu_1 - \mu_2\|^2/\sigma^2` (sum over the last axis):

    =============  =====================================================
    ``kind``       value
    =============  =====================================================
    "kl"           :math:`D/2` (also "reverse_kl": symmetric here)
    "hellinger"    squared Hellinger :math:`H^2 = 1 - e^{-D/8}`
    "chi2"         Pearson :math:`\chi^2 = e^{D} - 1`
    "alpha"        :math:`(1 - e^{-\alpha(1-\alpha)D/2})/(\alpha(1-\alpha))`
    "tv"           total variation :math:`\mathrm{erf}(\sqrt{D}/(2\sqrt2))`
    =============  =====================================================

    Parameters
    ----------
    mu1, mu2 : Tensor or array-like of shape (..., d)
        Means (a 0-d or 1-element last axis is a 1-D Gaussian).
    sigma : float or Tensor broadcastable to (...)
        Common standard deviation, > 0.
    kind : str, default="kl"
    alpha : float, optional
        Required for ``kind="alpha"`` (not 0 or 1).

    Returns
    -------
    div : Tensor of shape (...)
        In the dtype of the means (float64 stays float64).

    Examples
    --------
    >>> mu = torch.tensor([1.0, 0.0], dtype=torch.float64)
    >>> float(gaussian_f_divergence(mu, torch.zeros(2, dtype=torch.float64), 1.0, "kl"))
    0.5
    """
    if kind not in _CLOSED_FORMS:
        raise ValueError(f"kind must be one of {_CLOSED_FORMS}, got {kind!r} (no closed form for "
                         "others, e.g. 'js': use VariationalFDivergence)")
    if kind == "alpha":
        if alpha is None:
            raise ValueError("alpha is required for kind='alpha'")
        alpha = _check_alpha(alpha)
    mu1 = mu1 if isinstance(mu1, Tensor) else torch.as_tensor(mu1, dtype=torch.float64)
    mu2 = mu2 if isinstance(mu2, Tensor) else torch.as_tensor(mu2, dtype=torch.float64)
    _check_tensor(mu1, "mu1")
    _check_tensor(mu2, "mu2")
    try:
        diff = mu1 - mu2
    except RuntimeError as exc:
        raise ValueError(f"mu1 {tuple(mu1.shape)} and mu2 {tuple(mu2.shape)} do not broadcast") from exc
    if isinstance(sigma, Tensor):
        if not (sigma > 0).all() or not torch.isfinite(sigma).all():
            raise ValueError("sigma must be finite and > 0 everywhere")
        sigma = sigma.to(diff.dtype)
    else:
        sigma = check_scalar(sigma, "sigma", Interval("real", 0.0, None, "neither"))
    sq = diff.pow(2).sum(-1) if diff.dim() else diff.pow(2)
    d = sq / (sigma * sigma)  # a product, not ``**``: a huge float sigma gives d = 0, no OverflowError
    if kind in ("kl", "reverse_kl"):
        return d / 2
    if kind == "hellinger":
        return -torch.expm1(-d / 8)
    if kind == "chi2":
        return torch.expm1(d)
    if kind == "tv":
        return torch.erf(d.sqrt() / (2 * math.sqrt(2.0)))
    a = float(alpha) * (1.0 - float(alpha))  # type: ignore[arg-type]
    return -torch.expm1(-a * d / 2) / a


# --------------------------------------------------------------------------- variational
class VariationalFDivergence(nn.Module):
    r"""The f-GAN variational bound :math:`D_f(P\|Q) \ge \sup_T E_P[T] - E_Q[f^*(T)]`.

    The critic ``T = g_f(v)`` is a critic network's logit ``v`` through the output activation
    ``g_f``; ``f*`` is the Fenchel conjugate (Nowozin et al. 2016, Table 6). The bound is tight for
    ``T = f'(p/q)``. P = anchor outputs (frozen model on ``c``), Q = fine-tuned outputs on ``c*``.

    ===========  ================================  ==============================  ===========
    divergence   ``g_f(v)``                        ``f*(t)``                       ``f(u)``
    ===========  ================================  ==============================  ===========
    kl           ``v``                             ``exp(t - 1)``                  u log u
    reverse_kl   ``-exp(-v)``                      ``-1 - log(-t)``                -log u
    hellinger    ``1 - exp(-v)``                   ``t / (1 - t)``                 (sqrt(u)-1)^2
    js           ``log 2 - softplus(-v)``          ``-log(2 - exp(t))``            2 JS (nats)
    chi2         ``v``                             ``t^2 / 4 + t``                 (u - 1)^2
    tv           ``tanh(v) / 2``                   ``t``                           abs(u - 1)/2
    ===========  ================================  ==============================  ===========

    ``f*(g_f(v))`` is evaluated in the logit domain in a stable form (e.g. ``exp(v) - 1`` for
    Hellinger, ``softplus(v) - log 2`` for JS), so no clamping is needed there.

    Parameters
    ----------
    divergence : str, default="kl"
        One of :data:`DIVERGENCES`.
    eps : float, default=1e-6
        Clamp margin of :meth:`conjugate` at the edges of its domain (reverse KL, Hellinger, JS).

    Examples
    --------
    >>> vf = VariationalFDivergence("kl")
    >>> round(float(vf.critic_loss(torch.zeros(4), torch.zeros(4))), 6)  # f*(0) - 0 = exp(-1)
    0.367879
    """

    def __init__(self, divergence: str = "kl", eps: float = 1e-6):
        super().__init__()
        if divergence not in DIVERGENCES:
            raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")
        self.divergence = divergence
        self.eps = check_scalar(eps, "eps", Interval("real", 0.0, 0.5, "neither"))

    def extra_repr(self) -> str:
        """The divergence name, shown in the module's repr."""
        return f"divergence={self.divergence!r}"

    def activation(self, v: Tensor) -> Tensor:
        """Output activation ``T = g_f(v)`` (elementwise, any shape).

        Examples
        --------
        >>> VariationalFDivergence("tv").activation(torch.tensor([0.0]))
        tensor([0.])
        """
        _check_tensor(v, "v")
        div = self.divergence
        if div in ("kl", "chi2"):
            return v
        if div == "reverse_kl":
            return -torch.exp(-v)
        if div == "hellinger":
            return -torch.expm1(-v)
        if div == "js":
            return math.log(2.0) - F.softplus(-v)
        return 0.5 * torch.tanh(v)

    def conjugate(self, t: Tensor) -> Tensor:
        """Fenchel conjugate ``f*(t)`` (elementwise, any shape), clamped ``eps`` inside its domain.

        Examples
        --------
        >>> VariationalFDivergence("chi2").conjugate(torch.tensor([2.0]))  # t^2/4 + t
        tensor([3.])
        """
        _check_tensor(t, "t")
        div, eps = self.divergence, self.eps
        if div == "kl":
            return torch.exp(t - 1.0)
        if div == "reverse_kl":
            return -1.0 - torch.log((-t).clamp_min(eps))
        if div == "hellinger":
            t = t.clamp_max(1.0 - eps)
            return t / (1.0 - t)
        if div == "js":
            return -torch.log((2.0 - torch.exp(t)).clamp_min(eps))
        if div == "chi2":
            return t * t / 4.0 + t
        return t

    def conjugate_of_logits(self, v: Tensor) -> Tensor:
        """``f*(g_f(v))`` in a numerically stable closed form (elementwise).

        Examples
        --------
        >>> vf = VariationalFDivergence("hellinger")
        >>> v = torch.tensor([0.5])
        >>> bool(torch.allclose(vf.conjugate_of_logits(v), vf.conjugate(vf.activation(v))))
        True
        """
        _check_tensor(v, "v")
        div = self.divergence
        if div == "kl":
            return torch.exp(v - 1.0)
        if div == "reverse_kl":
            return v - 1.0
        if div == "hellinger":
            return torch.expm1(v)
        if div == "js":
            return F.softplus(v) - math.log(2.0)
        if div == "chi2":
            return v * v / 4.0 + v
        return 0.5 * torch.tanh(v)

    @staticmethod
    def _wmean(x: Tensor, mask: Tensor | None) -> Tensor:
        if mask is None:
            return x.mean()
        w = torch.broadcast_to(mask.to(x.dtype), x.shape)
        return (x * w).sum() / w.sum().clamp_min(torch.finfo(x.dtype).tiny)

    def bound(self, real_logits: Tensor, fake_logits: Tensor, mask: Tensor | None = None) -> Tensor:
        r"""Monte-Carlo value of the bound, :math:`\mathrm{mean}\,g_f(v_P) - \mathrm{mean}\,f^*(g_f(v_Q))`.

        Parameters
        ----------
        real_logits : Tensor of any shape
            Critic logits on samples of P (anchor outputs).
        fake_logits : Tensor of any shape
            Critic logits on samples of Q (fine-tuned outputs).
        mask : Tensor broadcastable to both, optional
            Weights of a weighted mean.

        Returns
        -------
        bound : Tensor of shape ()

        Examples
        --------
        >>> VariationalFDivergence("chi2").bound(torch.ones(3), torch.zeros(3))  # 1 - 0
        tensor(1.)
        """
        _check_tensor(real_logits, "real_logits")
        _check_tensor(fake_logits, "fake_logits")
        return self._wmean(self.activation(real_logits), mask) - self._wmean(
            self.conjugate_of_logits(fake_logits), mask)

    def critic_loss(self, real_logits: Tensor, fake_logits: Tensor, mask: Tensor | None = None) -> Tensor:
        r"""Critic objective ``mean_mask[f*(T(fake)) - T(real)]`` = minus :meth:`bound`.

        Pass logits computed from detached inputs so that only the critic is updated.

        Parameters
        ----------
        real_logits, fake_logits : Tensor
            See :meth:`bound`.
        mask : Tensor, optional

        Returns
        -------
        loss : Tensor of shape ()

        Examples
        --------
        >>> VariationalFDivergence("chi2").critic_loss(torch.ones(3), torch.zeros(3))
        tensor(-1.)
        """
        return -self.bound(real_logits, fake_logits, mask)

    def generator_loss(self, fake_logits: Tensor, mask: Tensor | None = None) -> Tensor:
        r"""Generator objective ``-mean_mask f*(T(fake))`` (the part of the bound that depends on Q).

        Parameters
        ----------
        fake_logits : Tensor
            Critic logits on the fine-tuned outputs (gradients flow into the model).
        mask : Tensor, optional

        Returns
        -------
        loss : Tensor of shape ()

        Examples
        --------
        >>> VariationalFDivergence("chi2").generator_loss(torch.full((3,), 2.0))  # -(1 + 2)
        tensor(-3.)
        """
        _check_tensor(fake_logits, "fake_logits")
        return -self._wmean(self.conjugate_of_logits(fake_logits), mask)

    def forward(self, real_logits: Tensor, fake_logits: Tensor, mask: Tensor | None = None) -> Tensor:
        """Same as :meth:`bound`.

        Examples
        --------
        >>> VariationalFDivergence("tv")(torch.zeros(2), torch.zeros(2))
        tensor(0.)
        """
        return self.bound(real_logits, fake_logits, mask)


class ConvCritic(nn.Module):
    """Conv critic of f-DMU: spectral-norm convs, LeakyReLU(0.2), ``n_layers`` stride-2 layers.

    Input: the output tensor (B, C, H, W) concatenated with a mask channel; output a logit map
    (B, 1, ceil(H / 2^n_layers), ceil(W / 2^n_layers)) from a final 1x1 conv.

    Parameters
    ----------
    in_channels : int
        Channels of the model output (the mask adds one).
    base : int, default=64
        Channels of the first layer (doubled in each following one).
    n_layers : int, default=3

    Examples
    --------
    >>> critic = ConvCritic(4, base=8)
    >>> tuple(critic(torch.zeros(2, 4, 16, 16)).shape)
    (2, 1, 2, 2)
    """

    def __init__(self, in_channels: int, base: int = 64, n_layers: int = 3):
        super().__init__()
        check_scalar(in_channels, "in_channels", Interval("int", 1, None))
        check_scalar(base, "base", Interval("int", 1, None))
        check_scalar(n_layers, "n_layers", Interval("int", 1, None))
        layers: list[nn.Module] = []
        ch, width = in_channels + 1, base
        for _ in range(n_layers):
            layers += [nn.utils.parametrizations.spectral_norm(nn.Conv2d(ch, width, 4, 2, 1)),
                       nn.LeakyReLU(0.2)]
            ch, width = width, width * 2
        layers.append(nn.utils.parametrizations.spectral_norm(nn.Conv2d(ch, 1, 1)))
        self.net = nn.Sequential(*layers)
        self.n_layers = n_layers
        self.in_channels = int(in_channels)

    def forward(self, output: Tensor, cond: Tensor | None = None) -> Tensor:
        """Logit map.

        Parameters
        ----------
        output : Tensor of shape (B, C, H, W)
        cond : Tensor of shape (B, 1, H, W), optional
            The mask channel (ones when None).

        Returns
        -------
        logits : Tensor of shape (B, 1, H', W')

        Examples
        --------
        >>> tuple(ConvCritic(1, base=4, n_layers=1)(torch.zeros(1, 1, 4, 4)).shape)
        (1, 1, 2, 2)
        """
        _check_tensor(output, "output")
        if output.dim() != 4 or output.shape[1] != self.in_channels:
            raise ValueError(f"output must have shape (B, {self.in_channels}, H, W), got "
                             f"{tuple(output.shape)}")
        if cond is not None:
            if not isinstance(cond, Tensor):
                raise TypeError(f"cond must be a torch.Tensor or None, got {type(cond).__name__}")
            _not_meta(cond, "cond")
            if cond.is_complex():
                raise TypeError(f"cond must be a real tensor, got dtype {cond.dtype}")
            want = (output.shape[0], 1, *output.shape[2:])
            if tuple(cond.shape) != want:
                raise ValueError(f"cond must have shape {want} (like output, one channel), got "
                                 f"{tuple(cond.shape)}")
        mask = torch.ones_like(output[:, :1]) if cond is None else cond.to(output.dtype)
        return self.net(torch.cat([output, mask], dim=1))

    def pool_mask(self, mask: Tensor) -> Tensor:
        """A (B, 1, H, W) mask averaged down to the logit map's resolution (weights for the losses).

        Examples
        --------
        >>> ConvCritic(1, base=4, n_layers=1).pool_mask(torch.ones(1, 1, 4, 4)).tolist()
        [[[[1.0, 1.0], [1.0, 1.0]]]]
        """
        if not isinstance(mask, Tensor):
            raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
        _not_meta(mask, "mask")
        if mask.is_complex():
            raise TypeError(f"mask must be a real tensor, got dtype {mask.dtype}")
        if mask.dim() not in (3, 4):
            raise ValueError(f"mask must have shape (B, 1, H, W), got {tuple(mask.shape)}")
        k = 2**self.n_layers
        return F.avg_pool2d(mask.to(torch.get_default_dtype()), k, k, ceil_mode=True)


class MLPCritic(nn.Module):
    """MLP critic for low-dimensional outputs (the toy denoiser's 2-D noise predictions).

    Input: the output vector, optionally concatenated with conditioning features (e.g. ``x_t``
    and ``t / T``); ``n_layers`` spectral-norm LeakyReLU(0.2) hidden layers; one logit per sample.

    Parameters
    ----------
    in_features : int
        Output dimension of the model.
    cond_features : int, default=0
        Number of conditioning features passed as ``cond`` (0: none).
    hidden : int, default=64
    n_layers : int, default=2
    spectral_norm : bool, default=True

    Examples
    --------
    >>> tuple(MLPCritic(2, cond_features=3)(torch.zeros(5, 2), torch.zeros(5, 3)).shape)
    (5,)
    """

    def __init__(self, in_features: int, cond_features: int = 0, hidden: int = 64, n_layers: int = 2,
                 spectral_norm: bool = True):
        super().__init__()
        check_scalar(in_features, "in_features", Interval("int", 1, None))
        check_scalar(cond_features, "cond_features", Interval("int", 0, None))
        check_scalar(hidden, "hidden", Interval("int", 1, None))
        check_scalar(n_layers, "n_layers", Interval("int", 1, None))
        self.cond_features = int(cond_features)
        self.in_features = int(in_features)
        sn = nn.utils.parametrizations.spectral_norm if spectral_norm else (lambda m: m)
        layers: list[nn.Module] = []
        width = in_features + cond_features
        for _ in range(n_layers):
            layers += [sn(nn.Linear(width, hidden)), nn.LeakyReLU(0.2)]
            width = hidden
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, output: Tensor, cond: Tensor | None = None) -> Tensor:
        """Logits.

        Parameters
        ----------
        output : Tensor of shape (B, in_features)
        cond : Tensor of shape (B, cond_features), optional
            Required when ``cond_features > 0``.

        Returns
        -------
        logits : Tensor of shape (B,)

        Examples
        --------
        >>> tuple(MLPCritic(2)(torch.zeros(4, 2)).shape)
        (4,)
        """
        _check_tensor(output, "output")
        if output.dim() != 2 or output.shape[1] != self.in_features:
            raise ValueError(f"output must have shape (B, {self.in_features}), got {tuple(output.shape)}")
        if self.cond_features:
            if cond is not None and not isinstance(cond, Tensor):
                raise TypeError(f"cond must be a torch.Tensor, got {type(cond).__name__}")
            if cond is not None:
                _not_meta(cond, "cond")
                if cond.is_complex():
                    raise TypeError(f"cond must be a real tensor, got dtype {cond.dtype}")
            if cond is None or cond.shape != (output.shape[0], self.cond_features):
                raise ValueError(f"cond must have shape ({output.shape[0]}, {self.cond_features}) "
                                 "(B of output, cond_features)")
            output = torch.cat([output, cond.to(output.dtype)], dim=1)
        return self.net(output).squeeze(-1)


# --------------------------------------------------------------------------- PCGrad
def pcgrad_project(g_a: Tensor, g_b: Tensor, lam: float = 1.0) -> Tensor:
    r"""PCGrad-style combination of an unlearning gradient ``g_a`` and a preservation gradient ``g_b``.

    If they conflict (:math:`g_a\cdot g_b < 0`), ``g_a`` loses its component along ``g_b``:
    :math:`g_a' = g_a - \frac{g_a\cdot g_b}{\|g_b\|^2} g_b`; the result is :math:`g_a' + \lambda g_b`
    (Yu et al. 2020, arXiv 2001.06782; ``lam`` = f-DMU's ``prior_loss_weight``). The way ``lam``
    enters is PROPOSED (the reference code was not read line by line).

    Parameters
    ----------
    g_a, g_b : Tensor of the same shape
        Flattened or per-parameter gradients (treated as one vector).
    lam : float, default=1.0
        Weight of the preservation gradient, >= 0.

    Returns
    -------
    g : Tensor of the shape of ``g_a``

    Examples
    --------
    >>> pcgrad_project(torch.tensor([1.0, -1.0]), torch.tensor([0.0, 1.0]), lam=0.0)
    tensor([1., 0.])
    """
    _check_tensor(g_a, "g_a")
    _check_tensor(g_b, "g_b")
    if g_a.shape != g_b.shape:
        raise ValueError(f"g_b must have g_a's shape {tuple(g_a.shape)}, got {tuple(g_b.shape)}")
    lam = check_scalar(lam, "lam", Interval("real", 0.0, None, "left"))
    dot = (g_a * g_b).sum()
    nb = (g_b * g_b).sum()
    coef = torch.where((dot < 0) & (nb > 0), dot / nb.clamp_min(torch.finfo(g_a.dtype).tiny),
                       torch.zeros((), dtype=g_a.dtype))
    return g_a - coef * g_b + lam * g_b


# --------------------------------------------------------------------------- training
@dataclass
class UnlearnResult:
    """What :func:`unlearn` returns.

    Attributes
    ----------
    model : nn.Module
        The fine-tuned copy (eval mode); the input model is untouched.
    loss : list of float
        Unlearning objective per step.
    prior_loss : list of float
        Prior-preservation MSE per step (empty without ``preserve``).
    critic_loss : list of float
        Critic objective per step (variational objective only).
    """

    model: nn.Module
    loss: list[float] = field(default_factory=list)
    prior_loss: list[float] = field(default_factory=list)
    critic_loss: list[float] = field(default_factory=list)


class _VariationalStep:
    """The critic, its optimiser and the divergence of the variational objective in :func:`unlearn`."""

    def __init__(self, vf: VariationalFDivergence, critic: nn.Module, lr: float):
        self.vf, self.critic = vf, critic
        self.opt = torch.optim.Adam(critic.parameters(), lr=lr, betas=(0.5, 0.999))
        self.flat = isinstance(critic, MLPCritic)
        self.use_cond = bool(getattr(critic, "cond_features", 0))

    def _logits(self, out: Tensor, cond: Tensor) -> Tensor:
        if self.flat:
            out = out.reshape(out.shape[0], -1)
        return self.critic(out, cond if self.use_cond else None)

    def critic_step(self, real: Tensor, fake: Tensor, cond: Tensor) -> float:
        loss = self.vf.critic_loss(self._logits(real, cond), self._logits(fake, cond))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def generator_loss(self, fake: Tensor, cond: Tensor) -> Tensor:
        return self.vf.generator_loss(self._logits(fake, cond))


def _flat_grad(params: list[nn.Parameter], loss: Tensor, retain: bool = False) -> Tensor:
    grads = torch.autograd.grad(loss, params, retain_graph=retain, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                      for p, g in zip(params, grads, strict=True)])


def _probe(frozen: nn.Module, x0: Tensor, c_star: int, c_anchor: int, t0: int) -> None:
    """One no-grad call of the frozen model on ``x0[:1]`` per concept, before any training: a
    sample shape or concept id the model cannot take fails here with a ValueError naming the
    arguments (not mid-run with the model's own error)."""
    t = torch.full((1,), t0, dtype=torch.long)
    for c, name in ((c_star, "target_concept"), (c_anchor, "anchor_concept")):
        try:
            with torch.no_grad():
                frozen(x0[:1], torch.full((1,), c, dtype=torch.long), t)
        except (RuntimeError, IndexError, ValueError, TypeError) as exc:
            raise ValueError(
                f"model(x_t, c, t) failed on x0[:1] (shape {tuple(x0[:1].shape)}) with {name}={c}: "
                f"{type(exc).__name__}: {exc}"[:500]
            ) from exc


def unlearn(model: nn.Module, schedule, x0: Tensor, *, target_concept: int, anchor_concept: int,
            objective: str = "mse", steps: int = 200, lr: float = 1e-3, batch_size: int = 128,
            sigma: float = 1.0, alpha: float | None = None, t_range: tuple[int, int] | None = None,
            preserve: tuple[Tensor, Tensor] | None = None, prior_weight: float = 1.0,
            pcgrad: bool = True, optimizer: str = "adam",
            trainable: Callable[[str], bool] | None = None, divergence: str = "kl", critic: nn.Module | None = None,
            critic_lr: float = 1e-3, critic_warmup: int = 50,
            callback: Callable[[int, nn.Module], None] | None = None, callback_every: int = 10,
            seed: int | torch.Generator = 0, progress: bool = True) -> UnlearnResult:
    r"""Fine-tune a copy of a denoiser so that on ``c*`` it predicts what the original does on ``c``.

    Each step draws clean anchor samples ``x0`` (a batch from the given pool), steps ``t``
    uniformly in ``t_range`` and noise, forms ``x_t``, and minimises the chosen objective between
    :math:`\hat\epsilon_\theta(x_t, c^*, t)` and the frozen :math:`\epsilon(x_t, c, t)` (f-DMU,
    arXiv 2509.21167, Sec. 3): ``"mse"``, ``"hellinger"``, ``"chi2"``, ``"alpha"`` (closed forms,
    :func:`mse_unlearn_loss` ...) or ``"variational"`` (f-GAN min-max with a critic, any of
    :data:`DIVERGENCES`, after ``critic_warmup`` critic-only steps). With ``preserve`` the MSE to
    the frozen model on other concepts (self-distillation; PROPOSED: concept ablation uses the
    denoising loss on anchor images) is added, through :func:`pcgrad_project` when ``pcgrad``.
    Optimiser: Adam (or SGD) on the ``trainable`` parameters.

    Parameters
    ----------
    model : nn.Module
        ``model(x_t, c, t) -> eps`` with (B, ...), (B,) long, (B,) long -> (B, ...). Not modified.
    schedule : DDPMSchedule
        Its ``q_sample`` and ``n_steps`` are used.
    x0 : Tensor of shape (N, ...)
        Clean samples of the anchor concept (e.g. the original model's samples on ``c``).
    target_concept, anchor_concept : int
        ``c*`` (to erase) and ``c`` (to map it to); must differ.
    objective : {"mse", "hellinger", "chi2", "alpha", "variational"}, default="mse"
    steps, batch_size : int, default=200, 128
    lr : float, default=1e-3
    sigma : float, default=1.0
        Scale of the closed-form objectives.
    alpha : float, optional
        Required for ``objective="alpha"``.
    t_range : (int, int), optional
        Steps drawn uniformly from ``[lo, hi)``; default all.
    preserve : (Tensor of shape (M, ...), LongTensor of shape (M,)), optional
        Clean samples and concept ids to preserve.
    prior_weight : float, default=1.0
        ``lambda`` of the preservation term.
    pcgrad : bool, default=True
    optimizer : {"adam", "sgd"}, default="adam"
        Adam (as in f-DMU) is invariant to a common scale of the gradient, so only the objectives'
        per-sample reweighting differs; plain SGD also feels their gradient magnitudes.
    trainable : callable, optional
        ``trainable(name) -> bool`` selects the parameters to fine-tune by their names in
        ``model.named_parameters()`` (f-DMU tunes cross-attention K, V only); default all.
    divergence : str, default="kl"
        For ``objective="variational"``.
    critic : nn.Module, optional
        ``critic(output, cond) -> logits``; default an :class:`MLPCritic` on flattened outputs
        conditioned on ``(x_t, t / T)`` (for 2-D toy outputs; the paper's critic sees only the
        output, which is a spatial map there).
    critic_lr : float, default=1e-3
    critic_warmup : int, default=50
    callback : callable, optional
        ``callback(step, model)`` at step 0 and every ``callback_every`` steps and at the end
        (``model`` in eval mode, under ``torch.no_grad`` is up to the callback).
    callback_every : int, default=10
    seed : int or torch.Generator, default=0
    progress : bool, default=True

    Returns
    -------
    UnlearnResult

    Raises
    ------
    ValueError
        Unknown objective/divergence, equal concepts, bad ``t_range``, ``sigma <= 0``, alpha in {0, 1}.
    FloatingPointError
        A non-finite loss (e.g. ``chi2`` with too small ``sigma``), naming the step.

    Examples
    --------
    >>> from rml_fast.models.diffusion import DDPMSchedule, ConditionalDenoiser
    >>> s, net = DDPMSchedule(n_steps=10), ConditionalDenoiser(n_steps=10)
    >>> res = unlearn(net, s, torch.zeros(8, 2), target_concept=0, anchor_concept=1,
    ...               objective="hellinger", steps=3, batch_size=4, progress=False)
    >>> len(res.loss)
    3
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if objective not in _OBJECTIVES:
        raise ValueError(f"objective must be one of {_OBJECTIVES}, got {objective!r}")
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    if objective == "variational" and divergence not in DIVERGENCES:
        raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")
    if objective == "alpha":
        if alpha is None:
            raise ValueError("alpha is required for objective='alpha'")
        alpha = _check_alpha(alpha)
    _check_tensor(x0, "x0")
    if x0.dim() < 1 or x0.shape[0] == 0:
        raise ValueError(f"x0 must hold at least one sample, got shape {tuple(x0.shape)}")
    if not bool(torch.isfinite(x0).all()):
        raise ValueError("x0 must be finite, got NaN or infinite values")
    c_star = int(check_scalar(target_concept, "target_concept", Interval("int", 0, None)))
    c_anchor = int(check_scalar(anchor_concept, "anchor_concept", Interval("int", 0, None)))
    if c_star == c_anchor:
        raise ValueError(f"target_concept and anchor_concept must differ, both are {c_star}")
    n_concepts = getattr(model, "n_concepts", None)
    if isinstance(n_concepts, int) and not isinstance(n_concepts, bool):
        for c, name in ((c_star, "target_concept"), (c_anchor, "anchor_concept")):
            if c >= n_concepts:
                raise ValueError(f"{name} must be a concept id in [0, {n_concepts}) "
                                 f"(model.n_concepts), got {c}")
    steps = int(check_scalar(steps, "steps", Interval("int", 1, None)))
    batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
    lr = check_scalar(lr, "lr", Interval("real", 0.0, None, "neither"))
    critic_lr = check_scalar(critic_lr, "critic_lr", Interval("real", 0.0, None, "neither"))
    sigma = check_scalar(sigma, "sigma", Interval("real", 0.0, None, "neither"))
    prior_weight = check_scalar(prior_weight, "prior_weight", Interval("real", 0.0, None, "left"))
    critic_warmup = int(check_scalar(critic_warmup, "critic_warmup", Interval("int", 0, None)))
    callback_every = int(check_scalar(callback_every, "callback_every", Interval("int", 1, None)))
    n_t = int(schedule.n_steps)
    lo, hi = (0, n_t) if t_range is None else (int(t_range[0]), int(t_range[1]))
    if not 0 <= lo < hi <= n_t:
        raise ValueError(f"t_range must satisfy 0 <= lo < hi <= {n_t}, got {t_range!r}")
    if preserve is not None:
        xp, cp = preserve
        _check_tensor(xp, "preserve[0]")
        if not isinstance(cp, Tensor) or cp.dtype != torch.long or cp.shape != (xp.shape[0],):
            raise ValueError(f"preserve[1] must be a LongTensor of shape ({xp.shape[0]},)")
        if xp.shape[1:] != x0.shape[1:]:
            raise ValueError(f"preserve[0] samples must have x0's shape {tuple(x0.shape[1:])}")
    if isinstance(seed, torch.Generator):
        g = seed
    else:
        seed = int(check_scalar(seed, "seed", Interval("int", 0, None)))
        g = torch.Generator().manual_seed(seed)

    frozen = copy.deepcopy(model).eval()
    for p in frozen.parameters():
        p.requires_grad_(False)
    tuned = copy.deepcopy(model).train()
    params = [p for n, p in tuned.named_parameters()
              if p.requires_grad and (trainable is None or trainable(n))]
    if not params:
        raise ValueError("trainable selects no parameter of model")
    _probe(frozen, x0, c_star, c_anchor, lo)
    keep = {id(p) for p in params}
    for p in tuned.parameters():
        p.requires_grad_(id(p) in keep)
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(params, lr=lr)
    variational: _VariationalStep | None = None
    if objective == "variational":
        if critic is None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=g)))
                critic = MLPCritic(int(x0[0].numel()), cond_features=int(x0[0].numel()) + 1)
        variational = _VariationalStep(VariationalFDivergence(divergence), critic.to(x0.dtype),
                                       critic_lr)
    alpha_value = 0.5 if alpha is None else float(alpha)
    result = UnlearnResult(model=tuned)
    from tqdm.auto import tqdm

    def _noisy(x: Tensor) -> tuple[Tensor, Tensor]:
        t = torch.randint(lo, hi, (x.shape[0],), generator=g)
        noise = torch.randn(x.shape, generator=g, dtype=x.dtype)
        return schedule.q_sample(x, t, noise), t

    def _call(step: int) -> None:
        if callback is not None:
            tuned.eval()
            callback(step, tuned)
            tuned.train()

    _call(0)
    total = steps + (critic_warmup if objective == "variational" else 0)
    for it in tqdm(range(total), disable=not progress, desc=f"unlearn ({objective})"):
        idx = torch.randint(0, x0.shape[0], (batch_size,), generator=g)
        x_t, t = _noisy(x0[idx])
        cs = torch.full_like(t, c_star)
        with torch.no_grad():
            target = frozen(x_t, torch.full_like(t, c_anchor), t)
        pred = tuned(x_t, cs, t)
        if variational is not None:
            cond = torch.cat([x_t.reshape(x_t.shape[0], -1), (t.to(x_t.dtype) / n_t)[:, None]], 1)
            result.critic_loss.append(variational.critic_step(target, pred.detach(), cond))
            if it < critic_warmup:
                continue
            loss = variational.generator_loss(pred, cond)
        elif objective == "mse":
            loss = mse_unlearn_loss(pred, target)
        elif objective == "hellinger":
            loss = hellinger_unlearn_loss(pred, target, sigma=sigma)
        elif objective == "chi2":
            loss = chi2_unlearn_loss(pred, target, sigma=sigma)
        else:
            loss = alpha_unlearn_loss(pred, target, alpha=alpha_value, sigma=sigma)
        step = it - (critic_warmup if objective == "variational" else 0)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite unlearning loss at step {step}; for 'chi2' "
                                     "increase sigma")
        if preserve is not None:
            pidx = torch.randint(0, xp.shape[0], (batch_size,), generator=g)
            xpt, tp = _noisy(xp[pidx])
            with torch.no_grad():
                ptarget = frozen(xpt, cp[pidx], tp)
            prior = mse_unlearn_loss(tuned(xpt, cp[pidx], tp), ptarget)
            g_u = _flat_grad(params, loss)
            g_p = _flat_grad(params, prior)
            g_tot = pcgrad_project(g_u, g_p, prior_weight) if pcgrad else g_u + prior_weight * g_p
            off = 0
            for p in params:
                p.grad = g_tot[off:off + p.numel()].view_as(p).clone()
                off += p.numel()
            result.prior_loss.append(float(prior.detach()))
        else:
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
        result.loss.append(float(loss.detach()))
        if (step + 1) % callback_every == 0 and step + 1 < steps:
            _call(step + 1)
    _call(steps)
    tuned.eval()
    return result
