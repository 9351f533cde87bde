"""Figure of the nudft suite for ``docs/neural_processes.md``: ``python benchmarks/plot_nudft.py
[RESULTS_JSON] [OUT_PNG]`` (defaults: ``benchmarks/results/nudft.json``,
``docs/img/nudft.png``; needs matplotlib).

Left: speed-up of the SFConv layer (forward + backward) over each peer per layer case. Right:
time per step against the context size ``N`` for our layer and the TNP-style self-attention
layer of the scaling cases (log-log; slopes 1 and 2 for reference). Every ratio is written on
its bar; a note names the machine (from the rows) and quick mode; skipped peer rows are named.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def _label(case: dict) -> str:
    return " ".join(f"{k}={case[k]}" for k in ("d", "N", "M", "C"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="plot_nudft.py", description=__doc__.splitlines()[0])
    p.add_argument(
        "results",
        nargs="?",
        type=Path,
        default=_ROOT / "benchmarks" / "results" / "nudft.json",
        help="rows of the nudft suite (default: benchmarks/results/nudft.json)",
    )
    p.add_argument(
        "out",
        nargs="?",
        type=Path,
        default=_ROOT / "docs" / "img" / "nudft.png",
        help="PNG to write (default: docs/img/nudft.png)",
    )
    return p


def main(argv: list[str] | None = None) -> Path:
    ap = _parser()
    args = ap.parse_args(argv)
    src, out = args.results, args.out
    try:
        rows = json.loads(src.read_text())
    except (OSError, ValueError) as exc:
        ap.error(f"cannot read the results {src}: {exc}")
    try:
        import matplotlib
    except ImportError:
        ap.error("plotting needs matplotlib: pip install 'rml_fast[bench]'")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rml_fast.benchmarking import machine_note

    timed = [r for r in rows if not r.get("skipped") and r.get("ratio") is not None]
    layer = [r for r in timed if r["case"].get("kind") == "layer"]
    scaling = [r for r in timed if r["case"].get("kind") == "scaling"]
    if not layer:
        ap.error(f"{src} has no timed layer rows of the nudft suite")
    quick = any(r.get("quick") for r in rows) or src.name.endswith(".quick.json")

    machine = next((r["machine"] for r in rows if r.get("machine")), None)
    threads = (machine or {}).get("torch_threads")
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5.8), gridspec_kw={"width_ratios": [2.2, 1]})
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
        for x, y in zip(xs, ys, strict=True):  # the value on each bar
            ax.text(x, y * 1.04, f"{y:.3g}", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(3.0, color="grey", lw=0.8, ls="--", label="goal vs einsum (3x)")
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.set_ylim(min(lo, 0.8), hi * 1.8)  # headroom for the values
    ax.set_xticks(range(len(cases)), cases, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("speed-up of ours (peer time / our time)")
    ax.set_title(
        "SFConv layer, forward + backward, float32 CPU"
        + (f", torch threads {threads}" if threads else "")
        + (" (quick mode)" if quick else "")
    )
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3)

    if not scaling:
        bx.text(0.5, 0.5, "no scaling rows (a --quick run has none)", ha="center",
                va="center", transform=bx.transAxes)
        bx.set_axis_off()
    ns = [r["case"]["N"] for r in scaling]
    ours = [r["ours_median_s"] * 1e3 for r in scaling]
    att = [r["peer_median_s"] * 1e3 for r in scaling]
    bx.loglog(ns, ours, "o-", label="ours (SFConv, NUFFT)")
    bx.loglog(ns, att, "s-", label="self-attention (TNP)")
    for slope, base, style in ((1, ours, ":"), (2, att, "--")):
        if base:
            bx.loglog(ns, [base[0] * (n / ns[0]) ** slope for n in ns], style, color="grey",
                      lw=0.8)
    for n, o, a in zip(ns, ours, att, strict=True):  # the attention/ours ratio at each N
        bx.annotate(f"{a / o:.3g}x", (n, (o * a) ** 0.5), xytext=(4, 0),
                    textcoords="offset points", ha="left", va="center", fontsize=7,
                    color="dimgray")
    if scaling:
        bx.set_xticks(ns, [str(n) for n in ns])
        bx.set_xlim(min(ns) / 1.4, max(ns) * 1.8)
        bx.minorticks_off()
        bx.set_xlabel("context points N (B = 8, C = 128)")
        bx.set_ylabel("ms per forward + backward")
        bx.set_title("scaling in N (grey: slopes 1 and 2;\nlabels: attention time / ours)",
                     fontsize=10)
        bx.legend(fontsize=8)
    skipped = sorted({f"{r['peer']} ({r['skipped']})" for r in rows if r.get("skipped")})
    note = machine_note(machine, quick=quick) + (
        "\nskipped: " + "; ".join(skipped) if skipped else ""
    )
    fig.text(0.01, 0.01, note, fontsize=7, color="dimgray", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03 + 0.03 * note.count("\n"), 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(main())
