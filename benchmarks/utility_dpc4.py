"""Utility of DP-C4 against DP-SGD at epsilon in {1, 3, 8}, delta = 1/n (spec privacy §2.6).

``python benchmarks/utility_dpc4.py [--seeds 5] [--out DIR] [--quick]``

Three scikit-learn data sets, each split 80/20 (stratified for the classifiers) per seed and
standardised on the training part:

* ``breast_cancer``: L2 logistic regression (``DPC4Classifier``), 455 training rows;
* ``digits``: 10-class softmax regression (``DPC4Classifier``), 1437 training rows;
* ``diabetes``: ridge regression on the standardised target (``DPC4Regressor``), 353 rows.

For every (data set, epsilon, algorithm, seed) the same hyper-parameters are used for DP-C4 and
DP-SGD (``algorithm=`` is the only difference; noise calibrated by the PLD accountant to the
target budget over the whole run). Reported per cell: the test metric (accuracy, or MSE of
the standardised target), and the distance ``||theta - theta*||`` of (coef, intercept) to the
non-private optimum ``theta*`` of the same regularised training objective (scikit-learn's
``LogisticRegression(C=1/(alpha n))`` / ``Ridge(alpha=alpha n)``), whose test metric is the
``non-private`` row. Means and standard deviations over seeds; JSON in
``<out>/dpc4_utility.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
EPSILONS = (1.0, 3.0, 8.0)
ALGORITHMS = ("dpsgd", "dpc4")

# One hyper-parameter set per data set, shared by both algorithms (not tuned on test data).
SETTINGS: dict[str, dict[str, Any]] = {
    "breast_cancer": dict(kind="logistic", alpha=0.1, epochs=200, batch_size=128, lr=0.2,
                          lr_decay_steps=100.0, anchor_clip=0.3),
    "digits": dict(kind="softmax", alpha=1e-3, epochs=40, batch_size=256, lr=0.5,
                   lr_decay_steps=100.0, anchor_clip=1.0),
    "diabetes": dict(kind="squared", alpha=0.01, epochs=100, batch_size=64, lr=0.1,
                     lr_decay_steps=100.0, anchor_clip=1.0),
}


def load(name: str, seed: int) -> tuple[np.ndarray, ...]:
    """Standardised (X_train, y_train, X_test, y_test) for one seeded 80/20 split."""
    from sklearn import datasets
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    loader = {"breast_cancer": datasets.load_breast_cancer, "digits": datasets.load_digits,
              "diabetes": datasets.load_diabetes}[name]
    X, y = loader(return_X_y=True)
    classify = SETTINGS[name]["kind"] != "squared"
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=seed,
                                          stratify=y if classify else None)
    scaler = StandardScaler().fit(Xtr)
    Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
    if not classify:
        mu, sd = ytr.mean(), ytr.std()
        ytr, yte = (ytr - mu) / sd, (yte - mu) / sd
    return Xtr, ytr, Xte, yte


def non_private(name: str, Xtr: np.ndarray, ytr: np.ndarray) -> Any:
    """scikit-learn's optimum of the objective the private fits minimise.

    One OpenMP thread: on a busy machine scikit-learn's threaded loss made this fit 100x
    slower (17 s against 0.17 s for digits under load 3).
    """
    from sklearn.linear_model import LogisticRegression, Ridge
    from threadpoolctl import threadpool_limits

    alpha, n = SETTINGS[name]["alpha"], Xtr.shape[0]
    with threadpool_limits(1):
        if SETTINGS[name]["kind"] == "squared":
            return Ridge(alpha=alpha * n).fit(Xtr, ytr)
        return LogisticRegression(C=1.0 / (alpha * n), tol=1e-10, max_iter=10_000).fit(Xtr, ytr)


def metric(name: str, model: Any, Xte: np.ndarray, yte: np.ndarray) -> float:
    """Test accuracy (classifiers) or test MSE of the standardised target (regression)."""
    if SETTINGS[name]["kind"] == "squared":
        return float(np.mean((model.predict(Xte) - yte) ** 2))
    return float(np.mean(model.predict(Xte) == yte))


def _theta(model: Any) -> np.ndarray:
    return np.append(np.ravel(model.coef_), np.ravel(model.intercept_))


def run(seeds: int = 5, epsilons: tuple[float, ...] = EPSILONS,
        datasets: tuple[str, ...] = tuple(SETTINGS), epochs_scale: float = 1.0) -> dict[str, Any]:
    """All cells; ``epochs_scale`` shortens the runs (tests, ``--quick``)."""
    from rml_fast.privacy.dp_c4 import calibrate_noise_multiplier
    from rml_fast.privacy.dp_c4_linear import DPC4Classifier, DPC4Regressor

    rows: list[dict[str, Any]] = []
    for name in datasets:
        cfg = dict(SETTINGS[name])
        kind = cfg.pop("kind")
        cfg["epochs"] = max(1, round(cfg["epochs"] * epochs_scale))
        est = DPC4Regressor if kind == "squared" else DPC4Classifier
        cells: dict[tuple[str, float], list[tuple[float, float]]] = {}
        reference: list[float] = []
        sigmas: dict[float, float] = {}  # the split sizes, hence (q, T), are the same every seed
        for seed in range(seeds):
            Xtr, ytr, Xte, yte = load(name, seed)
            n = Xtr.shape[0]
            q = cfg["batch_size"] / n
            steps = cfg["epochs"] * max(1, round(1 / q))
            ref = non_private(name, Xtr, ytr)
            reference.append(metric(name, ref, Xte, yte))
            for eps in epsilons:
                if eps not in sigmas:
                    sigmas[eps] = calibrate_noise_multiplier(eps, 1.0 / n, q, steps)
                for algorithm in ALGORITHMS:
                    model = est(epsilon=eps, delta=1.0 / n, algorithm=algorithm,
                                noise_multiplier=sigmas[eps], random_state=seed,
                                **cfg).fit(Xtr, ytr)
                    dist = float(np.linalg.norm(_theta(model) - _theta(ref)))
                    cells.setdefault((algorithm, eps), []).append(
                        (metric(name, model, Xte, yte), dist))
        rows.append(dict(dataset=name, algorithm="non-private", epsilon=None,
                         metric_mean=float(np.mean(reference)),
                         metric_std=float(np.std(reference)), dist_mean=0.0, dist_std=0.0))
        for (algorithm, eps), vals in cells.items():
            m, d = np.array(vals).T
            rows.append(dict(dataset=name, algorithm=algorithm, epsilon=eps,
                             metric_mean=float(m.mean()), metric_std=float(m.std()),
                             dist_mean=float(d.mean()), dist_std=float(d.std())))
    return dict(seeds=seeds, epochs_scale=epochs_scale, settings=SETTINGS, rows=rows)


def table(result: dict[str, Any]) -> str:
    """Markdown: one line per (data set, algorithm), one column pair per epsilon."""
    eps = sorted({r["epsilon"] for r in result["rows"] if r["epsilon"] is not None})
    head = "| data set (metric) | algorithm | " + " | ".join(
        f"ε={e:g}: metric / ‖θ−θ*‖" for e in eps) + " |"
    lines = [head, "|" + " --- |" * (2 + len(eps))]
    for name in dict.fromkeys(r["dataset"] for r in result["rows"]):
        label = "test MSE" if SETTINGS[name]["kind"] == "squared" else "test acc."
        rows = [r for r in result["rows"] if r["dataset"] == name]
        ref = next(r for r in rows if r["algorithm"] == "non-private")
        lines.append(f"| {name} ({label}) | non-private | " + " | ".join(
            f"{ref['metric_mean']:.3f}" for _ in eps) + " |")
        for algorithm in ALGORITHMS:
            cells = {r["epsilon"]: r for r in rows if r["algorithm"] == algorithm}
            lines.append(f"| {name} ({label}) | {algorithm} | " + " | ".join(
                f"{cells[e]['metric_mean']:.3f} ± {cells[e]['metric_std']:.3f} / "
                f"{cells[e]['dist_mean']:.2f}" for e in eps) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--quick", action="store_true", help="2 seeds, a tenth of the epochs")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result = run(seeds=2 if args.quick else args.seeds, epochs_scale=0.1 if args.quick else 1.0)
    result["seconds"] = time.perf_counter() - start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dpc4_utility.json").write_text(json.dumps(result, indent=1))
    print(table(result))
    print(f"({result['seconds']:.0f} s; JSON in {out / 'dpc4_utility.json'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
