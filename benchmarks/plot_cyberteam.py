"""CYBERTEAM figure for the evaluation docs: ``python benchmarks/plot_cyberteam.py
[--out docs/img/cyberteam_workflow.png] [--quick]`` (needs matplotlib).

Left: the example workflow of :func:`~rml_fast.evaluation.cyberteam.example_tasks` as a DAG,
one column per stage, each node labelled with its modules and coloured by its score on the
four example reports (:func:`~rml_fast.evaluation.cyberteam.example_samples`, stand-in
:func:`~rml_fast.evaluation.cyberteam.heuristic_llm`). Right: the distribution of base scores
over every CVSS v3.1 base vector (2592) and every CVSS v4.0 base vector (104,976; ``--quick``:
a random 5000), from :func:`cvss31_base` and :func:`cvss40_score`. Prints the numbers.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

from rml_fast.evaluation.cyberteam import (
    PRIMARY_METRIC,
    STAGES,
    Workflow,
    cvss31_base,
    cvss40_score,
    example_knowledge,
    example_samples,
    example_tasks,
    heuristic_llm,
)

_ROOT = Path(__file__).resolve().parent.parent


def v31_scores() -> np.ndarray:
    vecs = ["CVSS:3.1/AV:{}/AC:{}/PR:{}/UI:{}/S:{}/C:{}/I:{}/A:{}".format(*t)
            for t in itertools.product("NALP", "LH", "NLH", "NR", "UC", "HLN", "HLN", "HLN")]
    return np.array([cvss31_base(v)[0] for v in vecs])


def v40_scores(quick: bool) -> np.ndarray:
    keys = ("AV", "AC", "AT", "PR", "UI", "VC", "VI", "VA", "SC", "SI", "SA")
    vals = ("NALP", "LH", "NP", "NLH", "NPA", "HLN", "HLN", "HLN", "HLN", "HLN", "HLN")
    combos = list(itertools.product(*vals))
    if quick:
        idx = np.random.default_rng(0).choice(len(combos), 5000, replace=False)
        combos = [combos[i] for i in idx]
    return np.array([cvss40_score("CVSS:4.0/" + "/".join(f"{k}:{v}" for k, v in
                                                         zip(keys, c, strict=True)))[0]
                     for c in combos])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(_ROOT / "docs" / "img" / "cyberteam_workflow.png"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = example_tasks()
    wf = Workflow(tasks)
    rep = wf.evaluate(example_samples(), heuristic_llm, knowledge=example_knowledge(),
                      progress=False)
    score = {t.name: rep["per_task"][t.name][PRIMARY_METRIC[t.scorer]] for t in tasks}
    s31, s40 = v31_scores(), v40_scores(args.quick)
    print("per-task primary scores:", {k: round(v, 3) for k, v in score.items()})
    print(f"mean task score {rep['mean_task_score']:.3f}, DAG consistency "
          f"{rep['dag_consistency']:.2f}, module success {rep['module_success']:.2f}")
    print(f"CVSS v3.1: n={s31.size} mean={s31.mean():.2f} median={np.median(s31):.1f}")
    print(f"CVSS v4.0: n={s40.size} mean={s40.mean():.2f} median={np.median(s40):.1f}")

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1.4, 1]})
    col = {st: i for i, st in enumerate(STAGES)}
    rows: dict[str, int] = {}
    pos = {}
    for name in wf.topological_order():
        st = wf.tasks[name].stage
        pos[name] = (col[st], -rows.get(st, 0))
        rows[st] = rows.get(st, 0) + 1
    for name in wf.tasks:
        for d in wf.tasks[name].depends_on:
            (x0, y0), (x1, y1) = pos[d], pos[name]
            if x0 == x1:  # same stage: from the parent's left side down to the child's
                start, end, rad = (x0 - 0.3, y0), (x1 - 0.3, y1), 0.4
            else:
                start, end, rad = (x0 + 0.28, y0), (x1 - 0.28, y1), 0.08
            ax.annotate("", xy=end, xytext=start,
                        arrowprops={"arrowstyle": "->", "color": "0.5", "lw": 1,
                                    "connectionstyle": f"arc3,rad={rad}"})
    cmap = plt.get_cmap("RdYlGn")
    for name, (x, y) in pos.items():
        t = wf.tasks[name]
        ax.text(x, y, name.replace("_", "\n", 1) + "\n[" + ", ".join(t.modules) + "]",
                ha="center", va="center", fontsize=7,
                bbox={"boxstyle": "round", "fc": cmap(score[name]), "ec": "0.3"})
    for st, i in col.items():
        ax.text(i, 0.8, st, ha="center", fontsize=9, weight="bold")
    ax.set_xlim(-0.75, len(STAGES) - 0.4)
    ax.set_ylim(-max(rows.values()) + 0.4, 1.1)
    ax.axis("off")
    ax.set_title("example workflow (colour: task score, stand-in LLM)", fontsize=9)
    bins = np.arange(-0.05, 10.1, 0.1)
    bx.hist(s31, bins=bins, density=True, histtype="step", lw=1.4,
            label=f"CVSS v3.1 (all {s31.size})")
    bx.hist(s40, bins=bins, density=True, histtype="step", lw=1.4,
            label=f"CVSS v4.0 ({'sample of ' if args.quick else 'all '}{s40.size})")
    bx.set_xlabel("base score")
    bx.set_ylabel("density over base vectors")
    bx.legend(fontsize=8)
    bx.set_title("base-score distribution over all base vectors", fontsize=9)
    fig.tight_layout()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print("wrote", out)
    return {"scores": score, "v31_mean": float(s31.mean()), "v40_mean": float(s40.mean())}


if __name__ == "__main__":
    main()
