"""GraviTree: unconstrained Rashomon sets vs treefarms; falling vs unconstrained pruning.

Cases: monk_1/2/3, compas-binned, fico-binary (2000-row subsample), breast-cancer (binarised,
sklearn) x depth 2-4 x lambda in {0.005, 0.01, 0.02} x epsilon in {0.01, 0.05, 0.1}
(``--quick``: monk_1, depth 2, lambda 0.01, epsilon 0.05). For each case:

* ``treefarms`` (TREEFARMS with ``depth_budget = depth + 1``,
  ``rashomon_ignore_trivial_extensions=False``, the same problem) vs ``gravitree_fit(...,
  falling=False)``: fit time and peak memory; both set sizes are recorded and must agree.
* ``gravitree unconstrained`` vs ``gravitree falling``: time, and in the note the ratio of
  subproblems (pruning ratio) and both set sizes.
* Rule lists (full run only; compas-binned, fico-binary, monk_2, breast-cancer): the optimal
  falling rule list (``FallingTreeClassifier(depth_budget=4, branch_budget=0)``) and falling
  tree (depth 3) vs imodels' ``GreedyRuleListClassifier(max_depth=5)``: 5-fold CV accuracy,
  AUC and mean decision-path length of the top-risk decile (in ``note``/``metrics``), plus
  one fit's time. corels could not be installed here (its wheel needs to be compiled).

Peak memory is the growth of the resident set (sampled every millisecond) of a fresh
subprocess during its first fit, after imports and data loading, single-threaded.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from itertools import product
from typing import Any

import numpy as np

from rml_fast.benchmarking import Suite, import_skip_reason
from rml_fast.kernels.gravitree import gravitree_fit

SUITE = "gravitree"
DATASETS = ("monk_1", "monk_2", "monk_3", "compas-binned", "fico-binary", "breast-cancer")


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Binary features and labels of a benchmark data set (fico subsampled to 2000 rows)."""
    if name == "breast-cancer":
        from sklearn.datasets import load_breast_cancer

        from rml_fast.trees import QuantileBinarizer

        data = load_breast_cancer()
        cols = [0, 1, 6, 7, 20, 21, 27]
        x = QuantileBinarizer(n_thresholds=2).fit_transform(data.data[:, cols])
        return x, (data.target == 0).astype(np.int64)
    from rml_fast.datasets import load_binarized

    x, y, _ = load_binarized(name)
    if x.shape[0] > 2000:
        idx = np.random.default_rng(0).choice(x.shape[0], 2000, replace=False)
        x, y = x[idx], y[idx]
    return x, y


def treefarms_fit(x: np.ndarray, y: np.ndarray, depth: int, lam: float, eps: float) -> int:
    import pandas as pd
    from treefarms import TREEFARMS

    frame = pd.DataFrame(x, columns=[f"f{j}" for j in range(x.shape[1])])
    cfg = {"regularization": lam, "rashomon_bound_multiplier": eps, "depth_budget": depth + 1,
           "rashomon_ignore_trivial_extensions": False}
    with _quiet():
        model = TREEFARMS(cfg)
        model.fit(frame, pd.Series(y, name="label"))
    return int(model.model_set.get_tree_count())


@contextlib.contextmanager
def _quiet() -> Any:
    """Silence stdout at the file-descriptor level (treefarms prints from C++)."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def ours_fit(x: np.ndarray, y: np.ndarray, depth: int, lam: float, eps: float,
             falling: bool = False) -> Any:
    return gravitree_fit(x, y, depth=depth, regularization=lam, bound_value=eps,
                         falling=falling)


_CHILD = """
import json, sys
sys.path.insert(0, {here!r})
import bench_gravitree as b
from rml_fast.benchmarking import peak_memory_mb
x, y = b.load({name!r})
if {who!r} == "treefarms":
    import pandas, treefarms
    fn = lambda: b.treefarms_fit(x, y, {depth}, {lam}, {eps})
else:
    fn = lambda: b.ours_fit(x, y, {depth}, {lam}, {eps}, falling={falling})
print(json.dumps(peak_memory_mb(fn)))
"""


def peak_mb(who: str, case: dict[str, Any], falling: bool = False) -> float | None:
    """Peak RSS growth (MiB) of one fit in a fresh single-threaded subprocess."""
    code = _CHILD.format(here=os.path.dirname(os.path.abspath(__file__)), who=who,
                         falling=falling, **case)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=600, env=env, check=True)
        return float(json.loads(out.stdout.strip().splitlines()[-1]))
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def _body(suite: Suite, case: dict[str, Any]) -> None:
    x, y = load(case["name"])
    d, lam, eps = case["depth"], case["lam"], case["eps"]
    n_ours = len(ours_fit(x, y, d, lam, eps))
    try:
        n_tf: int | None = treefarms_fit(x, y, d, lam, eps)
    except ImportError as exc:
        n_tf = None
        suite.skip(case, peer_name="treefarms", reason=import_skip_reason(exc))
    if n_tf is not None:
        row = suite.compare(case, lambda: ours_fit(x, y, d, lam, eps),
                            lambda: treefarms_fit(x, y, d, lam, eps), peer_name="treefarms",
                            memory=False, note=f"n_trees ours={n_ours} treefarms={n_tf}")
        row["ours_peak_mb"] = peak_mb("ours", case)
        row["peer_peak_mb"] = peak_mb("treefarms", case)
        row["n_trees"] = n_ours
        row["n_trees_peer"] = n_tf
        row["sizes_agree"] = n_ours == n_tf
    fall = ours_fit(x, y, d, lam, eps, falling=True)
    free = ours_fit(x, y, d, lam, eps)
    ratio = fall.stats["n_subproblems"] / max(free.stats["n_subproblems"], 1)
    row = suite.compare(case, lambda: ours_fit(x, y, d, lam, eps, falling=True),
                        lambda: ours_fit(x, y, d, lam, eps), peer_name="gravitree unconstrained",
                        memory=False,
                        note=f"falling: {len(fall)} trees vs {len(free)}; subproblems ratio "
                             f"{ratio:.2f}")
    row["pruning_ratio"] = ratio


def _imodels_path_length(model: Any, x: np.ndarray) -> np.ndarray:
    """Conditions a greedy rule list evaluates before deciding, per row."""
    rules = model.rules_
    out = np.full(x.shape[0], max(len(rules) - 1, 0), dtype=np.int64)
    undecided = np.ones(x.shape[0], dtype=bool)
    for j, rule in enumerate(rules[:-1]):
        col = x[:, rule["index_col"]]
        fired = (col < rule["cutoff"]) if rule["flip"] else (col >= rule["cutoff"])
        hit = undecided & fired
        out[hit] = j + 1
        undecided &= ~fired
    return out


def rule_list_metrics(x: np.ndarray, y: np.ndarray, make: Any, path: Any) -> dict[str, float]:
    """5-fold CV accuracy, AUC and top-decile decision-path length of a classifier."""
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold

    acc, auc, top = [], [], []
    for tr, te in StratifiedKFold(5, shuffle=True, random_state=0).split(x, y):
        model = make().fit(x[tr], y[tr])
        risk = model.predict_proba(x[te])[:, 1]
        acc.append(float(np.mean((risk >= 0.5) == y[te])))
        auc.append(float(roc_auc_score(y[te], risk)))
        cut = np.quantile(risk, 0.9)
        top.append(float(np.mean(path(model, x[te])[risk >= cut])))
    return {"accuracy": float(np.mean(acc)), "auc": float(np.mean(auc)),
            "top_decile_path": float(np.mean(top))}


def _rule_list_body(suite: Suite, case: dict[str, Any]) -> None:
    import warnings

    from rml_fast.trees import FallingTreeClassifier

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from imodels import GreedyRuleListClassifier
    except ImportError as exc:
        for label in ("falling rule list", "falling tree d3"):
            suite.skip({**case, "model": label}, peer_name="imodels GreedyRuleList",
                       reason=import_skip_reason(exc))
        return
    x, y = load(case["name"])

    def frl() -> Any:
        return FallingTreeClassifier(depth_budget=4, branch_budget=0, regularization=0.005,
                                     progress=False)

    def ftree() -> Any:
        return FallingTreeClassifier(depth_budget=3, regularization=0.005, progress=False)

    def greedy() -> Any:
        return GreedyRuleListClassifier(max_depth=5)

    ours_path = lambda m, xx: m.decision_path_length(xx)  # noqa: E731
    for label, make in (("falling rule list", frl), ("falling tree d3", ftree)):
        mine = rule_list_metrics(x, y, make, ours_path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = rule_list_metrics(x, y, greedy, _imodels_path_length)
            row = suite.compare({**case, "model": label}, lambda m=make: m().fit(x, y),
                                lambda: greedy().fit(x, y),
                                peer_name="imodels GreedyRuleList", memory=False,
                                note=f"ours acc {mine['accuracy']:.3f} auc {mine['auc']:.3f} "
                                     f"top-decile path {mine['top_decile_path']:.2f}; imodels "
                                     f"acc {theirs['accuracy']:.3f} auc {theirs['auc']:.3f} "
                                     f"path {theirs['top_decile_path']:.2f}")
        row["metrics"] = {"ours": mine, "peer": theirs}


def _dispatch(suite: Suite, case: dict[str, Any]) -> None:
    if case.get("kind") == "rulelist":
        _rule_list_body(suite, {k: v for k, v in case.items() if k != "kind"})
    else:
        _body(suite, case)


def cases(quick: bool) -> list[dict[str, Any]]:
    if quick:
        return [{"name": "monk_1", "depth": 2, "lam": 0.01, "eps": 0.05}]
    out: list[dict[str, Any]] = [
        {"name": n, "depth": d, "lam": lam, "eps": eps}
        for n, d, lam, eps in product(DATASETS, (2, 3, 4), (0.005, 0.01, 0.02),
                                      (0.01, 0.05, 0.1))]
    # without imodels these cases record skipped rows (see _rule_list_body)
    return out + [{"kind": "rulelist", "name": n}
                  for n in ("compas-binned", "fico-binary", "monk_2", "breast-cancer")]


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    return Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run(cases(quick),
                                                                           _dispatch)


if __name__ == "__main__":  # python benchmarks/bench_gravitree.py [--quick] [--out DIR] ...
    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
