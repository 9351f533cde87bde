"""Neural Concept Verifier on offline concept data: the game against its ablations (makes docs/img/ncv_game.png).

For each data set (binarised tabular benchmarks shipped with rml_fast, every 0/1 column a named
concept, and a synthetic logical one) it trains, on a 70/30 split with the same seed:

* ``NCV``: the prover-verifier game (gamma = 1) revealing ``k`` concepts;
* ``no game``: the same verifier trained with Merlin only (gamma = 0), the baseline without the game;
* ``all concepts``: scikit-learn's ``MLPClassifier`` on all concepts (the accuracy reference);

and reports test accuracy, completeness (Merlin certifies the true label) and soundness against
the exhaustive adversary (all k-subsets). Run ``python benchmarks/plot_ncv.py [--quick] [--out PNG]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

from rml_fast.datasets import load_binarized
from rml_fast.verification.ncv import NeuralConceptVerifier

#: (name, k, epochs, lr, warmup_epochs)
CASES = [("logic (c1 and c2) or c5", 2, 60, 1e-3, 5), ("monk_1", 2, 150, 3e-3, 10),
         ("car_evaluation", 3, 40, 3e-3, 5), ("tic-tac-toe", 3, 40, 3e-3, 5),
         ("compas-binned", 3, 8, 1e-3, 2)]


def _data(name: str, seed: int):
    if name.startswith("logic"):
        rng = np.random.default_rng(seed)
        Z = rng.integers(0, 2, size=(700, 8)).astype(np.float64)
        b = Z.astype(bool)
        return Z, ((b[:, 0] & b[:, 1]) | b[:, 4]).astype(np.int64)
    X, y, _ = load_binarized(name)
    return X.astype(np.float64), y


def run(*, seed: int = 0, quick: bool = False, out: str | None = None, progress: bool = True) -> dict:
    """Train NCV, the no-game baseline and an all-concepts MLP per data set; return the metrics.

    Returns
    -------
    dict
        ``{"rows": [{"data", "k", "model", "accuracy", "completeness", "soundness", "seconds"}]}``.
    """
    rows = []
    cases = CASES[:2] if quick else CASES
    for name, k, epochs, lr, warm in cases:
        Z, y = _data(name, seed)
        Ztr, Zte, ytr, yte = train_test_split(Z, y, test_size=0.3, random_state=seed, stratify=y)
        for label, gamma in (("NCV", 1.0), ("no game", 0.0)):
            t = time.perf_counter()
            est = NeuralConceptVerifier(k=k, gamma=gamma, epochs=epochs // (3 if quick else 1),
                                        lr=lr, warmup_epochs=warm, random_state=seed,
                                        progress=progress).fit(Ztr, ytr)
            sec = time.perf_counter() - t
            rows.append({"data": name, "k": k, "model": label, "accuracy": est.score(Zte, yte),
                         "completeness": est.completeness_score(Zte, yte),
                         "soundness": est.soundness_score(Zte, yte, adversary="exact"),
                         "seconds": sec})
        t = time.perf_counter()
        mlp = MLPClassifier((64, 64), max_iter=300, random_state=seed).fit(Ztr, ytr)
        rows.append({"data": name, "k": Z.shape[1], "model": "all concepts",
                     "accuracy": mlp.score(Zte, yte), "completeness": float("nan"),
                     "soundness": float("nan"), "seconds": time.perf_counter() - t})
    result = {"rows": rows}
    if out is not None:
        _plot(result, out)
    return result


def format_table(result: dict) -> str:
    """Markdown table of :func:`run`'s result."""
    lines = ["| data | model | k | accuracy | completeness | soundness | fit s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        f = (lambda v: "-" if v != v else f"{v:.3f}")  # noqa: E731
        lines.append(f"| {r['data']} | {r['model']} | {r['k']} | {f(r['accuracy'])} | "
                     f"{f(r['completeness'])} | {f(r['soundness'])} | {r['seconds']:.1f} |")
    return "\n".join(lines)


def _plot(result: dict, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["data"] for r in result["rows"]))
    get = {(r["data"], r["model"]): r for r in result["rows"]}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), sharey=True)
    x = np.arange(len(names))
    for ax, metric in zip(axes, ("accuracy", "completeness", "soundness"), strict=True):
        models = ("NCV", "no game", "all concepts") if metric == "accuracy" else ("NCV", "no game")
        w = 0.8 / len(models)
        for j, model in enumerate(models):
            vals = [get[(n, model)][metric] for n in names]
            ax.bar(x + (j - (len(models) - 1) / 2) * w, vals, w, label=model)
        ax.set_xticks(x, [n.split(" ")[0] for n in names], rotation=20)
        ax.set_title(metric + (" (exhaustive adversary)" if metric == "soundness" else ""))
        ax.set_ylim(0, 1.05)
    axes[0].legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="docs/img/ncv_game.png")
    a = ap.parse_args()
    print(format_table(run(seed=a.seed, quick=a.quick, out=a.out, progress=False)))
