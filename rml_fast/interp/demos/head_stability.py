"""Weight decay and attention-head stability across refits (Bali et al. 2026, arXiv 2602.16740).

Character language models on the interpreter's own standard-library text are trained from
several initialisation seeds with Adam (no weight decay) and with AdamW (decoupled weight decay),
at two depths; for each setting the heads of the refits are compared on one fixed set of
held-out prompts (cosine of attention signatures, best match per head) and the layer stability
is plotted against relative depth, with the prompt-permutation null and the residual-stream
stability (linear CKA). The paper reports that weight decay makes heads more stable across seeds
at no cost in perplexity; the table shows what these tiny models do.

``run(quick=True)`` trains 2 seeds x 2 optimisers of a 2-layer model for a few steps (seconds);
the full run trains 3 seeds x 2 optimisers x depths {2, 4} of width 32 for 800 steps (16 minutes
on a busy 2-core machine; every model is cached by ``train_tiny``, so a second run only
re-measures).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rml_fast.interp.head_stability import StabilityStudy
from rml_fast.models.transformer import TinyConfig

__all__ = ["format_table", "run"]


def _settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "depths": (2,), "d_model": 32, "d_mlp": 64, "seq_len": 32, "n_seeds": 2, "steps": 30,
            "lr": 3e-3, "warmup": 0, "n_prompts": 8, "n_eval": 16, "n_null": 2,
        }  # fmt: skip
    return {
        "depths": (2, 4), "d_model": 32, "d_mlp": 128, "seq_len": 32, "n_seeds": 3, "steps": 800,
        "lr": 2e-3, "warmup": 50, "n_prompts": 64, "n_eval": 128, "n_null": 10,
    }  # fmt: skip


def run(
    *,
    seed: int = 0,
    quick: bool = False,
    out: str | Path | None = None,
    progress: bool = True,
    weight_decay: float = 0.1,
) -> dict[str, Any]:
    """Train Adam and AdamW refits of tiny character LMs and compare their head stability.

    Parameters
    ----------
    seed : int, default=0
        The refits use seeds ``seed, seed + 1, ...`` (the prompt set is fixed).
    quick : bool, default=False
        The smallest setting (one depth, 2 seeds, 30 steps; seconds).
    out : str or Path, optional
        Write a PNG figure there (needs matplotlib).
    progress : bool, default=True
        tqdm bars while training.
    weight_decay : float, default=0.1
        AdamW's decoupled weight decay.

    Returns
    -------
    result : dict
        ``settings``, ``studies`` ({depth: :meth:`StabilityStudy.run` result}) and ``rows``
        (one dict per depth, optimiser and layer: ``depth, optimizer, layer, rel_depth,
        stability, sd, null, residual, ppl``).

    Examples
    --------
    >>> from rml_fast.interp.demos import head_stability as demo
    >>> callable(demo.run) and callable(demo.format_table)
    True
    """
    st = _settings(bool(quick))
    studies: dict[int, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    for depth in st["depths"]:
        cfg = TinyConfig(
            n_layers=depth, d_model=st["d_model"], n_heads=4, d_mlp=st["d_mlp"],
            n_ctx=st["seq_len"], d_vocab=128,
        )  # fmt: skip
        study = StabilityStudy(
            cfg, "charlm", seeds=range(seed, seed + st["n_seeds"]), weight_decay=weight_decay,
            steps=st["steps"], lr=st["lr"], batch=32, warmup=st["warmup"],
            n_prompts=st["n_prompts"], n_eval=st["n_eval"], n_null=st["n_null"],
            task_kwargs={"seq_len": st["seq_len"]}, progress=progress,
        )  # fmt: skip
        res = study.run()
        studies[depth] = res
        for label in res["labels"]:
            for layer in range(depth):
                rows.append({
                    "depth": depth, "optimizer": label, "layer": layer,
                    "rel_depth": float(res["relative_depth"][layer]),
                    "stability": float(res["layer_stability"][label][layer]),
                    "sd": float(res["layer_stability_sd"][label][layer]),
                    "null": float(res["null_layer_stability"][label][layer]),
                    "residual": float(res["residual"][label][layer]),
                    "ppl": float(res["perplexity"][label].mean()),
                })  # fmt: skip
    result = {"settings": st, "studies": studies, "rows": rows, "weight_decay": weight_decay}
    if out is not None:
        _plot(result, Path(out))
    return result


def format_table(result: dict[str, Any]) -> str:
    """The per-layer numbers of :func:`run` as a plain-text table.

    Parameters
    ----------
    result : dict
        The return value of :func:`run`.

    Returns
    -------
    table : str

    Examples
    --------
    >>> from rml_fast.interp.demos.head_stability import format_table
    >>> row = {"depth": 2, "optimizer": "adam", "layer": 0, "rel_depth": 0.0, "stability": 0.9,
    ...        "sd": 0.01, "null": 0.8, "residual": 0.95, "ppl": 5.0}
    >>> print(format_table({"rows": [row]}).splitlines()[1])
        2  adam         0   0.00      0.900  0.010  0.800     0.950   5.00
    """
    head = (
        f"{'depth':>5}  {'optimizer':<10} {'layer':>5} {'l/(L-1)':>6} {'stability':>10} "
        f"{'sd':>6} {'null':>6} {'residual':>9} {'ppl':>6}"
    )
    lines = [head]
    for r in result["rows"]:
        lines.append(
            f"{r['depth']:>5}  {r['optimizer']:<10} {r['layer']:>5} {r['rel_depth']:>6.2f} "
            f"{r['stability']:>10.3f} {r['sd']:>6.3f} {r['null']:>6.3f} {r['residual']:>9.3f} "
            f"{r['ppl']:>6.2f}"
        )
    return "\n".join(lines)


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    colors = {"adam": "tab:orange", "adamw": "tab:blue"}
    markers = ["o", "s", "^", "D"]
    for i, (depth, res) in enumerate(sorted(result["studies"].items())):
        x = res["relative_depth"].numpy()
        for label in res["labels"]:
            c = colors.get(label, "tab:gray")
            y = res["layer_stability"][label].numpy()
            sd = res["layer_stability_sd"][label].numpy()
            axes[0].errorbar(x, y, yerr=sd, color=c, marker=markers[i % 4], capsize=3,
                             label=f"{label}, {depth} layers")  # fmt: skip
            axes[0].plot(x, res["null_layer_stability"][label].numpy(), color=c, ls=":", lw=1)
            xr = list(range(depth + 1))
            xr = [v / depth for v in xr]
            axes[1].plot(xr, res["residual"][label].numpy(), color=c, marker=markers[i % 4],
                         label=f"{label}, {depth} layers, ppl "
                               f"{float(res['perplexity'][label].mean()):.2f}")  # fmt: skip
    axes[0].set_xlabel("relative depth l / (L - 1)")
    axes[0].set_ylabel("head stability (cosine, best match)")
    axes[0].set_title(f"attention heads across seeds (dotted: permutation null)\n"
                      f"AdamW weight decay {result['weight_decay']:g}", fontsize=9)  # fmt: skip
    axes[1].set_xlabel("residual stream position l / L")
    axes[1].set_ylabel("linear CKA across seeds")
    axes[1].set_title("residual-stream stability", fontsize=9)
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
