"""B3IT on the stand-in endpoint, figure for the evaluation docs: ``python benchmarks/plot_b3it.py
[--out docs/img/b3it_auc.png] [--json PATH] [--quick]`` (needs matplotlib).

Left: ROC AUC of the B3IT statistic against the size ``s`` of a weight-noise change of
:class:`~rml_fast.evaluation.b3it.LinearLMEndpoint`, for the 20 most balanced border inputs and
for 20 random prompts, at equal query budget (5 prompts x (50 reference + 10 detection) queries
per test, 1000 null and 1000 changed resplits each). Right: detection queries per test
(5 prompts x k samples) needed to reach AUC 0.95 at ``s = 3e-4``. The script also times
:func:`~rml_fast.evaluation.b3it.null_statistics` (vectorised) against a per-test NumPy loop on
the same draws for 10^4 resplits (the statistic on shared draws, and the whole call with its
draws), and prints every number.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from rml_fast.evaluation import _b3it_counts as bc
from rml_fast.evaluation.b3it import (
    LinearLMEndpoint,
    detection_auc,
    find_border_inputs,
    null_statistics,
    reference_distributions,
    select_balanced,
    two_sample_statistics,
)

_ROOT = Path(__file__).resolve().parent.parent
SCALES = (0.0, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
DET = (1, 3, 10, 20, 50)


def _auc(endpoint, changed, prompts, n_det, n_tests, seed):
    pool = {p: endpoint(p, 300) for p in prompts}
    new = {p: changed(p, 100) for p in prompts}
    t0 = null_statistics(pool, 5, 50, n_det, n_tests, rng=seed)
    t1 = two_sample_statistics(pool, new, 5, 50, n_det, n_tests, rng=seed + 1)
    return detection_auc(t0, t1)


def _loop_statistics(padded, n_bins, draws) -> np.ndarray:
    """The per-test loop: one count matrix and TV per test, on the same draws."""
    out = []
    for prompt_idx, ref_idx, det_idx in draws:
        n_prompts = prompt_idx.shape[1]
        for t in range(prompt_idx.shape[0]):
            c1 = np.zeros((n_prompts, n_bins))
            c2 = np.zeros((n_prompts, n_bins))
            for j, p in enumerate(prompt_idx[t]):
                c1[j] = np.bincount(padded[p, ref_idx[t, j]], minlength=n_bins)
                c2[j] = np.bincount(padded[p, det_idx[t, j]], minlength=n_bins)
            out.append(float(bc.mean_tv(c1, c2)))
    return np.array(out)


def run(quick: bool = False) -> dict:
    """Compute every number of the figure; returns them as a JSON-able dict."""
    n_tests = 300 if quick else 1000
    ep = LinearLMEndpoint(seed=0)
    bis = find_border_inputs(ep, ep.candidate_prompts(), target=50, rng=0, progress=False)
    border = select_balanced(reference_distributions(ep, bis, 100, progress=False), 20)
    rand = [str(p) for p in np.random.default_rng(5).choice(ep.candidate_prompts(), 20, False)]
    res: dict = {"scales": list(SCALES), "auc_bi": [], "auc_random": []}
    for s in SCALES:
        ch = ep.changed(s, seed=3)
        res["auc_bi"].append(_auc(ep, ch, border, 10, n_tests, 1))
        res["auc_random"].append(_auc(ep, ch, rand, 10, n_tests, 1))
    res["det"] = list(DET)
    ch = ep.changed(3e-4, seed=3)
    res["auc_bi_det"] = [_auc(ep, ch, border, k, n_tests, 7) for k in DET]
    res["auc_random_det"] = [_auc(ep, ch, rand, k, n_tests, 7) for k in DET]

    pool = {p: ep(p, 300) for p in border}
    n_resplits = 2000 if quick else 10_000
    t = time.perf_counter()
    null_statistics(pool, 10, 50, 10, n_resplits, rng=3)
    t_total = time.perf_counter() - t
    # the statistic alone (draws made once, shared): vectorised pass vs per-test loop
    (codes,), n_bins = bc.encode([list(pool.values())])
    padded, lengths = bc.pad(codes)
    draws = list(bc.resplit_draws(np.random.default_rng(3), lengths, None, 10, 50, 10, n_resplits))
    t = time.perf_counter()
    fast = bc.resplit_statistics(padded, None, n_bins, iter(draws))
    t_fast = time.perf_counter() - t
    t = time.perf_counter()
    slow = _loop_statistics(padded, n_bins, draws)
    t_loop = time.perf_counter() - t
    assert np.allclose(fast, slow, rtol=1e-12, atol=1e-15)
    res["throughput"] = {
        "resplits": n_resplits,
        "null_statistics_s": t_total,
        "vectorised_s": t_fast,
        "loop_s": t_loop,
        "ratio": t_loop / t_fast,
    }
    return res


def _first_reaching(xs, ys, level=0.95):
    return next((x for x, y in zip(xs, ys, strict=True) if y >= level), None)


def main(argv: list[str] | None = None) -> Path:
    """Run, print the numbers, write the PNG (and the JSON when asked)."""
    ap = argparse.ArgumentParser(prog="plot_b3it.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=_ROOT / "docs" / "img" / "b3it_auc.png")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    ap.add_argument("--quick", action="store_true", help="fewer resplits (a smoke run)")
    args = ap.parse_args(argv)
    try:
        import matplotlib
    except ImportError:
        ap.error("plotting needs matplotlib: pip install 'rml_fast[bench]'")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = run(args.quick)
    print("s          AUC(border inputs)  AUC(random prompts)")
    for s, a, b in zip(res["scales"], res["auc_bi"], res["auc_random"], strict=True):
        print(f"{s:<10.0e} {a:>18.3f}  {b:>19.3f}")
    q_bi = _first_reaching(res["det"], res["auc_bi_det"])
    q_rand = _first_reaching(res["det"], res["auc_random_det"])
    print("det/prompt AUC(BI)  AUC(random)   at s=3e-4, 5 prompts")
    for k, a, b in zip(res["det"], res["auc_bi_det"], res["auc_random_det"], strict=True):
        print(f"{k:<10d} {a:.3f}    {b:.3f}")
    print(
        f"detection queries per test to AUC 0.95: BI {None if q_bi is None else 5 * q_bi}, "
        f"random {'not reached' if q_rand is None else 5 * q_rand}"
    )
    tp = res["throughput"]
    print(
        f"{tp['resplits']} resplits (10 prompts, 50+10): null_statistics (draws included) "
        f"{tp['null_statistics_s']:.3f} s; statistic on shared draws: vectorised "
        f"{tp['vectorised_s']:.3f} s, per-test loop {tp['loop_s']:.3f} s, ratio {tp['ratio']:.1f}x"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    xs = [max(s, 1e-5) for s in res["scales"]]
    ax1.semilogx(xs, res["auc_bi"], "o-", label="20 border inputs")
    ax1.semilogx(xs, res["auc_random"], "s--", label="20 random prompts")
    ax1.axhline(0.5, color="grey", lw=0.8)
    ax1.set_xlabel("weight-noise scale s (jitter sigma = 1e-3; s=0 drawn at 1e-5)")
    ax1.set_ylabel("ROC AUC")
    ax1.set_title("5 prompts x (50 ref + 10 det) queries per test")
    ax1.legend()
    det_q = [5 * k for k in res["det"]]
    ax2.semilogx(det_q, res["auc_bi_det"], "o-", label="border inputs")
    ax2.semilogx(det_q, res["auc_random_det"], "s--", label="random prompts")
    ax2.axhline(0.95, color="grey", lw=0.8, ls=":")
    ax2.set_xlabel("detection queries per test (5 prompts)")
    ax2.set_ylabel("ROC AUC at s = 3e-4")
    ax2.legend()
    fig.suptitle("B3IT on LinearLMEndpoint (vocab 64, context 2)")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return args.out


if __name__ == "__main__":
    main()
