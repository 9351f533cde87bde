"""Gaming rate and accuracy over stages, decision-dependent robust vs decision-independent robust,
for ``docs``: ``python benchmarks/plot_strategic.py [OUT_PNG] [--stages 5] [--timing]`` (default
``docs/img/strategic_gaming.png``; needs matplotlib).

Data: FICO HELOC (binarised, ``rml_fast.datasets.load_binarized("fico-binary")``), standardised,
2000 training and 2000 test agents. Agents' worst-case cost starts at ``kappa_1 = 2`` and, after
the rule ``w_t`` is deployed, drops to ``kappa_{t+1} = max(kappa_t - gamma ||w_t||_1,
0.1 kappa_1)`` (the PROPOSED decision-dependent model of ``rml_fast.strategic.decision_dependent``,
gamma = 0.2). Each stage the learner refits on the training set with the current ``kappa_t``:

* DDU-robust: :class:`TwoStageDDURobustClassifier` (receding horizon: deploy its stage-1 rule,
  which anticipates that it lowers the next stage's costs);
* decision-independent robust: :class:`RobustStrategicClassifier` at ``kappa_lo = kappa_t``
  (robust to today's costs, blind to the dependence);
* non-strategic: logistic regression.

The test agents best-respond (``StrategicSimulator``, one round per stage with that stage's
rule and cost); the figure shows the gaming rate (true negatives accepted after the response)
and the accuracy on the responses. ``--timing`` also prints solve times of the SOCP versus ``n``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

_ROOT = Path(__file__).resolve().parent.parent


def simulate(n_stages: int = 5, gamma: float = 0.2, kappa1: float = 2.0, C: float = 0.1,
             seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """Run the stage-by-stage comparison; returns per-policy arrays of kappa/gaming/accuracy."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from rml_fast.datasets import load_binarized
    from rml_fast.strategic.decision_dependent import (
        RobustStrategicClassifier,
        TwoStageDDURobustClassifier,
    )
    from rml_fast.strategic.simulator import StrategicSimulator

    X, y, _ = load_binarized("fico-binary")
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(y))[:4000]
    sc = StandardScaler().fit(X[idx[:2000]].astype(float))
    Xtr, ytr = sc.transform(X[idx[:2000]].astype(float)), y[idx[:2000]]
    Xte, yte = sc.transform(X[idx[2000:]].astype(float)), y[idx[2000:]]
    floor = 0.1 * kappa1

    def fit(policy: str, kappa: float):
        if policy == "DDU-robust":
            est = TwoStageDDURobustClassifier(kappa_lo=kappa, kappa_hi=2 * kappa, gamma=gamma,
                                              C=C, method="param_search", n_grid=21,
                                              kappa_floor=min(floor, kappa))
            est.fit(Xtr, ytr)
            return est.stage_rule(1)
        if policy == "decision-independent robust":
            return RobustStrategicClassifier(kappa_lo=kappa, kappa_hi=2 * kappa, C=C).fit(Xtr, ytr)
        return LogisticRegression(C=1.0).fit(Xtr, ytr)

    out: dict[str, dict[str, np.ndarray]] = {}
    for policy in ("DDU-robust", "decision-independent robust", "non-strategic (logistic)"):
        kappas, rules = [kappa1], []
        for t in range(n_stages):
            rule = fit(policy, kappas[t])
            rules.append(rule)
            g = float(np.abs(rule.coef_).sum())
            kappas.append(max(kappas[t] - gamma * g, floor))
        ks = np.array(kappas[:n_stages])
        res = StrategicSimulator(kappa=lambda t, prev, ks=ks: float(ks[t]),
                                 n_rounds=n_stages).run(rules, Xte, yte)
        out[policy] = {"kappa": ks, "gaming_rate": res.series("gaming_rate"),
                       "accuracy": res.series("accuracy")}
    return out


def timing(ns=(500, 2000, 8000), seed: int = 0) -> list[tuple[int, float, float, float]]:
    """Seconds to fit the single-stage SOCP and the two-stage program (both methods) vs n."""
    from sklearn.preprocessing import StandardScaler

    from rml_fast.datasets import load_binarized
    from rml_fast.strategic.decision_dependent import (
        RobustStrategicClassifier,
        TwoStageDDURobustClassifier,
    )

    X, y, _ = load_binarized("fico-binary")
    rng = np.random.default_rng(seed)
    rows = []
    for n in ns:
        idx = rng.choice(len(y), n, replace=False)
        Xs, ys = StandardScaler().fit_transform(X[idx].astype(float)), y[idx]
        t0 = time.perf_counter()
        RobustStrategicClassifier(kappa_lo=2.0, C=0.1).fit(Xs, ys)
        t1 = time.perf_counter()
        TwoStageDDURobustClassifier(kappa_lo=2.0, gamma=0.2, C=0.1, n_grid=21).fit(Xs, ys)
        t2 = time.perf_counter()
        TwoStageDDURobustClassifier(kappa_lo=2.0, gamma=0.2, C=0.1,
                                    method="alternating").fit(Xs, ys)
        t3 = time.perf_counter()
        rows.append((n, t1 - t0, t2 - t1, t3 - t2))
    return rows


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(prog="plot_strategic.py", description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", type=Path,
                   default=_ROOT / "docs" / "img" / "strategic_gaming.png")
    p.add_argument("--stages", type=int, default=5)
    p.add_argument("--timing", action="store_true")
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = simulate(n_stages=args.stages)
    stages = np.arange(1, args.stages + 1)
    print(f"{'policy':30s} {'stage':>5s} {'kappa':>7s} {'gaming':>7s} {'accuracy':>8s}")
    for policy, r in res.items():
        for t in range(args.stages):
            print(f"{policy:30s} {t + 1:5d} {r['kappa'][t]:7.3f} {r['gaming_rate'][t]:7.3f} "
                  f"{r['accuracy'][t]:8.3f}")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    styles = {"DDU-robust": ("C0", "o"), "decision-independent robust": ("C1", "s"),
              "non-strategic (logistic)": ("C7", "^")}
    for policy, r in res.items():
        c, m = styles[policy]
        axes[0].plot(stages, r["gaming_rate"], color=c, marker=m, label=policy)
        axes[1].plot(stages, r["accuracy"], color=c, marker=m, label=policy)
        axes[2].plot(stages, r["kappa"], color=c, marker=m, label=policy)
    axes[0].set_ylabel("gaming rate (negatives accepted)")
    axes[1].set_ylabel("accuracy on best responses")
    axes[2].set_ylabel(r"agents' worst-case cost $\kappa_t$")
    for ax in axes:
        ax.set_xlabel("stage")
        ax.set_xticks(stages)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("FICO, decision-dependent costs "
                 r"$\kappa_{t+1} = \kappa_t - \gamma\,\|w_t\|_1$ ($\gamma=0.2$; PROPOSED model)",
                 fontsize=10)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    if args.timing:
        print(f"{'n':>6s} {'single SOCP s':>14s} {'param_search s':>15s} {'alternating s':>14s}")
        for n, a, b, c in timing():
            print(f"{n:6d} {a:14.3f} {b:15.3f} {c:14.3f}")
    return args.out


if __name__ == "__main__":
    main()
