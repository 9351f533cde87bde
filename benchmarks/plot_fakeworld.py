"""FakeWorld figure for the evaluation docs: ``python benchmarks/plot_fakeworld.py
[--out docs/img/fakeworld.png] [--quick]`` (needs matplotlib).

Left: FakeWorld-mini examples (:func:`~rml_fast.evaluation.fakeworld.make_fakeworld_mini`), one
real digit and one per manipulation, with their captions and content labels. Right: two-axis
metrics with 95 % bootstrap intervals (stratified by quadrant, B = 1000) on 1000 test instances
(``--quick``: 300) for the constant "real & veracious" baseline, the pixel-statistics +
digit-caption :class:`~rml_fast.evaluation.fakeworld.OmniChecker` pipeline (trained on 1500
other instances) and the oracle. Prints the metric table of each detector.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from rml_fast.evaluation.fakeworld import (
    ConstantDetector,
    DigitCaptionChecker,
    OmniChecker,
    OracleDetector,
    PixelStatsDetector,
    TwoAxisEvaluator,
    make_fakeworld_mini,
)

_ROOT = Path(__file__).resolve().parent.parent
METRICS = ("authenticity/balanced_accuracy", "content/balanced_accuracy", "joint/exact_match",
           "joint/quadrant_accuracy", "joint/fake_f1", "rationale/token_f1")


def run(quick: bool = False) -> dict:
    train = make_fakeworld_mini(600 if quick else 1500, random_state=1)
    test = make_fakeworld_mini(300 if quick else 1000, random_state=2)
    pix = PixelStatsDetector().fit(train)
    chk = DigitCaptionChecker().fit(train)
    agent = OmniChecker({"image": lambda x: pix.score_payload("image", x),
                         "video": lambda x: pix.score_payload("video", x)},
                        consistency=chk.consistency, factcheck=chk.factcheck, output="scores")
    ev = TwoAxisEvaluator(n_bootstrap=1000, random_state=0)
    reports = {"constant": ev.evaluate(ConstantDetector(), test),
               "pixel-stats + digit-caption": ev.evaluate(agent, test),
               "oracle": ev.evaluate(OracleDetector(), test)}
    return {"test": test, "reports": reports}


def plot(result: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    test, reports = result["test"], result["reports"]
    fig = plt.figure(figsize=(12, 4.2))
    gs = fig.add_gridspec(2, 6, width_ratios=[1, 1, 0.15, 2.2, 2.2, 2.2])
    picks = {"real": None, "pca_resynthesis": None, "class_blend": None, "patch_splice": None}
    for inst in test:
        key = "real" if inst.media_labels["image"] == 0 else next(
            (k for k, w in (("pca_resynthesis", "low-rank"), ("class_blend", "blend"),
                            ("patch_splice", "spliced")) if w in inst.rationale), None)
        if key and picks[key] is None:
            picks[key] = inst
    for ax_i, (key, inst) in enumerate(picks.items()):
        ax = fig.add_subplot(gs[ax_i // 2, ax_i % 2])
        ax.imshow(inst.media["image"], cmap="gray_r", vmin=0, vmax=1)
        ax.set_title(f"{key}\n'{inst.media['text']}'\n{inst.content_label}", fontsize=7)
        ax.axis("off")
    ax = fig.add_subplot(gs[:, 3:])
    width = 0.8 / len(reports)
    x = np.arange(len(METRICS))
    for j, (name, rep) in enumerate(reports.items()):
        vals = np.array([rep.metrics[m] for m in METRICS])
        lo = np.array([rep.ci[m][0] for m in METRICS])
        hi = np.array([rep.ci[m][1] for m in METRICS])
        ax.bar(x + (j - 1) * width, vals, width, label=name,
               yerr=np.vstack([vals - lo, hi - vals]), capsize=2)
    ax.set_xticks(x, [m.replace("/", "\n").replace("_", " ") for m in METRICS], fontsize=8)
    ax.set_ylim(0, 1.2)
    ax.set_ylabel("score (95 % bootstrap CI)")
    ax.legend(fontsize=8, loc="upper center", ncol=3)
    ax.set_title(f"FakeWorld-mini, {len(test)} test instances", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=_ROOT / "docs" / "img" / "fakeworld.png")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    result = run(args.quick)
    for name, rep in result["reports"].items():
        print(f"== {name}\n{rep.table()}")
    print(plot(result, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
