"""Fairness-metric compatibility on COMPAS for ``docs``: ``python
benchmarks/plot_fairness_compatibility.py [OUT_PNG]`` (default
``docs/img/fairness_compatibility.png``; needs matplotlib).

A logistic regression on the binarised COMPAS data (``two_year_recid``; sensitive attribute
``sex:Female``); players = the 12 binary columns (4096 coalitions), interventional masking with
16 background rows on 2000 evaluation rows. Left: the cosine compatibility matrix ``C`` of the
six built-in metrics' interaction vectors (Harsanyi dividends of all orders). Right: how
``C(m1, m2)`` splits over coalition sizes, ``sum_{|T| = r} c_T``, for three metric pairs.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

_ROOT = Path(__file__).resolve().parent.parent

_LABELS = {"accuracy": "accuracy", "demographic_parity": "-|DP|", "equalized_odds": "-|EO|",
           "equal_opportunity": "-|EOP|", "predictive_parity": "-|PP|",
           "calibration": "-calib. gap"}


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(prog="plot_fairness_compatibility.py",
                                description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", type=Path,
                   default=_ROOT / "docs" / "img" / "fairness_compatibility.png")
    p.add_argument("--n-eval", type=int, default=2000)
    p.add_argument("--n-background", type=int, default=16)
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.linear_model import LogisticRegression

    from rml_fast.datasets import load_binarized
    from rml_fast.fairness.compatibility import MetricCompatibility, attribution_by_order

    X, y, names = load_binarized("compas-binned")
    X = X.astype(np.float64)
    a = X[:, names.index("sex:Female")].astype(int)
    model = LogisticRegression(max_iter=1000).fit(X, y)
    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(X.shape[0], size=min(args.n_eval, X.shape[0]), replace=False))
    t0 = time.perf_counter()
    est = MetricCompatibility(model, prefit=True, n_background=args.n_background,
                              random_state=0, progress=False).fit(X[rows], y[rows], a[rows])
    seconds = time.perf_counter() - t0
    C = est.compatibility_
    labels = [_LABELS.get(m, m) for m in est.metric_names_]

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11.5, 4.6),
                                   gridspec_kw={"width_ratios": [1.0, 1.15]})
    im = ax0.imshow(C, cmap="RdBu", vmin=-1, vmax=1)
    ax0.set_xticks(range(len(labels)), labels, rotation=35, ha="right")
    ax0.set_yticks(range(len(labels)), labels)
    for i in range(C.shape[0]):
        for j in range(C.shape[1]):
            ax0.text(j, i, f"{C[i, j]:.2f}", ha="center", va="center", fontsize=8,
                     color="white" if abs(C[i, j]) > 0.6 else "black")
    fig.colorbar(im, ax=ax0, fraction=0.046, pad=0.04, label="C(m1, m2)")
    ax0.set_title("compatibility of metric games (COMPAS, LR)")

    idx = {m: k for k, m in enumerate(est.metric_names_)}
    pairs = [("accuracy", "demographic_parity"), ("accuracy", "equalized_odds"),
             ("demographic_parity", "calibration")]
    d = len(names)
    width = 0.27
    for k, (m1, m2) in enumerate(pairs):
        tot = attribution_by_order(est.interaction_vectors_, idx[m1], idx[m2],
                                   coalitions=est.coalitions_)
        ax1.bar(np.arange(1, d + 1) + (k - 1) * width, tot, width=width,
                label=f"{_LABELS[m1]} vs {_LABELS[m2]} (C = {C[idx[m1], idx[m2]]:.2f})")
    ax1.axhline(0, color="k", lw=0.6)
    ax1.set_xlabel("coalition size |T|")
    ax1.set_ylabel(r"$\sum_{|T|=r} c_T$")
    ax1.set_xticks(range(1, d + 1))
    ax1.set_title("where the (in)compatibility lives: per-order shares")
    ax1.legend(fontsize=8)
    fig.suptitle(f"12 players (4096 coalitions), interventional masking, "
                 f"{len(rows)} evaluation rows x {args.n_background} background rows",
                 fontsize=9)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=130)
    plt.close(fig)
    print(f"wrote {args.out} ({seconds:.1f} s for the games)")
    return args.out


if __name__ == "__main__":
    main()
