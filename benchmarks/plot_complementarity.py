"""Figure for docs/decisions.md: robust human-AI complementarity.

``python benchmarks/plot_complementarity.py [--out docs/img/complementarity_robust.png] [--quick]``

Three panels:

1. the guaranteed gain ``min_U G(w)`` of each strategy's weight as the upper end ``rho_hi`` of the
   correlation box moves from -0.9 to 0.9 (``s_h = 0.3``, ``s_a in [0.25, 0.35]``, box width 0.2);
2. simulation with known correlations (``simulate_forecasts``, ``s_h = 0.3``, ``s_a = 0.35``,
   rho in [-0.9, 0.9]): out-of-sample Brier gain over the human of each strategy fitted on 150
   cases (mean and worst over repetitions), with the robust strategy's guaranteed gain;
3. real predictions on COMPAS (``load_binarized("compas-binned")``): the "human" stand-in is a
   logistic regression on half of the features, the "AI" a gradient-boosted tree on all of them;
   out-of-sample Brier score of each strategy.

It also prints the numbers it plots.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from rml_fast.decisions.complementarity import (
    STRATEGIES,
    RobustComplementarity,
    compare_strategies,
    optimal_pooling_weight,
    robust_pooling_weight,
    simulate_forecasts,
    worst_case_gain,
)


def _compas(seed: int = 0):
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    from rml_fast.datasets import load_binarized

    X, y, _ = load_binarized("compas-binned")
    idx = np.random.default_rng(seed).permutation(len(y))
    train, fit, test = np.array_split(idx, 3)
    half = X.shape[1] // 2
    human = LogisticRegression(max_iter=500).fit(X[train][:, :half], y[train])
    ai = HistGradientBoostingClassifier(max_iter=60, random_state=seed).fit(X[train], y[train])

    def f(rows):
        return np.column_stack([human.predict_proba(X[rows][:, :half])[:, 1],
                                ai.predict_proba(X[rows])[:, 1]]), y[rows]

    return f(fit), f(test)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/img/complementarity_robust.png")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s_h, sa = 0.3, (0.25, 0.35)
    rho_hi = np.linspace(-0.9, 0.9, 37)
    curves = {s: [] for s in ("robust", "plugin", "average", "ai")}
    for r in rho_hi:
        box = (max(r - 0.2, -1.0), r)
        rw = robust_pooling_weight(s_h, sa, box)
        curves["robust"].append(rw.guaranteed_gain)
        w_plug = optimal_pooling_weight(s_h, 0.3, sum(box) / 2)  # the centre of the box
        curves["plugin"].append(worst_case_gain(w_plug, s_h, sa, box))
        curves["average"].append(worst_case_gain(0.5, s_h, sa, box))
        curves["ai"].append(worst_case_gain(1.0, s_h, sa, box))

    reps, n_fit = (4, 150) if args.quick else (40, 150)
    rhos = np.linspace(-0.9, 0.9, 7 if args.quick else 13)
    sim = {s: np.zeros(len(rhos)) for s in STRATEGIES}
    worst = {s: np.full(len(rhos), np.inf) for s in STRATEGIES}
    below = 0  # repetitions whose out-of-sample gain fell below the guaranteed gain
    below_uh = 0  # the same for the PROPOSED human_uncertain=True variant
    sim_uh = np.zeros(len(rhos))
    guaranteed = np.zeros(len(rhos))
    for i, r in enumerate(rhos):
        for rep in range(reps):
            d = simulate_forecasts(n_fit, 0.3, 0.35, r, rng=1000 * i + rep)
            t = simulate_forecasts(20_000, 0.3, 0.35, r, rng=10**6 + 1000 * i + rep)
            res = compare_strategies(np.column_stack([d.h, d.a]), d.y,
                                     np.column_stack([t.h, t.a]), t.y,
                                     n_boot=300, random_state=rep)
            for s in STRATEGIES:
                sim[s][i] += res[s]["gain"] / reps
                worst[s][i] = min(worst[s][i], res[s]["gain"])
            below += res["robust"]["gain"] < res["robust"]["guaranteed_gain"]
            uh = RobustComplementarity(n_boot=300, random_state=rep, human_uncertain=True).fit(
                np.column_stack([d.h, d.a]), d.y)
            g_uh = uh.score(np.column_stack([t.h, t.a]), t.y)
            sim_uh[i] += g_uh / reps
            below_uh += g_uh < uh.guaranteed_gain_
            guaranteed[i] += res["robust"]["guaranteed_gain"] / reps

    (Xf, yf), (Xt, yt) = _compas()
    real = compare_strategies(Xf, yf, Xt, yt, n_boot=1000, random_state=0)
    mom = RobustComplementarity(random_state=0).fit(Xf, yf)

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for s, c in curves.items():
        ax[0].plot(rho_hi, c, label=s, lw=2 if s == "robust" else 1)
    ax[0].axhline(0, color="k", lw=0.5)
    ax[0].set(xlabel=r"$\rho_{hi}$ (box $[\rho_{hi}-0.2, \rho_{hi}]$)",
              ylabel=r"guaranteed gain $\min_U G(w)$",
              title=r"worst case over $U$ ($s_H=0.3$, $s_A\in[0.25,0.35]$)")
    ax[0].set_ylim(-0.06, None)
    ax[0].legend()
    for k, s in enumerate(("robust", "plugin", "average")):
        ax[1].plot(rhos, sim[s], color=f"C{k}", marker="o", ms=3, label=f"{s}: mean",
                   lw=2 if s == "robust" else 1)
        ax[1].plot(rhos, worst[s], color=f"C{k}", ls=":", label=f"{s}: worst rep")
    ax[1].plot(rhos, guaranteed, "k--", label="robust: guaranteed (mean)")
    ax[1].plot(rhos, sim_uh, color="C4", marker="s", ms=3, label="robust, $s_H$ uncertain: mean")
    ax[1].axhline(0, color="k", lw=0.5)
    ax[1].set(xlabel=r"true error correlation $\rho$", ylabel="out-of-sample Brier gain vs human",
              title=f"simulation (fit on n={n_fit}, mean of {reps} reps)")
    ax[1].set_ylim(-0.015, None)
    ax[1].legend(fontsize=8)
    names = list(STRATEGIES)
    ax[2].bar(names, [real[s]["brier"] for s in names], color="C0")
    lo = min(real[s]["brier"] for s in names)
    ax[2].set_ylim(lo - 0.01, max(real[s]["brier"] for s in names) + 0.005)
    for k, s in enumerate(names):
        ax[2].text(k, real[s]["brier"] + 0.0005, f"w={real[s]['weight']:.2f}", ha="center",
                   fontsize=8)
    ax[2].set(ylabel="test Brier score",
              title=f"COMPAS: LR (half the features) vs GBT, rho={mom.moments_['rho']:.2f}")
    fig.tight_layout()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    print("simulation (rho, mean gain / worst rep per strategy, robust guaranteed):")
    for i, r in enumerate(rhos):
        row = "  ".join(f"{s}={sim[s][i]:+.4f}/{worst[s][i]:+.4f}" for s in STRATEGIES)
        print(f"  rho={r:+.2f}  {row}  guaranteed={guaranteed[i]:.4f}")
    print(f"robust gain below its guarantee in {below} of {reps * len(rhos)} repetitions")
    print(f"human_uncertain=True: below its guarantee in {below_uh} of {reps * len(rhos)}; "
          "mean gains " + " ".join(f"{g:+.4f}" for g in sim_uh))
    print("COMPAS:", {s: {k: round(v, 4) for k, v in real[s].items()} for s in names})
    print("COMPAS moments:", {k: round(v, 4) for k, v in mom.moments_.items()},
          "box:", mom.s_a_range_, mom.rho_range_)
    return {"curves": curves, "sim": sim, "worst": worst, "below": below, "below_uh": below_uh, "guaranteed": guaranteed, "real": real}


if __name__ == "__main__":
    main()
