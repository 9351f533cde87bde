"""Pairwise preference losses, their incentive-score decomposition and reward calibration.

Every pairwise preference objective ``L(z_w, z_l)`` of the sequence log-likelihoods
``z_w = log pi(y_w|x)``, ``z_l = log pi(y_l|x)`` has the gradient

    grad L = -d_w s_w + d_l s_l,   s_* = grad z_*,   d_w = -dL/dz_w,   d_l = dL/dz_l,

so the objectives differ only in two scalar *incentives* ``(d_w, d_l)`` (arXiv 2604.18239,
"Towards Disentangled Preference Optimization Dynamics"). A step raises ``z_w`` and lowers
``z_l`` exactly when ``r = d_w / d_l`` lies in the *disentanglement band*
``[rho r*, r*/rho]`` (``r* = |s_l|/|s_w|``, ``rho = cos(s_w, s_l)``); reward calibration (RC)
rescales the backward pass of any objective so that ``r`` moves to the band's centre.

The nine objectives (``LOSSES``) and their hyper-parameters (defaults in brackets):

========  =======================================  ===========================
kind      loss per pair                             hyper-parameters
========  =======================================  ===========================
dpo       ``-log sig(beta m~)``                     beta [0.1]
ipo       ``(m~ - 1/(2 tau))**2``                   tau [1.0]
simpo     ``-log sig(beta m - gamma)``              beta [0.1], gamma [1.0]
cpo       ``-log sig(beta m) - lam z_w``            beta [0.1], lam [1.0]
slic      ``max(0, gamma - m) - lam z_w``           gamma [1.0], lam [0.1]
bce       ``-log sig(r_w) - log sig(-r_l)``         --
lsif      ``-exp(r_w) + exp(2 r_l)/2``              --
ukl       ``-z_w + exp(r_l)``                       --
ddro      ``(log 2 - r_w) + (log 2 - log(2 - e^r_l))``  ddro_eps [1e-6]
========  =======================================  ===========================

with ``r_* = z_* - z_*^ref``, ``m = z_w - z_l`` and ``m~ = r_w - r_l``. Every kind also takes
``length_norm`` (default True for simpo, False otherwise): each ``z_*`` (and its reference) is
divided by the response length ``len_*`` first, as SimPO does (and TRL's ``ipo`` and
``sigmoid_norm``); the incentives are then taken with respect to the un-normalised sums.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rml_fast._validation import Interval, check_scalar

__all__ = [
    "LOSSES",
    "PreferenceLoss",
    "PreferenceOutput",
    "RewardCalibrator",
    "disentanglement_band",
    "incentives",
    "pairwise_loss",
    "predicted_delta",
    "preference_step",
    "score_geometry",
    "sequence_logps",
]

#: the nine pairwise objectives of arXiv 2604.18239 (Table 1)
LOSSES = frozenset({"dpo", "ipo", "simpo", "cpo", "slic", "bce", "lsif", "ukl", "ddro"})

_POS = Interval("real", 0.0, None, closed="neither")
_NONNEG = Interval("real", 0.0, None, closed="left")
_REAL = Interval("real", None, None)
_HP: dict[str, dict[str, tuple[float, Interval]]] = {
    "dpo": {"beta": (0.1, _POS)},
    "ipo": {"tau": (1.0, _POS)},
    "simpo": {"beta": (0.1, _POS), "gamma": (1.0, _REAL)},
    "cpo": {"beta": (0.1, _POS), "lam": (1.0, _NONNEG)},
    "slic": {"gamma": (1.0, _REAL), "lam": (0.1, _NONNEG)},
    "bce": {},
    "lsif": {},
    "ukl": {},
    "ddro": {"ddro_eps": (1e-6, Interval("real", 0.0, 1.0, closed="neither"))},
}
# which references each kind uses: (chosen, rejected)
_REFS = {
    "dpo": (True, True),
    "ipo": (True, True),
    "simpo": (False, False),
    "cpo": (False, False),
    "slic": (False, False),
    "bce": (True, True),
    "lsif": (True, True),
    "ukl": (False, True),
    "ddro": (True, True),
}
_LOG2 = math.log(2.0)


def _check_kind(kind: Any) -> str:
    if not isinstance(kind, str) or kind.lower() not in LOSSES:
        raise ValueError(f"kind must be one of {sorted(LOSSES)}, got {kind!r}")
    return kind.lower()


def _resolve_hp(kind: str, hp: dict[str, Any]) -> dict[str, Any]:
    table = _HP[kind]
    unknown = set(hp) - set(table) - {"length_norm"}
    if unknown:
        raise TypeError(
            f"unknown hyper-parameter(s) {sorted(unknown)} for kind={kind!r}; "
            f"expected some of {[*sorted(table), 'length_norm']}"
        )
    out: dict[str, Any] = {
        k: check_scalar(hp.get(k, default), k, iv) for k, (default, iv) in table.items()
    }
    ln = hp.get("length_norm", kind == "simpo")
    if not isinstance(ln, bool):
        raise TypeError(f"length_norm must be a bool, got {type(ln).__name__} {ln!r}")
    out["length_norm"] = ln
    return out


def _check_vec(x: Any, name: str, b: int | None, *, finite: bool = True,
               like: str = "zw") -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (B,), got {type(x).__name__}")
    if x.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.ndim != 1 or (b is not None and x.shape[0] != b):
        want = "(B,)" if b is None else f"({b},) like {like}"
        raise ValueError(f"{name} must have shape {want}, got {tuple(x.shape)}")
    if finite and not bool(torch.isfinite(x.detach()).all()):
        bad = int((~torch.isfinite(x.detach())).nonzero()[0, 0])
        raise ValueError(f"{name} must be finite; {name}[{bad}] = {float(x.detach()[bad])}")
    return x


def _check_len(n: Any, name: str, b: int, like: torch.Tensor) -> torch.Tensor | None:
    if n is None:
        return None
    if isinstance(n, numbers.Real) and not isinstance(n, bool):
        check_scalar(n, name, _POS)
        return torch.full((b,), float(n), dtype=like.dtype, device=like.device)
    if not isinstance(n, torch.Tensor):
        raise TypeError(f"{name} must be a positive number or a tensor of shape (B,), got "
                        f"{type(n).__name__}")
    if n.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    if n.ndim != 1 or n.shape[0] != b:
        raise ValueError(f"{name} must have shape ({b},) like zw, got {tuple(n.shape)}")
    n = n.to(dtype=like.dtype, device=like.device)
    if not bool((n > 0).all()) or not bool(torch.isfinite(n).all()):
        raise ValueError(f"{name} must be positive and finite (response lengths)")
    return n


def _prepare(
    kind: Any, zw: Any, zl: Any, zw_ref: Any, zl_ref: Any, len_w: Any, len_l: Any, hp: dict
) -> tuple[str, dict[str, Any], tuple[Any, ...]]:
    kind = _check_kind(kind)
    h = _resolve_hp(kind, hp)
    zw = _check_vec(zw, "zw", None)
    b = zw.shape[0]
    zl = _check_vec(zl, "zl", b)
    need_w, need_l = _REFS[kind]
    if need_w and zw_ref is None:
        raise ValueError(f"kind={kind!r} needs the reference log-likelihood zw_ref")
    if need_l and zl_ref is None:
        raise ValueError(f"kind={kind!r} needs the reference log-likelihood zl_ref")
    zw_ref = _check_vec(zw_ref, "zw_ref", b) if need_w else None
    zl_ref = _check_vec(zl_ref, "zl_ref", b) if need_l else None
    nw = _check_len(len_w, "len_w", b, zw)
    nl = _check_len(len_l, "len_l", b, zw)
    return kind, h, (zw, zl, zw_ref, zl_ref, nw, nl)


def _scores(args: tuple[Any, ...], length_norm: bool) -> tuple[torch.Tensor, torch.Tensor, Any, Any]:
    """The normalised chosen/rejected scores ``a_w, a_l`` (reference subtracted where used)."""
    zw, zl, zw_ref, zl_ref, nw, nl = args
    aw = zw if zw_ref is None else zw - zw_ref
    al = zl if zl_ref is None else zl - zl_ref
    if not length_norm:
        return aw, al, None, None
    nw = torch.ones_like(aw) if nw is None else nw
    nl = torch.ones_like(al) if nl is None else nl
    return aw / nw, al / nl, nw, nl


def _loss_core(kind: str, h: dict[str, Any], args: tuple[Any, ...]) -> torch.Tensor:
    aw, al, _, _ = _scores(args, h["length_norm"])
    if kind == "dpo":
        return F.softplus(-h["beta"] * (aw - al))
    if kind == "ipo":
        return (aw - al - 0.5 / h["tau"]) ** 2
    if kind == "simpo":
        return F.softplus(h["gamma"] - h["beta"] * (aw - al))
    if kind == "cpo":
        return F.softplus(-h["beta"] * (aw - al)) - h["lam"] * aw
    if kind == "slic":
        return torch.relu(h["gamma"] - (aw - al)) - h["lam"] * aw
    if kind == "bce":
        return F.softplus(-aw) + F.softplus(al)
    if kind == "lsif":
        return -torch.exp(aw) + 0.5 * torch.exp(2.0 * al)
    if kind == "ukl":
        return -aw + torch.exp(al)
    # ddro; e^{r_l} is capped below 2 (as the reference code does) so the loss stays finite
    e = torch.exp(al).clamp(max=2.0 - h["ddro_eps"])
    return (_LOG2 - aw) + (_LOG2 - torch.log(2.0 - e))


def _incentives_core(
    kind: str, h: dict[str, Any], args: tuple[Any, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    aw, al, nw, nl = _scores(args, h["length_norm"])
    aw, al = aw.detach(), al.detach()
    if kind == "dpo":
        dw = h["beta"] * torch.sigmoid(-h["beta"] * (aw - al))
        dl = dw
    elif kind == "ipo":
        dw = 2.0 * (0.5 / h["tau"] - (aw - al))
        dl = dw
    elif kind == "simpo":
        dw = h["beta"] * torch.sigmoid(h["gamma"] - h["beta"] * (aw - al))
        dl = dw
    elif kind == "cpo":
        dl = h["beta"] * torch.sigmoid(-h["beta"] * (aw - al))
        dw = dl + h["lam"]
    elif kind == "slic":
        dl = ((aw - al) < h["gamma"]).to(aw.dtype)
        dw = dl + h["lam"]
    elif kind == "bce":
        dw, dl = torch.sigmoid(-aw), torch.sigmoid(al)
    elif kind == "lsif":
        dw, dl = torch.exp(aw), torch.exp(2.0 * al)
    elif kind == "ukl":
        dw, dl = torch.ones_like(aw), torch.exp(al)
    else:  # ddro
        e = torch.exp(al)
        cap = 2.0 - h["ddro_eps"]
        dw = torch.ones_like(aw)
        dl = torch.where(e < cap, e / (2.0 - e.clamp(max=cap)), torch.zeros_like(e))
    if nw is not None:  # chain rule through z / len
        dw, dl = dw / nw, dl / nl
    return dw, dl


def pairwise_loss(
    kind: str,
    zw: torch.Tensor,
    zl: torch.Tensor,
    zw_ref: torch.Tensor | None = None,
    zl_ref: torch.Tensor | None = None,
    len_w: Any = None,
    len_l: Any = None,
    **hp: Any,
) -> torch.Tensor:
    """Per-pair loss ``L(z_w, z_l)`` of one of the nine preference objectives (Table 1).

    Parameters
    ----------
    kind : str
        One of :data:`LOSSES` (see the module docstring for each formula).
    zw, zl : Tensor of shape (B,)
        Policy sequence log-likelihoods of the chosen / rejected responses (sums over tokens).
    zw_ref, zl_ref : Tensor of shape (B,), optional
        Reference-model log-likelihoods; required by dpo, ipo, bce, lsif, ddro (both) and ukl
        (``zl_ref``), ignored by the reference-free simpo, cpo and slic.
    len_w, len_l : Tensor of shape (B,) or positive float, optional
        Response lengths, used when ``length_norm`` (default 1).
    **hp
        Hyper-parameters of ``kind``: ``beta`` (> 0), ``tau`` (> 0), ``gamma``, ``lam`` (>= 0),
        ``ddro_eps`` and ``length_norm``.

    Returns
    -------
    loss : Tensor of shape (B,)
        Differentiable per-pair losses (reduce them yourself, e.g. ``.mean()``).

    Raises
    ------
    ValueError
        Unknown kind, mismatched shapes, non-finite inputs, a missing reference, ``beta <= 0``.
    TypeError
        Non-tensor inputs or an unknown hyper-parameter.

    Examples
    --------
    >>> import torch
    >>> z = torch.zeros(2)
    >>> pairwise_loss("dpo", z, z, z, z, beta=0.1)  # log 2 at m~ = 0
    tensor([0.6931, 0.6931])
    """
    kind, h, args = _prepare(kind, zw, zl, zw_ref, zl_ref, len_w, len_l, hp)
    return _loss_core(kind, h, args)


def incentives(
    kind: str,
    zw: torch.Tensor,
    zl: torch.Tensor,
    zw_ref: torch.Tensor | None = None,
    zl_ref: torch.Tensor | None = None,
    len_w: Any = None,
    len_l: Any = None,
    **hp: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Analytic incentives ``d_w = -dL/dz_w`` and ``d_l = dL/dz_l`` (Table 1 of the paper).

    ``grad L = -d_w grad z_w + d_l grad z_l``; e.g. DPO: ``d_w = d_l = beta sig(-beta m~)``,
    IPO: ``2 (1/(2 tau) - m~)``, SimPO: ``beta sig(gamma - beta m_norm) / |y_*|``.

    Parameters
    ----------
    kind, zw, zl, zw_ref, zl_ref, len_w, len_l, **hp
        As in :func:`pairwise_loss`.

    Returns
    -------
    d_w, d_l : Tensor of shape (B,)
        Detached incentives (same dtype as ``zw``).

    Examples
    --------
    >>> import torch
    >>> z = torch.zeros(1, dtype=torch.float64)
    >>> incentives("dpo", z, z, z, z, beta=0.1)  # beta / 2 at initialisation
    (tensor([0.0500], dtype=torch.float64), tensor([0.0500], dtype=torch.float64))
    """
    kind, h, args = _prepare(kind, zw, zl, zw_ref, zl_ref, len_w, len_l, hp)
    return _incentives_core(kind, h, args)


def disentanglement_band(
    s_w: torch.Tensor | float, s_l: torch.Tensor | float, rho: float | None = None
) -> tuple[float, float]:
    """The band ``[rho r*, r*/rho]`` of incentive ratios ``r = d_w/d_l`` that disentangle a step.

    With ``r* = |s_l| / |s_w|`` and ``rho = cos(s_w, s_l)``: if ``rho > 0``, a gradient step
    raises ``z_w`` and lowers ``z_l`` iff ``rho r* <= r <= r*/rho``; if ``rho <= 0`` every
    ``r > 0`` does (band ``(0, inf)``). At ``rho = 1`` the band collapses to ``r = r*``.

    Parameters
    ----------
    s_w, s_l : Tensor or float
        Either the score vectors ``grad z_w`` and ``grad z_l`` (any equal shapes; ``rho`` is then
        their cosine and must not be given), or their norms (then ``rho`` is required).
    rho : float in [-1, 1], optional

    Returns
    -------
    lo, hi : float
        Band endpoints for ``r`` (``hi`` may be ``inf``).

    Examples
    --------
    >>> disentanglement_band(1.0, 2.0, rho=0.5)
    (1.0, 4.0)
    >>> disentanglement_band(1.0, 2.0, rho=1.0)
    (2.0, 2.0)
    """
    vec_w = isinstance(s_w, torch.Tensor) and s_w.numel() > 1
    vec_l = isinstance(s_l, torch.Tensor) and s_l.numel() > 1
    if vec_w or vec_l:
        if rho is not None:
            raise ValueError("rho must be None when s_w and s_l are score vectors")
        if not (isinstance(s_w, torch.Tensor) and isinstance(s_l, torch.Tensor)) or (
            s_w.shape != s_l.shape
        ):
            raise ValueError("s_w and s_l must be score vectors of the same shape")
        a, b = s_w.detach().double().flatten(), s_l.detach().double().flatten()
        nw, nl = float(a.norm()), float(b.norm())
        if nw == 0 or nl == 0:
            raise ValueError("s_w and s_l must be non-zero score vectors")
        rho = float(a @ b) / (nw * nl)
    else:
        nw = check_scalar(_as_real(s_w, "s_w"), "s_w", _POS)
        nl = check_scalar(_as_real(s_l, "s_l"), "s_l", _POS)
        if rho is None:
            raise ValueError("rho is required when s_w and s_l are norms")
        rho = check_scalar(rho, "rho", Interval("real", -1.0 - 1e-9, 1.0 + 1e-9))
    r_star = nl / nw
    if rho <= 0:
        return 0.0, math.inf
    rho = min(rho, 1.0)
    return rho * r_star, r_star / rho


def _as_real(x: Any, name: str) -> float:
    """A Python float from a real number or a one-element tensor (``name`` in the errors)."""
    if isinstance(x, torch.Tensor):
        if x.device.type == "meta":
            raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
        if x.numel() != 1 or x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"{name} must be a real number or a one-element real tensor, "
                            f"got a {x.dtype} tensor of shape {tuple(x.shape)}")
        return float(x.detach())
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number or a one-element tensor, got "
                        f"{type(x).__name__} {x!r}"[:200])
    return float(x)


def _check_operand(x: Any, name: str) -> None:
    """``x`` must be a real number or a real tensor with values (``predicted_delta``)."""
    if isinstance(x, torch.Tensor):
        if x.device.type == "meta":
            raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
        if x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"{name} must be a real tensor, got dtype {x.dtype}")
    elif isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number or a tensor, got {type(x).__name__} "
                        f"{x!r}"[:200])


def predicted_delta(
    d_w: Any, d_l: Any, sw_sq: Any, sl_sq: Any, dot: Any, lr: float
) -> tuple[Any, Any]:
    """First-order change of ``(z_w, z_l)`` after one gradient step of size ``lr``.

    ``dz_w = lr (d_w |s_w|^2 - d_l <s_w, s_l>)``, ``dz_l = lr (d_w <s_w, s_l> - d_l |s_l|^2)``.

    Parameters
    ----------
    d_w, d_l : Tensor or float
        Incentives (broadcastable).
    sw_sq, sl_sq, dot : Tensor or float
        ``|s_w|^2``, ``|s_l|^2`` and ``<s_w, s_l>`` (see :func:`score_geometry`).
    lr : float
        Step size (> 0).

    Returns
    -------
    dz_w, dz_l : Tensor or float

    Examples
    --------
    >>> predicted_delta(1.0, 1.0, 1.0, 4.0, 1.5, lr=0.1)  # DPO outside the band: both fall
    (-0.05, -0.25)
    """
    for v, name in ((d_w, "d_w"), (d_l, "d_l"), (sw_sq, "sw_sq"), (sl_sq, "sl_sq"), (dot, "dot")):
        _check_operand(v, name)
    lr = check_scalar(lr, "lr", _POS)
    return lr * (d_w * sw_sq - d_l * dot), lr * (d_w * dot - d_l * sl_sq)


def _as_params(params: Any) -> list[torch.Tensor]:
    if isinstance(params, torch.Tensor):
        params = [params]
    if not isinstance(params, Iterable):
        raise TypeError(f"params must be a list of tensors, got {type(params).__name__}")
    out = list(params)
    if not out or not all(isinstance(p, torch.Tensor) and p.requires_grad for p in out):
        raise ValueError("params must be a non-empty list of tensors that require grad")
    return out


def score_geometry(
    zw: torch.Tensor, zl: torch.Tensor, params: Any, *, max_grad_norm: float = 0.0
) -> dict[str, torch.Tensor]:
    """Gradient geometry of the batch-mean scores, restricted to ``params``.

    Two ``torch.autograd.grad`` calls (``retain_graph=True``, so the loss can still be
    back-propagated) give ``g_w = grad mean(z_w)`` and ``g_l = grad mean(z_l)`` with respect to
    a small parameter subset (the LM head or LoRA weights). With ``max_grad_norm > 0`` the pair
    ``[g_w, g_l]`` is clipped jointly to norm ``sqrt(2) max_grad_norm`` (the ratio is kept).

    Parameters
    ----------
    zw, zl : Tensor of shape (B,)
        Scores still attached to the graph.
    params : list of Tensor
    max_grad_norm : float, default=0.0

    Returns
    -------
    geometry : dict
        ``sw_sq``, ``sl_sq``, ``dot`` (0-dim float64 tensors), ``rho`` (cosine).

    Examples
    --------
    >>> import torch
    >>> theta = torch.tensor([1.0, 0.0], requires_grad=True)
    >>> g = score_geometry(theta[:1] * 2, theta[1:] + theta[:1], [theta])
    >>> float(g["sw_sq"]), float(g["sl_sq"]), float(g["dot"])
    (4.0, 2.0, 2.0)
    """
    params = _as_params(params)
    for z, name in ((zw, "zw"), (zl, "zl")):
        _check_vec(z, name, None)
        if z.numel() == 0:
            raise ValueError(f"{name} must not be empty, got shape {tuple(z.shape)}")
        if not z.requires_grad:
            raise ValueError(f"{name} must be attached to the autograd graph (requires_grad), "
                             "so that its gradient can be taken")
    max_grad_norm = check_scalar(max_grad_norm, "max_grad_norm", _NONNEG)
    gw = torch.autograd.grad(zw.mean(), params, retain_graph=True, allow_unused=True)
    gl = torch.autograd.grad(zl.mean(), params, retain_graph=True, allow_unused=True)
    z = torch.zeros((), dtype=torch.float64, device=zw.device)
    sw_sq, sl_sq, dot = z.clone(), z.clone(), z.clone()
    for a, b in zip(gw, gl, strict=True):
        a64 = None if a is None else a.detach().double()
        b64 = None if b is None else b.detach().double()
        if a64 is not None:
            sw_sq = sw_sq + (a64 * a64).sum()
        if b64 is not None:
            sl_sq = sl_sq + (b64 * b64).sum()
        if a64 is not None and b64 is not None:
            dot = dot + (a64 * b64).sum()
    if max_grad_norm > 0:
        total = torch.sqrt(sw_sq + sl_sq)
        c = torch.clamp(math.sqrt(2.0) * max_grad_norm / (total + 1e-6), max=1.0)
        sw_sq, sl_sq, dot = sw_sq * c * c, sl_sq * c * c, dot * c * c
    rho = dot / torch.sqrt(sw_sq * sl_sq).clamp_min(1e-300)
    return {"sw_sq": sw_sq, "sl_sq": sl_sq, "dot": dot, "rho": rho}


class RewardCalibrator:
    """Reward calibration (RC): rescale the backward pass so ``r = d_w/d_l`` hits the band centre.

    Forward-unchanged, backward-rescaled scores (Sec. 5 of arXiv 2604.18239)::

        z_w^rc = alpha z_w + (1 - alpha) sg(z_w),   z_l^rc = z_l / alpha + (1 - 1/alpha) sg(z_l)

    so the effective incentive ratio becomes ``alpha^2 r``, with
    ``alpha = exp((log r*_bar - log r_bar) / 2)``; ``log r_bar = EMA(log mean d_w) -
    EMA(log mean d_l)`` and ``log r*_bar = EMA(log |g_l|) - EMA(log |g_w|)``, log-domain EMAs
    (the first step initialises them) of the batch incentives and of the head-restricted score
    norms from :func:`score_geometry`. Applied only while grad is enabled, ``zw`` requires grad
    and :attr:`training` is True; otherwise the scores pass through unchanged.

    Parameters
    ----------
    params : list of Tensor
        The small parameter subset for the score norms (LM head, or LoRA weights).
    ema : float in [0, 1), default=0.98
        EMA decay.
    eps : float, default=1e-12
        Floor inside the logs.
    max_grad_norm : float, default=0.0
        If > 0, clip ``[g_w, g_l]`` jointly (ratio preserved), as the reference does when the
        trainer clips gradients.
    every : int, default=1
        PROPOSED (not in the paper): refresh the score-norm EMAs (the two extra head backward
        passes) only every ``every`` calibrated steps and reuse them in between; the incentive
        EMAs and alpha are updated every step. 1 is the paper's method.

    Attributes
    ----------
    state : dict
        ``log_dw, log_dl, log_sw, log_sl`` (EMAs, None before the first step), ``alpha`` and
        ``steps``.
    last : dict
        The latest batch's ``d_w, d_l`` (Tensor (B,)) and geometry (``sw_sq, sl_sq, dot, rho``).

    Examples
    --------
    >>> import torch
    >>> theta = torch.tensor([1.0, 0.5], requires_grad=True)
    >>> rc = RewardCalibrator([theta])
    >>> zw, zl = theta[:1] * 1.0, theta[:1] * 2.0 + theta[1:]
    >>> zw_rc, zl_rc = rc("dpo", zw, zl, zw.detach(), zl.detach())
    >>> bool(torch.equal(zw_rc, zw)), round(rc.state["alpha"] ** 2, 4)  # alpha^2 = r* / r
    (True, 2.2361)
    """

    def __init__(
        self,
        params: Any,
        *,
        ema: float = 0.98,
        eps: float = 1e-12,
        max_grad_norm: float = 0.0,
        every: int = 1,
    ) -> None:
        self.params = _as_params(params)
        self.ema = check_scalar(ema, "ema", Interval("real", 0.0, 1.0, closed="left"))
        self.eps = check_scalar(eps, "eps", _POS)
        self.max_grad_norm = check_scalar(max_grad_norm, "max_grad_norm", _NONNEG)
        self.every = check_scalar(every, "every", Interval("int", 1, None))
        self.training = True
        self.last: dict[str, Any] = {}
        self.reset()

    def reset(self) -> None:
        """Forget the EMA statistics (``alpha`` back to 1)."""
        self.state: dict[str, Any] = dict.fromkeys(("log_dw", "log_dl", "log_sw", "log_sl"))
        self.state.update(alpha=1.0, steps=0)

    def train(self, mode: bool = True) -> RewardCalibrator:
        """Switch calibration on (``mode=True``) or off; returns ``self``."""
        self.training = bool(mode)
        return self

    def state_dict(self) -> dict[str, Any]:
        """A copy of :attr:`state` (plain floats), for checkpoints."""
        return dict(self.state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :attr:`state` from :meth:`state_dict`."""
        missing = {"log_dw", "log_dl", "log_sw", "log_sl", "alpha", "steps"} - set(state)
        if missing:
            raise ValueError(f"state is missing keys {sorted(missing)}")
        self.state = dict(state)

    def needs_geometry(self) -> bool:
        """Whether the next calibrated step refreshes the score norms (see ``every``)."""
        return self.state["log_sw"] is None or self.state["steps"] % self.every == 0

    def _ema(self, key: str, value: float) -> float:
        old = self.state[key]
        new = value if old is None else self.ema * old + (1.0 - self.ema) * value
        self.state[key] = new
        return new

    def update(
        self, d_w: torch.Tensor, d_l: torch.Tensor, geometry: dict[str, Any] | None
    ) -> float:
        """Fold one batch's incentives (and score geometry, if given) into the EMAs.

        Returns the new alpha. Without ``geometry`` the score-norm EMAs are reused (they must
        have been initialised by an earlier step).
        """
        eps = self.eps
        _check_vec(d_w, "d_w", None, finite=False)
        _check_vec(d_l, "d_l", d_w.shape[0], finite=False, like="d_w")
        if geometry is None and self.state["log_sw"] is None:
            raise ValueError("the first calibrated step needs the score geometry")
        log_dw = self._ema("log_dw", math.log(max(float(d_w.mean()), eps)))
        log_dl = self._ema("log_dl", math.log(max(float(d_l.mean()), eps)))
        if geometry is not None:
            self._ema("log_sw", 0.5 * math.log(max(float(geometry["sw_sq"]), eps * eps)))
            self._ema("log_sl", 0.5 * math.log(max(float(geometry["sl_sq"]), eps * eps)))
        log_sw, log_sl = self.state["log_sw"], self.state["log_sl"]
        alpha = math.exp(0.5 * ((log_sl - log_sw) - (log_dw - log_dl)))
        self.state["alpha"] = alpha
        self.state["steps"] += 1
        return alpha

    def __call__(
        self,
        kind: str,
        zw: torch.Tensor,
        zl: torch.Tensor,
        zw_ref: torch.Tensor | None = None,
        zl_ref: torch.Tensor | None = None,
        len_w: Any = None,
        len_l: Any = None,
        **hp: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Calibrated scores ``(z_w^rc, z_l^rc)``: same values, backward scaled by alpha, 1/alpha.

        Evaluate the base loss on them: ``pairwise_loss(kind, zw_rc, zl_rc, zw_ref, zl_ref)``.
        """
        kind, h, args = _prepare(kind, zw, zl, zw_ref, zl_ref, len_w, len_l, hp)
        return self._apply(kind, h, args)

    def _apply(
        self, kind: str, h: dict[str, Any], args: tuple[Any, ...],
        geometry: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        zw, zl = args[0], args[1]
        if not (self.training and torch.is_grad_enabled() and zw.requires_grad and zl.requires_grad):
            return zw, zl
        d_w, d_l = _incentives_core(kind, h, args)
        geo = geometry
        if geo is None and self.needs_geometry():
            geo = score_geometry(zw, zl, self.params, max_grad_norm=self.max_grad_norm)
        alpha = self.update(d_w, d_l, geo)
        self.last = {"d_w": d_w, "d_l": d_l, **(geo or {})}
        a, ai = alpha, 1.0 / alpha
        return a * zw + (1.0 - a) * zw.detach(), ai * zl + (1.0 - ai) * zl.detach()


@dataclass
class PreferenceOutput:
    """Loss and incentive-score diagnostics of one :func:`preference_step`.

    Attributes
    ----------
    loss : Tensor (0-dim)
        Reduced loss, attached to the graph.
    losses : Tensor of shape (B,)
    d_w, d_l : Tensor of shape (B,)
        Incentives of the base objective (before calibration).
    r : Tensor of shape (B,)
        ``d_w / d_l`` (inf where ``d_l = 0``).
    log_r : float
        ``log mean d_w - log mean d_l`` for the batch.
    alpha : float
        RC factor used (1.0 without calibration); the effective ratio is ``alpha^2 r``.
    geometry : dict or None
        ``sw_sq, sl_sq, dot, rho`` when params were given.
    band : tuple of float or None
        ``(lo, hi)`` for ``r`` from the batch geometry.
    inside : Tensor of bool, shape (B,), or None
        Whether each pair's effective ratio ``alpha^2 r`` lies inside the band.

    Raises
    ------
    TypeError, ValueError
        When built by hand: a tensor field that is not a tensor, is on the ``meta`` device or
        holds NaN (:func:`preference_step` builds its outputs unchecked).

    Examples
    --------
    >>> import torch
    >>> d = torch.tensor([0.5, 0.25])
    >>> out = PreferenceOutput(torch.tensor(0.6), torch.tensor([0.5, 0.7]), d, d, d / d, 0.0)
    >>> out.r.tolist(), out.alpha
    ([1.0, 1.0], 1.0)
    """

    loss: torch.Tensor
    losses: torch.Tensor
    d_w: torch.Tensor
    d_l: torch.Tensor
    r: torch.Tensor
    log_r: float
    alpha: float = 1.0
    geometry: dict[str, torch.Tensor] | None = None
    band: tuple[float, float] | None = None
    inside: torch.Tensor | None = None

    def __post_init__(self) -> None:
        # a user-built output is checked (tensors with values, no NaN); preference_step builds
        # its own through ``_unchecked`` (e.g. IPO's r = 0/0 = NaN at the target margin is kept)
        for name in ("loss", "losses", "d_w", "d_l", "r"):
            x = getattr(self, name)
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
            if x.device.type == "meta":
                raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
            if x.is_floating_point() and bool(torch.isnan(x.detach()).any()):
                raise ValueError(f"{name} must not contain NaN")

    @classmethod
    def _unchecked(cls, **fields: Any) -> PreferenceOutput:
        out = cls.__new__(cls)
        out.__dict__.update(fields)
        return out


def preference_step(
    kind: str,
    zw: torch.Tensor,
    zl: torch.Tensor,
    zw_ref: torch.Tensor | None = None,
    zl_ref: torch.Tensor | None = None,
    len_w: Any = None,
    len_l: Any = None,
    *,
    params: Any = None,
    calibrator: RewardCalibrator | None = None,
    geometry: dict[str, torch.Tensor] | None = None,
    **hp: Any,
) -> PreferenceOutput:
    """Fused loss + incentive-score decomposition (+ optional reward calibration) for one batch.

    Computes ``mean_b L(z_w, z_l)`` (on the calibrated scores when ``calibrator`` is given),
    the analytic incentives, and -- with ``params`` or a ``calibrator`` -- the head-restricted
    score geometry, the disentanglement band and whether each pair is inside it. The geometry
    is computed once and shared with the calibrator.

    Parameters
    ----------
    kind, zw, zl, zw_ref, zl_ref, len_w, len_l, **hp
        As in :func:`pairwise_loss`.
    params : list of Tensor, optional
        Parameter subset for the band diagnostic (defaults to ``calibrator.params``).
    calibrator : RewardCalibrator, optional
    geometry : dict, optional
        A precomputed score geometry (``sw_sq, sl_sq, dot, rho`` as returned by
        :func:`score_geometry`, e.g. from a closed form for the LM head); used instead of the
        two autograd calls, for the band and the calibrator.

    Returns
    -------
    out : PreferenceOutput

    Examples
    --------
    >>> import torch
    >>> theta = torch.tensor([0.3, -0.2], requires_grad=True)
    >>> zw, zl = theta[:1].expand(3) * 1.0, (theta[:1] * 2 + theta[1:]).expand(3)
    >>> out = preference_step("dpo", zw, zl, zw.detach(), zl.detach(), params=[theta])
    >>> out.loss.backward()
    >>> round(float(out.d_w[0]), 3), out.inside.tolist()  # DPO (r = 1) is outside the band
    (0.05, [False, False, False])
    """
    kind, h, args = _prepare(kind, zw, zl, zw_ref, zl_ref, len_w, len_l, hp)
    if calibrator is not None and not isinstance(calibrator, RewardCalibrator):
        raise TypeError(f"calibrator must be a RewardCalibrator, got {type(calibrator).__name__}")
    if params is None and calibrator is not None:
        params = calibrator.params
    d_w, d_l = _incentives_core(kind, h, args)
    geo = geometry
    reuse = (  # the calibrator reuses its score norms on this step (see ``every``)
        calibrator is not None and params is calibrator.params and calibrator.training
        and not calibrator.needs_geometry()
    )
    grad_on = torch.is_grad_enabled() and args[0].requires_grad
    if geo is None and params is not None and grad_on and not reuse:
        geo = score_geometry(
            args[0], args[1], params,
            max_grad_norm=calibrator.max_grad_norm if calibrator is not None else 0.0,
        )
    alpha = 1.0
    if calibrator is not None:
        zw_rc, zl_rc = calibrator._apply(kind, h, args, geometry=geo)
        alpha = float(calibrator.state["alpha"]) if zw_rc is not args[0] else 1.0
        args = (zw_rc, zl_rc, *args[2:])
    losses = _loss_core(kind, h, args)
    with torch.no_grad():
        r = d_w / d_l
        log_r = math.log(max(float(d_w.mean()), 1e-300)) - math.log(max(float(d_l.mean()), 1e-300))
    band = inside = None
    if geo is not None:
        sw, sl = float(geo["sw_sq"]) ** 0.5, float(geo["sl_sq"]) ** 0.5
        if sw > 0 and sl > 0:
            band = disentanglement_band(sw, sl, rho=max(-1.0, min(1.0, float(geo["rho"]))))
            eff = r * alpha**2
            inside = (eff >= band[0] * (1 - 1e-9)) & (eff <= band[1] * (1 + 1e-9))
    return PreferenceOutput._unchecked(
        loss=losses.mean(), losses=losses, d_w=d_w, d_l=d_l, r=r, log_r=log_r, alpha=alpha,
        geometry=geo, band=band, inside=inside,
    )


class PreferenceLoss(nn.Module):
    """A preference objective as a module: ``PreferenceLoss("dpo", beta=0.1)(zw, zl, ...)``.

    Wraps :func:`preference_step` with fixed hyper-parameters and, with ``calibrate=True``, a
    :class:`RewardCalibrator` on ``params`` (its state is saved in the module's ``state_dict``
    under ``extra_state``). Calibration follows the module's ``train()`` / ``eval()`` mode.

    Parameters
    ----------
    kind : str
        One of :data:`LOSSES`.
    params : list of Tensor, optional
        Head parameters for the band diagnostic / calibration (required with ``calibrate``).
    calibrate : bool, default=False
    ema, max_grad_norm : float
        Passed to :class:`RewardCalibrator`.
    rc_every : int, default=1
        The calibrator's ``every`` (PROPOSED amortisation of the score norms).
    **hp
        Hyper-parameters of ``kind``.

    Examples
    --------
    >>> import torch
    >>> theta = torch.zeros(3, requires_grad=True)
    >>> loss_fn = PreferenceLoss("ipo", tau=0.5)
    >>> out = loss_fn(theta[:2] + 1, theta[1:] - 1, torch.ones(2), -torch.ones(2))
    >>> float(out.loss.detach()), out.d_w.tolist()  # at init IPO's incentives are 1/tau
    (1.0, [2.0, 2.0])
    """

    def __init__(
        self,
        kind: str,
        *,
        params: Any = None,
        calibrate: bool = False,
        ema: float = 0.98,
        max_grad_norm: float = 0.0,
        rc_every: int = 1,
        **hp: Any,
    ) -> None:
        super().__init__()
        self.kind = _check_kind(kind)
        self.hp = _resolve_hp(self.kind, hp)
        self.params = None if params is None else _as_params(params)
        if calibrate and self.params is None:
            raise ValueError("calibrate=True needs params (e.g. the LM head's parameters)")
        self.calibrator = (
            RewardCalibrator(self.params, ema=ema, max_grad_norm=max_grad_norm, every=rc_every)
            if calibrate else None
        )
        if self.calibrator is not None:  # the same list, so the geometry is shared
            self.params = self.calibrator.params

    def train(self, mode: bool = True) -> PreferenceLoss:
        """Set training mode (and the calibrator's)."""
        super().train(mode)
        if self.calibrator is not None:
            self.calibrator.train(mode)
        return self

    def get_extra_state(self) -> dict[str, Any]:
        """The calibrator's EMA state (empty without calibration)."""
        return {} if self.calibrator is None else self.calibrator.state_dict()

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore the calibrator's EMA state."""
        if self.calibrator is not None and state:
            self.calibrator.load_state_dict(state)

    def forward(
        self,
        zw: torch.Tensor,
        zl: torch.Tensor,
        zw_ref: torch.Tensor | None = None,
        zl_ref: torch.Tensor | None = None,
        len_w: Any = None,
        len_l: Any = None,
    ) -> PreferenceOutput:
        """Loss and diagnostics for one batch (see :func:`preference_step`)."""
        return preference_step(
            self.kind, zw, zl, zw_ref, zl_ref, len_w, len_l,
            params=self.params, calibrator=self.calibrator, **self.hp,
        )


def sequence_logps(
    logits: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    average: bool = False,
    ignore_index: int = -100,
) -> torch.Tensor:
    """Sequence log-likelihoods ``sum_t mask[b,t] log softmax(logits[b,t])[labels[b,t]]``.

    ``logits[:, t]`` must already be aligned with ``labels[:, t]`` (for a causal LM pass
    ``logits[:, :-1]`` and ``input_ids[:, 1:]``). Half-precision logits are upcast to float32.

    Parameters
    ----------
    logits : Tensor of shape (B, T, V)
    labels : LongTensor of shape (B, T)
        Positions equal to ``ignore_index`` never count.
    mask : Tensor of shape (B, T), optional
        Bool or 0/1 weights of the positions to count (default: ``labels != ignore_index``).
    average : bool, default=False
        Divide by the number of counted tokens (SimPO-style length normalisation).

    Returns
    -------
    logps : Tensor of shape (B,)

    Examples
    --------
    >>> import torch
    >>> logits = torch.zeros(1, 3, 4)
    >>> labels = torch.tensor([[1, 2, -100]])
    >>> sequence_logps(logits, labels)  # two tokens of probability 1/4
    tensor([-2.7726])
    """
    if not isinstance(logits, torch.Tensor) or logits.ndim != 3 or not logits.is_floating_point():
        raise ValueError("logits must be a floating-point tensor of shape (B, T, V)")
    if not isinstance(labels, torch.Tensor) or labels.shape != logits.shape[:2] or (
        labels.is_floating_point() or labels.is_complex()
    ):
        raise ValueError(f"labels must be an integer tensor of shape {tuple(logits.shape[:2])} "
                         "(logits.shape[:2])")
    for x, name in ((logits, "logits"), (labels, "labels"), (mask, "mask")):
        if isinstance(x, torch.Tensor) and x.device.type == "meta":
            raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    valid = labels != ignore_index
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.shape != labels.shape:
            raise ValueError(f"mask must be a tensor of shape {tuple(labels.shape)}")
        valid = valid & (mask != 0)
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    safe = torch.where(valid, labels, torch.zeros_like(labels))
    tok = _TokenLogps.apply(logits, safe)
    w = valid.to(tok.dtype) if mask is None or mask.dtype == torch.bool else (
        valid.to(tok.dtype) * mask.to(tok.dtype)
    )
    out = (tok * w).sum(-1)
    if average:
        out = out / w.sum(-1).clamp_min(1.0)
    return out


def _row_chunks(n: int, per_row: int) -> list[slice]:
    step = max(1, (1 << 22) // max(per_row, 1))  # ~16 MiB of float32 per chunk
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


class _TokenLogps(torch.autograd.Function):
    """``log softmax(logits)[labels]`` per token with a one-buffer backward.

    Forward: ``logits[labels] - logsumexp(logits)`` by row chunks (no (N, V) temporaries beyond
    a chunk). Backward: ``grad = g (onehot(labels) - softmax(logits))`` written straight into one
    (N, V) buffer (autograd's version allocates the softmax, the scattered one-hot and their sum).
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        flat = logits.reshape(-1, logits.shape[-1])
        lab = labels.reshape(-1)
        lse = torch.empty(flat.shape[0], dtype=logits.dtype, device=logits.device)
        for c in _row_chunks(flat.shape[0], flat.shape[1]):
            lse[c] = torch.logsumexp(flat[c], dim=-1)
        tok = flat.gather(-1, lab[:, None]).squeeze(-1) - lse
        ctx.save_for_backward(logits, labels, lse)
        return tok.reshape(labels.shape)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits, labels, lse = ctx.saved_tensors
        flat = logits.reshape(-1, logits.shape[-1])
        lab = labels.reshape(-1, 1)
        gf = g.reshape(-1, 1).to(logits.dtype)
        grad = torch.empty_like(flat)
        for c in _row_chunks(flat.shape[0], flat.shape[1]):
            out = grad[c]
            torch.sub(flat[c], lse[c, None], out=out)
            out.exp_().mul_(-gf[c])
            out.scatter_add_(-1, lab[c], gf[c])
        return grad.reshape(logits.shape), None
