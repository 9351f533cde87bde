"""The multi-class accuracy-disparity frontier on COMPAS (``rml-fast demo fairness``).

Data: the binarised COMPAS set shipped with rml_fast (``load_binarized("compas-binned")``,
6907 defendants). The *multi-class* target is the prior-count class (4 classes, from the
mutually exclusive ``priors:=0``, ``priors:=1``, ``priors:2-3``, ``priors:>3`` columns); the
sensitive attribute is ``sex:Female``; the features are the age bins, the three juvenile-record
bits and the two-year recidivism label (8 binary features, sex excluded: the base model is
attribute-blind). COMPAS is the data set of the spec (its multi-class variant bins the prior
count); sklearn's toy sets have no real sensitive attribute.

Split 50/50 (seeded); the base model is multinomial logistic regression on the train half.
For each ``xi`` the demo fits, on the train half,

* ``optfair-post``: :class:`~rml_fast.fairness.multiclass.OptFairPostProcessor`
  (attribute-aware, demographic parity);
* ``optfair-blind``: the same with a logistic ``group_estimator`` (attribute-blind);
* ``optfair-in``: :class:`~rml_fast.fairness.multiclass.OptFairInProcessing` (linear model),
* ``optfair-reduction``: :class:`~rml_fast.fairness.multiclass.OptFairReduction` (a mixture of
  logistic regressions),

and reports on the test half the expected accuracy and the demographic-parity disparity of the
*randomised* classifier ``h`` (``predict_proba``; the base model's point is its argmax). The
in-processing model is also shown by its argmax (``optfair-in-argmax``): its constraints bind
its softmax, which as a randomised classifier is far less accurate than its argmax.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rml_fast.fairness.multiclass import (
    OptFairInProcessing,
    OptFairPostProcessor,
    OptFairReduction,
    disparity,
)

__all__ = ["format_table", "load_compas_multiclass", "run"]

XIS = (0.0, 0.01, 0.02, 0.04, 0.06, 0.1)
XIS_QUICK = (0.0, 0.02, 0.1)
CLASS_NAMES = ("priors=0", "priors=1", "priors 2-3", "priors>3")


def load_compas_multiclass() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """COMPAS as a 4-class problem: features, prior-count class, female indicator.

    Returns
    -------
    X : ndarray of shape (6907, 8), float64
        Age bins (4), juvenile felonies/misdemeanours/crimes == 0 (3), two-year recidivism.
    y : ndarray of shape (6907,), int64
        Prior-count class ``0..3`` (``=0``, ``=1``, ``2-3``, ``>3``).
    sensitive : ndarray of shape (6907,), int64
        1 for ``sex:Female``.

    Examples
    --------
    >>> X, y, s = load_compas_multiclass()
    >>> X.shape, sorted(set(y.tolist())), sorted(set(s.tolist()))
    ((6907, 8), [0, 1, 2, 3], [0, 1])
    """
    from rml_fast.datasets import load_binarized

    B, recid, names = load_binarized("compas-binned")
    col = {n: i for i, n in enumerate(names)}
    priors = B[:, [col["priors:=0"], col["priors:=1"], col["priors:2-3"], col["priors:>3"]]]
    if not np.all(priors.sum(axis=1) == 1):
        raise RuntimeError("the COMPAS prior-count bins are not one-hot")
    feats = [n for n in names if n.startswith(("age:", "juvenile"))]
    X = np.column_stack([B[:, [col[n] for n in feats]], recid]).astype(np.float64)
    return X, priors.argmax(axis=1).astype(np.int64), B[:, col["sex:Female"]].astype(np.int64)


def _metrics(H: np.ndarray, y: np.ndarray, s: np.ndarray) -> dict[str, float]:
    return {"acc": float(H[np.arange(len(y)), y].mean()),
            "disparity": float(disparity(H, y, s, "dp"))}


def run(*, seed: int = 0, quick: bool = False, out: str | Path | None = None,
        progress: bool = True) -> dict[str, Any]:
    """Trace the multi-class accuracy-disparity frontier of OptFair on COMPAS.

    Parameters
    ----------
    seed : int, default=0
        Seeds the train/test split and the in-processing model.
    quick : bool, default=False
        Three ``xi`` values and a shorter in-processing run (a few seconds).
    out : str or Path, optional
        PNG path of the figure (a directory gets ``fairness_frontier.png``); needs matplotlib.
    progress : bool, default=True
        A tqdm bar over ``xi``.

    Returns
    -------
    dict
        ``dataset``, ``n_train``, ``n_test``, ``classes``, ``base`` (``acc``, ``disparity``),
        ``xi`` (list) and per method (``optfair-post``, ``optfair-blind``, ``optfair-in``) a
        list of ``{"xi", "acc", "disparity"}`` on the test half (``optfair-in-argmax`` and
        ``optfair-reduction`` too);
        ``figure`` (path or None).

    Examples
    --------
    >>> res = run(quick=True, progress=False)   # doctest: +SKIP
    >>> res["optfair-post"][0]["disparity"] < res["base"]["disparity"]   # doctest: +SKIP
    True
    """
    from sklearn.linear_model import LogisticRegression

    X, y, s = load_compas_multiclass()
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(y))
    tr, te = idx[: len(y) // 2], idx[len(y) // 2:]
    base = LogisticRegression(max_iter=1000).fit(X[tr], y[tr])
    yb = base.predict(X[te])
    result: dict[str, Any] = {
        "dataset": "COMPAS (compas-binned): target prior-count class (4), sensitive sex:Female",
        "n_train": int(tr.size), "n_test": int(te.size), "classes": list(CLASS_NAMES),
        "base": {"acc": float((yb == y[te]).mean()),
                 "disparity": float(disparity(yb, y[te], s[te], n_classes=4))},
        "xi": list(XIS_QUICK if quick else XIS),
        "optfair-post": [], "optfair-blind": [], "optfair-in": [], "optfair-in-argmax": [],
        "optfair-reduction": [],
    }
    xis = result["xi"]
    if progress:
        from tqdm.auto import tqdm

        xis = tqdm(xis, desc="fairness frontier")
    for xi in xis:
        post = OptFairPostProcessor(base, prefit=True, xi=xi).fit(X[tr], y[tr], s[tr])
        result["optfair-post"].append(
            {"xi": xi, **_metrics(post.predict_proba(X[te], s[te]), y[te], s[te])})
        blind = OptFairPostProcessor(base, prefit=True, xi=xi,
                                     group_estimator=LogisticRegression(max_iter=1000))
        blind.fit(X[tr], y[tr], s[tr])
        result["optfair-blind"].append(
            {"xi": xi, **_metrics(blind.predict_proba(X[te]), y[te], s[te])})
        inproc = OptFairInProcessing(xi=xi, epochs=40 if quick else 120, batch_size=len(tr),
                                     lr=0.05, lr_lambda=1.0, random_state=seed)
        inproc.fit(X[tr], y[tr], s[tr])
        Hi = inproc.predict_proba(X[te])
        result["optfair-in"].append({"xi": xi, **_metrics(Hi, y[te], s[te])})
        result["optfair-in-argmax"].append(
            {"xi": xi, **_metrics(np.eye(Hi.shape[1])[Hi.argmax(axis=1)], y[te], s[te])})
        red = OptFairReduction(LogisticRegression(max_iter=1000), xi=xi,
                               max_iter=10 if quick else 30).fit(X[tr], y[tr], s[tr])
        result["optfair-reduction"].append(
            {"xi": xi, **_metrics(red.predict_proba(X[te]), y[te], s[te])})
    result["figure"] = None
    if out is not None:
        result["figure"] = str(_plot(result, Path(out)))
    return result


def _plot(result: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if out.is_dir() or out.suffix == "":
        out.mkdir(parents=True, exist_ok=True)
        out = out / "fairness_frontier.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    styles = {"optfair-post": ("o-", "OptFair post (attribute-aware)"),
              "optfair-blind": ("s--", "OptFair post (attribute-blind)"),
              "optfair-in": ("^:", "OptFair in-processing (linear), randomised softmax"),
              "optfair-in-argmax": ("v:", "OptFair in-processing (linear), argmax"),
              "optfair-reduction": ("D-.", "OptFair reductions (logistic regression mixture)")}
    for key, (style, label) in styles.items():
        pts = result[key]
        ax.plot([p["disparity"] for p in pts], [p["acc"] for p in pts], style, label=label)
    ax.plot([result["base"]["disparity"]], [result["base"]["acc"]], "k*", ms=12,
            label="base argmax (logistic regression)")
    ax.set_xlabel("demographic-parity disparity  max_{k,a} |P(Ŷ=k|A=a) − P(Ŷ=k)|  (test)")
    ax.set_ylabel("expected accuracy (test)")
    ax.set_title("COMPAS, 4 prior-count classes, sensitive = sex: multi-class frontier",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def format_table(result: dict[str, Any]) -> str:
    """A plain-text table of :func:`run`'s result: accuracy and disparity per method and xi.

    Parameters
    ----------
    result : dict
        The output of :func:`run`.

    Returns
    -------
    str

    Examples
    --------
    >>> r = {"dataset": "toy", "n_train": 2, "n_test": 2, "xi": [0.0],
    ...      "base": {"acc": 0.5, "disparity": 0.2},
    ...      "optfair-post": [{"xi": 0.0, "acc": 0.45, "disparity": 0.01}],
    ...      "optfair-blind": [{"xi": 0.0, "acc": 0.44, "disparity": 0.05}],
    ...      "optfair-in": [{"xi": 0.0, "acc": 0.40, "disparity": 0.03}]}
    >>> print(format_table(r).splitlines()[2])
    method            xi     accuracy  DP disparity
    """
    lines = [f"{result['dataset']}", f"train {result['n_train']}, test {result['n_test']}",
             f"{'method':<17} {'xi':<6} {'accuracy':>8}  {'DP disparity':>12}"]
    b = result["base"]
    lines.append(f"{'base argmax':<17} {'-':<6} {b['acc']:>8.4f}  {b['disparity']:>12.4f}")
    for key in ("optfair-post", "optfair-blind", "optfair-in", "optfair-in-argmax",
                "optfair-reduction"):
        for p in result.get(key, []):
            lines.append(f"{key:<17} {p['xi']:<6g} {p['acc']:>8.4f}  {p['disparity']:>12.4f}")
    return "\n".join(lines)
