"""Human-centred decisions: ASR-ICL recourse vs DiCE, and the complementarity bootstrap vs scipy.

Cases (one group per family; ``GROUPS`` lists them, each a (cases, body) pair):

* ``recourse``: :class:`rml_fast.decisions.recourse.AdaptiveSubspaceRecourse` vs DiCE
  (``dice_ml``, methods "random" and "genetic") on the same models (logistic regression, random
  forest, MLP, the in-context predictors) and instances of scikit-learn's breast-cancer and wine
  data: valid-recourse rate, model queries per instance (both sides wrapped by the same counter),
  recourse cost (l1 / MAD) and wall time (each side once per case). Goal (issue 19): validity >=
  DiCE's at >= 5x fewer queries. ``--quick``: 5 instances, three models.
* ``complementarity``: the percentile-bootstrap interval of the human/AI error correlation by
  :func:`rml_fast.decisions.complementarity.bootstrap_error_moments` vs ``scipy.stats.bootstrap``
  (paired, vectorised) at n in {1e3, 1e4, 1e5} cases, 1,000 resamples; the intervals are checked
  to agree (15% of scipy's width) before timing. ``--quick``: the two smaller n.

The fragments' own docstrings, kept above each family's code, give the details.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from rml_fast.benchmarking import Suite, missing_peer
from rml_fast.decisions.complementarity import bootstrap_error_moments, simulate_forecasts

SUITE = "recourse"


# --------------------------------------------------------------------------- bench_recourse.py

# Recourse: ASR-ICL (:class:`rml_fast.decisions.recourse.AdaptiveSubspaceRecourse`) vs DiCE.

RECOURSE_CASES = (
    [{"data": "bc", "model": m, "n": 20} for m in
     ("logreg", "rf", "mlp", "attention_icl", "transformer_icl")]
    + [{"data": "bc_immutable", "model": "logreg", "n": 20},
       {"data": "wine", "model": "rf", "n": 20}]
)
RECOURSE_QUICK_CASES = [
    {"data": "bc", "model": "logreg", "n": 5},
    {"data": "bc", "model": "rf", "n": 5},
    {"data": "wine", "model": "rf", "n": 5},
]

_BC_COLS = [0, 1, 4, 6, 8, 9]
_WINE_COLS = [0, 1, 6, 9, 12]


class _Counted:
    """The model behind both methods: counts the rows that reach it (DiCE sends DataFrames)."""

    def __init__(self, model: Any) -> None:
        self.model, self.rows = model, 0
        self.classes_ = getattr(model, "classes_", None)

    def predict_proba(self, X: Any) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        self.rows += len(X)
        return self.model.predict_proba(X)

    def predict(self, X: Any) -> np.ndarray:
        return np.argmax(self.predict_proba(X), axis=1)


def _setup(case: dict[str, Any]) -> dict[str, Any] | None:
    from sklearn.datasets import load_breast_cancer, load_wine
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from rml_fast.decisions.icl_predictor import AttentionICL

    if case["data"] == "wine":
        X, y = load_wine(return_X_y=True)
        X, src, target = X[:, _WINE_COLS], 0, 2
    else:
        X, y = load_breast_cancer(return_X_y=True)
        X, src, target = X[:, _BC_COLS], 0, 1
    rng = np.random.default_rng(0)
    kind = case["model"]
    if kind == "logreg":
        model = LogisticRegression(max_iter=5000).fit(X, y)
    elif kind == "rf":
        model = RandomForestClassifier(50, random_state=0).fit(X, y)
    elif kind == "mlp":
        model = make_pipeline(StandardScaler(), MLPClassifier((32,), max_iter=2000,
                                                              random_state=0)).fit(X, y)
    elif kind == "attention_icl":
        idx = rng.choice(len(X), 64, replace=False)
        model = AttentionICL(X[idx], y[idx], temperature=2.0)
    else:  # transformer_icl: only when the pretrained network is cached (no training here)
        from rml_fast.decisions.icl_predictor import (
            DEFAULT_RECIPE,
            TransformerICL,
            pretrained_icl_cached,
            pretrained_icl_transformer,
        )

        if not pretrained_icl_cached():
            return None

        net = pretrained_icl_transformer(progress=False)
        idx = rng.choice(len(X), DEFAULT_RECIPE["n_max"], replace=False)
        model = TransformerICL(X[idx], y[idx], net)
    pred = model.predict(X) if hasattr(model, "predict") else np.argmax(model.predict_proba(X), 1)
    inst = X[pred == src][: case["n"]]
    immutable = [0] if case["data"] == "bc_immutable" else []
    from rml_fast.decisions.recourse import AdaptiveSubspaceRecourse

    scale = AdaptiveSubspaceRecourse().fit(X).scale_  # the MAD scales both costs use
    return {"X": X, "y": y, "model": model, "inst": inst, "target": target,
            "immutable": immutable, "scale": scale}


def _ours(s: dict[str, Any], stats: dict[str, Any]):
    from rml_fast.decisions.recourse import AdaptiveSubspaceRecourse

    def run() -> None:
        counted = _Counted(s["model"])
        est = AdaptiveSubspaceRecourse(counted, immutable=s["immutable"], random_state=0,
                                       progress=False).fit(s["X"])
        res = est.generate(s["inst"], target=s["target"])
        ok = res.found.copy()
        if ok.any():  # independent re-query of every returned point
            ok[ok] = s["model"].predict_proba(res.x_cf[ok]).argmax(1) == s["target"]
        stats.update(validity=float(ok.mean()), queries=counted.rows / len(s["inst"]),
                     cost=float(np.mean(res.cost[ok])) if ok.any() else float("nan"),
                     changed=float(np.mean(res.n_changed[ok])) if ok.any() else float("nan"))

    return run


def _dice(s: dict[str, Any], method: str, stats: dict[str, Any]):
    import dice_ml
    import pandas as pd

    d = s["X"].shape[1]
    names = [f"x{j}" for j in range(d)]
    df = pd.DataFrame(s["X"], columns=names).assign(y=s["y"])
    data = dice_ml.Data(dataframe=df, continuous_features=names, outcome_name="y")
    vary = [n for j, n in enumerate(names) if j not in s["immutable"]]

    def run() -> None:
        counted = _Counted(s["model"])
        dice = dice_ml.Dice(data, dice_ml.Model(model=counted, backend="sklearn"), method=method)
        valid = errors = 0
        costs = []
        for i, x in enumerate(s["inst"]):
            q = pd.DataFrame(x[None], columns=names)
            seed = {"random_seed": i} if method == "random" else {}  # genetic takes no seed
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    out = dice.generate_counterfactuals(
                        q, total_CFs=1, desired_class=int(s["target"]), features_to_vary=vary,
                        verbose=False, **seed)
                except Exception:  # DiCE raises when it finds nothing: counts as invalid
                    errors += 1
                    continue
            cf = out.cf_examples_list[0].final_cfs_df
            if cf is not None and len(cf):
                xc = cf[names].to_numpy(np.float64)[:1]
                if s["model"].predict_proba(xc).argmax(1)[0] == s["target"]:
                    valid += 1
                    costs.append(float(np.abs((xc[0] - x) / s["scale"]).sum()))
        stats.update(validity=valid / len(s["inst"]), queries=counted.rows / len(s["inst"]),
                     errors=errors, cost=float(np.mean(costs)) if costs else float("nan"))

    return run


def recourse_body(suite: Suite, case: dict[str, Any]) -> None:
    """One model x data case: ASR-ICL vs DiCE random and genetic (validity, queries, time)."""
    reason = missing_peer("dice_ml")
    for method in ("random", "genetic"):
        peer_name = f"dice_ml {method}"
        if reason:
            suite.skip(case, peer_name=peer_name, reason=reason)
            continue
        s = _setup(case)
        if s is None:
            suite.skip(case, peer_name=peer_name,
                       reason="the pretrained ICL transformer is not cached (run "
                              "rml_fast.decisions.icl_predictor.pretrained_icl_transformer())")
            continue
        ours_stats: dict[str, Any] = {}
        peer_stats: dict[str, Any] = {}
        saved = suite.repeat, suite.warmup
        suite.repeat, suite.warmup = 1, 0
        try:
            row = suite.compare(case, _ours(s, ours_stats), _dice(s, method, peer_stats),
                                peer_name=peer_name, memory=False)
        finally:
            suite.repeat, suite.warmup = saved
        q_ratio = peer_stats["queries"] / max(ours_stats["queries"], 1e-12)
        row.update(ours_validity=ours_stats["validity"], peer_validity=peer_stats["validity"],
                   ours_queries=ours_stats["queries"], peer_queries=peer_stats["queries"],
                   query_ratio=q_ratio, ours_cost=ours_stats["cost"],
                   peer_cost=peer_stats["cost"])
        row["note"] = (f"validity ours {ours_stats['validity']:.2f} vs DiCE "
                       f"{peer_stats['validity']:.2f}; queries/instance ours "
                       f"{ours_stats['queries']:.0f} vs DiCE {peer_stats['queries']:.0f} "
                       f"({q_ratio:.1f}x fewer); mean l1/MAD cost of the valid ones ours "
                       f"{ours_stats['cost']:.2f} vs DiCE {peer_stats['cost']:.2f}; ours changed "
                       f"{ours_stats['changed']:.1f} features; DiCE raised on "
                       f"{peer_stats['errors']} instances")


# --------------------------------------------------------------------------- bench_complementarity.py

# Human-AI complementarity: the bootstrap of the error moments vs scipy.stats.bootstrap.

COMPLEMENTARITY_CASES = [
    {"family": "complementarity", "n": 1_000, "n_boot": 1000},
    {"family": "complementarity", "n": 10_000, "n_boot": 1000},
    {"family": "complementarity", "n": 100_000, "n_boot": 1000},
]
COMPLEMENTARITY_QUICK_CASES = COMPLEMENTARITY_CASES[:2]


def _rho_stat(x: np.ndarray, z: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x * z, axis=axis) / np.sqrt(np.mean(x * x, axis=axis)
                                                * np.mean(z * z, axis=axis))


def complementarity_body(suite: Suite, case: dict[str, Any]) -> None:
    """Time our bootstrap CI of rho against scipy.stats.bootstrap on the same data."""
    peer_name = "scipy.stats.bootstrap"
    reason = missing_peer("scipy")
    if reason:
        suite.skip(case, peer_name=peer_name, reason=reason)
        return
    from scipy.stats import bootstrap

    n, n_boot = case["n"], case["n_boot"]
    sim = simulate_forecasts(n, 0.3, 0.4, -0.3, rng=0)
    e_h, e_a = sim.h - sim.y, sim.a - sim.y

    def ours() -> tuple[float, float]:
        boot = bootstrap_error_moments(sim.h, sim.a, sim.y, n_boot=n_boot, rng=1)
        lo, hi = np.quantile(boot["rho"], [0.025, 0.975])
        return float(lo), float(hi)

    def peer() -> tuple[float, float]:
        res = bootstrap((e_h, e_a), _rho_stat, paired=True, vectorized=True,
                        n_resamples=n_boot, method="percentile", confidence_level=0.95,
                        rng=np.random.default_rng(1))
        return float(res.confidence_interval.low), float(res.confidence_interval.high)

    (lo, hi), (plo, phi) = ours(), peer()
    width = phi - plo
    if abs(lo - plo) > 0.15 * width or abs(hi - phi) > 0.15 * width:
        raise AssertionError(f"bootstrap intervals disagree: ours ({lo}, {hi}), scipy ({plo}, {phi})")
    note = f"95% CI of rho: ours ({lo:.4f}, {hi:.4f}), scipy ({plo:.4f}, {phi:.4f})"
    suite.compare(case, ours, peer, peer_name=peer_name, note=note)


GROUPS: list[tuple[Callable[[bool], list[dict[str, Any]]], Callable[[Suite, dict[str, Any]], None]]] = [
    (lambda quick: RECOURSE_QUICK_CASES if quick else RECOURSE_CASES, recourse_body),
    (lambda quick: COMPLEMENTARITY_QUICK_CASES if quick else COMPLEMENTARITY_CASES, complementarity_body),
]


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    """Run every family's cases into one ``recourse`` suite."""
    suite = Suite(SUITE, quick=quick, progress=progress, repeat=repeat)
    for cases, body in GROUPS:
        suite.run(cases(quick), body)
    return suite


if __name__ == "__main__":  # python benchmarks/bench_recourse.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
