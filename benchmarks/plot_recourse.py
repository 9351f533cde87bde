"""ASR-ICL recourse next to DiCE, for ``docs``: ``python benchmarks/plot_recourse.py [OUT_PNG]
[--n 8]`` (default ``docs/img/recourse_icl.png``; needs matplotlib and, for the DiCE markers and
bars, ``dice_ml``).

Left panel: breast cancer (scikit-learn's bundled copy), two continuous features (mean radius,
mean concavity), the in-context predictor :class:`~rml_fast.decisions.icl_predictor.TransformerICL`
(the cached pretrained TinyTransformer, conditioned on a 32-row context; the attention
surrogate :class:`~rml_fast.decisions.icl_predictor.AttentionICL` when the network is not cached
and ``--train`` is not given) with its decision regions, ``n`` instances it calls malignant,
their ASR-ICL counterfactuals (arrows) and DiCE-random's (crosses), and both methods' mean
model queries per instance.

Right panel: model queries per instance (log scale) and valid-recourse rate of ASR-ICL,
DiCE random and DiCE genetic on the same ``n`` instances of the six-feature breast-cancer task
(the benchmark's ``bc`` cases) for a logistic regression, a random forest and the attention ICL
predictor.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import numpy as np

_ROOT = Path(__file__).resolve().parent.parent
_BC6 = [0, 1, 4, 6, 8, 9]


class _Counted:
    def __init__(self, model: Any) -> None:
        self.model, self.rows = model, 0
        self.classes_ = getattr(model, "classes_", None)

    def predict_proba(self, X: Any) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        self.rows += len(X)
        return self.model.predict_proba(X)

    def predict(self, X: Any) -> np.ndarray:
        return np.argmax(self.predict_proba(X), axis=1)


def _asr(model: Any, X: np.ndarray, inst: np.ndarray, target: int) -> dict[str, Any]:
    from rml_fast.decisions.recourse import AdaptiveSubspaceRecourse

    c = _Counted(model)
    res = AdaptiveSubspaceRecourse(c, random_state=0, progress=False).fit(X).generate(inst, target)
    ok = res.found.copy()
    if ok.any():
        ok[ok] = model.predict_proba(res.x_cf[ok]).argmax(1) == target
    return {"x_cf": res.x_cf, "validity": float(ok.mean()), "queries": c.rows / len(inst)}


def _dice(model: Any, X: np.ndarray, y: np.ndarray, inst: np.ndarray, target: int,
          method: str) -> dict[str, Any] | None:
    try:
        import dice_ml
        import pandas as pd
    except ImportError:
        return None
    names = [f"x{j}" for j in range(X.shape[1])]
    data = dice_ml.Data(dataframe=pd.DataFrame(X, columns=names).assign(y=y),
                        continuous_features=names, outcome_name="y")
    c = _Counted(model)
    dice = dice_ml.Dice(data, dice_ml.Model(model=c, backend="sklearn"), method=method)
    x_cf = np.full(inst.shape, np.nan)
    valid = 0
    for i, x in enumerate(inst):
        seed = {"random_seed": i} if method == "random" else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out = dice.generate_counterfactuals(pd.DataFrame(x[None], columns=names),
                                                    total_CFs=1, desired_class=target,
                                                    verbose=False, **seed)
            except Exception:
                continue
        cf = out.cf_examples_list[0].final_cfs_df
        if cf is not None and len(cf):
            x_cf[i] = cf[names].to_numpy(np.float64)[0]
            valid += int(model.predict_proba(x_cf[i : i + 1]).argmax(1)[0] == target)
    return {"x_cf": x_cf, "validity": valid / len(inst), "queries": c.rows / len(inst)}


def make_figure(out: Path, n: int = 8, train: bool = False) -> Path:
    """Draw both panels into ``out``; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.datasets import load_breast_cancer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    from rml_fast.decisions.icl_predictor import (
        AttentionICL,
        TransformerICL,
        pretrained_icl_cached,
        pretrained_icl_transformer,
    )

    Xall, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(0)
    ctx = rng.choice(len(y), 32, replace=False)
    X2 = Xall[:, [0, 6]]
    if pretrained_icl_cached() or train:
        model2 = TransformerICL(X2[ctx], y[ctx], pretrained_icl_transformer(progress=True))
        label = "TransformerICL (TinyTransformer, 32-row context)"
    else:
        model2 = AttentionICL(X2[ctx], y[ctx], temperature=2.0)
        label = "AttentionICL (32-row context)"
    inst2 = X2[model2.predict(X2) == 0]
    inst2 = inst2[rng.choice(len(inst2), n, replace=False)]
    ours2 = _asr(model2, X2, inst2, 1)
    dice2 = _dice(model2, X2, y, inst2, 1, "random")

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12.5, 5.0))
    g0 = np.linspace(X2[:, 0].min() - 1, X2[:, 0].max() + 1, 70)
    g1 = np.linspace(0, X2[:, 1].max() + 0.05, 70)
    G0, G1 = np.meshgrid(g0, g1)
    P = model2.predict_proba(np.column_stack([G0.ravel(), G1.ravel()]))[:, 1].reshape(G0.shape)
    ax.contourf(G0, G1, P, levels=[0, 0.5, 1], colors=["#f4c7c3", "#cfe8cf"], alpha=0.8)
    ax.contour(G0, G1, P, levels=[0.5], colors="k", linewidths=1)
    ax.scatter(X2[ctx, 0], X2[ctx, 1], c=np.where(y[ctx] == 1, "tab:green", "tab:red"), s=14,
               marker="o", edgecolors="none", alpha=0.7, label="context rows")
    for x, cf in zip(inst2, ours2["x_cf"], strict=True):
        if np.isfinite(cf).all():
            ax.annotate("", xy=cf, xytext=x, arrowprops={"arrowstyle": "->", "color": "tab:blue"})
    ax.scatter(inst2[:, 0], inst2[:, 1], c="k", s=22, label="instances (malignant)")
    ax.scatter(ours2["x_cf"][:, 0], ours2["x_cf"][:, 1], c="tab:blue", s=22,
               label=f"ASR-ICL ({ours2['queries']:.0f} queries/inst., "
                     f"{ours2['validity']:.0%} valid)")
    if dice2 is not None:
        ax.scatter(dice2["x_cf"][:, 0], dice2["x_cf"][:, 1], c="tab:purple", marker="x", s=30,
                   label=f"DiCE random ({dice2['queries']:.0f} queries/inst., "
                         f"{dice2['validity']:.0%} valid)")
    ax.set_xlabel("mean radius")
    ax.set_ylabel("mean concavity")
    ax.set_title(f"recourse to 'benign' for {label}", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")

    X6 = Xall[:, _BC6]
    ctx6 = rng.choice(len(y), 64, replace=False)
    models = {"logistic regression": LogisticRegression(max_iter=5000).fit(X6, y),
              "random forest": RandomForestClassifier(50, random_state=0).fit(X6, y),
              "AttentionICL": AttentionICL(X6[ctx6], y[ctx6], temperature=2.0)}
    methods = ["ASR-ICL", "DiCE random", "DiCE genetic"]
    colors = ["tab:blue", "tab:purple", "tab:orange"]
    width = 0.26
    for k, model in enumerate(models.values()):
        inst = X6[model.predict(X6) == 0][:n]
        runs = [_asr(model, X6, inst, 1), _dice(model, X6, y, inst, 1, "random"),
                _dice(model, X6, y, inst, 1, "genetic")]
        for r, (meth, run) in enumerate(zip(methods, runs, strict=True)):
            if run is None:
                continue
            xpos = k + (r - 1) * width
            bx.bar(xpos, run["queries"], width, color=colors[r], label=meth if k == 0 else None)
            bx.text(xpos, run["queries"] * 1.08, f"{run['validity']:.0%}", ha="center",
                    fontsize=8)
    bx.set_yscale("log")
    bx.set_xticks(range(len(models)), list(models))
    bx.set_ylabel("model queries per instance (log)")
    bx.set_title(f"breast cancer, 6 features, {n} instances; labels: valid-recourse rate",
                 fontsize=10)
    bx.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: parse arguments, draw, print the path."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", nargs="?", default=str(_ROOT / "docs" / "img" / "recourse_icl.png"))
    p.add_argument("--n", type=int, default=8, help="instances per model")
    p.add_argument("--train", action="store_true",
                   help="train the ICL transformer if it is not cached (a few minutes)")
    args = p.parse_args(argv)
    print(make_figure(Path(args.out), n=args.n, train=args.train))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
