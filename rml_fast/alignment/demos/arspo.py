"""Unit-weight GRPO vs ARSPO on an easy + hard two-task bandit (spec np_alignment §4.3).

Every rollout answers two tasks, like OmniVL-Guard's veracity + grounding:

* easy, binary: the answer is right with probability ``p = sigmoid(h + c)`` (init ``~0.90``);
* hard, continuous: a Gaussian action ``a ~ N(m + h/2, sigma^2)`` scored
  ``s = exp(-(a - a*)^2 / width^2)`` (IoU-like, small at init: ``E s ~ 0.008``),

with a shared parameter ``h`` and task-specific ``c`` and ``m``. Per step ``n_groups`` prompt
groups of ``G = 8`` rollouts; GRPO advantages standardised per group; the surrogate of
:func:`~rml_fast.alignment.grpo.grpo_loss` with one "token" per task. Methods:

``grpo``     ``R = r_cls + s`` (unit weights, identity maps);
``map``      ``R = r_cls + sqrt(s)`` (reward map only);
``weights``  ``R = w_cls r_cls + w_loc s`` (dynamic weights only);
``arspo``    ``R = w_cls r_cls + w_loc sqrt(s)``, weights from
             :class:`~rml_fast.alignment.arspo.DynamicTaskWeights` on the mapped rewards.

The claim shown: ARSPO raises the hard task's expected score faster than unit-weight GRPO,
without lowering the easy task's accuracy.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rml_fast.alignment.arspo import DynamicTaskWeights, arspo_advantages, arspo_rewards, reward_map
from rml_fast.alignment.grpo import grpo_loss

__all__ = ["expected_scores", "format_table", "run", "run_bandit"]

METHODS = ("grpo", "map", "weights", "arspo")
A_STAR, WIDTH, SIGMA = 2.5, 0.7, 0.7
INIT = (0.0, 2.2, 0.0)  # h, c, m


def expected_scores(h: float, c: float, m: float) -> tuple[float, float]:
    """Expected easy-task accuracy and hard-task score of the policy (closed form).

    ``E s = sqrt(width^2 / (width^2 + 2 sigma^2)) exp(-(mu - a*)^2 / (width^2 + 2 sigma^2))``
    for ``a ~ N(mu, sigma^2)``, ``mu = m + h/2``.

    Parameters
    ----------
    h, c, m : float
        Shared, easy-task and hard-task parameters.

    Returns
    -------
    acc, score : float

    Examples
    --------
    >>> acc, score = expected_scores(*INIT)
    >>> round(acc, 3), round(score, 3)
    (0.9, 0.008)
    """
    mu = m + 0.5 * h
    v = WIDTH**2 + 2.0 * SIGMA**2
    return 1.0 / (1.0 + math.exp(-(h + c))), math.sqrt(WIDTH**2 / v) * math.exp(-((mu - A_STAR) ** 2) / v)


def run_bandit(
    method: str, *, seed: int = 0, steps: int = 80, n_groups: int = 16, group_size: int = 8, lr: float = 0.1,
) -> dict[str, Any]:
    """Train the two-task bandit policy with one method.

    Parameters
    ----------
    method : {"grpo", "map", "weights", "arspo"}
        Reward shaping (see the module docstring).
    seed : int, default=0
        Seeds the rollouts.
    steps : int, default=80
        Policy updates.
    n_groups : int, default=16
        Prompt groups per batch.
    group_size : int, default=8
        Rollouts per group.
    lr : float, default=0.1
        SGD step size.

    Returns
    -------
    curves : dict
        ``easy_acc``, ``hard_score`` (expected, closed form) of shape (steps + 1,) and
        ``w_easy``, ``w_hard`` (weights used at each step) of shape (steps,).

    Examples
    --------
    >>> c = run_bandit("arspo", steps=2)
    >>> c["hard_score"].shape
    (3,)
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    gen = torch.Generator().manual_seed(int(seed))
    theta = torch.tensor(INIT, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([theta], lr=lr)
    tw = DynamicTaskWeights(["cls", "loc"])
    n = n_groups * group_size
    group = torch.arange(n_groups).repeat_interleave(group_size)
    mapping = {"loc": "power"} if method in ("map", "arspo") else None
    acc, score, w_e, w_h = [], [], [], []
    log_norm = math.log(SIGMA) + 0.5 * math.log(2.0 * math.pi)
    for step in range(steps + 1):
        a_, s_ = expected_scores(*theta.detach().tolist())
        acc.append(a_)
        score.append(s_)
        if step == steps:
            break
        h, c, m = theta[0], theta[1], theta[2]
        logit = (h + c).expand(n)
        right = torch.rand(n, generator=gen, dtype=torch.float64) < torch.sigmoid(logit.detach())
        lp_cls = torch.where(right, torch.nn.functional.logsigmoid(logit), torch.nn.functional.logsigmoid(-logit))
        mu = m + 0.5 * h
        a = mu.detach() + SIGMA * torch.randn(n, generator=gen, dtype=torch.float64)
        lp_loc = -0.5 * ((a - mu) / SIGMA) ** 2 - log_norm
        r_cls = right.to(torch.float64)
        s = torch.exp(-((a - A_STAR) ** 2) / WIDTH**2)
        comps = {"cls": r_cls, "loc": s}
        if method in ("weights", "arspo"):
            tw.update({"cls": r_cls, "loc": reward_map(s) if mapping else s})
            weights = tw.weights
        else:
            weights = {"cls": 1.0, "loc": 1.0}
        w_e.append(weights["cls"])
        w_h.append(weights["loc"])
        reward = arspo_rewards(comps, weights, mapping)
        adv = arspo_advantages(reward, group, advantage_norm="std")
        logp = torch.stack([lp_cls, lp_loc], dim=1)
        loss = grpo_loss(logp, logp.detach(), None, adv)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {"easy_acc": np.array(acc), "hard_score": np.array(score), "w_easy": np.array(w_e),
            "w_hard": np.array(w_h)}


def _first_reach(x: np.ndarray, level: float) -> int:
    idx = np.nonzero(x >= level)[0]
    return int(idx[0]) if idx.size else -1


def run(*, seed: int = 0, quick: bool = False, out: str | Path | None = None, progress: bool = True) -> dict:
    """Run the bandit for every method over several seeds.

    Parameters
    ----------
    seed : int, default=0
        First seed (``n_seeds`` consecutive seeds are averaged).
    quick : bool, default=False
        Fewer steps and seeds (a few seconds).
    out : str or Path, optional
        PNG path for the figure (a directory gets ``alignment_arspo.png``); needs matplotlib.
    progress : bool, default=True
        Show a progress bar.

    Returns
    -------
    result : dict
        ``curves`` per method (seed-averaged lists) and ``summary`` per method: the hard score
        and easy accuracy at the checkpoint step, the lowest easy accuracy, the step at which
        the hard score first reaches 0.5 (-1: never), and the final weights.

    Examples
    --------
    >>> res = run(quick=True, progress=False)
    >>> s = res["summary"]
    >>> s["arspo"]["hard_at_checkpoint"] > s["grpo"]["hard_at_checkpoint"]
    True
    """
    from tqdm.auto import tqdm

    steps = 40 if quick else 80
    n_seeds = 2 if quick else 5
    checkpoint = 30
    bar = tqdm(total=len(METHODS) * n_seeds, disable=not progress, desc="arspo demo")
    curves: dict[str, dict[str, np.ndarray]] = {}
    for mth in METHODS:
        runs = []
        for s in range(n_seeds):
            runs.append(run_bandit(mth, seed=seed + s, steps=steps))
            bar.update()
        curves[mth] = {k: np.mean([r[k] for r in runs], axis=0) for k in runs[0]}
    bar.close()
    summary = {}
    for mth in METHODS:
        c = curves[mth]
        summary[mth] = {
            "hard_at_checkpoint": float(c["hard_score"][checkpoint]),
            "easy_at_checkpoint": float(c["easy_acc"][checkpoint]),
            "easy_start": float(c["easy_acc"][0]),
            "easy_min": float(c["easy_acc"].min()),
            "steps_to_hard_0.5": _first_reach(c["hard_score"], 0.5),
            "final_hard": float(c["hard_score"][-1]),
            "final_easy": float(c["easy_acc"][-1]),
            "final_w_easy": float(c["w_easy"][-1]),
            "final_w_hard": float(c["w_hard"][-1]),
        }
    result = {"config": {"seed": seed, "quick": quick, "steps": steps, "n_seeds": n_seeds,
                         "checkpoint": checkpoint, "n_groups": 16, "group_size": 8, "lr": 0.1},
              "summary": summary,
              "curves": {m: {k: v.tolist() for k, v in curves[m].items()} for m in METHODS}}
    if out is not None:
        _plot(result, Path(out))
    return result


def _plot(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if out.is_dir():
        out = out / "alignment_arspo.png"
    colors = {"grpo": "tab:gray", "map": "tab:orange", "weights": "tab:green", "arspo": "tab:blue"}
    labels = {"grpo": "GRPO (unit weights)", "map": "map only", "weights": "weights only", "arspo": "ARSPO"}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for m in METHODS:
        c = result["curves"][m]
        axes[0].plot(c["hard_score"], color=colors[m], lw=2, label=labels[m])
        axes[1].plot(c["easy_acc"], color=colors[m], lw=2, label=labels[m])
        if m in ("weights", "arspo"):
            axes[2].plot(c["w_hard"], color=colors[m], lw=2, label=f"{labels[m]}: hard")
            axes[2].plot(c["w_easy"], color=colors[m], lw=1.5, ls="--", label=f"{labels[m]}: easy")
    axes[0].set_title("hard task: expected IoU-like score")
    axes[1].set_title("easy task: accuracy")
    axes[2].set_title("dynamic task weights")
    axes[1].set_ylim(0.8, 1.005)
    for ax in axes:
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def format_table(result: dict) -> str:
    """Plain-text table of the summary numbers of :func:`run`.

    Parameters
    ----------
    result : dict
        The output of :func:`run`.

    Returns
    -------
    table : str

    Examples
    --------
    >>> print(format_table(run(quick=True, progress=False)).splitlines()[0])
    method   hard@ckpt  easy@ckpt  easy min  steps to hard>=0.5  final hard  final easy  w_easy  w_hard
    """
    head = ("method", "hard@ckpt", "easy@ckpt", "easy min", "steps to hard>=0.5", "final hard", "final easy",
            "w_easy", "w_hard")
    rows = [head]
    for m in METHODS:
        s = result["summary"][m]
        st = s["steps_to_hard_0.5"]
        rows.append((m, f"{s['hard_at_checkpoint']:.3f}", f"{s['easy_at_checkpoint']:.3f}", f"{s['easy_min']:.3f}",
                     "never" if st < 0 else str(st), f"{s['final_hard']:.3f}", f"{s['final_easy']:.3f}",
                     f"{s['final_w_easy']:.2f}", f"{s['final_w_hard']:.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
