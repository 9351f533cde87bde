"""Grokking through ExPLAIND's eyes: which components drive the modular-addition model.

The zoo's ``modadd`` recipe (1-layer ReLU transformer, ``a b = -> (a + b) mod p``, p = 53,
half of the pairs for training, full-batch AdamW lr 1e-3, betas (0.9, 0.98), weight decay 1,
3000 steps; Nanda et al. 2023) is trained with a :class:`~rml_fast.interp.explaind.TrainingHistory`
(no gradient clipping, so the path-kernel decomposition is exact). The correct-answer logit of
held-out pairs is then decomposed (arXiv 2505.20076, Sec. 5): per window of steps, the share of
the parameter-wise influence ``sum_s sum_o |phi_s(x)[o, j] (data part of dtheta_s)[j]|`` held by
the embeddings, the attention, the MLP and the unembedding, beside the train / test accuracy
(memorisation, then circuit formation and clean-up around the jump in test accuracy).
Completeness (data + weight-decay influences = the change of the logit) is checked on the way.

``quick=True``: p = 11, a 32-wide model, 80 steps at lr 2e-2 (a few seconds; it memorises
but need not grok). The full run logs to a temporary directory (about 5 GB) and takes about
half an hour on a CPU (training and logging, then one pass over the 3000 logged steps).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["format_table", "run"]

_GROUPS = ("embed", "attn", "mlp", "unembed")


def _groups(names: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {g: [] for g in _GROUPS}
    for n in names:
        if n in ("W_E", "W_pos"):
            out["embed"].append(n)
        elif ".attn." in n:
            out["attn"].append(n)
        elif ".mlp." in n:
            out["mlp"].append(n)
        else:
            out["unembed"].append(n)
    return {k: v for k, v in out.items() if v}


def _accuracy(model, hist, s: int, X: torch.Tensor, y: torch.Tensor) -> float:
    from torch.func import functional_call

    with torch.no_grad():
        logits = functional_call(model, hist.theta(s), (X,))[:, -1]
    return float((logits.argmax(-1) == y).float().mean())


def run(
    *,
    seed: int = 0,
    quick: bool = False,
    out: str | Path | None = None,
    progress: bool = True,
    n_test: int | None = None,
    window: int | None = None,
    log_dir: str | Path | None = None,
    data: bool | None = None,
) -> dict[str, Any]:
    """Train the modular-addition model with an ExPLAIND log and decompose its test logits.

    Parameters
    ----------
    seed : int, default=0
        Seeds the initialisation and the choice of test pairs.
    quick : bool, default=False
        The small setting (p = 11, 80 steps).
    out : str or Path, optional
        Write the figure (accuracy curves and component shares per window) to this PNG.
    progress : bool, default=True
    n_test : int, optional
        Held-out pairs whose correct-answer logit is decomposed (default 8 quick, 16 full).
    window : int, optional
        Steps per window (default 10 quick, 100 full).
    log_dir : str or Path, optional
        Keep the training log here (disk store, resumable); default a temporary directory.
    data : bool, optional
        Also compute the data influence of every training pair and check completeness
        (data + weight-decay influences = the logit change). Default: in quick mode only (on
        the full model it costs one forward-mode pass over the 1404 training pairs per test
        point and step, hours on a CPU); without it only the path completeness
        (sum of step influences vs the logit change) is checked.

    Returns
    -------
    dict
        ``p``, ``steps``, ``windows`` (labels), ``train_acc`` / ``test_acc`` (at each window's
        end), ``shares`` ({component: list per window}), ``memorised_at`` / ``grokked_at`` (first
        window end with train / test accuracy >= 0.95, or None), ``completeness_rel_error``,
        ``quadrature_error``, ``update_residual``.

    Examples
    --------
    >>> from rml_fast.interp.demos import grokking
    >>> res = grokking.run(quick=True, progress=False)  # doctest: +SKIP
    >>> abs(sum(v[-1] for v in res["shares"].values()) - 1) < 1e-9  # doctest: +SKIP
    True
    """
    from rml_fast.interp.explaind import ExactPathKernel, last_position, train_with_history
    from rml_fast.models.tasks import ModAddTask
    from rml_fast.models.transformer import TinyConfig, TinyTransformer
    from rml_fast.models.zoo import ZOO

    recipe = ZOO["modadd"]
    if quick:
        p, train_frac, steps, lr = 11, 0.5, 80, 2e-2
        cfg_kw: dict[str, Any] = {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_mlp": 64, "ln": False,
                  "act": "relu"}  # fmt: skip
        n_test = n_test or 8
        window = window or 10
        n_quad, n_quad_early = 2, 4
    else:
        p, train_frac = recipe.task_kwargs["p"], recipe.task_kwargs["train_frac"]
        steps, lr = recipe.train["steps"], recipe.train["lr"]
        cfg_kw = dict(recipe.cfg)
        n_test = n_test or 16
        window = window or 100
        n_quad, n_quad_early = 2, 10
    wd = recipe.train["weight_decay"]
    task = ModAddTask(p=p, train_frac=train_frac)
    cfg = TinyConfig(**{**cfg_kw, "d_vocab": task.d_vocab, "n_ctx": task.seq_len})
    model = TinyTransformer(cfg, seed=seed)
    Xtr, ytr = task.full_batch("train")
    Xte, yte = task.full_batch("test")
    pick = torch.randperm(len(yte), generator=torch.Generator().manual_seed(seed))[:n_test]
    loss = torch.nn.CrossEntropyLoss()
    tmp = None
    if log_dir is None and not quick:
        tmp = tempfile.TemporaryDirectory(prefix="explaind_grok_")
        log_dir = tmp.name
    try:
        hist = train_with_history(
            model, loss, (Xtr, ytr), n_steps=steps, lr=lr, betas=(0.9, 0.98),
            weight_decay=wd, batch_size=len(ytr), output_fn=last_position, seed=seed,
            store="memory" if log_dir is None else "disk", path=log_dir,
            checkpoint_every=window, progress=progress,
        )  # fmt: skip
        epk = ExactPathKernel(
            model, hist, loss, (Xtr, ytr), output_fn=last_position, n_quad=n_quad,
            n_quad_early=n_quad_early, early_steps=4, param_groups=_groups(hist.param_names),
            progress=progress,
        )  # fmt: skip
        if data is None:
            data = quick
        res = epk.decompose(Xte[pick], yte[pick], window=window, data=bool(data))
        W = res["component"].shape[0]
        ends = [min((w + 1) * window, steps) for w in range(W)]
        train_acc = [_accuracy(model, hist, s, Xtr, ytr) for s in ends]
        test_acc = [_accuracy(model, hist, s, Xte, yte) for s in ends]
        upd = epk.update_residual(steps=min(steps, 20))
    finally:
        if tmp is not None:
            tmp.cleanup()
    comp = res["component"].sum(1)  # (W, G)
    shares = comp / comp.sum(1, keepdim=True)
    target = res["fN"] - res["f0"]
    scale = float(target.abs().max()) or 1.0
    complete = None
    if res["data"] is not None:
        total = res["data"].sum(-1) + res["decay"].sum(0)
        complete = float((total - target).abs().max()) / scale
    labels = [f"{w * window + 1}-{e}" for w, e in enumerate(ends)]

    def first(acc: list[float]) -> int | None:
        return next((e for e, a in zip(ends, acc, strict=True) if a >= 0.95), None)

    result = {
        "p": p, "steps": steps, "n_test": n_test, "window": window, "windows": labels,
        "ends": ends, "train_acc": train_acc, "test_acc": test_acc,
        "shares": {g: shares[:, i].tolist() for i, g in enumerate(res["groups"])},
        "memorised_at": first(train_acc), "grokked_at": first(test_acc),
        "completeness_rel_error": complete,
        "quadrature_error": float((res["step"].sum(0) - target).abs().max()) / scale,
        "update_residual": upd,
        "mean_logit_change": float(target.mean()),
    }  # fmt: skip
    if out is not None:
        _plot(result, out)
    return result


def _plot(result: dict[str, Any], out: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ends = result["ends"]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    a1.plot(ends, result["train_acc"], label="train accuracy")
    a1.plot(ends, result["test_acc"], label="test accuracy")
    a1.set_ylabel("accuracy")
    a1.set_title(f"modular addition p={result['p']}: accuracy and ExPLAIND component shares")
    a1.legend(loc="lower right")
    starts = [0, *ends[:-1]]
    mids = [(s + e) / 2 for s, e in zip(starts, ends, strict=True)]
    a2.stackplot(mids, *result["shares"].values(), labels=list(result["shares"]))
    a2.set_ylabel("share of parameter influence")
    a2.set_xlabel("training step")
    a2.set_ylim(0, 1)
    a2.legend(loc="upper right", fontsize=8)
    for ax in (a1, a2):
        if result["grokked_at"] is not None:
            ax.axvline(result["grokked_at"], color="grey", ls="--", lw=1)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def format_table(result: dict[str, Any]) -> str:
    """Plain-text table: per window, train/test accuracy and each component's share.

    Examples
    --------
    >>> r = {"p": 5, "steps": 2, "windows": ["1-2"], "train_acc": [1.0], "test_acc": [0.5],
    ...      "shares": {"mlp": [1.0]}, "completeness_rel_error": 0.0, "quadrature_error": 0.0,
    ...      "update_residual": 0.0, "memorised_at": 2, "grokked_at": None}
    >>> print(format_table(r).splitlines()[1])
    window     train   test     mlp
    """
    groups = list(result["shares"])
    head = f"{'window':<10} {'train':>5} {'test':>6} " + " ".join(f"{g:>7}" for g in groups)
    lines = [f"ExPLAIND grokking, p={result['p']}, {result['steps']} steps", head]
    for i, lab in enumerate(result["windows"]):
        shares = " ".join(f"{result['shares'][g][i]:7.3f}" for g in groups)
        lines.append(f"{lab:<10} {result['train_acc'][i]:5.2f} {result['test_acc'][i]:6.2f} {shares}")
    comp = result["completeness_rel_error"]
    comp_txt = "not computed" if comp is None else f"{comp:.2e}"
    lines.append(
        f"memorised at {result['memorised_at']}, grokked at {result['grokked_at']}; "
        f"completeness rel. error {comp_txt} (quadrature {result['quadrature_error']:.2e}); "
        f"update residual {result['update_residual']:.1e}"
    )
    return "\n".join(lines)
