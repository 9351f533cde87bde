"""Figure of Query Lens for ``docs/interp.md``: ``python benchmarks/plot_query_lens.py [OUT_PNG]
[--quick]`` (default ``docs/img/query_lens_prev_token.png``; needs matplotlib; trains the zoo's
``induction-small`` model once, cached, ~1 min on 2 cores).

The experiment: a TopK SAE (96 features, k = 4) on ``blocks.0.hook_resid_post`` of the trained
induction model and of a random-weight model of the same shape. For every feature that fires
at least 20 times, ``A`` = the *previous* token at its 20 most-activating positions; the input
score ``I(T) = |{t in A : t in T}| / |A|`` (Lee et al. 2026) of its top-5 key tokens ``T`` is
computed for Query Lens (``transition="full"``: the key pulled back through layer 0, attention
included) and for the Logit Lens (``effect="direct"``: ``E_hat k_i``, the current token only).
Left: mean input scores; right: per-feature scores (Logit Lens vs Query Lens).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rml_fast.interp.query_lens import QueryLens, SparseDict, input_score
from rml_fast.interp.sae import train_topk_sae
from rml_fast.models import TinyTransformer, tiny_model

_ROOT = Path(__file__).resolve().parent.parent


def prev_token_scores(model: TinyTransformer, task: Any, *, quick: bool = False,
                      seed: int = 0) -> dict[str, np.ndarray]:  # fmt: skip
    """Per-feature input scores (previous token) of QL and LL key readouts of a layer-0 SAE."""
    toks, _, _ = task.train_batch(128, torch.Generator().manual_seed(seed))
    h = model.run_with_cache(toks, names=["blocks.0.hook_resid_post"])[1][
        "blocks.0.hook_resid_post"]  # fmt: skip
    sae = train_topk_sae(h[:, 1:].reshape(-1, h.shape[-1]), n_features=96, k=4,
                         steps=300 if quick else 1000, lr=3e-3, rng=seed, eval_every=500)  # fmt: skip
    z = sae.encode(h).detach()
    ql = QueryLens(model, SparseDict.from_sae(sae, 0), k=5).fit(toks[: 16 if quick else 64])
    top_q = ql.top_tokens(ql.key_scores())
    top_l = ql.top_tokens(ql.key_scores(effect="direct"))
    q, ll = [], []
    for f in range(96):
        a = z[:, 1:, f].reshape(-1)
        if int((a > 0).sum()) < 20:
            continue
        idx = a.topk(20).indices
        b, p = idx // (toks.shape[1] - 1), idx % (toks.shape[1] - 1) + 1
        prev = toks[b, p - 1]
        q.append(input_score(top_q[f], prev))
        ll.append(input_score(top_l[f], prev))
    return {"query_lens": np.array(q), "logit_lens": np.array(ll)}


def run(*, seed: int = 0, quick: bool = False, out: str | Path | None = None,
        progress: bool = True) -> dict[str, Any]:  # fmt: skip
    """Trained vs random induction model; returns mean scores (and writes the PNG to ``out``)."""
    torch.manual_seed(seed)
    model, task = tiny_model("induction-small", progress=progress)
    res = {"trained": prev_token_scores(model, task, quick=quick, seed=seed),
           "random": prev_token_scores(TinyTransformer(model.cfg, seed=seed + 1).eval(), task,
                                       quick=quick, seed=seed)}  # fmt: skip
    summary = {k: {m: float(v.mean()) for m, v in r.items()} for k, r in res.items()}
    if out is not None:
        _plot(res, Path(out), quick)
    return {"summary": summary, "scores": res}


def format_table(result: dict[str, Any]) -> str:
    """Mean previous-token input scores as a text table."""
    lines = [f"{'model':<8} {'Query Lens':>11} {'Logit Lens':>11}"]
    for k, r in result["summary"].items():
        lines.append(f"{k:<8} {r['query_lens']:>11.3f} {r['logit_lens']:>11.3f}")
    return "\n".join(lines)


def _plot(res: dict[str, dict[str, np.ndarray]], out: Path, quick: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    x = np.arange(2)
    for j, (m, c) in enumerate((("query_lens", "tab:blue"), ("logit_lens", "tab:gray"))):
        means = [res[k][m].mean() for k in ("trained", "random")]
        bars = ax0.bar(x + (j - 0.5) * 0.38, means, 0.38, color=c,
                       label="Query Lens key" if j == 0 else "Logit Lens key")  # fmt: skip
        for b, v in zip(bars, means, strict=True):
            ax0.text(b.get_x() + b.get_width() / 2, v + 0.01, f"{v:.2f}", ha="center", fontsize=8)
    ax0.set_xticks(x, ["trained induction", "random weights"])
    ax0.set_ylabel("input score (previous token in top-5)")
    ax0.set_ylim(0, 1)
    ax0.legend(fontsize=8)
    for k, c in (("trained", "tab:green"), ("random", "tab:red")):
        ax1.scatter(res[k]["logit_lens"], res[k]["query_lens"], s=12, alpha=0.6, c=c, label=k)
    ax1.plot([0, 1], [0, 1], "k:", lw=0.8)
    ax1.set_xlabel("Logit Lens input score")
    ax1.set_ylabel("Query Lens input score")
    ax1.legend(fontsize=8)
    note = " (quick)" if quick else ""
    fig.suptitle(f"Layer-0 SAE features of the induction model: key readouts{note}", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="plot_query_lens.py", description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", type=Path,
                   default=_ROOT / "docs" / "img" / "query_lens_prev_token.png")  # fmt: skip
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    print(format_table(run(quick=a.quick, out=a.out, progress=False)))
