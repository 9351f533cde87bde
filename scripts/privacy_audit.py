"""Empirical privacy audits at scale (issue 25 §3): writes
``benchmarks/results/privacy_audit.json`` and ``docs/img/privacy_audit_{mechanisms,training}.png``.

(a) Mechanism audits: every native sampler (Gaussian through the SGG kernel and through the
Philox normals DP-SGD adds, Laplace, the l2 mechanism, two further SGG members) is drawn
``n`` times on each of two neighbouring inputs; the empirical ``delta(eps)`` on the
likelihood-ratio sets, with simultaneous Clopper-Pearson bounds, is compared with the PLD
accountant's, for the correct sampler and for one whose scale is 20% too small.

(b) One-run training audits (Steinke, Nasr & Jagielski, arXiv 2305.08846): DP-SGD and DP-C4
on breast cancer with white-box Dirac gradient canaries, claimed (2, 1e-6)-DP, correct and
two broken variants implemented here (never in the library): per-sample clipping skipped
(the optimizer's clip factors patched to 1) and noise halved (trained with sigma/2 while the
claim stays that of sigma).

Usage: ``python scripts/privacy_audit.py [--quick]`` (a few minutes; ``--quick`` ~1 minute).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DELTA = 1e-6


def _mechanisms() -> list[dict[str, Any]]:
    from rml_fast.privacy import SGGMechanism
    from rml_fast.privacy.auditing import philox_gaussian_sampler

    gauss_eps = np.linspace(0.0, 3.0, 13)
    pure_eps = np.r_[np.linspace(0.0, 0.95, 11), 1.1, 1.5]  # eps0 = 1: avoid the atom at 1
    return [
        dict(name="Gaussian (SGG kernel), T=1, std=1", mech=SGGMechanism.gaussian(1, 1.0),
             wrong=SGGMechanism.gaussian(1, 0.8).randomize, sampler=None, eps=gauss_eps),
        dict(name="Gaussian (SGG kernel), T=10, std=1", mech=SGGMechanism.gaussian(10, 1.0),
             wrong=SGGMechanism.gaussian(10, 0.8).randomize, sampler=None, eps=gauss_eps),
        dict(name="Gaussian (Philox normals, DP-SGD noise), T=4", mech=SGGMechanism.gaussian(4, 1.0),
             wrong=philox_gaussian_sampler(0.8), sampler=philox_gaussian_sampler(1.0), eps=gauss_eps),
        dict(name="Laplace b=1", mech=SGGMechanism(1, 1.0, k=1.0, p=1.0),
             wrong=SGGMechanism(1, 0.8, k=1.0, p=1.0).randomize, sampler=None, eps=pure_eps),
        dict(name="l2 mechanism, T=3, sigma=1", mech=SGGMechanism.l2(3, 1.0),
             wrong=SGGMechanism.l2(3, 0.8).randomize, sampler=None, eps=pure_eps),
        dict(name="SGG T=2, p=1.5, sigma=1", mech=SGGMechanism(2, 1.0, p=1.5),
             wrong=SGGMechanism(2, 0.8, p=1.5).randomize, sampler=None,
             eps=np.linspace(0.0, 2.5, 11)),
        dict(name="SGG T=3, k=2, p=2, sigma=1.5", mech=SGGMechanism(3, 1.5, k=2.0, p=2.0),
             wrong=SGGMechanism(3, 1.2, k=2.0, p=2.0).randomize, sampler=None,
             eps=np.linspace(0.0, 3.0, 13)),
    ]


def mechanism_audits(n: int, seed: int, h: float) -> list[dict[str, Any]]:
    from rml_fast.privacy.auditing import audit_mechanism

    out = []
    for case in _mechanisms():
        rec: dict[str, Any] = {"name": case["name"], "mechanism": repr(case["mech"])}
        for label, sampler in (("correct", case["sampler"]), ("scale_0.8", case["wrong"])):
            t0 = time.perf_counter()
            res = audit_mechanism(case["mech"], case["eps"], n_samples=n, sampler=sampler,
                                  rng=seed, h=h)
            rec[label] = res.summary() | {"seconds": time.perf_counter() - t0,
                                          "pld_consistent": res.pld_consistent}
            print(f"  {case['name']:48s} {label:9s} violation={res.violation!s:5s} "
                  f"consistent={res.consistent!s:5s} max(lower-claimed)={res.max_excess:+.4f} "
                  f"({rec[label]['seconds']:.1f} s)", flush=True)
        out.append(rec)
    return out


def laplace_atom(n: int, seed: int) -> dict[str, Any]:
    """Laplace(b=1) is pure 1-DP in exact arithmetic; at eps = 1 exactly the set
    {L > 1} is empty for reals but not for float64 outputs of ``fl(x + X)`` (Mironov 2012).
    Audited for the snapped default release and for ``granularity=None`` (the raw sum)."""
    from rml_fast.privacy import SGGMechanism
    from rml_fast.privacy.auditing import audit_mechanism

    out = {}
    for label, gran in (("snapped (default)", "auto"), ("granularity=None", None)):
        mech = SGGMechanism(1, 1.0, k=1.0, p=1.0, granularity=gran)
        res = audit_mechanism(mech, [1.0], n_samples=n, rng=seed)
        out[label] = {"epsilon": 1.0, "claimed_delta": float(res.claimed_delta[0]),
                      "empirical_delta": float(res.empirical_delta[0]),
                      "lower": float(res.lower[0]), "violation": res.violation}
    return out


def float_lsb(n: int, seed: int) -> dict[str, Any]:
    """Least-significant-bit sets (Mironov 2012): ``y = fl(x + X)`` with ``x = 1`` and
    ``y`` in (-1, -0.5) is exact by Sterbenz's lemma, so its last mantissa bit (in the finer
    binade of ``y``) is always 0, while ``y = 0 + X`` has it set half the time. The set
    ``S = {y in (-1, -0.5), last bit 1}`` has ``Q(S) = 0``: no float64 additive mechanism is
    ``(eps, delta)``-DP with ``delta < P(S)`` for any eps."""
    from rml_fast.privacy import SGGMechanism
    from rml_fast.privacy.auditing import empirical_delta

    def score(y: np.ndarray) -> np.ndarray:
        odd = (np.ascontiguousarray(y).view(np.int64) & 1) == 1
        return np.where((y > -1.0) & (y < -0.5) & odd, np.inf, -np.inf)

    eps = np.array([1.0, 3.0, 5.0])
    out = {}
    cases = []
    for label, gran in (("snapped (default)", "auto"), ("granularity=None", None)):
        cases += [(f"gaussian std=1, {label}", SGGMechanism.gaussian(1, 1.0, granularity=gran)),
                  (f"laplace b=1, {label}", SGGMechanism(1, 1.0, k=1.0, p=1.0, granularity=gran))]
    for name, mech in cases:
        gen = np.random.default_rng(seed)
        y0 = mech.randomize(np.zeros((n, 1)), rng=int(gen.integers(2**62)))[:, 0]
        y1 = mech.randomize(np.ones((n, 1)), rng=int(gen.integers(2**62)))[:, 0]
        est = empirical_delta(score(y0), score(y1), eps)
        out[name] = {"epsilons": eps.tolist(), "empirical_delta": est.estimate.tolist(),
                     "lower": est.lower.tolist(),
                     "claimed_delta": np.asarray(mech.delta_for_epsilon(eps)).tolist()}
    return out


def _breast_cancer() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    return (X - X.mean(0)) / X.std(0), y.astype(np.float64)


def training_audits(canaries: list[int], seeds: list[int], progress: bool) -> list[dict[str, Any]]:
    import torch

    from rml_fast.privacy import dp_c4
    from rml_fast.privacy.auditing import audit_dp_training

    X, y = _breast_cancer()
    q, steps = 0.1, 100
    sigma = dp_c4.calibrate_noise_multiplier(2.0, DELTA, q, steps)
    claimed = dp_c4.privacy_spent(sigma, q, steps, DELTA)
    rows = []
    for m in canaries:
        for algorithm in ("dpsgd", "dpc4"):
            for variant in ("correct", "clipping skipped", "noise halved"):
                for seed in seeds:
                    noise = sigma / 2 if variant == "noise halved" else sigma
                    patch = (mock.patch.object(dp_c4, "clip_factors",
                                               lambda norms, c: torch.ones_like(norms))
                             if variant == "clipping skipped" else mock.MagicMock())
                    t0 = time.perf_counter()
                    with patch:
                        res = audit_dp_training(
                            X, y, algorithm=algorithm, noise_multiplier=noise, num_canaries=m,
                            canary_scale=30.0, sample_rate=q, steps=steps, lr=0.5,
                            target_delta=DELTA, rng=seed, progress=progress)
                    row = {
                        "algorithm": algorithm, "variant": variant, "num_canaries": m,
                        "seed": seed, "claimed_epsilon": claimed,
                        "actual_epsilon": res.claimed_epsilon,  # the accountant's, for the noise used
                        "epsilon_lower_bound": res.epsilon_lower_bound,
                        "caught": res.epsilon_lower_bound > claimed,
                        "num_guesses": res.audit.num_guesses, "num_correct": res.audit.num_correct,
                        "train_accuracy": res.train_accuracy, "noise_multiplier": noise,
                        "seconds": time.perf_counter() - t0,
                    }
                    rows.append(row)
                    print(f"  m={m:5d} {algorithm:5s} {variant:16s} seed={seed} "
                          f"claimed={claimed:.3f} lower bound={row['epsilon_lower_bound']:.3f} "
                          f"({row['num_correct']}/{row['num_guesses']}) caught={row['caught']} "
                          f"acc={row['train_accuracy']:.3f} ({row['seconds']:.1f} s)", flush=True)
    return rows


def plot_mechanisms(records: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(records)
    cols = 4
    fig, axes = plt.subplots(math.ceil(k / cols), cols, figsize=(4.2 * cols, 3.4 * math.ceil(k / cols)))
    for ax, rec in zip(axes.flat, records, strict=False):
        c, w = rec["correct"], rec["scale_0.8"]
        e = np.asarray(c["epsilons"])
        ax.plot(e, c["claimed_delta"], "k-", lw=1.5, label="claimed (PLD accountant)")
        for r, col, lab in ((c, "tab:blue", "sampler"), (w, "tab:red", "scale x0.8 (wrong)")):
            est, lo, hi = (np.asarray(r[x]) for x in ("empirical_delta", "lower", "upper"))
            ax.errorbar(e, est, yerr=[est - lo, hi - est], fmt="o", ms=3, color=col, capsize=2,
                        label=f"{lab}: empirical, 95% simult.")
        ax.set_title(rec["name"], fontsize=9)
        ax.set_xlabel("epsilon")
        ax.set_ylabel("delta(epsilon)")
        ax.set_ylim(bottom=-0.01)
    for ax in list(axes.flat)[k:]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower right", fontsize=9)
    n = records[0]["correct"]["n_samples"]
    fig.suptitle(f"Mechanism audits: empirical vs claimed delta(eps), n = {n:,} per neighbour")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_training(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [(a, v) for a in ("dpsgd", "dpc4") for v in ("correct", "noise halved", "clipping skipped")]
    ms = sorted({r["num_canaries"] for r in rows})
    fig, ax = plt.subplots(figsize=(10, 4.2))
    width = 0.8 / (len(ms) + 1)
    claimed = rows[0]["claimed_epsilon"]
    for gi, (a, v) in enumerate(groups):
        ax.bar(gi, claimed, width, color="0.8", edgecolor="k", label="claimed epsilon" if gi == 0 else None)
        for j, m in enumerate(ms):
            lbs = [r["epsilon_lower_bound"] for r in rows
                   if r["algorithm"] == a and r["variant"] == v and r["num_canaries"] == m]
            ax.bar(gi + (j + 1) * width, np.mean(lbs), width, color=f"C{j}",
                   yerr=[[np.mean(lbs) - min(lbs)], [max(lbs) - np.mean(lbs)]] if len(lbs) > 1 else None,
                   label=f"empirical lower bound, m={m}" if gi == 0 else None)
        actual = [r["actual_epsilon"] for r in rows if r["algorithm"] == a and r["variant"] == v]
        if v == "noise halved":
            ax.plot(gi, actual[0], "kv", label="actual epsilon (sigma/2)" if gi == 1 else None)
    ax.axhline(claimed, color="k", lw=0.8, ls="--")
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{'DP-SGD' if a == 'dpsgd' else 'DP-C4'}\n{v}" for a, v in groups], fontsize=9)
    ax.set_ylabel("epsilon (delta = 1e-6)")
    ax.set_title("One-run canary audits (Steinke et al. 2023), 95% confidence; caught = lower bound "
                 "> claimed\n(bars: mean over seeds, whiskers: min-max)", fontsize=10)
    ax.set_ylim(0, 8.0)
    ax.legend(fontsize=8, loc="upper center", ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(*, seed: int = 0, quick: bool = False, out: Path | None = None, progress: bool = False) -> dict[str, Any]:
    """Run both audits; returns the JSON-ready result (and writes the figures when ``out``)."""
    n = 200_000 if quick else 4_000_000
    canaries = [1000] if quick else [1000, 5000]
    seeds = [seed] if quick else [seed, seed + 1, seed + 2]
    t0 = time.perf_counter()
    print(f"mechanism audits, n = {n:,} per neighbouring input", flush=True)
    mech = mechanism_audits(n, seed, h=1e-3)
    atom = laplace_atom(n, seed)
    for label, rec in atom.items():
        print(f"  Laplace at the atom eps = 1, {label}: empirical delta "
              f"{rec['empirical_delta']:.4f} (lower bound {rec['lower']:.4f}) vs claimed "
              f"{rec['claimed_delta']}", flush=True)
    lsb = float_lsb(n, seed)
    for name, rec in lsb.items():
        print(f"  {name}: LSB set, delta lower bound {np.round(rec['lower'], 4)} vs claimed "
              f"{np.round(rec['claimed_delta'], 8)} at eps = {rec['epsilons']}", flush=True)
    print("training audits (breast cancer, claimed (2, 1e-6)-DP, 100 steps, q = 0.1)", flush=True)
    train = training_audits(canaries, seeds, progress)
    result = {
        "meta": {"quick": quick, "seed": seed, "python": sys.version.split()[0],
                 "machine": platform.machine(), "seconds": time.perf_counter() - t0,
                 "confidence": 0.95, "delta": DELTA},
        "mechanisms": mech, "laplace_float_atom": atom, "float_lsb": lsb, "training": train,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        plot_mechanisms(mech, out / "privacy_audit_mechanisms.png")
        plot_training(train, out / "privacy_audit_training.png")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "privacy_audit.json")
    ap.add_argument("--img-dir", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--replot", action="store_true", help="redraw the figures from --json only")
    args = ap.parse_args()
    if args.replot:
        saved = json.loads(args.json.read_text())
        plot_mechanisms(saved["mechanisms"], args.img_dir / "privacy_audit_mechanisms.png")
        plot_training(saved["training"], args.img_dir / "privacy_audit_training.png")
        return
    import torch

    torch.set_num_threads(1)
    result = run(seed=args.seed, quick=args.quick, out=args.img_dir, progress=args.progress)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1, default=float) + "\n")
    print(f"wrote {args.json} and {args.img_dir}/privacy_audit_*.png "
          f"({result['meta']['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
