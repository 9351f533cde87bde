"""DPO lowers the chosen likelihood; DPO + reward calibration raises it (arXiv 2604.18239).

The toy policy is a small causal character LM (:class:`~rml_fast.models.TinyTransformer`,
1 layer, d_model 32) pre-trained briefly on its offline task data (the stdlib-source corpus of
:class:`~rml_fast.models.CharLMTask`). Preference pairs are built from held-in corpus windows:
a 16-character prompt, the true 8-character continuation as the chosen response and the same
continuation with one early character replaced as the rejected one -- near-identical pairs,
the setting where DPO is known to displace the chosen likelihood. The pre-trained model is
the reference; the policy is trained with Adam on the full batch of pairs, once with plain DPO
and once with DPO + :class:`~rml_fast.alignment.preference.RewardCalibrator` (score norms from
the unembedding ``W_U, b_U``). Reported per seed: the change of the mean chosen / rejected
log-likelihood ``z_w - z_w^ref``, ``z_l - z_l^ref`` after training, the last RC factor alpha
and the fraction of (step, pair) whose effective incentive ratio ``alpha^2 r`` was inside the
disentanglement band of that step's batch geometry.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from rml_fast.alignment.preference import PreferenceLoss, sequence_logps
from rml_fast.models import CharLMTask, TinyConfig, train_tiny

__all__ = ["format_table", "run"]

PROMPT, RESPONSE = 16, 8


def _pairs(task: CharLMTask, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(10_000 + seed)
    chosen = task._windows(n, g, True)[:, : PROMPT + RESPONSE].clone()
    rejected = chosen.clone()
    rows = torch.arange(n)
    pos = PROMPT + torch.randint(0, 3, (n,), generator=g)
    new = torch.randint(97, 123, (n,), generator=g)  # a random lower-case letter
    same = new == chosen[rows, pos]
    rejected[rows, pos] = torch.where(same, (new - 97 + 1) % 26 + 97, new)
    return chosen, rejected


def _logps(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    labels = tokens[:, 1:]
    mask = torch.zeros_like(labels, dtype=torch.bool)
    mask[:, PROMPT - 1 :] = True  # the response tokens
    return sequence_logps(logits[:, :-1], labels, mask)


def _train(
    base: torch.nn.Module,
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    *,
    calibrate: bool,
    steps: int,
    lr: float,
    beta: float,
    seed: int,
) -> dict[str, Any]:
    with torch.no_grad():
        ref_w, ref_l = _logps(base, chosen), _logps(base, rejected)
    policy = copy.deepcopy(base).train()
    head = [policy.W_E if policy.W_U is None else policy.W_U, policy.b_U]  # the unembedding
    loss_fn = PreferenceLoss("dpo", params=head, calibrate=calibrate, beta=beta)
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    torch.manual_seed(seed)
    zw_traj, zl_traj, alphas, inside = [], [], [], []
    for _ in range(steps):
        zw, zl = _logps(policy, chosen), _logps(policy, rejected)
        out = loss_fn(zw, zl, ref_w, ref_l)
        zw_traj.append(float((zw.detach() - ref_w).mean()))
        zl_traj.append(float((zl.detach() - ref_l).mean()))
        alphas.append(out.alpha)
        inside.append(float(out.inside.double().mean()) if out.inside is not None else np.nan)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    with torch.no_grad():
        zw_traj.append(float((_logps(policy, chosen) - ref_w).mean()))
        zl_traj.append(float((_logps(policy, rejected) - ref_l).mean()))
    return {
        "dzw": zw_traj[-1], "dzl": zl_traj[-1], "zw_traj": zw_traj, "zl_traj": zl_traj,
        "alpha": alphas[-1], "inside_frac": float(np.nanmean(inside)),
    }


def run(
    *, seed: int = 0, quick: bool = False, out: str | None = None, progress: bool = True
) -> dict[str, Any]:
    """Train DPO and DPO + RC from the same pre-trained tiny LM over 5 seeds.

    Parameters
    ----------
    seed : int, default=0
        First seed; seeds ``seed .. seed + 4`` each pre-train their own model (cached in
        :func:`~rml_fast.models.cache_dir`) and draw their own pairs.
    quick : bool, default=False
        Fewer pre-training steps, pairs and DPO steps (the effect is the same).
    out : str or path, optional
        Write a PNG of the mean ``z_w - z_w^ref`` and ``z_l - z_l^ref`` trajectories.
    progress : bool, default=True
        Show a tqdm bar over seeds.

    Returns
    -------
    result : dict
        ``seeds``; ``dpo`` and ``dpo_rc``: lists (one per seed) of dicts with ``dzw``, ``dzl``
        (final changes of the mean chosen / rejected log-likelihood), trajectories, the last
        ``alpha`` and ``inside_frac``; ``settings``.

    Examples
    --------
    >>> from rml_fast.alignment.demos import calibration
    >>> callable(calibration.run)
    True
    """
    from tqdm.auto import tqdm

    settings: dict[str, Any] = (
        {"pretrain_steps": 150, "pairs": 32, "steps": 25, "lr": 1e-3, "beta": 0.1}
        if quick else {"pretrain_steps": 400, "pairs": 64, "steps": 60, "lr": 1e-3, "beta": 0.1}
    )
    task = CharLMTask(seq_len=PROMPT + RESPONSE)
    cfg = TinyConfig(n_layers=1, d_model=32, n_heads=2, d_mlp=64, d_vocab=128,
                     n_ctx=PROMPT + RESPONSE)
    seeds = [seed + i for i in range(5)]
    res: dict[str, Any] = {"seeds": seeds, "dpo": [], "dpo_rc": [], "settings": settings}
    with torch.random.fork_rng():
        for s in tqdm(seeds, desc="calibration", disable=not progress):
            base = train_tiny(cfg, task, steps=settings["pretrain_steps"], lr=3e-3, seed=s,
                              batch=32, progress=False)
            chosen, rejected = _pairs(task, settings["pairs"], s)
            kw = {k: settings[k] for k in ("steps", "lr", "beta")}
            res["dpo"].append(_train(base, chosen, rejected, calibrate=False, seed=s, **kw))
            res["dpo_rc"].append(_train(base, chosen, rejected, calibrate=True, seed=s, **kw))
    if out is not None:
        _plot(res, out)
    return res


def _plot(res: dict[str, Any], out: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharex=True)
    for key, label, color in (("dpo", "DPO", "tab:red"), ("dpo_rc", "DPO + RC", "tab:blue")):
        for ax, traj in zip(axes, ("zw_traj", "zl_traj"), strict=True):
            arr = np.array([r[traj] for r in res[key]])
            for row in arr:
                ax.plot(row, color=color, alpha=0.25, lw=0.8)
            ax.plot(arr.mean(0), color=color, lw=2, label=label)
    axes[0].set_title(r"chosen: $z_w - z_w^{ref}$")
    axes[1].set_title(r"rejected: $z_l - z_l^{ref}$")
    for ax in axes:
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xlabel("step")
    axes[0].legend(frameon=False)
    fig.suptitle("Tiny char-LM, near-identical pairs, 5 seeds (thin) and mean (thick)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def format_table(result: dict[str, Any]) -> str:
    """A plain-text table: per seed, the final change of chosen / rejected log-likelihoods.

    Examples
    --------
    >>> r = {"seeds": [0], "dpo": [{"dzw": -1.0, "dzl": -5.0, "alpha": 1.0, "inside_frac": 0.0}],
    ...      "dpo_rc": [{"dzw": 2.0, "dzl": -4.0, "alpha": 1.3, "inside_frac": 0.5}]}
    >>> print(format_table(r).splitlines()[0])
    seed    DPO dz_w    DPO dz_l   RC dz_w   RC dz_l   RC alpha  RC in-band
    """
    lines = ["seed    DPO dz_w    DPO dz_l   RC dz_w   RC dz_l   RC alpha  RC in-band"]
    for s, a, b in zip(result["seeds"], result["dpo"], result["dpo_rc"], strict=True):
        lines.append(
            f"{s:>4} {a['dzw']:>11.3f} {a['dzl']:>11.3f} {b['dzw']:>9.3f} {b['dzl']:>9.3f} "
            f"{b['alpha']:>10.3f} {b['inside_frac']:>11.2f}"
        )
    mean = [np.mean([r[k] for r in result[m]]) for m in ("dpo", "dpo_rc") for k in ("dzw", "dzl")]
    lines.append(f"mean {mean[0]:>11.3f} {mean[1]:>11.3f} {mean[2]:>9.3f} {mean[3]:>9.3f}")
    return "\n".join(lines)
