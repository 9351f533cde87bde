"""ARSPO: adaptive reward scaling (non-linear reward maps) and dynamic task weights for GRPO.

Shen et al., "OmniVL-Guard: Towards Unified Vision-Language Forgery Detection and Grounding via
Balanced RL", arXiv 2602.10687 (ICML 2026). The paper's code is not released and its method
section was not readable to us; what is public says ARSPO = a task-based non-linear reward
mapping (amplifying the hard grounding task) + dynamic task-weight adjustment inside GRPO, to fix
the "difficulty bias" of an easy task dominating the gradients. Every formula below is the
**PROPOSAL** of spec np_alignment §4.1:

* reward maps ``phi(s) = s^gamma`` (``"power"``, gamma = 0.5: concave, amplifies small scores),
  ``phi(s) = (e^{kappa s} - 1)/(e^kappa - 1)`` (``"exp"``, convex) or the identity;
* running success ``mu_k <- ema mu_k + (1 - ema) mean_batch(r_k)`` and weights
  ``w_k = clip(K (1 - mu_k)^eta / sum_j (1 - mu_j)^eta, w_min, w_max)``;
* total reward ``R = sum_k w_k phi_k(r_k)`` (+ unweighted components such as a format reward),
  then GRPO (:mod:`rml_fast.alignment.grpo`).

Caveat (tested): with per-group std normalisation (``advantage_norm="std"``) a weight that
multiplies the *whole* reward of a group cancels (advantages are scale invariant); the weights
act only because a rollout carries several components, or with ``advantage_norm="none"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from rml_fast._validation import Interval, check_scalar
from rml_fast.alignment.grpo import (
    _NONNEG,
    _POSITIVE,
    _as_float_tensor,
    _check_finite,
    grpo_advantages,
)

__all__ = ["DynamicTaskWeights", "arspo_advantages", "arspo_rewards", "reward_map"]

_KINDS = ("power", "exp", "identity")


def reward_map(s: torch.Tensor, kind: str = "power", gamma: float = 0.5, kappa: float = 2.0) -> torch.Tensor:
    r"""Task reward map ``phi: [0, 1] -> [0, 1]`` (PROPOSAL, spec np_alignment §4.1).

    .. math::

        \varphi_{power}(s) = s^\gamma, \qquad
        \varphi_{exp}(s) = \frac{e^{\kappa s} - 1}{e^\kappa - 1}, \qquad
        \varphi_{identity}(s) = s.

    All are increasing with ``phi(0) = 0`` and ``phi(1) = 1``; ``gamma < 1`` is concave (small
    IoU gains pay more), ``kappa > 0`` convex (precise localisation pays more).

    Parameters
    ----------
    s : Tensor of shape (...)
        Scores in [0, 1] (IoU, F1, accuracy), finite.
    kind : {"power", "exp", "identity"}, default="power"
        Which map.
    gamma : float, default=0.5
        Exponent of ``"power"``, > 0.
    kappa : float, default=2.0
        Curvature of ``"exp"``, > 0.

    Returns
    -------
    phi : Tensor of the shape and dtype of ``s``

    Raises
    ------
    ValueError
        Scores outside [0, 1] or non-finite, ``gamma <= 0``, ``kappa <= 0``, unknown ``kind``.

    Examples
    --------
    >>> import torch
    >>> reward_map(torch.tensor([0.0, 0.04, 1.0]))
    tensor([0.0000, 0.2000, 1.0000])
    >>> reward_map(torch.tensor([0.0, 0.5, 1.0]), kind="exp", kappa=2.0)
    tensor([0.0000, 0.2689, 1.0000])
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    gamma = check_scalar(gamma, "gamma", _POSITIVE)
    kappa = check_scalar(kappa, "kappa", _POSITIVE)
    s = _as_float_tensor(s, "s", ndim=tuple(range(0, 8)))
    _check_finite(s, "s")
    if bool(((s < 0) | (s > 1)).any()):
        raise ValueError("s must hold scores in [0, 1]")
    return _map(s, kind, gamma, kappa)


def _map(s: torch.Tensor, kind: str, gamma: float, kappa: float) -> torch.Tensor:
    if kind == "power":
        return s**gamma
    if kind == "exp":
        return torch.expm1(kappa * s) / math.expm1(kappa)
    return s.clone()


def _clip_to_sum(d: Sequence[float], total: float, lo: float, hi: float) -> list[float]:
    """w_k = clip(t d_k, lo, hi) with t chosen so that sum w = total (bisection on t)."""
    k = len(d)
    if all(x <= 0 for x in d):
        return [total / k] * k
    f = lambda t: sum(min(max(t * x, lo), hi) for x in d)  # noqa: E731  nondecreasing in t
    lo_t, hi_t = 0.0, 1.0
    while f(hi_t) < total and hi_t < 1e300:
        hi_t *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo_t + hi_t)
        if f(mid) < total:
            lo_t = mid
        else:
            hi_t = mid
    return [min(max(hi_t * x, lo), hi) for x in d]


class DynamicTaskWeights:
    r"""Task weights from running success rates (PROPOSAL, spec np_alignment §4.1).

    .. math::

        \bar\mu_k \leftarrow \text{ema}\,\bar\mu_k + (1 - \text{ema})\,\operatorname{mean}_{batch} r_k,
        \qquad
        w_k = \operatorname{clip}\Big(K\,\frac{(1-\bar\mu_k)^\eta}{\sum_j (1-\bar\mu_j)^\eta},
        w_{min}, w_{max}\Big)

    The less a task succeeds, the more it weighs. The spec claims ``sum_k w_k = K``; the clip
    breaks that (e.g. two tasks at 0.95 and 0.05 give ``0.2 + 1.9``). With ``sum_to_k=True``
    (default) the weights are ``clip(t (1-mu_k)^eta, w_min, w_max)`` with the scale ``t`` chosen
    by bisection so that they sum to ``K`` exactly (possible whenever ``w_min <= 1 <= w_max``; the
    ratios of unclipped weights are those of the formula); ``sum_to_k=False`` is the literal
    clip, whose sum lies in ``[K w_min, K w_max]``. The first update sets ``mu`` to the batch
    mean (PROPOSAL) unless ``init`` is given; before any update every weight is 1.

    Parameters
    ----------
    tasks : sequence of str
        Task names (distinct, at least one).
    ema : float, default=0.9
        Decay in [0, 1).
    eta : float, default=1.0
        Exponent > 0.
    w_min, w_max : float, default=0.2, 5.0
        Clip bounds, ``0 <= w_min <= 1 <= w_max`` when ``sum_to_k``.
    sum_to_k : bool, default=True
        Rescale before clipping so the weights sum to ``K`` (see above).
    init : mapping of str to float, optional
        Initial success rates in [0, 1].

    Attributes
    ----------
    mu : dict of str to float
        Running success rates (empty before the first update without ``init``).
    weights : dict of str to float
        Current weights.
    n_updates : int
        Number of updates so far.

    Examples
    --------
    >>> import torch
    >>> tw = DynamicTaskWeights(["cls", "loc"])
    >>> w = tw.update({"cls": torch.tensor([0.9, 1.0]), "loc": torch.tensor([0.0, 0.1])})
    >>> {k: round(v, 4) for k, v in w.items()}  # literal clip would give 0.2 + 1.9
    {'cls': 0.2, 'loc': 1.8}
    """

    def __init__(
        self,
        tasks: Sequence[str],
        ema: float = 0.9,
        eta: float = 1.0,
        w_min: float = 0.2,
        w_max: float = 5.0,
        sum_to_k: bool = True,
        init: Mapping[str, float] | None = None,
    ) -> None:
        if isinstance(tasks, str) or not isinstance(tasks, Sequence):
            raise TypeError(f"tasks must be a sequence of names, got {type(tasks).__name__}")
        tasks = [str(t) for t in tasks]
        if not tasks or len(set(tasks)) != len(tasks):
            raise ValueError(f"tasks must be at least one distinct name, got {tasks}")
        self.tasks = tasks
        self.ema = check_scalar(ema, "ema", Interval("real", 0.0, 1.0, closed="left"))
        self.eta = check_scalar(eta, "eta", _POSITIVE)
        self.w_min = check_scalar(w_min, "w_min", _NONNEG)
        self.w_max = check_scalar(w_max, "w_max", _POSITIVE)
        if self.w_min > self.w_max:
            raise ValueError(f"w_min must be <= w_max, got {w_min!r} > {w_max!r}")
        self.sum_to_k = bool(sum_to_k)
        if self.sum_to_k and not (self.w_min <= 1.0 <= self.w_max):
            raise ValueError(
                f"sum_to_k needs w_min <= 1 <= w_max (weights summing to K), got [{w_min!r}, {w_max!r}]"
            )
        self.mu: dict[str, float] = {}
        self.n_updates = 0
        if init is not None:
            self.mu = self._check_rates(init, "init")
        self.weights: dict[str, float] = self._compute() if self.mu else dict.fromkeys(tasks, 1.0)

    def _check_rates(self, rates: Mapping[str, Any], name: str) -> dict[str, float]:
        if not isinstance(rates, Mapping):
            raise TypeError(f"{name} must be a mapping task -> value, got {type(rates).__name__}")
        missing = [t for t in self.tasks if t not in rates]
        extra = [t for t in rates if t not in self.tasks]
        if missing or extra:
            raise ValueError(f"{name} must have exactly the tasks {self.tasks}; missing {missing}, unknown {extra}")
        out = {}
        for t in self.tasks:
            v = rates[t]
            x = _as_float_tensor(v, f"{name}[{t!r}]", ndim=tuple(range(0, 8))).detach()
            if x.numel() == 0:
                raise ValueError(f"{name}[{t!r}] must not be empty")
            _check_finite(x, f"{name}[{t!r}]")
            m = float(x.to(torch.float64).mean())
            if not 0.0 <= m <= 1.0:
                raise ValueError(f"{name}[{t!r}] must have its mean success in [0, 1], got {m}")
            out[t] = m
        return out

    def _compute(self) -> dict[str, float]:
        k = len(self.tasks)
        d = [(1.0 - self.mu[t]) ** self.eta for t in self.tasks]
        if self.sum_to_k:
            w = _clip_to_sum(d, float(k), self.w_min, self.w_max)
        else:
            tot = sum(d)
            raw = [k * x / tot for x in d] if tot > 0 else [1.0] * k
            w = [min(max(x, self.w_min), self.w_max) for x in raw]
        return dict(zip(self.tasks, w, strict=True))

    def update(self, rewards: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """Fold one batch of per-task rewards into the running success and recompute the weights.

        Parameters
        ----------
        rewards : mapping of str to Tensor of shape (B_k,)
            Rewards in [0, 1] per task (their batch mean is used); every task must be present.

        Returns
        -------
        weights : dict of str to float
            The new weights (also stored in :attr:`weights`).
        """
        means = self._check_rates(rewards, "rewards")
        if not self.mu:
            self.mu = means
        else:
            self.mu = {t: self.ema * self.mu[t] + (1.0 - self.ema) * means[t] for t in self.tasks}
        self.n_updates += 1
        self.weights = self._compute()
        return dict(self.weights)

    def state_dict(self) -> dict[str, Any]:
        """The running state (``mu``, ``weights``, ``n_updates``) as plain Python values.

        Returns
        -------
        state : dict
        """
        return {"mu": dict(self.mu), "weights": dict(self.weights), "n_updates": self.n_updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`.

        Parameters
        ----------
        state : mapping
            With keys ``mu``, ``weights``, ``n_updates``.
        """
        mu = dict(state["mu"])
        self.mu = self._check_rates(mu, "state['mu']") if mu else {}
        self.weights = {t: float(state["weights"][t]) for t in self.tasks}
        self.n_updates = int(state["n_updates"])


def arspo_rewards(
    components: Mapping[str, torch.Tensor],
    weights: Mapping[str, float] | None = None,
    mapping: Mapping[str, str | Callable[[torch.Tensor], torch.Tensor]] | None = None,
) -> torch.Tensor:
    r"""Total ARSPO reward ``R = sum_k w_k phi_k(r_k)`` (PROPOSAL, spec np_alignment §4.1).

    Components without a weight get weight 1 (e.g. the format reward), without a map the
    identity. With unit weights and identity maps this is the plain sum of the components, i.e.
    TRL's reward aggregation with ``reward_weights = 1``.

    Parameters
    ----------
    components : mapping of str to Tensor of shape (B,)
        Per-rollout rewards per task, finite; mapped ones must lie in [0, 1].
    weights : mapping of str to float, optional
        Task weights, e.g. :attr:`DynamicTaskWeights.weights`.
    mapping : mapping of str to {"power", "exp", "identity"} or callable, optional
        Reward map per task (a string uses :func:`reward_map`'s defaults).

    Returns
    -------
    reward : Tensor of shape (B,)

    Raises
    ------
    ValueError
        Unknown task names in ``weights``/``mapping``, mismatched lengths, non-finite values.

    Examples
    --------
    >>> import torch
    >>> comp = {"fmt": torch.tensor([1.0, 1.0]), "cls": torch.tensor([1.0, 0.0]), "loc": torch.tensor([0.25, 0.0])}
    >>> arspo_rewards(comp, {"cls": 0.5, "loc": 2.0}, {"loc": "power"})
    tensor([2.5000, 1.0000])
    """
    if not isinstance(components, Mapping) or not components:
        raise TypeError("components must be a non-empty mapping task -> Tensor of shape (B,)")
    weights = {} if weights is None else dict(weights)
    mapping = {} if mapping is None else dict(mapping)
    for name, table in (("weights", weights), ("mapping", mapping)):
        unknown = [k for k in table if k not in components]
        if unknown:
            raise ValueError(f"{name} names tasks {unknown} that are not in components {list(components)}")
    comps = {}
    n = None
    for k, v in components.items():
        x = _as_float_tensor(v, f"components[{k!r}]", ndim=1)
        _check_finite(x, f"components[{k!r}]")
        if n is None:
            n = x.shape[0]
        elif x.shape[0] != n:
            raise ValueError(f"components[{k!r}] must have shape ({n},) like the others, got {tuple(x.shape)}")
        comps[k] = x
    for k, w in weights.items():
        check_scalar(w, f"weights[{k!r}]", _NONNEG)
    total = None
    for k, x in comps.items():
        m = mapping.get(k)
        if m is None:
            y = x
        elif isinstance(m, str):
            y = reward_map(x, kind=m)
        elif callable(m):
            y = m(x)
        else:
            raise TypeError(f"mapping[{k!r}] must be a kind name or a callable, got {type(m).__name__}")
        term = float(weights.get(k, 1.0)) * y
        total = term if total is None else total + term
    assert total is not None
    return total


def arspo_advantages(
    reward: torch.Tensor,
    group_id: torch.Tensor,
    advantage_norm: str = "std",
    eps: float = 1e-6,
) -> torch.Tensor:
    r"""Group-relative advantages of the ARSPO reward.

    ``advantage_norm="std"``: ``(R - mean_g R)/(std_g R + eps)`` (GRPO); ``"none"``:
    ``R - mean_g R`` (Dr. GRPO), where a task weight that scales the whole reward is not cancelled.

    Parameters
    ----------
    reward : Tensor of shape (B,)
        Total rewards, e.g. from :func:`arspo_rewards`.
    group_id : integer Tensor of shape (B,)
        Prompt group of each rollout.
    advantage_norm : {"std", "none"}, default="std"
        See above.
    eps : float, default=1e-6
        Added to the std.

    Returns
    -------
    adv : Tensor of shape (B,)

    Examples
    --------
    >>> import torch
    >>> arspo_advantages(torch.tensor([2.0, 0.0]), torch.tensor([0, 0]), advantage_norm="none")
    tensor([ 1., -1.])
    """
    if advantage_norm not in ("std", "none"):
        raise ValueError(f"advantage_norm must be 'std' or 'none', got {advantage_norm!r}")
    return grpo_advantages(reward, group_id, normalize="group" if advantage_norm == "std" else "none", eps=eps)
