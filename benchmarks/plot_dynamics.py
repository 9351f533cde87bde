"""Figures of docs/interp.md for TRACED, behavioural geometry and belief dynamics.

``python benchmarks/plot_dynamics.py [--out docs/img]`` writes ``traced.png``,
``behavior_geometry.png`` and ``belief_dynamics.png`` (seconds on a CPU, no network).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics import roc_auc_score

from rml_fast.interp.behavior_geometry import (
    SyntheticAgent,
    collect_forced_choice,
    cosine_similarity_rows,
    count_matrix,
    ppmi,
    rsa,
)
from rml_fast.interp.belief_dynamics import BeliefDynamicsModel, simulate_curves
from rml_fast.interp.traced import TracedScorer, kinematics, simulate_trajectories, trace_features


def traced(out: Path) -> None:
    trajs, y = simulate_trajectories(600, rng=0)
    Z = trace_features(trajs)
    clf = TracedScorer().fit(Z[:400], y[:400])
    auc = roc_auc_score(y[400:], clf.decision_function(Z[400:]))
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.6))
    for label, name, c in ((1, "directed (correct)", "C0"), (0, "looping (hallucinated)", "C3")):
        m = y == label
        ax[0].scatter(Z[m, 0], Z[m, 4], s=6, alpha=0.5, c=c, label=name)
        k = kinematics(trajs[int(np.flatnonzero(m)[0])])
        ax[1].plot(k["cumulative_progress"], c=c, label=name)
    ax[0].set_xlabel("efficiency E = displacement / path length")
    ax[0].set_ylabel("std of turning angle (rad)")
    ax[0].set_title(f"TRACED features; Gaussian scorer AUROC {auc:.3f}")
    ax[0].legend(fontsize=8)
    ax[1].set_xlabel("step t")
    ax[1].set_ylabel("cumulative progress P_t")
    ax[1].set_title("certainty accumulation of one trace each")
    fig.tight_layout()
    fig.savefig(out / "traced.png", dpi=120)
    plt.close(fig)


def behavior_geometry(out: Path) -> None:
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(60)]
    Z = rng.normal(size=(60, 6))
    truth = cosine_similarity_rows(Z)
    trials = [1, 2, 4, 8, 16, 32]
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for beta in (0.0, 2.0, 6.0):
        curve = []
        for t in trials:
            agent = SyntheticAgent(words, Z, beta, rng=1)
            res = collect_forced_choice(
                agent.forced_choice, words, words, n_candidates=8, trials_per_cue=t, rng=1
            )
            C, _, _ = count_matrix(res["cues"], res["responses"], vocab=words)
            curve.append(rsa(cosine_similarity_rows(ppmi(C)), truth))
        ax.plot(trials, curve, marker="o", label=f"beta = {beta:g}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("forced-choice trials per cue")
    ax.set_ylabel("RSA: PPMI-cosine vs latent cosine")
    ax.set_title("Behavioural geometry recovers the latent one")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "behavior_geometry.png", dpi=120)
    plt.close(fig)


def belief_dynamics(out: Path) -> None:
    Ns = np.array([0, 1, 2, 4, 8, 16, 32, 64, 128], dtype=float)
    ms = np.linspace(-2, 2, 5)
    N, m = np.meshgrid(Ns, ms)
    X = np.column_stack([N.ravel(), m.ravel()])
    y, n = simulate_curves(X, b=-3.0, a=[1.5], gamma=1.2, alpha=0.3, n_trials=200, rng=0)
    model = BeliefDynamicsModel(loss="binomial").fit(X, y, sample_weight=n)
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.6))
    grid = np.geomspace(0.5, 128, 200)
    for j, mm in enumerate(ms):
        sel = X[:, 1] == mm
        ax[0].scatter(np.maximum(X[sel, 0], 0.5), y[sel], s=12, c=f"C{j}")
        ax[0].plot(
            grid,
            model.predict(np.column_stack([grid, np.full_like(grid, mm)])),
            c=f"C{j}",
            label=f"m = {mm:+.0f}",
        )
    ax[0].set_xscale("log")
    ax[0].set_xlabel("in-context examples N (0 plotted at 0.5)")
    ax[0].set_ylabel("P(behaviour)")
    ax[0].set_title("sigmoidal ICL curves, shifted by steering")
    ax[0].legend(fontsize=7)
    mg = np.linspace(-2.5, 2.5, 200)
    Nstar = model.phase_boundary_N(mg[:, None])
    NN, MM = np.meshgrid(np.geomspace(0.5, 128, 120), mg)
    P = model.belief(np.column_stack([NN.ravel(), MM.ravel()])).reshape(NN.shape)
    cs = ax[1].contourf(NN, MM, P, levels=11, cmap="RdBu_r")
    ax[1].plot(np.where(Nstar > 0, Nstar, np.nan), mg, "k--", label="phase boundary N*(m)")
    ax[1].set_xscale("log")
    ax[1].set_xlim(0.5, 128)
    ax[1].set_xlabel("N")
    ax[1].set_ylabel("steering magnitude m")
    ax[1].set_title("belief p(c | N, m)")
    ax[1].legend(fontsize=7, loc="lower right")
    fig.colorbar(cs, ax=ax[1])
    fig.tight_layout()
    fig.savefig(out / "belief_dynamics.png", dpi=120)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "img"))
    out = Path(p.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    traced(out)
    behavior_geometry(out)
    belief_dynamics(out)
    print(f"wrote traced.png, behavior_geometry.png, belief_dynamics.png to {out}")


if __name__ == "__main__":
    main()
