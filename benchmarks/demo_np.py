"""Demo: train a small SFConvCNP and a grid ConvCNP on GP-RBF tasks for the same wall-clock
budget on the CPU, print held-out log-likelihoods next to the exact GP oracle, and plot
predictive bands to PNG.

    python benchmarks/demo_np.py --budget 120 --out np_demo.png

The ConvCNP baseline (Gordon et al., 2020) is written here in ~40 lines: a Gaussian SetConv
with density channel onto a uniform grid (32 points per unit), a 1-D CNN, and a SetConv back to
the queries; it has about as many parameters as the SFConvCNP it is compared with.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from torch import nn

from rml_fast.neural_processes import SFConvCNP, nll_loss
from rml_fast.neural_processes.data import GPGenerator, batch_oracle_loglik
from rml_fast.neural_processes.train import evaluate


class ConvCNP(nn.Module):
    """Grid ConvCNP: SetConv (density + data) -> CNN on a uniform grid -> SetConv -> Normal."""

    def __init__(self, channels: int = 64, layers: int = 6, kernel: int = 9, ppu: int = 32, margin: float = 1.0):
        super().__init__()
        self.ppu, self.margin = ppu, margin
        init = math.log(math.expm1(2.0 / ppu))
        self.log_ell_in = nn.Parameter(torch.full((2,), init))
        self.log_ell_out = nn.Parameter(torch.tensor(init))
        convs: list[nn.Module] = [nn.Conv1d(2, channels, kernel, padding=kernel // 2)]
        for _ in range(layers - 2):
            convs += [nn.ReLU(), nn.Conv1d(channels, channels, kernel, padding=kernel // 2)]
        convs += [nn.ReLU(), nn.Conv1d(channels, channels, kernel, padding=kernel // 2)]
        self.cnn = nn.Sequential(*convs)
        self.head = nn.Sequential(nn.Linear(channels, channels), nn.ReLU(), nn.Linear(channels, 2))

    def forward(self, xc, yc, xq):
        lo = float(torch.minimum(xc.min(), xq.min())) - self.margin
        hi = float(torch.maximum(xc.max(), xq.max())) + self.margin
        grid = torch.linspace(lo, hi, int((hi - lo) * self.ppu) + 1, dtype=xc.dtype)
        ell = nn.functional.softplus(self.log_ell_in)
        d2 = (grid[None, :, None] - xc[..., 0][:, None, :]) ** 2  # (B, G, N)
        dens = torch.exp(-d2 / (2 * ell[0] ** 2)).sum(-1)
        data = (torch.exp(-d2 / (2 * ell[1] ** 2)) @ yc)[..., 0] / (dens + 1e-8)
        h = self.cnn(torch.stack([dens, data], 1))  # (B, C, G)
        w = torch.exp(-((xq[..., 0][:, :, None] - grid[None, None, :]) ** 2) / (2 * nn.functional.softplus(self.log_ell_out) ** 2))
        out = self.head(w @ h.transpose(1, 2))
        return torch.distributions.Normal(out[..., :1], nn.functional.softplus(out[..., 1:]) + 1e-6)


def train_for(model: nn.Module, seconds: float, lr: float, seed: int) -> int:
    gen = GPGenerator("rbf", batch_size=16, rng=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    t0, steps = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        b = gen.sample()
        opt.zero_grad()
        nll_loss(model(b.xc, b.yc, b.xq), b.yq).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        steps += 1
    return steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=120.0, help="training seconds per model")
    p.add_argument("--out", default="np_demo.png", help="PNG of predictive bands ('' to skip)")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    test = GPGenerator("rbf", batch_size=16, num_target=128, rng=2026).batches(8)
    oracle = float(np.mean([batch_oracle_loglik(b) for b in test]))
    models = {
        "SFConvCNP": SFConvCNP(embed_channels=32, feedforward_channels=64, num_layers=2, groups=4),
        "ConvCNP (grid)": ConvCNP(),
    }
    print(f"{'model':<16}{'params':>9}{'steps':>7}{'test loglik':>13}{'GP oracle':>11}")
    for name, m in models.items():
        steps = train_for(m, args.budget, 2e-3, seed=1)
        ll = evaluate(m, test)["loglik"]
        n = sum(p.numel() for p in m.parameters())
        print(f"{name:<16}{n:>9}{steps:>7}{ll:>13.3f}{oracle:>11.3f}")
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        gen = GPGenerator("rbf", batch_size=3, num_context=10, num_target=1, rng=7)
        b = gen.sample()
        xs = torch.linspace(-3, 3, 300)[None, :, None].expand(3, -1, -1).contiguous()
        fig, axes = plt.subplots(len(models), 3, figsize=(12, 3 * len(models)), squeeze=False)
        for r, (name, m) in enumerate(models.items()):
            with torch.no_grad():
                d = m(b.xc, b.yc, xs)
            for k in range(3):
                ax = axes[r][k]
                mu, sd = d.loc[k, :, 0], d.scale[k, :, 0]
                ax.plot(xs[k, :, 0], mu, color="tab:blue")
                ax.fill_between(xs[k, :, 0], mu - 2 * sd, mu + 2 * sd, alpha=0.3, color="tab:blue")
                ax.scatter(b.xc[k, :, 0], b.yc[k, :, 0], color="black", s=12)
                ax.set_title(f"{name}, task {k}")
        fig.tight_layout()
        fig.savefig(args.out, dpi=100)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
