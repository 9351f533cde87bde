"""TRACED kinematics (exact cases, invariances), the numba kernel against the NumPy reference,
the Gaussian scorer against scikit-learn's QDA and the analytic LLR, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_normal, special_ortho_group
from sklearn.discriminant_analysis import QuadraticDiscriminantAnalysis
from sklearn.metrics import roc_auc_score

from rml_fast.interp.traced import (
    FEATURES,
    TracedScorer,
    kinematics,
    pack_trajectories,
    segment_steps,
    simulate_trajectories,
    step_embeddings,
    trace_features,
    unsupervised_score,
)


def test_straight_line_is_all_progress_and_no_turning():
    a, b = np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.1, -0.2])
    H = a + np.arange(1, 9)[:, None] * b
    k = kinematics(H)
    assert k["efficiency"] == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(k["turn"], 0.0, atol=1e-6)
    np.testing.assert_allclose(k["curvature"], 0.0, atol=1e-6)
    np.testing.assert_allclose(k["cumulative_progress"], np.linspace(0, 1, 8), atol=1e-12)
    np.testing.assert_allclose(k["progress"], np.linalg.norm(b), rtol=1e-12)
    assert k["revisits"] == 0 and k["reversal_frac"] == 0.0


@pytest.mark.parametrize("n_points", [6, 12, 25])
def test_regular_polygon_turns_by_two_pi_over_n_with_curvature_one_over_radius(n_points):
    radius = 3.0
    t = 2 * np.pi * np.arange(n_points) / n_points
    H = radius * np.column_stack([np.cos(t), np.sin(t), np.zeros(n_points)])
    k = kinematics(H)
    np.testing.assert_allclose(k["turn"], 2 * np.pi / n_points, rtol=1e-9)
    assert k["std_turn"] == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(k["curvature"], 1 / radius, rtol=1e-9)


def test_back_and_forth_is_maximal_hesitation():
    a, b = np.array([0.5, 1.0]), np.array([1.0, -1.0])
    H = a + ((-1.0) ** np.arange(1, 8))[:, None] * b  # T = 7: h_T == h_1
    k = kinematics(H)
    np.testing.assert_allclose(k["turn"], np.pi, rtol=1e-7)
    assert k["efficiency"] == 0.0 and k["displacement"] == 0.0
    # revisits: the 4 odd-t states coincide (6 pairs), the 3 even-t states too (3 pairs)
    assert k["reversal_frac"] == 1.0 and k["revisits"] == 9


def test_efficiency_and_turns_are_invariant_to_rotation_translation_and_scale():
    rng = np.random.default_rng(0)
    H = np.cumsum(rng.standard_normal((12, 5)), axis=0)
    Q = special_ortho_group.rvs(5, random_state=1)
    G = 2.5 * H @ Q.T + rng.standard_normal(5)
    k0, k1 = kinematics(H), kinematics(G)
    assert k1["efficiency"] == pytest.approx(k0["efficiency"], rel=1e-10)
    np.testing.assert_allclose(k1["turn"], k0["turn"], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(k1["curvature"], k0["curvature"] / 2.5, rtol=1e-8)


def test_numba_kernel_equals_the_numpy_reference_on_ragged_batches():
    trajs, _ = simulate_trajectories(40, d=7, steps=(3, 30), rng=2)
    Z = trace_features(trajs)
    assert Z.shape == (40, len(FEATURES))
    for z, H in zip(Z, trajs, strict=True):
        k = kinematics(H)
        ref = [
            k["efficiency"],
            np.log(k["displacement"]),
            k["progress"].mean(),
            k["mean_turn"],
            k["std_turn"],
            k["reversal_frac"],
            np.log(len(H)),
        ]
        np.testing.assert_allclose(z, ref, rtol=1e-9, atol=1e-9)
    packed = pack_trajectories(trajs)
    np.testing.assert_array_equal(trace_features(packed), Z)


def test_transform_is_applied_to_the_stacked_states():
    trajs, _ = simulate_trajectories(6, d=5, rng=3)
    Q = special_ortho_group.rvs(5, random_state=4)
    Z0 = trace_features(trajs)
    Z1 = trace_features(trajs, transform=lambda X: X @ Q)
    np.testing.assert_allclose(Z1, Z0, rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match="transform must map"):
        trace_features(trajs, transform=lambda X: X[:-1])


def test_scorer_matches_qda_with_empirical_covariances():
    rng = np.random.default_rng(5)
    X = np.vstack([rng.normal(0, 1, (80, 3)), rng.normal(1, 2, (60, 3))])
    y = np.r_[np.zeros(80), np.ones(60)]
    ours = TracedScorer(covariance="empirical", reg=0.0).fit(X, y)
    qda = QuadraticDiscriminantAnalysis(reg_param=0.0).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X), qda.predict_proba(X), rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(ours.predict(X), qda.predict(X))


def test_scorer_llr_approaches_the_analytic_llr():
    rng = np.random.default_rng(6)
    mu0, mu1 = np.zeros(2), np.array([1.5, -0.5])
    S0, S1 = np.array([[1.0, 0.3], [0.3, 0.5]]), np.array([[0.6, -0.2], [-0.2, 1.2]])
    X = np.vstack(
        [rng.multivariate_normal(mu0, S0, 20000), rng.multivariate_normal(mu1, S1, 20000)]
    )
    y = np.r_[np.zeros(20000), np.ones(20000)]
    clf = TracedScorer().fit(X, y)
    grid = rng.normal(0.5, 1.0, (50, 2))
    exact = multivariate_normal(mu1, S1).logpdf(grid) - multivariate_normal(mu0, S0).logpdf(grid)
    np.testing.assert_allclose(clf.decision_function(grid), exact, atol=0.1)


def test_directed_walks_score_above_looping_walks():
    trajs, y = simulate_trajectories(300, rng=7)
    Z = trace_features(trajs)
    clf = TracedScorer().fit(Z[:200], y[:200])
    assert roc_auc_score(y[200:], clf.decision_function(Z[200:])) > 0.95
    # without labels, efficiency minus turn-angle fluctuation still separates them
    assert roc_auc_score(y[200:], unsupervised_score(Z[200:], Z[:200])) > 0.8


def test_segment_steps_and_step_embeddings():
    text = "a b. c d\n\ne f\n"
    offsets = [(0, 1), (2, 4), (5, 6), (7, 8), (10, 11), (12, 13)]
    assert segment_steps(text, offsets) == [slice(0, 4), slice(4, 6)]
    assert segment_steps(text, offsets, "sentence") == [slice(0, 2), slice(2, 4), slice(4, 6)]
    assert segment_steps(text, offsets, "blank_line") == [slice(0, 4), slice(4, 6)]
    assert len(segment_steps(text, offsets, "tokens")) == 6
    hidden = np.arange(4 * 6 * 2, dtype=float).reshape(4, 6, 2)
    steps = [slice(0, 4), slice(4, 6)]
    np.testing.assert_allclose(
        step_embeddings(hidden, steps), [hidden[2, :4].mean(0), hidden[2, 4:].mean(0)]
    )
    np.testing.assert_allclose(
        step_embeddings(hidden, steps, layer="last4")[1], hidden[:, 4:].mean((0, 1))
    )
    np.testing.assert_allclose(
        step_embeddings(hidden, steps, layer=0, pool="last")[0], hidden[0, 3]
    )


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"T >= 3"):
        kinematics(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="must be finite"):
        kinematics(np.array([[0.0], [np.nan], [1.0]]))
    with pytest.raises(ValueError, match=r"trajectories\[1\] has width 3"):
        trace_features([np.zeros((4, 2)), np.zeros((4, 3))])
    with pytest.raises(ValueError, match="offsets"):
        trace_features((np.zeros((5, 2)), np.array([0, 2, 5])))
    with pytest.raises(ValueError, match="mode must be one of"):
        segment_steps("a", [(0, 1)], mode="words")
    with pytest.raises(ValueError, match="token_offsets must be ordered"):
        segment_steps("ab", [(1, 2), (0, 1)])
    with pytest.raises(ValueError, match="layer must be an int"):
        step_embeddings(np.zeros((2, 3, 4)), [slice(0, 3)], layer=5)
    with pytest.raises(ValueError, match="selects no token"):
        step_embeddings(np.zeros((3, 4)), [slice(3, 5)])
    with pytest.raises(ValueError, match="at least 2 classes"):
        TracedScorer().fit(np.zeros((4, 2)), np.zeros(4))
    with pytest.raises(ValueError, match=r"reference must have shape"):
        unsupervised_score(np.zeros((1, 7)), np.zeros((1, 7)))
