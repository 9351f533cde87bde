"""Figure for docs/interp.md (MFA): regions, local subspaces, steering, EM vs Adam.

Left: three elongated 2-D regions sampled from a known MFA, the fitted regions (2-sigma ellipses
of ``W_k W_kᵀ + Ψ``, local directions ``W_k``) and centroid steering of one point toward
region 2 for α = 0 … 1 (colour = responsibility of the target). Right: mean log-likelihood per
iteration of exact EM and per epoch of minibatch Adam (the reference recipe).

Run: ``python benchmarks/plot_mfa.py [--out docs/img/mfa_regions.png]`` (about 10 s).
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np

from rml_fast.interp.mfa import MixtureOfFactorAnalyzers, mfa_steer


def main(out: str = "docs/img/mfa_regions.png") -> Path:
    """Draw the figure to ``out`` and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Ellipse

    truth = MixtureOfFactorAnalyzers.from_params(
        np.array([[-4.0, 0.0], [3.0, 3.0], [3.0, -3.0]]),
        np.array([[[0.3], [2.0]], [[1.8], [0.6]], [[1.5], [-1.2]]]),
        np.array([0.15, 0.15]), np.array([0.4, 0.3, 0.3]))
    X, _ = truth.sample(1500, rng=0)
    em = MixtureOfFactorAnalyzers(3, 1, tol=1e-8, max_iter=500, random_state=0).fit(X)
    paper_init = {"init_loadings": "random", "random_state": 0}  # the reference: random W
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        em_r = MixtureOfFactorAnalyzers(3, 1, tol=0.0, max_iter=40, **paper_init).fit(X)
        ad = MixtureOfFactorAnalyzers(3, 1, solver="adam", lr=2e-2, batch_size=128,
                                      max_epochs=40, tol=0.0, dtype="float64",
                                      **paper_init).fit(X)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.6))
    lab = em.predict(X)
    ax.scatter(X[:, 0], X[:, 1], c=lab, s=4, cmap="tab10", vmin=0, vmax=9, alpha=0.4)
    for k in range(3):
        C = em.loadings_[k] @ em.loadings_[k].T + np.diag(em.psi_)
        vals, vecs = np.linalg.eigh(C)
        ang = np.degrees(np.arctan2(vecs[1, 1], vecs[0, 1]))
        ax.add_patch(Ellipse(em.means_[k], 4 * np.sqrt(vals[1]), 4 * np.sqrt(vals[0]),
                             angle=ang, fill=False, color=f"C{k}", lw=2))
        w = em.loadings_[k][:, 0]
        ax.arrow(*em.means_[k], *w, color="k", width=0.05, length_includes_head=True)
        ax.text(*(em.means_[k] + 0.3), f"region {k}", fontsize=9)
    target = int(em.predict(truth.means_[1:2])[0])
    x0 = np.array([[-3.0, -2.0]])
    alphas = np.linspace(0, 1, 11)
    path = np.concatenate([mfa_steer(x0, em, k=target, alpha=a) for a in alphas])
    resp = em.predict_proba(path)[:, target]
    sc = ax.scatter(path[:, 0], path[:, 1], c=resp, cmap="viridis", vmin=0, vmax=1, s=40,
                    edgecolor="k", zorder=3)
    fig.colorbar(sc, ax=ax, label=f"responsibility of region {target}")
    ax.set_title("regions, directions W_k, steering α = 0…1")
    ax.set_aspect("equal")
    best = max(em.score(X), em_r.score(X), ad.score(X))
    gap_em = best - np.asarray(em_r.loglik_history_)
    gap_ad = best - np.asarray(ad.loglik_history_)
    bx.semilogy(np.arange(len(gap_em)), np.maximum(gap_em, 1e-6), label="EM (per iteration)")
    bx.semilogy(np.arange(1, len(gap_ad) + 1), np.maximum(gap_ad, 1e-6),
                label="Adam, lr 2e-2, batch 128 (per epoch)")
    bx.set_xlabel("iteration / epoch (k-means means, random loadings)")
    bx.set_ylabel("gap to the best mean log-likelihood")
    bx.legend()
    bx.set_title("exact EM vs minibatch Adam on the NLL")
    fig.tight_layout()
    outp = Path(out)
    outp.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(outp, dpi=110)
    plt.close(fig)
    return outp


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img/mfa_regions.png")
    print(main(parser.parse_args().out))
