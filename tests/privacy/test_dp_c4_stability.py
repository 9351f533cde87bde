"""DP-C4's stability floor on beta_t and the utility comparison script (spec privacy §2.6)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rml_fast.privacy.dp_c4 import DPC4Optimizer, stability_floor_beta
from rml_fast.privacy.dp_c4_linear import DPC4Classifier

ROOT = Path(__file__).resolve().parents[2]


def _utility_module():
    spec = importlib.util.spec_from_file_location("utility_dpc4", ROOT / "benchmarks" / "utility_dpc4.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_floor_closed_form() -> None:
    # g = c eta sigma sqrt(D) / B = 2 * 0.1 * 3 * 10 / 60 = 0.1 -> kappa g^2 = 0.01 kappa
    assert stability_floor_beta(2.0, 2.0, 0.1, 3.0, 100, 60) == pytest.approx(0.02)
    assert stability_floor_beta(0.0, 2.0, 0.1, 3.0, 100, 60) == 0.0
    assert stability_floor_beta(2.0, 2.0, 0.1, 0.0, 100, 60) == 0.0
    assert stability_floor_beta(1e6, 2.0, 0.1, 3.0, 100, 60) == 1.0


def test_optimizer_beta_respects_the_floor() -> None:
    model = torch.nn.Linear(99, 1)  # D = 100 parameters
    kwargs = dict(lr=0.5, noise_multiplier=2.0, expected_batch_size=16, beta_power=2.0 / 3.0, seed=0)
    free = DPC4Optimizer(model, stability_floor=0.0, **kwargs)
    floored = DPC4Optimizer(model, **kwargs)
    sigma_d = 2.0 / math.sqrt(0.5)
    g2 = (0.5 * sigma_d * 10 / 16) ** 2
    for t in (1, 5, 50):
        assert free.beta(t) == pytest.approx(1.0 / (t + 1) ** (2.0 / 3.0))
        assert floored.beta(t) == pytest.approx(min(1.0, max(free.beta(t), 2.0 * g2)))
    assert floored.beta(50) > free.beta(50)  # the floor binds at this noise level
    assert DPC4Optimizer(model, **{**kwargs, "noise_multiplier": 0.0}).beta(50) == free.beta(50)
    with pytest.raises(ValueError, match="stability_floor"):
        DPC4Optimizer(model, stability_floor=-1.0, **kwargs)


def test_floor_prevents_the_drift_noise_feedback_on_digits() -> None:
    """epsilon = 1 on digits (650 weights, B = 256): without the floor the drift noise feeds
    back through C_t ~ ||v|| and the weights grow geometrically; with it they stay bounded."""
    pytest.importorskip("sklearn")
    util = _utility_module()
    Xtr, ytr, Xte, yte = util.load("digits", 0)
    cfg = {k: v for k, v in util.SETTINGS["digits"].items() if k != "kind"}
    norms: dict[float, list[float]] = {}
    scores: dict[float, float] = {}
    for kappa in (0.0, 2.0):
        trace: list[float] = []
        clf = DPC4Classifier(epsilon=1.0, delta=1.0 / Xtr.shape[0], random_state=0,
                             stability_floor=kappa, callback=lambda t, c, b, tr=trace: tr.append(
                                 float(np.linalg.norm(c))), **cfg).fit(Xtr, ytr)
        norms[kappa], scores[kappa] = trace, clf.score(Xte, yte)
    T = len(norms[0.0])
    assert norms[0.0][-1] > 4 * norms[0.0][T // 2] > 0  # unstable: still growing fast
    assert norms[2.0][-1] < 2 * norms[2.0][T // 2]
    assert norms[2.0][-1] < 0.2 * norms[0.0][-1]
    assert scores[2.0] > 0.8 > scores[0.0]


def test_utility_script_runs_and_orders_methods(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    util = _utility_module()
    result = util.run(seeds=1, epsilons=(8.0,), datasets=("breast_cancer",), epochs_scale=0.5)
    rows = {r["algorithm"]: r for r in result["rows"]}
    assert set(rows) == {"non-private", "dpsgd", "dpc4"}
    assert rows["non-private"]["metric_mean"] > 0.9
    for algorithm in ("dpsgd", "dpc4"):
        assert rows[algorithm]["epsilon"] == 8.0
        assert 0.85 < rows[algorithm]["metric_mean"] <= 1.0
    # the bias DP-C4 removes: closer to the non-private optimum at the same budget
    assert rows["dpc4"]["dist_mean"] < rows["dpsgd"]["dist_mean"]
    assert "| breast_cancer (test acc.) | dpc4 |" in util.table(result)
    assert util.main(["--quick", "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "dpc4_utility.json").read_text())
    assert {r["dataset"] for r in saved["rows"]} == set(util.SETTINGS)
