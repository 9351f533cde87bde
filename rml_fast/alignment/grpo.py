"""Group Relative Policy Optimisation (GRPO): the core shared by AIR and ARSPO.

Three pieces, all vectorised torch (segment reductions with ``index_add``, no Python loop over
groups), float32 and float64, differentiable where a gradient is meaningful:

``grpo_advantages``
    group-relative advantages ``A_j = (r_j - mean_g r) / (std_g r + eps)`` (Shao et al. 2024,
    arXiv 2402.03300, eq. 3), per group, per (group, variant) cell, or un-normalised
    (Dr. GRPO, arXiv 2503.20783).
``grpo_loss``
    the token-level clipped surrogate with the k3 KL estimator,
    ``L = mean_j mean_t [-min(rho A, clip(rho, 1-eps, 1+eps) A) + beta KL_k3]``, exactly the
    ``loss_type="grpo"`` objective of TRL's ``GRPOTrainer`` (``"token"`` reduction: TRL's
    ``"bnpo"``).
``sequence_ratio``
    the length-normalised sequence importance ratio ``exp(mean_t(log pi - log pi_old))``.

References: Shao et al., "DeepSeekMath", arXiv 2402.03300 (GRPO); Schulman et al. 2017 (clipped
surrogate); Schulman 2020, "Approximating KL divergence" (k3 estimator).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rml_fast._validation import Interval, check_scalar

__all__ = ["grpo_advantages", "grpo_loss", "sequence_ratio"]

_NORMALIZE = ("group", "variant", "none")
_REDUCTIONS = ("sequence", "token")


# --------------------------------------------------------------------------- validation helpers


def _as_float_tensor(x: Any, name: str, *, ndim: int | tuple[int, ...]) -> torch.Tensor:
    """``x`` as a floating torch tensor (kept as is when already floating), shape checked."""
    if not isinstance(x, torch.Tensor):
        try:  # through NumPy: Python floats stay float64
            x = torch.as_tensor(np.asarray(x))
        except Exception as exc:  # ragged lists and the like
            raise TypeError(f"{name} must be a tensor or array-like, got {type(x).__name__}") from exc
    _not_meta(x, name)
    if x.dtype == torch.bool or not (x.is_floating_point() or x.dtype in _INT_DTYPES):
        raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if x.dim() not in dims:
        raise ValueError(f"{name} must have ndim in {dims}, got a tensor of shape {tuple(x.shape)}")
    return x


_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _not_meta(x: torch.Tensor, name: str) -> None:
    """Refuse a tensor on the ``meta`` device (shape only, no values to check or use)."""
    if x.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")


def _check_finite(x: torch.Tensor, name: str, where: torch.Tensor | None = None) -> None:
    bad = ~torch.isfinite(x.detach())
    if where is not None:
        bad = bad & where
    if bool(bad.any()):
        first = torch.nonzero(bad)[0].tolist()
        raise ValueError(f"{name} must be finite, got NaN or infinite values (first at index {first})")


def _as_ids(x: Any, name: str, n: int, like: str = "reward") -> torch.Tensor:
    """Integer ids of shape (n,) as int64 (``like`` names the argument that fixed ``n``)."""
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(x)
        except Exception as exc:
            raise TypeError(f"{name} must be an integer tensor or array-like, got {type(x).__name__}") from exc
    _not_meta(x, name)
    if x.dtype not in _INT_DTYPES:
        raise TypeError(f"{name} must hold integers, got dtype {x.dtype}")
    if x.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) like {like}, got {tuple(x.shape)}")
    return x.to(torch.int64)


def _as_mask(x: Any, name: str, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """A 0/1 mask of ``shape`` as a bool tensor."""
    if x is None:
        return torch.ones(shape, dtype=torch.bool, device=device)
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(x)
        except Exception as exc:
            raise TypeError(f"{name} must be a bool or 0/1 tensor, got {type(x).__name__}") from exc
    _not_meta(x, name)
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")
    if x.dtype != torch.bool:
        if x.is_floating_point() or x.dtype in _INT_DTYPES:
            if not bool(((x == 0) | (x == 1)).all()):
                raise ValueError(f"{name} must hold only 0/1 (or bool) values")
        else:
            raise TypeError(f"{name} must be a bool or 0/1 tensor, got dtype {x.dtype}")
        x = x != 0
    return x.to(device)


_NONNEG = Interval("real", 0.0, None, closed="left")
_POSITIVE = Interval("real", 0.0, None, closed="neither")


def _dense_ids(ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary integer ids to 0..n-1 (sorted order of the distinct ids)."""
    uniq, inv = torch.unique(ids, sorted=True, return_inverse=True)
    return inv, int(uniq.numel())


def _segment_mean_std(
    values: torch.Tensor, seg: torch.Tensor, n_seg: int, unbiased: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-segment mean and std of ``values`` (segments given by dense ids), gathered back to (B,)."""
    ones = torch.ones_like(values)
    count = torch.zeros(n_seg, dtype=values.dtype, device=values.device).index_add_(0, seg, ones)
    total = torch.zeros(n_seg, dtype=values.dtype, device=values.device).index_add(0, seg, values)
    mean = total / count
    dev = values - mean[seg]
    ss = torch.zeros(n_seg, dtype=values.dtype, device=values.device).index_add(0, seg, dev * dev)
    denom = (count - 1.0).clamp(min=1.0) if unbiased else count
    var = torch.where(count > 1, ss / denom, torch.zeros_like(ss))
    return mean[seg], var.sqrt()[seg]


# --------------------------------------------------------------------------- public API


def grpo_advantages(
    reward: torch.Tensor,
    group_id: torch.Tensor,
    normalize: str = "group",
    eps: float = 1e-6,
    variant_id: torch.Tensor | None = None,
    *,
    unbiased: bool = True,
) -> torch.Tensor:
    r"""Group-relative advantages of GRPO.

    .. math::

        A_j = \frac{r_j - \operatorname{mean}_{k \in g(j)} r_k}{\operatorname{std}_{k \in g(j)} r_k
        + \varepsilon}

    (Shao et al. 2024, arXiv 2402.03300, eq. 3), where the segment ``g(j)`` is the rollout's
    group (``normalize="group"``: for AIR's heterogeneous grouping, all rollouts of all variants
    of one intent) or its (group, variant) cell (``normalize="variant"``: standard per-prompt
    GRPO); ``normalize="none"`` returns ``r_j - mean_g r`` (Dr. GRPO, no std division).

    Parameters
    ----------
    reward : Tensor of shape (B,)
        Scalar reward per rollout, finite.
    group_id : integer Tensor of shape (B,)
        Group (prompt / intent) of each rollout; any integers, need not be contiguous.
    normalize : {"group", "variant", "none"}, default="group"
        Segment used for the mean and std (see above).
    eps : float, default=1e-6
        Added to the std (TRL uses 1e-4). Must be >= 0.
    variant_id : integer Tensor of shape (B,), optional
        Variant (context) of each rollout within its group; required for ``"variant"``.
    unbiased : bool, default=True
        Bessel-corrected std (``torch.std``'s and TRL's default); ``False`` divides by n.
        A segment with one rollout has std 0.

    Returns
    -------
    adv : Tensor of shape (B,)
        Same dtype as ``reward``.

    Raises
    ------
    ValueError
        Mismatched shapes, non-finite rewards, an unknown ``normalize``, a negative ``eps``,
        or ``"variant"`` without ``variant_id``.

    Examples
    --------
    >>> import torch
    >>> r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    >>> grpo_advantages(r, torch.tensor([0, 0, 1, 1]))
    tensor([ 0.7071, -0.7071,  0.0000,  0.0000])
    >>> grpo_advantages(r, torch.tensor([0, 0, 1, 1]), normalize="none")
    tensor([ 0.5000, -0.5000,  0.0000,  0.0000])
    """
    reward = _as_float_tensor(reward, "reward", ndim=1)
    n = reward.shape[0]
    group_id = _as_ids(group_id, "group_id", n)
    if normalize not in _NORMALIZE:
        raise ValueError(f"normalize must be one of {_NORMALIZE}, got {normalize!r}")
    eps = check_scalar(eps, "eps", _NONNEG)
    if normalize == "variant":
        if variant_id is None:
            raise ValueError("normalize='variant' needs variant_id (shape (B,)), got None")
        variant_id = _as_ids(variant_id, "variant_id", n)
    elif variant_id is not None:
        variant_id = _as_ids(variant_id, "variant_id", n)
    _check_finite(reward, "reward")
    if n == 0:
        return reward.clone()
    group_id = group_id.to(reward.device)
    if normalize == "variant":
        assert variant_id is not None
        key = torch.stack([group_id, variant_id.to(reward.device)], dim=1)
        _, seg = torch.unique(key, dim=0, return_inverse=True)
        n_seg = int(seg.max()) + 1
    else:
        seg, n_seg = _dense_ids(group_id)
    mean, std = _segment_mean_std(reward, seg, n_seg, unbiased)
    centred = reward - mean
    if normalize == "none":
        return centred
    return centred / (std + eps)


def sequence_ratio(
    logp_new: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    r"""Length-normalised sequence importance ratio.

    .. math:: s_j = \exp\Big(\frac{1}{|y_j|}\sum_t m_{j,t}\,(\log\pi_\theta(y_{j,t}) - \log\pi_{old}(y_{j,t}))\Big)

    (the geometric-mean token ratio, GSPO's sequence ratio; AIR's ``s_j(theta)``, spec
    np_alignment §2.1). Equals 1 at ``theta = theta_old`` and its gradient there is
    ``grad mean_t log pi(y_t)``.

    Parameters
    ----------
    logp_new : Tensor of shape (B, T)
        Per-token log-probabilities under the current policy (carries the gradient).
    logp_old : Tensor of shape (B, T)
        The same under the sampling policy (treated as a constant).
    mask : bool or 0/1 Tensor of shape (B, T), optional
        Which tokens belong to the completion; all when None. A row without tokens gets ratio 1.

    Returns
    -------
    ratio : Tensor of shape (B,)

    Raises
    ------
    ValueError
        Mismatched shapes or non-finite log-probabilities at unmasked tokens.

    Examples
    --------
    >>> import torch
    >>> lp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 1.0]]))
    >>> sequence_ratio(lp, torch.log(torch.full((2, 2), 0.5)))
    tensor([1., 1.])
    """
    logp_new = _as_float_tensor(logp_new, "logp_new", ndim=2)
    logp_old = _as_float_tensor(logp_old, "logp_old", ndim=2)
    if logp_old.shape != logp_new.shape:
        raise ValueError(
            f"logp_old must have the shape of logp_new {tuple(logp_new.shape)}, got {tuple(logp_old.shape)}"
        )
    m = _as_mask(mask, "mask", tuple(logp_new.shape), logp_new.device)
    _check_finite(logp_new, "logp_new", m)
    _check_finite(logp_old, "logp_old", m)
    return _sequence_ratio(logp_new, logp_old.to(logp_new.dtype), m)


def _sequence_ratio(logp_new: torch.Tensor, logp_old: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    mf = m.to(logp_new.dtype)
    diff = torch.where(m, logp_new - logp_old.detach(), torch.zeros_like(logp_new))
    return torch.exp((diff * mf).sum(-1) / mf.sum(-1).clamp(min=1.0))


def grpo_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor | None,
    adv: torch.Tensor,
    mask: torch.Tensor | None = None,
    clip_eps: float = 0.2,
    kl_coef: float = 0.0,
    *,
    clip_eps_high: float | None = None,
    reduction: str = "sequence",
) -> torch.Tensor:
    r"""GRPO's token-level clipped surrogate with the k3 KL penalty.

    .. math::

        \ell_{j,t} = -\min\big(\rho_{j,t} A_j,\ \operatorname{clip}(\rho_{j,t}, 1-\epsilon,
        1+\epsilon_{high}) A_j\big) + \beta\,\big(e^{\delta_{j,t}} - \delta_{j,t} - 1\big),

    with ``rho = exp(log pi_theta - log pi_old)`` and ``delta = log pi_ref - log pi_theta`` (k3
    estimator of KL(pi_theta || pi_ref)); ``L = mean_j (sum_t m l / sum_t m)`` for
    ``reduction="sequence"`` (GRPO, arXiv 2402.03300 eq. 3; TRL ``loss_type="grpo"``) or
    ``sum_{j,t} m l / sum_{j,t} m`` for ``"token"`` (TRL ``"bnpo"``, DAPO).

    Parameters
    ----------
    logp_new : Tensor of shape (B, T)
        Per-token log-probabilities under the current policy (carries the gradient).
    logp_old : Tensor of shape (B, T)
        Under the sampling policy (constant).
    logp_ref : Tensor of shape (B, T) or None
        Under the reference policy; needed only when ``kl_coef > 0``.
    adv : Tensor of shape (B,) or (B, T)
        Advantages (constant), e.g. from :func:`grpo_advantages`.
    mask : bool or 0/1 Tensor of shape (B, T), optional
        Completion tokens; all when None.
    clip_eps : float, default=0.2
        Lower clip ``epsilon`` (> 0); also the upper one unless ``clip_eps_high`` is given.
    kl_coef : float, default=0.0
        ``beta`` >= 0.
    clip_eps_high : float, optional
        Upper clip (DAPO's clip-higher); defaults to ``clip_eps``.
    reduction : {"sequence", "token"}, default="sequence"
        Mean over tokens then sequences, or over all tokens.

    Returns
    -------
    loss : Tensor of shape ()

    Raises
    ------
    ValueError
        Mismatched shapes, non-finite inputs at unmasked tokens, ``clip_eps <= 0``,
        ``kl_coef < 0``, ``kl_coef > 0`` without ``logp_ref``, unknown ``reduction``.

    Examples
    --------
    >>> import torch
    >>> lp = torch.zeros(2, 3, requires_grad=True)
    >>> loss = grpo_loss(lp, lp.detach(), None, torch.tensor([1.0, -1.0]))
    >>> round(loss.item(), 6)  # at theta = theta_old the surrogate is -mean(A)
    0.0
    >>> loss.backward(); lp.grad  # REINFORCE: -A_j / (B |y_j|)
    tensor([[-0.1667, -0.1667, -0.1667],
            [ 0.1667,  0.1667,  0.1667]])
    """
    logp_new = _as_float_tensor(logp_new, "logp_new", ndim=2)
    shape = tuple(logp_new.shape)
    logp_old = _as_float_tensor(logp_old, "logp_old", ndim=2)
    if tuple(logp_old.shape) != shape:
        raise ValueError(f"logp_old must have the shape of logp_new {shape}, got {tuple(logp_old.shape)}")
    kl_coef = check_scalar(kl_coef, "kl_coef", _NONNEG)
    clip_eps = check_scalar(clip_eps, "clip_eps", _POSITIVE)
    clip_hi = clip_eps if clip_eps_high is None else check_scalar(
        clip_eps_high, "clip_eps_high", _POSITIVE
    )
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if logp_ref is not None:
        logp_ref = _as_float_tensor(logp_ref, "logp_ref", ndim=2)
        if tuple(logp_ref.shape) != shape:
            raise ValueError(f"logp_ref must have the shape of logp_new {shape}, got {tuple(logp_ref.shape)}")
    elif kl_coef > 0:
        raise ValueError("kl_coef > 0 needs logp_ref (shape (B, T)), got None")
    adv = _as_float_tensor(adv, "adv", ndim=(1, 2))
    if adv.dim() == 1 and adv.shape[0] != shape[0]:
        raise ValueError(f"adv must have shape ({shape[0]},) or {shape}, got {tuple(adv.shape)}")
    if adv.dim() == 2 and tuple(adv.shape) != shape:
        raise ValueError(f"adv must have shape ({shape[0]},) or {shape}, got {tuple(adv.shape)}")
    m = _as_mask(mask, "mask", shape, logp_new.device)
    _check_finite(logp_new, "logp_new", m)
    _check_finite(logp_old, "logp_old", m)
    _check_finite(adv, "adv")
    if logp_ref is not None and kl_coef > 0:
        _check_finite(logp_ref, "logp_ref", m)
    return _grpo_loss(logp_new, logp_old, logp_ref, adv, m, clip_eps, clip_hi, kl_coef, reduction)


def _grpo_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor | None,
    adv: torch.Tensor,
    m: torch.Tensor,
    clip_eps: float,
    clip_hi: float,
    kl_coef: float,
    reduction: str,
) -> torch.Tensor:
    """:func:`grpo_loss` on checked inputs (``m`` a bool mask)."""
    dt = logp_new.dtype
    a = adv.detach().to(dt)
    if a.dim() == 1:
        a = a.unsqueeze(1)
    zero = torch.zeros_like(logp_new)
    log_ratio = torch.where(m, logp_new - logp_old.detach().to(dt), zero)
    ratio = torch.exp(log_ratio)
    per_tok = -torch.minimum(ratio * a, ratio.clamp(1.0 - clip_eps, 1.0 + clip_hi) * a)
    if kl_coef > 0:
        assert logp_ref is not None
        delta = torch.where(m, logp_ref.detach().to(dt) - logp_new, zero)
        per_tok = per_tok + kl_coef * (torch.exp(delta) - delta - 1.0)
    mf = m.to(dt)
    if reduction == "sequence":
        return ((per_tok * mf).sum(-1) / mf.sum(-1).clamp(min=1.0)).mean()
    return (per_tok * mf).sum() / mf.sum().clamp(min=1.0)
