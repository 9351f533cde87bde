"""Fairness: OptFair post-processing vs fairlearn's ThresholdOptimizer and vs a cvxpy LP.

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
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from rml_fast.benchmarking import Suite, missing_peer
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


#: family name -> (cases for quick/full, body); add a family by adding an entry
FAMILIES: dict[str, tuple[Callable[[bool], list[dict[str, Any]]],
                          Callable[[Suite, dict[str, Any]], None]]] = {
    "optfair-binary": (_binary_cases, _binary_body),
    "optfair-multiclass": (_multiclass_cases, _multiclass_body),
    "optfair-reduction": (_reduction_cases, _reduction_body),
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
