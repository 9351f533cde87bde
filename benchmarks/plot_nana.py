"""Draw docs/img/nana_modadd.png: NaNA on a modular-addition model, trained vs random init.

``python benchmarks/plot_nana.py [--out PATH] [--steps N]`` trains a small modular-addition
transformer (p = 29, 1 layer, D = 64, d_mlp = 256, ReLU, full-batch AdamW with weight decay 1,
about 10 s on one core, the variant used by tests/interp/test_nana.py) and plots (a) the
singular values of its ``W_out`` next to a random-init model's, (b) the unembedding readouts of
the top four effector units over the answers 0..p-1, (c) the share of each readout's power in
its strongest Fourier frequency (trained units, random directions of the trained model, units of
the random-init model).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from rml_fast.interp.nana import NativeNetworkAnatomy, fourier_concentration
from rml_fast.models import TinyConfig, TinyTransformer
from rml_fast.models.tasks import make_task
from rml_fast.models.train import train_tiny

P = 29


def main(argv: list[str] | None = None) -> Path:
    """Train, analyse and save the figure; returns its path."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs/img/nana_modadd.png"))
    ap.add_argument("--steps", type=int, default=1000)
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    torch.set_num_threads(1)
    task = make_task("modadd", p=P, train_frac=0.5)
    cfg = TinyConfig(n_layers=1, d_model=64, n_heads=4, d_mlp=256, ln=False, act="relu",
                     d_vocab=task.d_vocab, n_ctx=3)  # fmt: skip
    trained = train_tiny(cfg, task, steps=args.steps, lr=5e-3, weight_decay=1.0, optimizer="adamw",
                         batch=10**6, progress=True, cache=False)  # fmt: skip
    random = TinyTransformer(cfg, seed=0).eval()
    nt = NativeNetworkAnatomy(trained, matrices=("mlp_out",)).fit()
    nr = NativeNetworkAnatomy(random, matrices=("mlp_out",)).fit()
    Rt = nt.readout(0)[:, :P].numpy()
    Rr = nr.readout(0)[:, :P].numpy()
    dirs = np.random.default_rng(0).standard_normal((64, 64)) @ trained.unembed.detach().numpy()[:, :P]

    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    ax[0].semilogy(nt.banks_[(0, "mlp_out")].S.numpy(), label="trained")
    ax[0].semilogy(nr.banks_[(0, "mlp_out")].S.numpy(), label="random init")
    ax[0].set(title="(a) gains $\\sigma_i$ of $W_{out}$", xlabel="unit i")
    ax[0].legend()
    for i in range(4):
        ax[1].plot(Rt[i] / np.abs(Rt[i]).max() + 2.2 * i, marker=".", lw=1)
    ax[1].set(title="(b) effector readouts $C(v_i)\\,W_U$, units 0-3", xlabel="answer c (0..p-1)",
              yticks=[])  # fmt: skip
    data = [fourier_concentration(Rt[:8]), fourier_concentration(dirs), fourier_concentration(Rr[:8])]
    ax[2].boxplot(data)
    ax[2].set_xticks([1, 2, 3], ["trained\ntop-8 units", "trained\nrandom dirs", "random init\ntop-8 units"])
    ax[2].set(title="(c) power share of the top Fourier frequency", ylim=(0, 1))
    fig.tight_layout()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}; mean top-frequency share: trained {data[0].mean():.2f}, "
          f"random directions {data[1].mean():.2f}, random init {data[2].mean():.2f}")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
