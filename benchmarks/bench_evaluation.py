"""LLM-evaluation methods: the graded response model vs girth, LinUCB vs mabwiser, CYBERTEAM's
CVSS calculator, IOC extraction and workflow engine vs cvss, iocextract and graphlib, FakeWorld's
metrics and bootstrap vs scikit-learn and scipy.

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
* ``cyberteam``: ``cvss31``: :func:`rml_fast.evaluation.cyberteam.cvss31_base_scores` on
  10^5 v3.1 base vectors (quick: 10^4) vs a loop of RedHat's ``cvss`` (``CVSS3(v).scores()``),
  checked to agree first; ``rex``: :func:`rex_extract` over a synthetic 200 kB report corpus
  (quick: 20 kB; iocextract's regexes take minutes per MB) vs ``iocextract``; ``engine``: a 30-task random DAG of no-op modules through
  :meth:`Workflow.run` vs a bare ``graphlib`` loop (the floor of any executor; the ratio is
  expected below 1: ours builds contexts, merges outputs and scores).
* ``fakeworld``: the two-axis protocol's metrics (:func:`rml_fast.evaluation.fakeworld.axis_metrics`:
  accuracy, balanced accuracy, macro-F1, AUROC) vs scikit-learn's at n in {1e4, 1e5}, and their
  1,000-resample bootstrap intervals vs ``scipy.stats.bootstrap`` (accuracy, vectorised) and vs
  ``scipy.stats.bootstrap`` + ``f1_score`` (macro-F1).
"""

from __future__ import annotations

import graphlib
import itertools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from rml_fast.benchmarking import Suite, import_skip_reason, missing_peer
from rml_fast.evaluation.bite import LinUCB
from rml_fast.evaluation.cyberteam import (
    TaskSpec,
    Workflow,
    cvss31_base_scores,
    rex_extract,
)
from rml_fast.evaluation.fakeworld import axis_metrics
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
# --------------------------------------------------------------------------- CYBERTEAM

CYBERTEAM_CASES = [
    {"method": "cyberteam", "op": "cvss31", "n": 100_000},
    {"method": "cyberteam", "op": "rex", "mb": 0.2},
    {"method": "cyberteam", "op": "engine", "tasks": 30},
]
CYBERTEAM_QUICK_CASES = [
    {"method": "cyberteam", "op": "cvss31", "n": 10_000},
    {"method": "cyberteam", "op": "rex", "mb": 0.02},
    {"method": "cyberteam", "op": "engine", "tasks": 30},
]


def _cvss31_vectors(n: int, seed: int = 0) -> list[str]:
    allv = ["CVSS:3.1/AV:{}/AC:{}/PR:{}/UI:{}/S:{}/C:{}/I:{}/A:{}".format(*t)
            for t in itertools.product("NALP", "LH", "NLH", "NR", "UC", "HLN", "HLN", "HLN")]
    idx = np.random.default_rng(seed).integers(0, len(allv), n)
    return [allv[i] for i in idx]


def _report_corpus(mb: float, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    filler = ["the", "actor", "moved", "laterally", "and", "staged", "data", "before",
              "exfiltration", "while", "the", "defenders", "reviewed", "logs"]
    parts: list[str] = []
    size = 0
    while size < mb * 1_000_000:
        kind = rng.integers(0, 6)
        if kind == 0:
            ioc = ".".join(str(x) for x in rng.integers(1, 255, 4))
        elif kind == 1:
            ioc = f"host{rng.integers(10**6)}.example-{rng.integers(100)}.com"
        elif kind == 2:
            ioc = f"https://cdn{rng.integers(1000)}.bad-site.net/p/{rng.integers(10**6)}.php"
        elif kind == 3:
            ioc = f"user{rng.integers(10**5)}@mail.evil.org"
        elif kind == 4:
            ioc = "".join(rng.choice(list("0123456789abcdef"), 64))
        else:
            ioc = f"CVE-20{rng.integers(10, 25)}-{rng.integers(1000, 99999)}"
        words = list(rng.choice(filler, 12))
        s = " ".join(words[:6]) + f" {ioc} " + " ".join(words[6:]) + ". "
        parts.append(s)
        size += len(s)
    return "".join(parts)


def _random_workflow(n: int, p: float = 0.15, seed: int = 0) -> Workflow:
    rng = np.random.default_rng(seed)
    tasks = [TaskSpec(f"t{i}", "behavior", modules=("NOP",),
                      depends_on=tuple(f"t{j}" for j in range(i) if rng.random() < p))
             for i in range(n)]
    return Workflow(tasks, stages=None)


def _nop(ctx: Any) -> dict:
    return {}


def cyberteam_body(suite: Suite, case: dict[str, Any]) -> None:
    op = case["op"]
    if op == "cvss31":
        reason = missing_peer("cvss")
        if reason:
            suite.skip(case, peer_name="cvss.CVSS3 loop", reason=reason)
            return
        from cvss import CVSS3

        vecs = _cvss31_vectors(case["n"])
        ours_chk = cvss31_base_scores(vecs[:2000])
        peer_chk = np.array([float(CVSS3(v).scores()[0]) for v in vecs[:2000]])
        np.testing.assert_array_equal(ours_chk, peer_chk)
        suite.compare(case, lambda: cvss31_base_scores(vecs),
                      lambda: [CVSS3(v).scores()[0] for v in vecs],
                      peer_name="cvss.CVSS3 loop", memory=False,
                      note="both exact; checked equal on 2000 vectors")
    elif op == "rex":
        reason = missing_peer("iocextract")
        if reason:
            suite.skip(case, peer_name="iocextract.extract_iocs", reason=reason)
            return
        import iocextract

        text = _report_corpus(case["mb"])
        suite.compare(case, lambda: rex_extract(text),
                      lambda: list(iocextract.extract_iocs(text, refang=True)),
                      peer_name="iocextract.extract_iocs", memory=False,
                      note="type sets differ slightly (iocextract: no timestamps / CVE ids)")
    elif op == "engine":
        wf = _random_workflow(case["tasks"])
        deps = {n: wf.tasks[n].depends_on for n in wf.tasks}
        sample = {"id": "s", "text": "x"}

        def peer() -> dict:
            ts = graphlib.TopologicalSorter(deps)
            ts.prepare()
            out: dict = {}
            while ts.is_active():
                for n in ts.get_ready():
                    out[n] = _nop(None)
                    ts.done(n)
            return out

        suite.compare(case, lambda: wf.run(sample, modules={"NOP": _nop}), peer,
                      peer_name="graphlib.TopologicalSorter loop", memory=False,
                      note="ours also builds contexts, merges outputs, JSON-normalises results")
    else:  # pragma: no cover
        raise ValueError(f"unknown cyberteam op {op!r}")



# --------------------------------------------------------------------------- FakeWorld

FAKEWORLD_CASES = [
    {"family": "fakeworld", "op": "point", "n": 10_000},
    {"family": "fakeworld", "op": "point", "n": 100_000},
    {"family": "fakeworld", "op": "boot_acc", "n": 10_000, "B": 1000},
    {"family": "fakeworld", "op": "boot_acc", "n": 100_000, "B": 1000},
    {"family": "fakeworld", "op": "boot_f1", "n": 2000, "B": 1000},
]
FAKEWORLD_QUICK_CASES = [
    {"family": "fakeworld", "op": "point", "n": 10_000},
    {"family": "fakeworld", "op": "boot_acc", "n": 10_000, "B": 1000},
    {"family": "fakeworld", "op": "boot_f1", "n": 1000, "B": 200},
]


def _fakeworld_arrays(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    yt = rng.integers(0, 3, n)
    yp = np.where(rng.random(n) < 0.7, yt, rng.integers(0, 3, n))
    s = np.clip(0.4 * (yt > 0) + 0.6 * rng.random(n), 0, 1)
    return yt, yp, s


def fakeworld_body(suite: Suite, case: dict[str, Any]) -> None:
    from scipy import stats
    from sklearn.metrics import (
        accuracy_score,
        balanced_accuracy_score,
        f1_score,
        roc_auc_score,
    )

    yt, yp, s = _fakeworld_arrays(case["n"])
    yb = (yt > 0).astype(np.int64)
    hb = (yp > 0).astype(np.int64)
    op = case["op"]
    if op == "point":
        def ours() -> tuple[dict, dict]:
            return (axis_metrics(yt, yp, n_bootstrap=0),
                    axis_metrics(yb, hb, s, metrics=("auroc",), n_bootstrap=0))

        def peer() -> tuple[float, ...]:
            return (accuracy_score(yt, yp), balanced_accuracy_score(yt, yp),
                    f1_score(yt, yp, average="macro"), roc_auc_score(yb, s))

        a, b = ours()
        got = (a["accuracy"][0], a["balanced_accuracy"][0], a["macro_f1"][0], b["auroc"][0])
        np.testing.assert_allclose(got, peer(), rtol=0, atol=1e-12)
        suite.compare(case, ours, peer, peer_name="sklearn.metrics (4 calls)", memory=False,
                      note="equal to 1e-12")
    elif op == "boot_acc":
        B = case["B"]
        ours = lambda: axis_metrics(yt, yp, metrics=("accuracy",), n_bootstrap=B)  # noqa: E731

        def peer() -> Any:
            return stats.bootstrap((yt, yp), lambda a, b, axis: np.mean(a == b, axis=axis),
                                   n_resamples=B, paired=True, vectorized=True,
                                   method="percentile", random_state=0)

        lo, hi = ours()["accuracy"][1:]
        ci = peer().confidence_interval
        note = (f"CI ours [{lo:.4f}, {hi:.4f}] vs scipy [{ci.low:.4f}, {ci.high:.4f}] "
                "(different draws)")
        suite.compare(case, ours, peer, peer_name="scipy.stats.bootstrap (vectorized)",
                      memory=False, note=note)
    elif op == "boot_f1":
        B = case["B"]
        ours = lambda: axis_metrics(yt, yp, metrics=("macro_f1",), n_bootstrap=B)  # noqa: E731

        def peer() -> Any:
            return stats.bootstrap((yt, yp), lambda a, b: f1_score(a, b, average="macro"),
                                   n_resamples=B, paired=True, vectorized=False,
                                   method="percentile", random_state=0)

        lo, hi = ours()["macro_f1"][1:]
        ci = peer().confidence_interval
        note = (f"CI ours [{lo:.4f}, {hi:.4f}] vs scipy+sklearn [{ci.low:.4f}, {ci.high:.4f}]")
        suite.repeat, saved = min(suite.repeat, 3), suite.repeat
        try:
            suite.compare(case, ours, peer, peer_name="scipy.stats.bootstrap + sklearn f1_score",
                          memory=False, note=note)
        finally:
            suite.repeat = saved
    else:  # pragma: no cover
        raise ValueError(f"unknown fakeworld op {op!r}")


if __name__ == "__main__":  # try-out driver: .venv/bin/python /work/frag/bench_fakeworld.py
    import sys

    quick = "--quick" in sys.argv
    suite = Suite("fakeworld_try", quick=quick, progress=False, repeat=5)
    suite.run(FAKEWORLD_QUICK_CASES if quick else FAKEWORLD_CASES, fakeworld_body)
    for r in suite.rows:
        print(r["case"], f"ours {r['ours_median_s']:.4f}s peer {r['peer_median_s']:.4f}s "
              f"ratio {r['ratio']:.1f}", r["note"])


GROUPS: list[tuple[Callable[[bool], list[dict[str, Any]]], Callable[[Suite, dict[str, Any]], None]]] = [
    (_grm_cases, _grm_body),
    (_linucb_cases, _linucb_body),
    (lambda quick: CYBERTEAM_QUICK_CASES if quick else CYBERTEAM_CASES, cyberteam_body),
    (lambda quick: FAKEWORLD_QUICK_CASES if quick else FAKEWORLD_CASES, fakeworld_body),
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
