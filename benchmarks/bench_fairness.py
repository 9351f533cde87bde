"""Fairness: OptFair post-processing vs fairlearn's ThresholdOptimizer and a cvxpy LP; exact
fairness-metric coalition games vs a plain-Python loop and shapiq.

Families of cases (each a ``(cases, body)`` pair in :data:`FAMILIES`, so that another family,
e.g. exact coalition enumeration vs a plain-Python loop, is one more entry):

* ``optfair-binary``: binary labels, two groups, attribute-aware post-processing of a prefit
  logistic regression at ``xi = 0`` (exact parity, as fairlearn enforces), fit + predict, ours
  (:class:`~rml_fast.fairness.multiclass.OptFairPostProcessor`, ``tau = 0.01``) vs
  ``fairlearn.postprocessing.ThresholdOptimizer(prefit=True, predict_method="predict_proba")``,
  for demographic parity and equalised odds; n in {1e4, 1e5} (``--quick``: 1e4).
* ``optfair-multiclass``: K in {3, 5} classes (fairlearn has no multi-class post-processor):
  ours (fit + predict_proba) vs the exact LP of the same empirical problem
  (:func:`~rml_fast.fairness.multiclass.exact_fair_lp`, cvxpy + Clarabel), DP at ``xi = 0.02``;
  n = 1e4 (``--quick``: 2000). The note gives both accuracies (ours is within ``tau log K`` of
  the LP by construction).
* ``optfair-reduction``: the reductions route for a scikit-learn learner (logistic regression),
  binary DP at ``xi = 0.02``: :class:`~rml_fast.fairness.multiclass.OptFairReduction` vs
  ``fairlearn.reductions.ExponentiatedGradient``, fit + predict_proba; n in {5000, 20000}
  (``--quick``: 5000).
* ``compatibility`` (:mod:`rml_fast.fairness.compatibility`), by ``task``:
  * ``task="moebius"``: the exact Moebius transform of M = 6 metric games on 2**d coalitions,
    ours (numba butterfly, O(M d 2**d)) vs the same butterfly as a plain-Python loop
    (``moebius_transform_reference``); and one game's coalition enumeration + Moebius transform,
    ours vs ``shapiq.ExactComputer(game, n_players=d)("Moebius")`` (O(3**d) Python loop).
    d = 10, 12, 14, 16 (quick: 10, 12). shapiq at d >= 15 takes > 1 min a call: those rows run
    with warmup=0, repeat=1 (said in the row's note).
  * ``task="pipeline"``: all 2**d coalition values of 6 metrics for a logistic regression on
    n rows (baseline masking, all rows as background), ours (``coalition_values``: coalitions batched through the model,
    group rates for all coalitions by one matrix product) vs a plain per-coalition loop
    (mask, ``predict_proba``, fairlearn / scikit-learn / NumPy metrics). d = 7, n = 2000
    (quick: d = 4, n = 1000).
  * ``task="compas"``: all coalition values of the six metrics on binarised COMPAS (logistic
    regression, interventional masking, n rows x n_bg background rows), ours with the grid table
    (``tabulate="auto"``: one model call on the 2**12 level combinations, then additive-code
    look-ups) vs ours with direct model calls (``tabulate=False``). d = 12 players (one per
    column; quick: 4 feature groups), n = 1000, n_bg = 16.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from rml_fast.benchmarking import Suite, missing_peer
from rml_fast.fairness import compatibility as mc
from rml_fast.fairness.multiclass import (
    OptFairPostProcessor,
    OptFairReduction,
    disparity,
    exact_fair_lp,
)

SUITE = "fairness"


def _data(n: int, K: int, seed: int = 0):
    """Gaussian features with a group shift; labels from a softmax model; a prefit base model."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 5)) + 0.7 * a[:, None]
    logits = X @ rng.normal(size=(5, K))
    eta = np.exp(logits - logits.max(1, keepdims=True))
    eta /= eta.sum(1, keepdims=True)
    y = np.minimum((eta.cumsum(1) < rng.random(n)[:, None]).sum(1), K - 1)
    base = LogisticRegression(max_iter=1000).fit(X, y)
    return X, y, a, base


def _binary_cases(quick: bool) -> list[dict[str, Any]]:
    sizes = [10**4] if quick else [10**4, 10**5]
    return [{"family": "optfair-binary", "n": n, "constraint": c}
            for n in sizes for c in ("dp", "eo")]


def _binary_body(suite: Suite, case: dict[str, Any]) -> None:
    peer_name = "fairlearn ThresholdOptimizer"
    reason = missing_peer("fairlearn")
    if reason:
        suite.skip(case, peer_name=peer_name, reason=reason)
        return
    from fairlearn.postprocessing import ThresholdOptimizer

    X, y, a, base = _data(case["n"], 2)
    fl_constraint = {"dp": "demographic_parity", "eo": "equalized_odds"}[case["constraint"]]

    def ours():
        est = OptFairPostProcessor(base, prefit=True, constraint=case["constraint"], xi=0.0)
        return est.fit(X, y, a).predict(X, a)

    def peer():
        to = ThresholdOptimizer(estimator=base, constraints=fl_constraint, prefit=True,
                                predict_method="predict_proba")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return to.fit(X, y, sensitive_features=a).predict(X, sensitive_features=a,
                                                               random_state=0)

    yo, yp = ours(), peer()
    note = (f"acc ours {np.mean(yo == y):.4f} / fairlearn {np.mean(yp == y):.4f}; "
            f"{case['constraint']} disparity ours {disparity(yo, y, a, case['constraint']):.4f}"
            f" / fairlearn {disparity(yp, y, a, case['constraint']):.4f} (hard labels)")
    suite.compare(case, ours, peer, peer_name=peer_name, note=note)


def _multiclass_cases(quick: bool) -> list[dict[str, Any]]:
    if quick:
        return [{"family": "optfair-multiclass", "n": 2000, "K": 3}]
    return [{"family": "optfair-multiclass", "n": 10**4, "K": K} for K in (3, 5)]


def _multiclass_body(suite: Suite, case: dict[str, Any]) -> None:
    X, y, a, base = _data(case["n"], case["K"], seed=1)
    P = base.predict_proba(X)
    G = np.eye(2)[a]
    xi = 0.02

    def ours():
        est = OptFairPostProcessor("passthrough", constraint="dp", xi=xi).fit(P, y, a)
        return est.predict_proba(P, a)

    def peer():
        return exact_fair_lp(P, G, constraint="dp", xi=xi)["h"]

    Ho, Hp = ours(), peer()
    note = (f"expected eta-accuracy ours {(Ho * P).sum(1).mean():.4f} / LP "
            f"{(Hp * P).sum(1).mean():.4f}; DP disparity ours {disparity(Ho, y, a):.4f} / LP "
            f"{disparity(Hp, y, a):.4f} (xi={xi})")
    suite.compare(case, ours, peer, peer_name="cvxpy LP (Clarabel)", note=note)


def _reduction_cases(quick: bool) -> list[dict[str, Any]]:
    return [{"family": "optfair-reduction", "n": n} for n in ([5000] if quick else [5000, 20000])]


def _reduction_body(suite: Suite, case: dict[str, Any]) -> None:
    peer_name = "fairlearn ExponentiatedGradient"
    reason = missing_peer("fairlearn")
    if reason:
        suite.skip(case, peer_name=peer_name, reason=reason)
        return
    from fairlearn.reductions import DemographicParity, ExponentiatedGradient
    from sklearn.linear_model import LogisticRegression

    X, y, a, _ = _data(case["n"], 2, seed=2)
    xi = 0.02

    def ours():
        return OptFairReduction(xi=xi).fit(X, y, a).predict_proba(X)

    def peer():
        eg = ExponentiatedGradient(LogisticRegression(max_iter=1000),
                                   DemographicParity(difference_bound=xi))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eg.fit(X, y, sensitive_features=a)
            return eg._pmf_predict(X)

    Ho, Hp = ours(), peer()
    idx = np.arange(len(y))
    note = (f"expected acc ours {Ho[idx, y].mean():.4f} / fairlearn {Hp[idx, y].mean():.4f}; "
            f"DP disparity ours {disparity(Ho, y, a):.4f} / fairlearn {disparity(Hp, y, a):.4f}"
            f" (xi={xi}, LogisticRegression learner; ours 30 EG + <= 10 column-generation rounds,"
            " fairlearn's defaults)")
    suite.compare(case, ours, peer, peer_name=peer_name, note=note)


# --------------------------------------------------------------------------- compatibility

_COMPAT_CASES = ([{"task": "moebius", "d": d} for d in (10, 12, 14, 16)]
                + [{"task": "pipeline", "d": 7, "n": 2000},
                   {"task": "compas", "d": 12, "n": 1000, "n_bg": 16}])
_COMPAT_QUICK_CASES = ([{"task": "moebius", "d": d} for d in (10, 12)]
                      + [{"task": "pipeline", "d": 4, "n": 1000},
                         {"task": "compas", "d": 4, "n": 1000, "n_bg": 16}])

_METRICS = ["accuracy", "demographic_parity", "equalized_odds", "equal_opportunity",
            "predictive_parity", "calibration"]


def _table_game(values: np.ndarray, d: int):
    weights = 1 << np.arange(d)

    def game(coalitions: np.ndarray) -> np.ndarray:
        return values[np.asarray(coalitions, dtype=np.int64) @ weights]

    return game


def _moebius_case(suite: Suite, case: dict[str, Any]) -> None:
    d = case["d"]
    rng = np.random.default_rng(d)
    V = rng.normal(size=(6, 1 << d))
    suite.compare(case, lambda: mc.moebius_transform(V), lambda: mc.moebius_transform_reference(V),
                  peer_name="plain-Python butterfly (6 games)")
    reason = missing_peer("shapiq")
    if reason:
        suite.skip(case, peer_name="shapiq ExactComputer Moebius", reason=reason)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import shapiq
    game = _table_game(V[0], d)
    masks = ((np.arange(1 << d)[:, None] >> np.arange(d)) & 1).astype(bool)

    def ours() -> np.ndarray:
        return mc.moebius_transform(game(masks))

    def peer() -> Any:
        return shapiq.ExactComputer(game, n_players=d)("Moebius")

    a, iv = ours(), None
    if d <= 10:  # cross-check once at the smallest size
        iv = peer()
        t = (1 << d) - 1
        assert abs(iv[tuple(range(d))] - a[t]) < 1e-8
    slow = d >= 15
    saved = (suite.warmup, suite.repeat)
    if slow:
        suite.warmup, suite.repeat = 0, 1
    try:
        suite.compare(case, ours, peer, peer_name="shapiq ExactComputer Moebius (1 game)",
                      memory=not slow, note="warmup=0, repeat=1" if slow else None)
    finally:
        suite.warmup, suite.repeat = saved


def _loop_metrics(prob: np.ndarray, y: np.ndarray, a: np.ndarray) -> list[float]:
    from fairlearn.metrics import (
        demographic_parity_difference,
        equal_opportunity_difference,
        equalized_odds_difference,
    )
    from sklearn.metrics import accuracy_score

    yhat = (prob >= 0.5).astype(int)
    ppv = [y[(a == g) & (yhat == 1)].mean() for g in (0, 1) if ((a == g) & (yhat == 1)).any()]
    gap = [prob[a == g].mean() - y[a == g].mean() for g in (0, 1)]
    return [accuracy_score(y, yhat),
            -demographic_parity_difference(y, yhat, sensitive_features=a),
            -equalized_odds_difference(y, yhat, sensitive_features=a),
            -equal_opportunity_difference(y, yhat, sensitive_features=a),
            -(max(ppv) - min(ppv)) if len(ppv) == 2 else 0.0,
            -(max(gap) - min(gap))]


def _pipeline_case(suite: Suite, case: dict[str, Any]) -> None:
    from sklearn.linear_model import LogisticRegression

    reason = missing_peer("fairlearn")
    if reason:
        suite.skip(case, peer_name="per-coalition loop + fairlearn metrics", reason=reason)
        return
    d, n = case["d"], case["n"]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    a = (rng.random(n) < 0.4).astype(int)
    X[:, 0] += a
    y = (X @ rng.normal(size=d) + 0.5 * a + rng.normal(size=n) > 0).astype(int)
    model = LogisticRegression().fit(X, y)
    base = X.mean(axis=0)

    def ours() -> np.ndarray:
        return mc.coalition_values(model, X, y, a, _METRICS, masking="baseline", background=X,
                                   progress=False)

    def peer() -> np.ndarray:
        out = np.empty((6, 1 << d))
        for s in range(1 << d):
            keep = ((s >> np.arange(d)) & 1).astype(bool)
            Z = np.where(keep, X, base)
            out[:, s] = _loop_metrics(model.predict_proba(Z)[:, 1], y, a)
        return out

    np.testing.assert_allclose(ours(), peer(), atol=1e-12)  # same numbers before timing
    suite.compare(case, ours, peer, peer_name="per-coalition loop + fairlearn metrics")


def _compas_case(suite: Suite, case: dict[str, Any]) -> None:
    from sklearn.linear_model import LogisticRegression

    from rml_fast.datasets import load_binarized

    X, y, names = load_binarized("compas-binned")
    X = X.astype(np.float64)
    a = X[:, names.index("sex:Female")].astype(int)
    model = LogisticRegression(max_iter=1000).fit(X, y)
    rows = np.random.default_rng(0).choice(X.shape[0], size=case["n"], replace=False)
    Xe, ye, ae = X[rows], y[rows], a[rows]
    players = (None if case["d"] == 12
               else [[0], [1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11]])
    kw = {"players": players, "n_background": case["n_bg"], "random_state": 0,
          "progress": False}

    def ours() -> np.ndarray:
        return mc.coalition_values(model, Xe, ye, ae, _METRICS, tabulate="auto", **kw)

    def peer() -> np.ndarray:
        return mc.coalition_values(model, Xe, ye, ae, _METRICS, tabulate=False, **kw)

    np.testing.assert_allclose(ours(), peer(), atol=1e-9)
    suite.compare(case, ours, peer, peer_name="ours, direct model calls (tabulate=False)")


def _compatibility_body(suite: Suite, case: dict[str, Any]) -> None:
    """One compatibility case (see the module docstring)."""
    if case["task"] == "moebius":
        _moebius_case(suite, case)
    elif case["task"] == "compas":
        _compas_case(suite, case)
    else:
        _pipeline_case(suite, case)


def _compatibility_cases(quick: bool) -> list[dict[str, Any]]:
    return _COMPAT_QUICK_CASES if quick else _COMPAT_CASES


#: family name -> (cases for quick/full, body); add a family by adding an entry
FAMILIES: dict[str, tuple[Callable[[bool], list[dict[str, Any]]],
                          Callable[[Suite, dict[str, Any]], None]]] = {
    "optfair-binary": (_binary_cases, _binary_body),
    "optfair-multiclass": (_multiclass_cases, _multiclass_body),
    "optfair-reduction": (_reduction_cases, _reduction_body),
    "compatibility": (_compatibility_cases, _compatibility_body),
}


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    suite = Suite(SUITE, quick=quick, progress=progress, repeat=repeat)
    for cases, body in FAMILIES.values():
        suite.run(cases(quick), body)
    return suite


if __name__ == "__main__":  # python benchmarks/bench_fairness.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
