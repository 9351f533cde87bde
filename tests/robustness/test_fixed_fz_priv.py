"""Regression tests for the fuzzer's contract violations fixed in the strategic, decisions and
privacy areas (issue 25 section 1): each bad input raises a ValueError/TypeError whose message
names the user's argument (as a word), NaN is refused where it would give a finite answer, and
valid inputs keep their results.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from rml_fast.decisions import (
    AttentionICL,
    ICLTabularNet,
    RecourseResult,
    RobustComplementarity,
    asr_recourse,
    compare_strategies,
    robust_pooling_weight,
    simulate_forecasts,
)
from rml_fast.privacy import (
    ClippingEngine,
    PrivacyLossDistribution,
    SGGMechanism,
    optimal_sgg,
    per_sample_grad_norms,
    per_sample_losses,
)
from rml_fast.privacy.auditing import (
    DeltaEstimate,
    audit_canary_scores,
    audit_dp_training,
    empirical_delta,
    one_run_epsilon_lower_bound,
    one_run_p_value,
)
from rml_fast.privacy.dp_c4 import privacy_spent, stability_floor_beta
from rml_fast.privacy.dp_c4_linear import DPC4Classifier
from rml_fast.privacy.grad_norms import GemmForm, UnsupportedLayerError
from rml_fast.strategic.ambiguity import (
    AmbiguousStrategicClassifier,
    IntervalSet,
    RealizedRule,
    exact_interval_sweep,
)
from rml_fast.strategic.decision_dependent import (
    LinearRule,
    RobustStrategicClassifier,
    StageCertificate,
    robust_strategic_objective,
)
from rml_fast.strategic.simulator import RoundResult, grid_best_response, linear_rule


def raises_naming(exc, name: str):
    """pytest.raises(exc) whose message must name ``name`` as a word (the fuzzer's test)."""
    return pytest.raises(exc, match=rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])")


X2 = np.array([[-2.0, 0.1], [-1.0, 0.3], [1.0, -0.2], [2.0, 0.4]])
Y2 = np.array([0, 0, 1, 1])


# --- strategic ------------------------------------------------------------------------------


def test_sklearn_validation_errors_name_the_argument():
    clf = AmbiguousStrategicClassifier(epochs=0).fit(X2, Y2)
    for bad in (np.zeros((0, 2)), X2.ravel(), X2[None], X2.astype(complex)):
        with raises_naming(ValueError, "X"):
            clf.predict(bad)
    with raises_naming(ValueError, "y"):
        RobustStrategicClassifier().fit(X2, Y2[:0])
    with raises_naming(ValueError, "y"):
        RobustStrategicClassifier().fit(X2, np.array([0.5, 1.5, 2.5, 3.5]))  # continuous
    # sklearn's own wording is kept after the name (regex checks on it still match)
    with pytest.raises(ValueError, match="Found array with 0 sample"):
        clf.predict(np.zeros((0, 2)))


def test_revealed_sets_refuse_nan_and_wrong_width():
    H = IntervalSet(np.array([1.0, 0.0]), 0.0, 0.5)
    with raises_naming(ValueError, "X"):
        H.in_region(np.array([[np.nan, 0.0]]))
    with raises_naming(ValueError, "X"):
        H.in_region(np.array([1.0, 0.0, 2.0, 0.0]))
    with raises_naming(ValueError, "w"):
        H.contains(np.array([np.nan, 0.0]), 0.25)
    with raises_naming(TypeError, "b"):
        H.contains(np.array([1.0, 0.0]), None)
    assert H.in_region(np.array([[0.6, 0.0], [0.2, 0.0]])).tolist() == [True, False]
    with raises_naming(ValueError, "w"):
        RealizedRule(np.array([np.nan]), 0.5, np.array([0, 1]), H, 2.0)


def test_strategic_functions_name_their_arguments():
    with raises_naming(ValueError, "scores"):
        exact_interval_sweep(np.zeros(0), np.array([0, 1]))
    with raises_naming(ValueError, "w"):
        robust_strategic_objective(np.zeros(0), 0.0, X2, np.array([1, -1, 1, -1]), 2.0)
    with raises_naming(TypeError, "b"):
        robust_strategic_objective(np.ones(2), None, X2, np.array([1, -1, 1, -1]), 2.0)
    with raises_naming(ValueError, "y_pm"):
        robust_strategic_objective(np.ones(2), 0.0, X2, np.zeros(0), 2.0)
    # the docstring's value is unchanged
    X = np.array([[1.0], [-1.0]])
    assert robust_strategic_objective(np.array([1.0]), 0.0, X, np.array([1, -1]), 2.0,
                                      C=0.0) == 0.25
    with raises_naming(TypeError, "b"):
        LinearRule(np.array([1.0]), None, np.array([0, 1]))
    with raises_naming(ValueError, "alpha"):
        StageCertificate("optimal", 0.0, 0.0, 0.0, 0.0, np.array([np.nan]), np.zeros(1))
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression().fit(X2, Y2)
    for d in (0, 5):
        with raises_naming(ValueError, "d"):
            linear_rule(lr, d)
    with raises_naming(TypeError, "d"):
        linear_rule(lr, None)


def test_grid_best_response_with_no_agents_and_results_refusing_nan():
    from sklearn.tree import DecisionTreeClassifier

    tree = DecisionTreeClassifier().fit([[0.0], [1.0]], [0, 1])
    Xn, moved = grid_best_response(np.zeros((0, 1)), tree, np.linspace(-1, 2, 31)[:, None])
    assert Xn.shape == (0, 1) and moved.shape == (0,)
    fields = dict(round=0, classifier=None, X_response=np.array([[np.nan]]), moved=np.zeros(1, bool),
                  cost=np.zeros(1), y_pred=np.zeros(1), accuracy=1.0, accuracy_truthful=1.0,
                  gaming_rate=0.0, manipulation_rate=0.0, move_rate=0.0, mean_cost=0.0)
    with raises_naming(ValueError, "X_response"):
        RoundResult(**fields)


# --- decisions ------------------------------------------------------------------------------


def test_recourse_names_x_ref_and_n_classes():
    f = lambda X: (X[:, 0] > 1).astype(int)  # noqa: E731
    X = np.array([[0.0, 0.0], [2.0, 0.0]])
    with raises_naming(ValueError, "X_ref"):
        asr_recourse(f, X, target=1, n_classes=2, X_ref=np.array([[np.nan, 0.0]]),
                     progress=False)
    with raises_naming(ValueError, "X_ref"):
        asr_recourse(f, X, target=1, n_classes=2, X_ref=np.zeros((0, 2)), progress=False)
    with raises_naming(TypeError, "n_classes"):
        asr_recourse(f, X, target=1, n_classes=math.nan, X_ref=np.eye(2), progress=False)


def test_recourse_result_nan_only_where_not_found():
    base = dict(found=np.array([True, False]), valid=np.array([True, False]),
                status=np.array(["found", "budget_exhausted"], dtype=object),
                target=np.array([1, 1]), original_class=np.array([0, 0]),
                n_changed=np.array([1, -1]), n_queries=np.array([5, 9]), n_calls=3)
    ok = RecourseResult(x_cf=np.array([[1.0, 2.0], [np.nan, np.nan]]),
                        cost=np.array([0.5, np.nan]), **base)
    assert ok.validity == 0.5
    with raises_naming(ValueError, "x_cf"):  # NaN in a row reported as found
        RecourseResult(x_cf=np.array([[np.nan, 2.0], [np.nan, np.nan]]),
                       cost=np.array([0.5, np.nan]), **base)
    with raises_naming(ValueError, "cost"):
        RecourseResult(x_cf=np.array([[1.0, 2.0], [np.nan, np.nan]]),
                       cost=np.array([np.nan, np.nan]), **base)


def test_complementarity_names_its_arguments():
    sim = simulate_forecasts(200, 0.3, 0.3, -0.2, rng=3)
    X = np.column_stack([sim.h, sim.a])
    bad = X.copy()
    bad[0, 0] = np.nan
    for kw, name in ((dict(X_fit=bad), "X_fit"), (dict(X_eval=bad), "X_eval"),
                     (dict(y_fit=sim.y[:0]), "y_fit")):
        args = dict(X_fit=X, y_fit=sim.y, X_eval=X, y_eval=sim.y) | kw
        with raises_naming(ValueError, name):
            compare_strategies(**args, strategies=["human"], uncertainty="none")
    with raises_naming(ValueError, "X"):
        RobustComplementarity(uncertainty="none").fit(X[:, :1].ravel(), sim.y)
    with raises_naming(TypeError, "random_state"):
        RobustComplementarity(uncertainty="none", random_state="seed").fit(X, sim.y)
    with raises_naming(ValueError, "s_h"):
        robust_pooling_weight(1e300, (0.25, 0.35), (-0.3, -0.1))
    r = robust_pooling_weight(0.3, (0.25, 0.35), (-0.3, -0.1))  # the docstring's numbers
    assert round(r.w, 4) == 0.4304 and round(r.guaranteed_gain, 5) == 0.04326


def test_icl_arguments_are_named():
    with raises_naming(ValueError, "context_X"):
        AttentionICL(np.zeros((0, 1)), np.array([0, 1]))
    with raises_naming(TypeError, "d_max"):
        ICLTabularNet(d_max=math.nan)
    with raises_naming(ValueError, "n_max"):
        ICLTabularNet(n_max=-1)
    net = ICLTabularNet(d_max=2, k_max=3, n_max=4, d_model=8, n_heads=2, d_mlp=8)
    xs, ys = torch.zeros(1, 3, 2), torch.zeros(1, 3, dtype=torch.long)
    assert tuple(net(xs, ys).shape) == (1, 3, 3)
    with raises_naming(TypeError, "xs"):
        net(xs.long(), ys)
    with raises_naming(ValueError, "xs"):
        net(xs.to("meta"), ys)
    with raises_naming(ValueError, "ys"):
        net(xs, ys[:, :2])
    with raises_naming(TypeError, "ys"):
        net(xs, ys.numpy())


# --- privacy --------------------------------------------------------------------------------


def test_clipping_inputs_named_and_own_errors_passed_on():
    torch.manual_seed(0)
    model, x, y = torch.nn.Linear(3, 2), torch.randn(5, 3), torch.tensor([0, 1, 1, 0, 1])
    loss = torch.nn.CrossEntropyLoss()
    ref = per_sample_grad_norms(model, loss, x, y)
    assert ref.shape == (5,) and bool(torch.isfinite(ref).all())
    with raises_naming(ValueError, "inputs"):  # batch of 0 against 5 targets
        per_sample_grad_norms(model, loss, x[:0], y)
    with raises_naming(ValueError, "inputs"):  # int features into a float layer
        per_sample_grad_norms(model, loss, x.long(), y)
    with raises_naming(ValueError, "inputs"):
        per_sample_grad_norms(model, loss, x.to("meta"), y)
    with raises_naming(ValueError, "target"):
        per_sample_grad_norms(model, loss, x, y.to("meta"))
    with raises_naming(ValueError, "output"):
        per_sample_losses(loss, torch.zeros(2, 2, device="meta"), y[:2])
    with raises_naming(TypeError, "target"):
        per_sample_losses(loss, torch.zeros(2, 2), y[:2].numpy())

    class Twice(torch.nn.Module):  # a layer run twice: the engine's own error, unchanged
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, v):
            return self.lin(self.lin(v))

    with pytest.raises(UnsupportedLayerError, match="ran twice"):
        per_sample_grad_norms(Twice(), loss, torch.randn(4, 2), torch.tensor([0, 1, 0, 1]))
    with ClippingEngine(model) as eng, raises_naming(ValueError, "losses"):
        eng.backward(torch.zeros(5, device="meta"))


def test_gemm_form_checked_when_built_directly():
    lin = torch.nn.Linear(3, 2)
    f = GemmForm(lin.weight, torch.ones(4, 1, 3), torch.ones(4, 1, 2), lin.bias)
    assert tuple(f.bias_per_sample.shape) == (4, 2)
    A = torch.ones(4, 1, 3)
    A[0, 0, 0] = math.nan
    with raises_naming(ValueError, "A"):
        GemmForm(lin.weight, A, torch.ones(4, 1, 2))
    with raises_naming(ValueError, "D"):
        GemmForm(lin.weight, torch.ones(4, 1, 3), torch.ones(3, 1, 2))


def test_audit_results_refuse_nan_and_extreme_eps_gives_no_nan():
    with raises_naming(ValueError, "lower"):
        DeltaEstimate(np.array([1.0]), np.array([0.1]), np.array([np.nan]), np.array([0.2]),
                      0.95)
    rng = np.random.default_rng(0)
    y0, y1 = rng.normal(0, 1, 2000), rng.normal(1, 1, 2000)
    est = empirical_delta(0.5 - y0, 0.5 - y1, [1.0, 800.0])  # e^800 overflows to inf
    assert not np.isnan(est.estimate).any() and not np.isnan(est.upper).any()
    assert est.estimate[1] == 0.0 and est.upper[1] >= 0.0  # no score above eps = 800


def test_one_run_counts_and_canary_scores_named():
    with raises_naming(ValueError, "num_guesses"):
        one_run_p_value(10, 0, 100, 1.0, 1e-5)
    with raises_naming(ValueError, "num_guesses"):
        one_run_epsilon_lower_bound(10, 200, 100, 1e-5)
    assert one_run_p_value(0, 0, 100, 1.0, 1e-5) == pytest.approx(1.0)
    with raises_naming(ValueError, "scores"):
        audit_canary_scores(np.zeros(0), np.zeros(10, bool), 1e-6)
    with raises_naming(ValueError, "X"):
        audit_dp_training(np.zeros((0, 3)), np.zeros(200), target_epsilon=1.0, target_delta=1e-5)


def test_dp_c4_scalars_named():
    with raises_naming(ValueError, "noise_multiplier"):
        privacy_spent(math.nan, 0.01, 10, 1e-5)
    with raises_naming(ValueError, "noise_multiplier"):
        privacy_spent(1e300, 0.01, 10, 1e-5)
    with raises_naming(ValueError, "sample_rate"):
        privacy_spent(1.0, 0.0, 10, 1e-5)
    assert privacy_spent(0.0, 0.01, 10, 1e-5) == math.inf  # no noise: no privacy
    with raises_naming(ValueError, "numel"):
        stability_floor_beta(2.0, 1.0, 0.1, 1.0, -1, 10.0)
    with raises_naming(ValueError, "batch_size"):
        stability_floor_beta(2.0, 1.0, 0.1, 1.0, 100, 0)
    with raises_naming(TypeError, "kappa"):
        stability_floor_beta(None, 1.0, 0.1, 1.0, 100, 10.0)
    assert stability_floor_beta(2.0, 1.0, 0.1, math.inf, 100, 10.0) == 1.0  # DP-SGD's drift


def test_pld_arguments_named():
    mech = SGGMechanism.gaussian(dim=1, std=2.0)
    for bad in (0.0, -1.0, math.nan):
        with raises_naming(ValueError, "value_discretization_interval"):
            mech.pld(bad)
    with raises_naming(ValueError, "sensitivity"):
        PrivacyLossDistribution.from_laplace(1.0, 1e300)
    with raises_naming(ValueError, "std"):
        PrivacyLossDistribution.from_gaussian(1e300)
    with raises_naming(TypeError, "p_grid"):
        optimal_sgg(2, 1.0, 1e-5, p_grid=None)
    with raises_naming(TypeError, "refine"):
        optimal_sgg(2, 1.0, 1e-5, refine="yes")
    with raises_naming(ValueError, "epsilon"):  # e^epsilon beyond float64
        optimal_sgg(2, 1e300, 1e-5, p_grid=(1.0, 2.0), refine=False)


def test_dpc4_classifier_predict_names_x():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 3))
    clf = DPC4Classifier(noise_multiplier=1.0, epochs=1, batch_size=30, random_state=0).fit(
        X, (X[:, 0] > 0).astype(int))
    with raises_naming(ValueError, "X"):
        clf.predict(np.zeros((0, 3)))
