"""LLM-evaluation methods: the graded response model vs girth, LinUCB vs mabwiser.

Cases (one group per family; ``GROUPS`` lists them, each a (cases, body) pair):

* ``grm``: :class:`rml_fast.evaluation.irt.GradedResponseModel` fit (MML-EM, tol 1e-4) vs
  ``girth.grm_mml`` on simulated GRM data at (N, J, K) = (1000, 10, 5), (10000, 50, 5),
  (100000, 20, 7) (``--quick``: the smallest). Both run single-threaded (``n_jobs=1``; girth
  is NumPy). Both fits' marginal log-likelihoods, evaluated by the same function on the same
  61-node quadrature, are recorded in the case's ``note`` (``ll_ours``, ``ll_girth``): girth
  approximates the MML solution (its difficulties solve integral equations, discrimination by
  a bounded line search, stop at 1e-3), so ours reaches a log-likelihood at least as high.
* ``linucb``: :class:`rml_fast.evaluation.bite.LinUCB` (BITE's bandit; d = 384, 10 arms,
  alpha = lambda = 1, float64) vs mabwiser's ``LinUCB``. ``online``: ``steps`` rounds of one
  update then one select, the loop of a BITE attack (mabwiser: ``partial_fit`` of one row, then
  ``predict``); ``batch``: all updates in one call, then select on 100 contexts (mabwiser:
  ``fit`` then ``predict``). Each timed call starts from a fresh bandit; before timing, both
  sides' final UCB values are checked to agree (1e-8). ``--quick``: 200 / 2000 steps.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from rml_fast.benchmarking import Suite, import_skip_reason, missing_peer
from rml_fast.evaluation.bite import LinUCB
from rml_fast.evaluation.irt import GradedResponseModel, _reference_loglik

SUITE = "evaluation"


# --------------------------------------------------------------------------- GRM vs girth


def _grm_data(n: int, j: int, k: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.8, 2.5, j)
    b = np.sort(rng.standard_normal((j, k - 1)), axis=1) + 0.15 * np.arange(k - 1)
    truth = GradedResponseModel.from_params(a, -a[:, None] * b)
    return truth.simulate(rng.standard_normal(n), rng=seed + 1)


def _grm_cases(quick: bool) -> list[dict[str, Any]]:
    sizes = [(1000, 10, 5)] if quick else [(1000, 10, 5), (10000, 50, 5), (100000, 20, 7)]
    return [{"family": "grm", "N": n, "J": j, "K": k} for n, j, k in sizes]


def _grm_body(suite: Suite, case: dict[str, Any]) -> None:
    Y = _grm_data(case["N"], case["J"], case["K"])
    try:
        from girth import grm_mml
    except ImportError as exc:
        suite.skip(case, peer_name="girth.grm_mml", reason=import_skip_reason(exc))
        return
    data = (Y + 1).T  # girth: items x persons, categories from 1
    ours = lambda: GradedResponseModel(n_jobs=1).fit(Y)  # noqa: E731

    def peer() -> dict[str, Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return grm_mml(data)

    model = ours()
    res = peer()
    a_g, b_g = res["Discrimination"], res["Difficulty"]
    ll_ours = _reference_loglik(model.a_, model.d_, Y.astype(float))
    ll_girth = _reference_loglik(a_g, -a_g[:, None] * b_g, Y.astype(float))
    note = (f"ll_ours={ll_ours:.3f} ll_girth={ll_girth:.3f} (diff {ll_ours - ll_girth:+.3f}); "
            f"max|a diff|={np.abs(model.a_ - a_g).max():.3g}; EM cycles={model.n_iter_}; "
            "both single-threaded")
    # the calls above were the warm-up; the large cases time fewer runs (girth takes minutes)
    big = case["N"] * case["J"] >= 10**6
    saved = suite.repeat, suite.warmup
    if big:
        suite.repeat, suite.warmup = min(suite.repeat, 2), 0
    try:
        suite.compare(case, ours, peer, peer_name="girth.grm_mml", note=note, memory=not big)
    finally:
        suite.repeat, suite.warmup = saved
    row = suite.rows[-1]
    row["ll_ours"] = float(ll_ours)
    row["ll_girth"] = float(ll_girth)


# --------------------------------------------------------------------------- LinUCB

_LINUCB_CASES = [
    {"method": "linucb", "mode": "online", "steps": 1000, "d": 384, "arms": 10},
    {"method": "linucb", "mode": "batch", "steps": 10000, "d": 384, "arms": 10},
]
_LINUCB_QUICK_CASES = [
    {"method": "linucb", "mode": "online", "steps": 200, "d": 384, "arms": 10},
    {"method": "linucb", "mode": "batch", "steps": 2000, "d": 384, "arms": 10},
]


def _linucb_stream(n: int, d: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n + 100, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return rng.integers(0, k, n), X[:n], rng.standard_normal(n), X[n:]


def _linucb_body(suite: Suite, case: dict[str, Any]) -> None:
    n, d, k, mode = case["steps"], case["d"], case["arms"], case["mode"]
    peer_name = "mabwiser LinUCB"
    reason = missing_peer("mabwiser")
    if reason:
        suite.skip(case, peer_name=peer_name, reason=reason)
        return
    from mabwiser.mab import MAB, LearningPolicy

    arms, X, r, Q = _linucb_stream(n, d, k)
    arm_list = list(range(k))

    def ours_online() -> LinUCB:
        bandit = LinUCB(k, d, alpha=1.0, lambda_reg=1.0)
        for t in range(n):
            bandit.update(int(arms[t]), X[t], float(r[t]))
            bandit.select(X[t + 1] if t + 1 < n else Q[0])
        return bandit

    def peer_online() -> Any:
        mab = MAB(arm_list, LearningPolicy.LinUCB(alpha=1.0, l2_lambda=1.0))
        mab.fit(arms[:1], r[:1], X[:1])
        mab.predict(X[1:2])
        for t in range(1, n):
            mab.partial_fit(arms[t : t + 1], r[t : t + 1], X[t : t + 1])
            mab.predict(X[t + 1 : t + 2] if t + 1 < n else Q[:1])
        return mab

    def ours_batch() -> LinUCB:
        bandit = LinUCB(k, d, alpha=1.0, lambda_reg=1.0)
        bandit.update(arms, X, r)
        bandit.select(Q)
        return bandit

    def peer_batch() -> Any:
        mab = MAB(arm_list, LearningPolicy.LinUCB(alpha=1.0, l2_lambda=1.0))
        mab.fit(arms, r, X)
        mab.predict(Q)
        return mab

    ours, peer = (ours_online, peer_online) if mode == "online" else (ours_batch, peer_batch)
    # the same work: the final UCB values agree
    theirs = np.array([[e[a] for a in arm_list] for e in peer().predict_expectations(Q)])
    np.testing.assert_allclose(ours().ucb(Q), theirs, rtol=1e-8, atol=1e-8)
    suite.compare(case, ours, peer, peer_name=peer_name)


def _linucb_cases(quick: bool) -> list[dict[str, Any]]:
    return _LINUCB_QUICK_CASES if quick else _LINUCB_CASES


# --------------------------------------------------------------------------- the suite

#: (cases(quick) -> list of case dicts, body(suite, case)) per family; add a family here.
GROUPS: list[tuple[Callable[[bool], list[dict[str, Any]]], Callable[[Suite, dict[str, Any]], None]]] = [
    (_grm_cases, _grm_body),
    (_linucb_cases, _linucb_body),
]


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    """Run every family's cases into one ``evaluation`` suite."""
    suite = Suite(SUITE, quick=quick, progress=progress, repeat=repeat)
    for cases, body in GROUPS:
        suite.run(cases(quick), body)
    return suite


if __name__ == "__main__":  # python benchmarks/bench_evaluation.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
