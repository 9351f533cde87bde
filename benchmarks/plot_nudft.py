"""Figure of the nudft suite for ``docs/neural_processes.md``: ``python benchmarks/plot_nudft.py
[RESULTS_JSON] [OUT_PNG]`` (defaults: ``benchmarks/results/nudft.json``,
``docs/img/nudft.png``; needs matplotlib).

Left: speed-up of the SFConv layer (forward + backward) over each peer per layer case. Right:
time per step against the context size ``N`` for our layer and the TNP-style self-attention
layer of the scaling cases (log-log; slopes 1 and 2 for reference).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def _label(case: dict) -> str:
    return " ".join(f"{k}={case[k]}" for k in ("d", "N", "M", "C"))


def main(argv: list[str] | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args = sys.argv[1:] if argv is None else argv
    src = Path(args[0]) if args else _ROOT / "benchmarks" / "results" / "nudft.json"
    out = Path(args[1]) if len(args) > 1 else _ROOT / "docs" / "img" / "nudft.png"
    rows = json.loads(src.read_text())
    layer = [r for r in rows if r["case"]["kind"] == "layer"]
    scaling = [r for r in rows if r["case"]["kind"] == "scaling"]

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5.4), gridspec_kw={"width_ratios": [2.2, 1]})
    cases = list(dict.fromkeys(_label(r["case"]) for r in layer))
    peers = list(dict.fromkeys(r["peer"] for r in layer))
    width = 0.8 / len(peers)
    for j, peer in enumerate(peers):
        xs, ys = [], []
        for i, c in enumerate(cases):
            for r in layer:
                if r["peer"] == peer and _label(r["case"]) == c:
                    xs.append(i + (j - (len(peers) - 1) / 2) * width)
                    ys.append(r["ratio"])
        ax.bar(xs, ys, width, label=peer)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(3.0, color="grey", lw=0.8, ls="--", label="goal vs einsum (3x)")
    ax.set_yscale("log")
    ax.set_xticks(range(len(cases)), cases, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("speed-up of ours (peer time / our time)")
    ax.set_title("SFConv layer, forward + backward, float32 CPU")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3)

    ns = [r["case"]["N"] for r in scaling]
    ours = [r["ours_median_s"] * 1e3 for r in scaling]
    att = [r["peer_median_s"] * 1e3 for r in scaling]
    bx.loglog(ns, ours, "o-", label="ours (SFConv, NUFFT)")
    bx.loglog(ns, att, "s-", label="self-attention (TNP)")
    for slope, base, style in ((1, ours, ":"), (2, att, "--")):
        bx.loglog(ns, [base[0] * (n / ns[0]) ** slope for n in ns], style, color="grey", lw=0.8)
    bx.set_xticks(ns, [str(n) for n in ns])
    bx.minorticks_off()
    bx.set_xlabel("context points N (B = 8, C = 128)")
    bx.set_ylabel("ms per forward + backward")
    bx.set_title("scaling in N (grey: slopes 1 and 2)")
    bx.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out


if __name__ == "__main__":
    print(main())
