"""GRPO vs V-REx vs AIR on toy intents: anchor accuracy and the anchor/open gap.

Two experiments (spec np_alignment §2.3):

``exact``
    two contexts of one intent, logistic policy ``p_e = sigmoid(w + u_e)`` (shared ``w``, one
    surface parameter per context), init ``w = 0, u_a = 1, u_o = -2``; the anchor's reward is
    exact, the open variant's judge flips it with probability ``q``; expected risks
    ``R_a = 1 - p_a``, ``R_o = 1 - (q + (1 - 2q) p_o)`` and their exact gradients; plain
    gradient descent (lr 0.5) on ``mean(R_a, R_o)`` (GRPO's expected objective) plus
    ``lam * Var(R_a, R_o)`` (V-REx) or ``lam * max(R_o - sg(R_a), 0)^2`` (AIR), ``lam = 8``.
``stochastic``
    ``n_intents`` intents with an intent feature ``x_i``, a categorical policy
    {refuse (correct), comply} with logit ``w x_i + u_e``, G = 8 sampled rollouts per
    (intent, variant), heterogeneous GRPO groups and :class:`~rml_fast.alignment.air.AIRObjective`
    (``regulariser`` = none / vrex / air) on the sampled batch.

The claim shown: V-REx lowers anchor accuracy early compared with plain GRPO (it shrinks the
variance from both sides), AIR does not (the anchor gets no gradient from it) and closes the
anchor/open gap faster than GRPO.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from rml_fast.alignment.air import AIRObjective

__all__ = ["format_table", "run", "run_exact", "run_stochastic"]

METHODS = ("grpo", "vrex", "air")


def run_exact(
    method: str, *, steps: int = 150, lr: float = 0.5, lam: float = 8.0, q: float = 0.2,
    init: tuple[float, float, float] = (0.0, 1.0, -2.0),
) -> dict[str, np.ndarray]:
    """Exact expected-gradient descent on the two-context logistic toy.

    Parameters
    ----------
    method : {"grpo", "vrex", "air"}
        Objective (see the module docstring).
    steps : int, default=150
        Gradient steps.
    lr : float, default=0.5
        Step size.
    lam : float, default=8.0
        Regulariser weight.
    q : float, default=0.2
        Judge flip probability on the open variant.
    init : tuple of float, default=(0, 1, -2)
        ``(w, u_a, u_o)``.

    Returns
    -------
    curves : dict
        ``anchor_acc``, ``open_acc`` (true accuracies ``p_a``, ``p_o``), ``gap`` and
        ``group_acc`` (``p_a p_o``), each of shape (steps + 1,).

    Examples
    --------
    >>> c = run_exact("air", steps=5)
    >>> bool(c["anchor_acc"][-1] >= c["anchor_acc"][0])
    True
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    theta = torch.tensor(init, dtype=torch.float64, requires_grad=True)
    pa_hist, po_hist = [], []
    for step in range(steps + 1):
        p_a = torch.sigmoid(theta[0] + theta[1])
        p_o = torch.sigmoid(theta[0] + theta[2])
        pa_hist.append(float(p_a.detach()))
        po_hist.append(float(p_o.detach()))
        if step == steps:
            break
        r_a = 1.0 - p_a
        r_o = 1.0 - (q + (1.0 - 2.0 * q) * p_o)
        loss = 0.5 * (r_a + r_o)
        if method == "vrex":
            loss = loss + lam * (r_a - r_o) ** 2 / 4.0
        elif method == "air":
            loss = loss + lam * torch.clamp(r_o - r_a.detach(), min=0.0) ** 2
        (g,) = torch.autograd.grad(loss, theta)
        with torch.no_grad():
            theta -= lr * g
    pa, po = np.array(pa_hist), np.array(po_hist)
    return {"anchor_acc": pa, "open_acc": po, "gap": pa - po, "group_acc": pa * po}


def run_stochastic(
    method: str, *, seed: int = 0, steps: int = 60, n_intents: int = 16, group_size: int = 8,
    lr: float = 0.5, lam: float = 8.0, q: float = 0.2,
) -> dict[str, np.ndarray]:
    """GRPO / V-REx / AIR with sampled rollouts of a categorical {refuse, comply} policy.

    Parameters
    ----------
    method : {"grpo", "vrex", "air"}
        Regulariser (none / V-REx / AIR) of :class:`~rml_fast.alignment.air.AIRObjective`.
    seed : int, default=0
        Seeds the intent features and the rollouts.
    steps : int, default=60
        Policy updates (one batch of ``n_intents * 2 * group_size`` rollouts each).
    n_intents : int, default=16
        Intents, each with one anchor and one open variant.
    group_size : int, default=8
        Rollouts per (intent, variant).
    lr : float, default=0.5
        SGD step size.
    lam : float, default=8.0
        Regulariser weight.
    q : float, default=0.2
        Judge flip probability on open variants.

    Returns
    -------
    curves : dict
        Expected ``anchor_acc``, ``open_acc``, ``gap``, ``group_acc`` under the current policy,
        each of shape (steps + 1,).

    Examples
    --------
    >>> c = run_stochastic("grpo", steps=3, n_intents=4)
    >>> c["anchor_acc"].shape
    (4,)
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    gen = torch.Generator().manual_seed(int(seed))
    x = 0.5 + torch.rand(n_intents, generator=gen, dtype=torch.float64)
    w = torch.zeros((), dtype=torch.float64, requires_grad=True)
    u = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)  # anchor, open
    reg = {"grpo": "none", "vrex": "vrex", "air": "air"}[method]
    obj = AIRObjective(lam=lam, regulariser=reg)
    opt = torch.optim.SGD([w, u], lr=lr)
    intent = torch.arange(n_intents).repeat_interleave(2 * group_size)
    variant = torch.arange(2).repeat_interleave(group_size).repeat(n_intents)
    is_anchor = variant == 0
    hist: dict[str, list[float]] = {"anchor_acc": [], "open_acc": [], "group_acc": []}
    for step in range(steps + 1):
        with torch.no_grad():
            pa = torch.sigmoid(w * x + u[0])
            po = torch.sigmoid(w * x + u[1])
            hist["anchor_acc"].append(float(pa.mean()))
            hist["open_acc"].append(float(po.mean()))
            hist["group_acc"].append(float((pa * po).mean()))
        if step == steps:
            break
        logit = w * x[intent] + u[variant]
        p_refuse = torch.sigmoid(logit)
        refuse = torch.rand(p_refuse.shape, generator=gen, dtype=torch.float64) < p_refuse.detach()
        logp = torch.where(refuse, torch.nn.functional.logsigmoid(logit), torch.nn.functional.logsigmoid(-logit))
        flip = (torch.rand(refuse.shape, generator=gen, dtype=torch.float64) < q) & ~is_anchor
        reward = (refuse ^ flip).to(torch.float64)
        out = obj({"logp_new": logp[:, None], "logp_old": logp.detach()[:, None], "reward": reward,
                   "group_id": intent, "variant_id": variant, "is_anchor": is_anchor})
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    res = {k: np.array(v) for k, v in hist.items()}
    res["gap"] = res["anchor_acc"] - res["open_acc"]
    return res


def _steps_to_close(gap: np.ndarray, tol: float) -> int:
    idx = np.nonzero(gap < tol)[0]
    return int(idx[0]) if idx.size else -1


def run(*, seed: int = 0, quick: bool = False, out: str | Path | None = None, progress: bool = True) -> dict:
    """Run both experiments for GRPO, V-REx and AIR.

    Parameters
    ----------
    seed : int, default=0
        Seed of the stochastic experiment (``n_seeds`` consecutive seeds are averaged).
    quick : bool, default=False
        Fewer steps, intents and seeds (a few seconds).
    out : str or Path, optional
        PNG path for the figure (a directory gets ``alignment_air.png``); needs matplotlib.
    progress : bool, default=True
        Show a progress bar.

    Returns
    -------
    result : dict
        ``exact`` and ``stochastic``: per method the curves (lists) and a ``summary`` with the
        minimum anchor accuracy over the early window, the anchor accuracy drop from the start,
        the gap at the end of the window and the step at which the gap falls below 0.1.

    Examples
    --------
    >>> res = run(quick=True, progress=False)
    >>> s = res["exact"]["summary"]
    >>> s["vrex"]["anchor_drop"] > 0.05 and s["air"]["anchor_drop"] <= 1e-12
    True
    """
    from tqdm.auto import tqdm

    exact_steps = 60 if quick else 150
    sto_steps = 30 if quick else 80
    n_intents = 8 if quick else 16
    n_seeds = 2 if quick else 5
    window_exact, window_sto = 20, 15
    result: dict[str, Any] = {"config": {"seed": seed, "quick": quick, "lam": 8.0, "lr": 0.5, "q": 0.2,
                                         "group_size": 8, "n_intents": n_intents, "n_seeds": n_seeds}}
    bar = tqdm(total=3 * (1 + n_seeds), disable=not progress, desc="air demo")
    exact: dict[str, Any] = {}
    sto: dict[str, Any] = {}
    for m in METHODS:
        exact[m] = run_exact(m, steps=exact_steps)
        bar.update()
        runs = []
        for s in range(n_seeds):
            runs.append(run_stochastic(m, seed=seed + s, steps=sto_steps, n_intents=n_intents))
            bar.update()
        sto[m] = {k: np.mean([r[k] for r in runs], axis=0) for k in runs[0]}
    bar.close()
    for name, curves, win in (("exact", exact, window_exact), ("stochastic", sto, window_sto)):
        summary = {}
        for m in METHODS:
            c = curves[m]
            summary[m] = {
                "anchor_start": float(c["anchor_acc"][0]),
                "anchor_min_early": float(c["anchor_acc"][: win + 1].min()),
                "anchor_drop": float(c["anchor_acc"][0] - c["anchor_acc"][: win + 1].min()),
                "gap_at_window": float(c["gap"][win]),
                "steps_to_gap_0.1": _steps_to_close(c["gap"], 0.1),
                "final_anchor": float(c["anchor_acc"][-1]),
                "final_open": float(c["open_acc"][-1]),
                "final_group": float(c["group_acc"][-1]),
            }
        result[name] = {"window": win, "summary": summary,
                        "curves": {m: {k: v.tolist() for k, v in curves[m].items()} for m in METHODS}}
    if out is not None:
        _plot(result, Path(out))
    return result


def _plot(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if out.is_dir():
        out = out / "alignment_air.png"
    colors = {"grpo": "tab:gray", "vrex": "tab:red", "air": "tab:blue"}
    labels = {"grpo": "GRPO", "vrex": "GRPO + V-REx", "air": "GRPO + AIR"}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, name, title in ((axes[0], "exact", "two contexts, exact gradients"),
                            (axes[1], "stochastic", "categorical policy, G=8 rollouts")):
        for m in METHODS:
            c = result[name]["curves"][m]
            ax.plot(c["anchor_acc"], color=colors[m], lw=2, label=f"{labels[m]}: anchor")
            ax.plot(c["open_acc"], color=colors[m], lw=1.5, ls="--", label=f"{labels[m]}: open")
        ax.axvline(result[name]["window"], color="k", lw=0.5, ls=":")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1.02)
    axes[0].legend(fontsize=7, loc="lower right")
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
    experiment  method  anchor@0  min anchor (early)  gap@window  steps to gap<0.1  final anchor  final open
    """
    head = ("experiment", "method", "anchor@0", "min anchor (early)", "gap@window", "steps to gap<0.1",
            "final anchor", "final open")
    rows = [head]
    for name in ("exact", "stochastic"):
        for m in METHODS:
            s = result[name]["summary"][m]
            steps = s["steps_to_gap_0.1"]
            rows.append((name, m, f"{s['anchor_start']:.3f}", f"{s['anchor_min_early']:.3f}",
                         f"{s['gap_at_window']:.3f}", "never" if steps < 0 else str(steps),
                         f"{s['final_anchor']:.3f}", f"{s['final_open']:.3f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
