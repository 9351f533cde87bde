"""Accuracy vs disclosure size for ambiguous strategic classification, for ``docs``:
``python benchmarks/plot_ambiguity.py [OUT_PNG] [--quick] [--no-timing]`` (default
``docs/img/strategic_ambiguity.png``; needs matplotlib).

Fits :class:`rml_fast.strategic.ambiguity.AmbiguousStrategicClassifier` (interval, finite K=2,
ball) for a grid of ``delta`` (``delta = 0`` is full disclosure, i.e. standard strategic
classification) on two real data sets -- scikit-learn's breast cancer (standardised) and FICO
HELOC (``load_binarized("fico-binary")``, standardised) -- with a 70/30 split, and draws the
learner's accuracy on the users' max-min responses, in-sample and held out (mean over seeds).
Then times the hot spots against the obvious alternatives in the same process (median of 5):
the exact threshold sweep (numba) vs a NumPy sort + cumsum sweep, and the finite-H projection
(numba active set) vs one cvxpy QP.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

_ROOT = Path(__file__).resolve().parent.parent
KINDS = ("interval", "finite", "ball")


def _data(name: str):
    from sklearn.preprocessing import StandardScaler

    if name == "breast cancer":
        from sklearn.datasets import load_breast_cancer

        X, y = load_breast_cancer(return_X_y=True)
    else:
        from rml_fast.datasets import load_binarized

        X, y, _ = load_binarized("fico-binary")
        X = X.astype(np.float64)
    return StandardScaler().fit_transform(X), np.asarray(y)


def _curves(X, y, deltas, seeds, epochs):
    from sklearn.model_selection import train_test_split

    from rml_fast.strategic.ambiguity import AmbiguousStrategicClassifier

    out = {k: np.zeros((2, len(deltas), len(seeds))) for k in KINDS}
    for si, seed in enumerate(seeds):
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed,
                                              stratify=y)
        for kind in KINDS:
            for di, delta in enumerate(deltas):
                clf = AmbiguousStrategicClassifier(ambiguity=kind, delta=delta, epochs=epochs,
                                                   random_state=seed).fit(Xtr, ytr)
                out[kind][0, di, si] = clf.train_accuracy_
                out[kind][1, di, si] = clf.score(Xte, yte)
    return out


def _median_time(fn, reps=5):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _numpy_sweep(s, y):
    order = np.argsort(s)  # the same sort as ours; then vectorised prefix counts
    ys = y[order]
    neg_before = np.concatenate([[0], np.cumsum(1 - ys)])
    pos_after = np.concatenate([np.cumsum(ys[::-1])[::-1], [0]])
    return int((neg_before + pos_after).max())


def timing(quick: bool) -> list[tuple[str, float, float]]:
    """Rows (what, ours [s], alternative [s])."""
    from rml_fast.strategic import _ambiguity_numba as nb
    from rml_fast.strategic.ambiguity import FiniteSet, _project

    rng = np.random.default_rng(0)
    rows = []
    sizes = (10**3, 10**4, 10**5) if quick else (10**3, 10**4, 10**5, 10**6)
    nb.best_threshold(np.zeros(3), np.zeros(3, np.int64), -np.inf, np.inf)  # compile
    for n in sizes:
        s = rng.normal(size=n)
        y = (s + rng.normal(size=n) > 0).astype(np.int64)
        t_ours = _median_time(lambda s=s, y=y: nb.best_threshold(s, y, -np.inf, np.inf))
        t_np = _median_time(lambda s=s, y=y: _numpy_sweep(s, y))
        rows.append((f"threshold sweep n={n:.0e}", t_ours, t_np))
    W = rng.normal(size=(3, 10))
    H = FiniteSet(W, W @ np.full(10, 0.3) - 0.1)
    for n in (200, 2000):
        X = rng.normal(size=(n, 10))
        X = X[~H.in_region(X)]
        _project(X[:2], H, "auto", True)  # compile
        t_ours = _median_time(lambda X=X: _project(X, H, "auto", True))
        t_cv = _median_time(lambda X=X: _project(X, H, "cvxpy", True), reps=3)
        rows.append((f"finite-H projection K=3 d=10 n={X.shape[0]}", t_ours, t_cv))
    return rows


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(prog="plot_ambiguity.py", description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", type=Path,
                   default=_ROOT / "docs" / "img" / "strategic_ambiguity.png")
    p.add_argument("--quick", action="store_true", help="fewer deltas/seeds/epochs")
    p.add_argument("--no-timing", action="store_true", help="skip the timing table")
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    deltas = [0.0, 0.5, 1.0, 2.0] if args.quick else [0.0, 0.25, 0.5, 1.0, 1.5, 2.0]
    seeds = [0] if args.quick else [0, 1, 2]
    epochs = 60 if args.quick else 200
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=False)
    colors = {"interval": "tab:gray", "finite": "tab:blue", "ball": "tab:orange"}
    for ax, name in zip(axes, ("breast cancer", "FICO HELOC"), strict=True):
        X, y = _data(name)
        curves = _curves(X, y, deltas, seeds, epochs)
        print(f"{name} (n={X.shape[0]}, d={X.shape[1]}): accuracy on max-min responses, "
              f"mean over {len(seeds)} seed(s)")
        print("  kind      delta:  " + "  ".join(f"{d:>11.2f}" for d in deltas))
        for kind in KINDS:
            tr, te = curves[kind].mean(axis=2)
            print(f"  {kind:<9} train  " + "  ".join(f"{v:11.4f}" for v in tr))
            print(f"  {kind:<9} test   " + "  ".join(f"{v:11.4f}" for v in te))
            wide = {"lw": 5, "alpha": 0.35, "zorder": 1} if kind == "interval" else {"zorder": 2}
            ax.plot(deltas, tr, "-o", color=colors[kind], ms=4, label=f"{kind} (train)", **wide)
            ax.plot(deltas, te, "--s", color=colors[kind], ms=4, label=f"{kind} (held out)",
                    **({"lw": 5, "alpha": 0.35, "zorder": 1} if kind == "interval"
                       else {"alpha": 0.7, "zorder": 2}))
        ax.set_title(f"{name} (n={X.shape[0]}, d={X.shape[1]})")
        ax.set_xlabel(r"disclosure size $\delta$ (0 = full disclosure)")
        ax.set_ylabel("accuracy on users' max-min responses")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")
    axes[1].text(0.02, 0.5, "interval (wide grey) = full disclosure for every delta;\n"
                 "curves that coincide are drawn on top of each other",
                 transform=axes[1].transAxes, fontsize=7, va="center")
    fig.suptitle(r"Ambiguous strategic classification: accuracy vs $\delta$ "
                 r"(cost $\|x'-x\|^2$, reach 1; PROPOSED model)", fontsize=10)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    if not args.no_timing:
        print(f"{'hot spot':<42} {'ours [ms]':>10} {'alternative [ms]':>17} {'ratio':>7}")
        for what, t_ours, t_alt in timing(args.quick):
            print(f"{what:<42} {1e3 * t_ours:10.3f} {1e3 * t_alt:17.3f} {t_alt / t_ours:7.1f}")
    return args.out


if __name__ == "__main__":
    main()
