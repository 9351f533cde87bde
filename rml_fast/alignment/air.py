"""Anchor Invariance Regularisation (AIR) on top of GRPO, and the symmetric V-REx baseline.

Wang et al., "Towards Context-Invariant Safety Alignment for Large Language Models",
arXiv 2605.20994 (ICML 2026). The paper's code is not released and its method section was not
readable to us; what is public (abstract, a third-party summary) fixes the ingredients: verifiable
"anchor" prompts, a stop-gradient anchor target, only open-ended variants regularised, a plug-in
auxiliary loss on GRPO with heterogeneous prompt grouping, and V-REx as the symmetric baseline
that can lower anchor performance. The concrete loss below is the **PROPOSAL** of spec
np_alignment §2.1:

* per-context differentiable risk (value = empirical risk at theta_old, gradient = policy
  gradient): ``R_{i,e}(theta) = 1 - (1/n_e) sum_{j in e} s_j(theta) r_j`` with the
  length-normalised ratio ``s_j = exp(mean_t(log pi_theta - log pi_old))``;
* ``R^anc_i = mean_{e in A_i} R_{i,e}``,
  ``L_AIR = mean_i mean_{e in O_i} phi(R_{i,e} - sg(R^anc_i))``, ``phi(u) = max(u, 0)^2``
  (``one_sided=True``, default) or ``u^2``;
* ``L = L_GRPO + lambda L_AIR`` (lambda = 1 by default, PROPOSAL);
* V-REx: ``L_VREx = mean_i Var_{e in A_i u O_i}(R_{i,e})`` without stop-gradient.

Rewards are expected in [0, 1]. Intents are "groups" (``group_id``), contexts are "variants"
(``variant_id``); ``is_anchor`` marks the verifiable variants.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rml_fast._validation import check_scalar
from rml_fast.alignment.grpo import (
    _NONNEG,
    _POSITIVE,
    _as_float_tensor,
    _as_ids,
    _as_mask,
    _check_finite,
    _dense_ids,
    _grpo_loss,
    _sequence_ratio,
    grpo_advantages,
    sequence_ratio,
)

__all__ = [
    "AIRObjective",
    "air_loss",
    "context_metrics",
    "context_risk",
    "sequence_ratio",
    "vrex_loss",
]

_REGULARISERS = ("air", "vrex", "none")


def _cells(
    group_id: torch.Tensor, variant_id: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    gi, n_g = _dense_ids(group_id)
    vi, n_v = _dense_ids(variant_id)
    return gi, vi, n_g, n_v


def context_risk(
    ratio: torch.Tensor,
    reward: torch.Tensor,
    group_id: torch.Tensor,
    variant_id: torch.Tensor,
) -> torch.Tensor:
    r"""Differentiable per-(intent, variant) risk.

    .. math:: R_{i,e}(\theta) = 1 - \frac{1}{n_{i,e}} \sum_{j \in (i,e)} s_j(\theta)\, r_j

    (spec np_alignment §2.1, PROPOSAL for arXiv 2605.20994). At ``theta = theta_old``
    (``s = 1``) the value is ``1 - mean reward`` of the cell, and its gradient is the REINFORCE
    estimate ``-(1/n) sum_j r_j grad mean_t log pi(y_j,t)``.

    Parameters
    ----------
    ratio : Tensor of shape (B,)
        ``s_j(theta)`` from :func:`sequence_ratio` (carries the gradient).
    reward : Tensor of shape (B,)
        Rewards in [0, 1] (constant), finite.
    group_id, variant_id : integer Tensors of shape (B,)
        Intent and variant of each rollout. Rows of the result follow the sorted distinct group
        ids, columns the sorted distinct variant ids.

    Returns
    -------
    risk : Tensor of shape (n_groups, n_variants)
        ``NaN`` in cells with no rollout (use ``torch.isfinite(risk)`` as the valid mask).

    Raises
    ------
    ValueError
        Mismatched shapes or non-finite inputs.

    Examples
    --------
    >>> import torch
    >>> r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    >>> context_risk(torch.ones(6), r, torch.tensor([0, 0, 0, 0, 1, 1]), torch.tensor([0, 0, 1, 1, 0, 0]))
    tensor([[0.5000, 0.0000],
            [1.0000,    nan]])
    """
    ratio = _as_float_tensor(ratio, "ratio", ndim=1)
    n = ratio.shape[0]
    reward = _as_float_tensor(reward, "reward", ndim=1)
    if reward.shape[0] != n:
        raise ValueError(f"reward must have shape ({n},) like ratio, got {tuple(reward.shape)}")
    group_id = _as_ids(group_id, "group_id", n, like="ratio")
    variant_id = _as_ids(variant_id, "variant_id", n, like="ratio")
    _check_finite(ratio, "ratio")
    _check_finite(reward, "reward")
    return _context_risk(ratio, reward.to(ratio.dtype), group_id.to(ratio.device), variant_id.to(ratio.device))


def _context_risk(
    ratio: torch.Tensor, reward: torch.Tensor, group_id: torch.Tensor, variant_id: torch.Tensor
) -> torch.Tensor:
    gi, vi, n_g, n_v = _cells(group_id, variant_id)
    cell = gi * n_v + vi
    dt = ratio.dtype
    count = torch.zeros(n_g * n_v, dtype=dt, device=ratio.device).index_add_(0, cell, torch.ones_like(ratio))
    total = torch.zeros(n_g * n_v, dtype=dt, device=ratio.device).index_add(0, cell, ratio * reward.detach())
    risk = 1.0 - total / count.clamp(min=1.0)
    risk = torch.where(count > 0, risk, torch.full_like(risk, float("nan")))
    return risk.view(n_g, n_v)


def _check_risk(risk: Any, valid: Any) -> tuple[torch.Tensor, torch.Tensor]:
    risk = _as_float_tensor(risk, "risk", ndim=2)
    if valid is None:
        valid = torch.isfinite(risk.detach())
    else:
        valid = _as_mask(valid, "valid", tuple(risk.shape), risk.device)
    _check_finite(risk, "risk", valid)
    return risk, valid


def air_loss(
    risk: torch.Tensor,
    is_anchor: torch.Tensor,
    valid: torch.Tensor | None = None,
    one_sided: bool = True,
) -> torch.Tensor:
    r"""Anchor invariance regulariser (PROPOSAL, spec np_alignment §2.1).

    .. math::

        R^{anc}_i = \operatorname{mean}_{e \in A_i} R_{i,e}, \qquad
        L_{AIR} = \operatorname{mean}_i \operatorname{mean}_{e \in O_i}
        \varphi\big(R_{i,e} - \operatorname{sg}(R^{anc}_i)\big),

    ``phi(u) = max(u, 0)^2`` (one-sided) or ``u^2``. The anchors receive no gradient (stop
    gradient); an open variant already at or below its anchor risk contributes nothing when
    one-sided. Intents with no valid anchor or no valid open variant are left out of the mean;
    with none left the loss is 0 (still connected to ``risk`` for autograd).

    Parameters
    ----------
    risk : Tensor of shape (G, V)
        Per-context risks, e.g. from :func:`context_risk`.
    is_anchor : bool Tensor of shape (G, V) or (V,)
        Which variants are verifiable anchors (a (V,) mask applies to every intent).
    valid : bool Tensor of shape (G, V), optional
        Which cells exist; default ``isfinite(risk)``.
    one_sided : bool, default=True
        ``max(u, 0)^2`` (AIR) or ``u^2`` (two-sided, anchored).

    Returns
    -------
    loss : Tensor of shape ()

    Raises
    ------
    ValueError
        Mismatched shapes, non-finite valid risks.

    Examples
    --------
    >>> import torch
    >>> risk = torch.tensor([[0.2, 0.5, 0.1]], requires_grad=True)
    >>> loss = air_loss(risk, torch.tensor([True, False, False]))
    >>> round(loss.item(), 6)  # mean(0.3**2, 0)
    0.045
    >>> loss.backward(); risk.grad  # anchor column gets exactly 0
    tensor([[0.0000, 0.3000, 0.0000]])
    """
    risk, valid = _check_risk(risk, valid)
    anchor = _anchor_mask(is_anchor, risk)
    return _air_loss(risk, anchor, valid, bool(one_sided))


def _anchor_mask(is_anchor: Any, risk: torch.Tensor) -> torch.Tensor:
    if not isinstance(is_anchor, torch.Tensor):
        is_anchor = torch.as_tensor(is_anchor)
    if is_anchor.dim() == 1:
        if is_anchor.shape[0] != risk.shape[1]:
            raise ValueError(
                f"is_anchor must have shape {tuple(risk.shape)} or ({risk.shape[1]},), got {tuple(is_anchor.shape)}"
            )
        is_anchor = is_anchor.unsqueeze(0).expand(risk.shape)
    return _as_mask(is_anchor, "is_anchor", tuple(risk.shape), risk.device)


def _air_loss(risk: torch.Tensor, anchor: torch.Tensor, valid: torch.Tensor, one_sided: bool) -> torch.Tensor:
    dt = risk.dtype
    zero = torch.zeros_like(risk)
    safe = torch.where(valid, risk, zero)
    a_mask = (anchor & valid).to(dt)
    o_mask = (~anchor & valid).to(dt)
    n_a = a_mask.sum(1)
    n_o = o_mask.sum(1)
    r_anc = (safe.detach() * a_mask).sum(1) / n_a.clamp(min=1.0)
    u = safe - r_anc.unsqueeze(1)
    phi = u.clamp(min=0.0) ** 2 if one_sided else u**2
    per_intent = (phi * o_mask).sum(1) / n_o.clamp(min=1.0)
    use = ((n_a > 0) & (n_o > 0)).to(dt)
    return (per_intent * use).sum() / use.sum().clamp(min=1.0)


def vrex_loss(risk: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    r"""V-REx variance penalty across contexts (Krueger et al. 2021, arXiv 2003.00688).

    .. math:: L_{VREx} = \operatorname{mean}_i \operatorname{Var}_{e \in A_i \cup O_i} R_{i,e}

    (population variance, ``numpy.var``'s default), with gradients into every context, anchors
    included: the symmetric baseline AIR replaces. Intents with one valid context add 0.

    Parameters
    ----------
    risk : Tensor of shape (G, V)
        Per-context risks.
    valid : bool Tensor of shape (G, V), optional
        Which cells exist; default ``isfinite(risk)``.

    Returns
    -------
    loss : Tensor of shape ()

    Raises
    ------
    ValueError
        Mismatched shapes, non-finite valid risks.

    Examples
    --------
    >>> import torch
    >>> round(vrex_loss(torch.tensor([[0.2, 0.6], [0.0, 0.0]])).item(), 6)  # mean(0.04, 0)
    0.02
    """
    risk, valid = _check_risk(risk, valid)
    return _vrex_loss(risk, valid)


def _vrex_loss(risk: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    dt = risk.dtype
    vm = valid.to(dt)
    safe = torch.where(valid, risk, torch.zeros_like(risk))
    n = vm.sum(1)
    mean = (safe * vm).sum(1) / n.clamp(min=1.0)
    var = (((safe - mean.unsqueeze(1)) ** 2) * vm).sum(1) / n.clamp(min=1.0)
    use = (n > 0).to(dt)
    return (var * use).sum() / use.sum().clamp(min=1.0)


def _cell_anchor(is_anchor: torch.Tensor, group_id: torch.Tensor, variant_id: torch.Tensor) -> torch.Tensor:
    """Per-rollout anchor flags -> (G, V) mask; all rollouts of a cell must agree."""
    gi, vi, n_g, n_v = _cells(group_id, variant_id)
    cell = gi * n_v + vi
    f = is_anchor.to(torch.float64)
    cnt = torch.zeros(n_g * n_v, dtype=torch.float64, device=f.device).index_add_(0, cell, torch.ones_like(f))
    tot = torch.zeros(n_g * n_v, dtype=torch.float64, device=f.device).index_add_(0, cell, f)
    if bool(((tot > 0) & (tot < cnt)).any()):
        raise ValueError("is_anchor must be the same for every rollout of one (group_id, variant_id) cell")
    return (tot > 0).view(n_g, n_v)


class AIRObjective:
    r"""GRPO plus an anchor-invariance (or V-REx) regulariser, callable on a batch dict.

    ``L = L_GRPO + lam * L_reg`` with ``L_GRPO`` from :func:`~rml_fast.alignment.grpo.grpo_loss`
    on advantages from :func:`~rml_fast.alignment.grpo.grpo_advantages` (heterogeneous grouping:
    ``normalize="group"`` pools all variants of an intent) and ``L_reg`` = :func:`air_loss`
    (``regulariser="air"``), :func:`vrex_loss` (``"vrex"``) or 0 (``"none"``, plain GRPO) on the
    :func:`context_risk` of the batch. PROPOSAL reconstruction of arXiv 2605.20994 (spec
    np_alignment §2.1); lam = 1 by default.

    Parameters
    ----------
    lam : float, default=1.0
        Regulariser weight, >= 0.
    regulariser : {"air", "vrex", "none"}, default="air"
        Which penalty.
    one_sided : bool, default=True
        AIR's ``phi``: ``max(u, 0)^2`` or ``u^2``.
    normalize : {"group", "variant", "none"}, default="group"
        Advantage normalisation (see :func:`~rml_fast.alignment.grpo.grpo_advantages`).
    clip_eps : float, default=0.2
        PPO clip.
    kl_coef : float, default=0.0
        k3 KL weight (needs ``logp_ref`` in the batch when > 0).
    eps : float, default=1e-6
        Added to the group std.

    Examples
    --------
    >>> import torch
    >>> obj = AIRObjective(lam=1.0)
    >>> lp = torch.log(torch.full((4, 1), 0.5)).requires_grad_()
    >>> batch = dict(logp_new=lp, logp_old=lp.detach(), reward=torch.tensor([1.0, 1.0, 0.0, 1.0]),
    ...              group_id=torch.zeros(4, dtype=torch.long), variant_id=torch.tensor([0, 0, 1, 1]),
    ...              is_anchor=torch.tensor([True, True, False, False]))
    >>> out = obj(batch)
    >>> out["risks"]
    tensor([[0.0000, 0.5000]], grad_fn=<ViewBackward0>)
    >>> round(out["air"].item(), 6)
    0.25
    """

    def __init__(
        self,
        lam: float = 1.0,
        regulariser: str = "air",
        one_sided: bool = True,
        normalize: str = "group",
        clip_eps: float = 0.2,
        kl_coef: float = 0.0,
        eps: float = 1e-6,
    ) -> None:
        self.lam = check_scalar(lam, "lam", _NONNEG)
        if regulariser not in _REGULARISERS:
            raise ValueError(f"regulariser must be one of {_REGULARISERS}, got {regulariser!r}")
        self.regulariser = regulariser
        self.one_sided = bool(one_sided)
        if normalize not in ("group", "variant", "none"):
            raise ValueError(f"normalize must be one of ('group', 'variant', 'none'), got {normalize!r}")
        self.normalize = normalize
        self.clip_eps = check_scalar(clip_eps, "clip_eps", _POSITIVE)
        self.kl_coef = check_scalar(kl_coef, "kl_coef", _NONNEG)
        self.eps = check_scalar(eps, "eps", _NONNEG)

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Loss and its parts for one batch of rollouts.

        Parameters
        ----------
        batch : mapping
            ``logp_new`` (B, T) with grad, ``logp_old`` (B, T), ``reward`` (B,) in [0, 1],
            ``group_id`` (B,), ``variant_id`` (B,), ``is_anchor`` (B,) bool (constant within a
            cell); optional ``mask`` (B, T), ``logp_ref`` (B, T) (needed if ``kl_coef > 0``),
            ``adv`` (B,) to use given advantages instead of computing them.

        Returns
        -------
        out : dict
            ``loss`` (), ``grpo`` (), ``air`` () (the regulariser before ``lam``), ``risks``
            (G, V), ``adv`` (B,), ``is_anchor`` (G, V), ``valid`` (G, V).
        """
        if not isinstance(batch, Mapping):
            raise TypeError(f"batch must be a mapping of tensors, got {type(batch).__name__}")
        missing = [k for k in ("logp_new", "logp_old", "reward", "group_id", "variant_id", "is_anchor")
                   if k not in batch]
        if missing:
            raise ValueError(f"batch is missing the keys {missing}")
        logp_new = _as_float_tensor(batch["logp_new"], "logp_new", ndim=2)
        b, t = logp_new.shape
        logp_old = _as_float_tensor(batch["logp_old"], "logp_old", ndim=2)
        if tuple(logp_old.shape) != (b, t):
            raise ValueError(f"logp_old must have shape {(b, t)}, got {tuple(logp_old.shape)}")
        reward = _as_float_tensor(batch["reward"], "reward", ndim=1)
        if reward.shape[0] != b:
            raise ValueError(f"reward must have shape ({b},) (one per rollout), got {tuple(reward.shape)}")
        group_id = _as_ids(batch["group_id"], "group_id", b).to(logp_new.device)
        variant_id = _as_ids(batch["variant_id"], "variant_id", b).to(logp_new.device)
        is_anchor = _as_mask(batch["is_anchor"], "is_anchor", (b,), logp_new.device)
        mask = _as_mask(batch.get("mask"), "mask", (b, t), logp_new.device)
        _check_finite(reward, "reward")
        _check_finite(logp_new, "logp_new", mask)
        _check_finite(logp_old, "logp_old", mask)
        if "adv" in batch and batch["adv"] is not None:
            adv = _as_float_tensor(batch["adv"], "adv", ndim=1)
            if adv.shape[0] != b:
                raise ValueError(f"adv must have shape ({b},), got {tuple(adv.shape)}")
        else:
            adv = grpo_advantages(reward, group_id, self.normalize, self.eps, variant_id)
        logp_ref = batch.get("logp_ref")
        if logp_ref is not None:
            logp_ref = _as_float_tensor(logp_ref, "logp_ref", ndim=2)
            if tuple(logp_ref.shape) != (b, t):
                raise ValueError(f"logp_ref must have shape {(b, t)}, got {tuple(logp_ref.shape)}")
            if self.kl_coef > 0:
                _check_finite(logp_ref, "logp_ref", mask)
        elif self.kl_coef > 0:
            raise ValueError("kl_coef > 0 needs batch['logp_ref'] of shape (B, T)")
        l_grpo = _grpo_loss(logp_new, logp_old, logp_ref, adv, mask, self.clip_eps, self.clip_eps,
                            self.kl_coef, "sequence")
        ratio = _sequence_ratio(logp_new, logp_old.to(logp_new.dtype), mask)
        risks = _context_risk(ratio, reward.to(logp_new.dtype), group_id, variant_id)
        valid = torch.isfinite(risks.detach())
        anchor = _cell_anchor(is_anchor, group_id, variant_id)
        if self.regulariser == "air":
            reg = _air_loss(risks, anchor, valid, self.one_sided)
        elif self.regulariser == "vrex":
            reg = _vrex_loss(risks, valid)
        else:
            reg = (torch.where(valid, risks, torch.zeros_like(risks)) * 0.0).sum()
        loss = l_grpo + self.lam * reg
        return {"loss": loss, "grpo": l_grpo, "air": reg, "risks": risks, "adv": adv,
                "is_anchor": anchor, "valid": valid}


def context_metrics(
    correct: torch.Tensor, is_anchor: torch.Tensor, valid: torch.Tensor | None = None
) -> dict[str, float]:
    r"""Anchor, open, group accuracy and consistency over intents x contexts.

    * anchor (open) accuracy: mean correctness over valid anchor (open) cells;
    * group accuracy: fraction of intents whose valid variants are *all* correct;
    * consistency: fraction of intents whose variants all get the same decision (all correct or
      all wrong; for a binary decision whose right answer depends on the intent only).

    ``correct`` may be 0/1 (decisions) or probabilities in [0, 1] (the policy's chance of the
    right decision); probabilities give the expected metrics with independent variants
    (``prod_e p`` for group accuracy, ``prod_e p + prod_e (1-p)`` for consistency).

    Parameters
    ----------
    correct : Tensor of shape (G, V)
        Correctness (bool/0-1) or probability of the correct decision.
    is_anchor : bool Tensor of shape (G, V) or (V,)
        Anchor variants.
    valid : bool Tensor of shape (G, V), optional
        Existing cells; default all.

    Returns
    -------
    metrics : dict
        ``anchor_accuracy``, ``open_accuracy``, ``group_accuracy``, ``consistency`` (floats;
        NaN where no cell qualifies).

    Raises
    ------
    ValueError
        Values outside [0, 1], mismatched shapes.

    Examples
    --------
    >>> import torch
    >>> c = torch.tensor([[1, 1, 0], [1, 1, 1]])
    >>> context_metrics(c, torch.tensor([True, False, False]))
    {'anchor_accuracy': 1.0, 'open_accuracy': 0.75, 'group_accuracy': 0.5, 'consistency': 0.5}
    """
    c = _as_float_tensor(correct if not (isinstance(correct, torch.Tensor) and correct.dtype == torch.bool)
                         else correct.to(torch.float64), "correct", ndim=2).detach().to(torch.float64)
    _check_finite(c, "correct")
    if bool(((c < 0) | (c > 1)).any()):
        raise ValueError("correct must hold values in [0, 1]")
    anchor = _anchor_mask(is_anchor, c)
    v = torch.ones_like(c, dtype=torch.bool) if valid is None else _as_mask(valid, "valid", tuple(c.shape), c.device)
    am, om = (anchor & v), (~anchor & v)

    def _mean(mask: torch.Tensor) -> float:
        return float(c[mask].mean()) if bool(mask.any()) else float("nan")

    one = torch.ones_like(c)
    p_all = torch.where(v, c, one).prod(1)
    q_all = torch.where(v, 1.0 - c, one).prod(1)
    rows = v.any(1)
    group = float(p_all[rows].mean()) if bool(rows.any()) else float("nan")
    cons = float((p_all + q_all)[rows].mean()) if bool(rows.any()) else float("nan")
    return {"anchor_accuracy": _mean(am), "open_accuracy": _mean(om), "group_accuracy": group,
            "consistency": cons}
