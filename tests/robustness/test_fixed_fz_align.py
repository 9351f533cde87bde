"""Regression tests for the fuzzer's contract violations fixed in alignment, steering and
fairness (issue 25 §1): bad input raises a ValueError / TypeError naming the argument, before
any work, and valid input keeps its result."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch


def _raises(exc_type, name, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` raises ``exc_type`` whose message names ``name`` as a word."""
    with pytest.raises(exc_type) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", msg), msg


META = torch.zeros(4, device="meta")


# --- alignment ------------------------------------------------------------------------------


def test_grpo_meta_and_shape_errors_name_the_argument():
    from rml_fast.alignment.grpo import grpo_advantages, grpo_loss, sequence_ratio

    r, g = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])
    _raises(ValueError, "reward", grpo_advantages, META, g)
    _raises(ValueError, "group_id", grpo_advantages, r, g.to("meta"))
    # an empty reward: the group_id error also names reward, whose length it follows
    _raises(ValueError, "reward", grpo_advantages, r[:0], g)
    lp = torch.zeros(2, 3)
    _raises(ValueError, "logp_old", sequence_ratio, lp, lp.to("meta"))
    _raises(ValueError, "adv", grpo_loss, lp, lp, None, torch.zeros(2, device="meta"))
    # valid input unchanged
    assert torch.allclose(grpo_advantages(r, g), torch.tensor([0.7071, -0.7071, 0.0, 0.0]),
                          atol=1e-4)


def test_air_and_arspo_meta():
    from rml_fast.alignment.air import context_metrics, context_risk
    from rml_fast.alignment.arspo import arspo_advantages, reward_map

    ids = torch.tensor([0, 0, 1, 1])
    _raises(ValueError, "ratio", context_risk, META, torch.ones(4), ids, ids)
    _raises(ValueError, "variant_id", context_risk, torch.ones(4), torch.ones(4), ids,
            ids.to("meta"))
    _raises(ValueError, "correct", context_metrics, torch.ones(2, 3, device="meta"),
            torch.tensor([True, False, False]))
    _raises(ValueError, "s", reward_map, META)
    _raises(ValueError, "reward", arspo_advantages, torch.ones(0), torch.tensor([0, 0]))


def test_preference_checks():
    from rml_fast.alignment.preference import (
        PreferenceOutput,
        RewardCalibrator,
        disentanglement_band,
        pairwise_loss,
        predicted_delta,
        score_geometry,
        sequence_logps,
    )

    z = torch.zeros(3)
    _raises(ValueError, "zw", pairwise_loss, "dpo", z.to("meta"), z, z, z)
    _raises(TypeError, "s_w", disentanglement_band, None, 2.0, rho=0.5)
    _raises(TypeError, "s_l", disentanglement_band, 1.0, "x", rho=0.5)
    _raises(TypeError, "dot", predicted_delta, 1.0, 1.0, 1.0, 4.0, None, lr=0.1)
    assert predicted_delta(1.0, 1.0, 1.0, 4.0, 1.5, lr=0.1) == pytest.approx((-0.05, -0.25))
    theta = torch.tensor([1.0, 0.0], requires_grad=True)
    _raises(ValueError, "zw", score_geometry, torch.zeros(1), theta[1:] * 1.0, [theta])
    _raises(ValueError, "zl", score_geometry, theta[:1] * 2,
            torch.tensor([math.nan]), [theta])
    _raises(TypeError, "max_grad_norm", score_geometry, theta[:1] * 2, theta[1:] * 1.0,
            [theta], max_grad_norm=None)
    cal = RewardCalibrator([theta])
    _raises(TypeError, "d_w", cal.update, torch.ones(3, dtype=torch.long), torch.ones(3), None)
    _raises(ValueError, "d_w", cal.update, torch.ones(0), torch.ones(1), None)
    d = torch.tensor([0.5, 0.25])
    _raises(ValueError, "loss", PreferenceOutput, torch.tensor(math.nan), d, d, d, d, 0.0)
    _raises(ValueError, "logits", sequence_logps, torch.zeros(0, 3, 4),
            torch.tensor([[1, 2, -100]]))
    _raises(ValueError, "labels", sequence_logps, torch.zeros(1, 3, 4),
            torch.tensor([[1, 2, -100]], device="meta"))


def test_preference_step_keeps_nan_ratio_unchecked():
    """A NaN incentive ratio (0/0) from a valid step still builds its PreferenceOutput."""
    from rml_fast.alignment.preference import PreferenceOutput

    out = PreferenceOutput._unchecked(
        loss=torch.tensor(0.0), losses=torch.zeros(1), d_w=torch.zeros(1), d_l=torch.zeros(1),
        r=torch.tensor([math.nan]), log_r=0.0, alpha=1.0, geometry=None, band=None, inside=None)
    assert torch.isnan(out.r).all()


def test_head_geometry_checks():
    from rml_fast.alignment.trl_dpo import head_geometry

    h, W = torch.zeros(4, 3, 5), torch.zeros(7, 5)
    y = torch.zeros(4, 3, dtype=torch.long)
    _raises(ValueError, "weight", head_geometry, h, y, W[:0])
    _raises(TypeError, "weight", head_geometry, h, y, W.long())
    _raises(TypeError, "hidden", head_geometry, h.numpy(), y, W)
    _raises(ValueError, "labels", head_geometry, h, y + 7, W)
    _raises(ValueError, "labels", head_geometry, h, y.to("meta"), W)


def test_unlearning_checks():
    from rml_fast.alignment.unlearning import (
        ConvCritic,
        MLPCritic,
        VariationalFDivergence,
        gaussian_f_divergence,
        masked_mean_sq,
        unlearn,
    )
    from rml_fast.models.diffusion import ConditionalDenoiser, DDPMSchedule

    x = torch.zeros(3, 2)
    _raises(ValueError, "target", masked_mean_sq, x, x.to("meta"))
    _raises(ValueError, "mask", masked_mean_sq, x, x, torch.ones(3, 1, device="meta"))
    _raises(TypeError, "v", VariationalFDivergence("tv").activation, np.zeros(2))
    _raises(ValueError, "output", MLPCritic(2, cond_features=3), torch.zeros(0, 2),
            torch.zeros(5, 3))
    _raises(TypeError, "output", MLPCritic(2), torch.zeros(4, 2, dtype=torch.long))
    _raises(ValueError, "output", ConvCritic(1, base=4, n_layers=1), torch.zeros(1, 1, 1, 4, 4))
    _raises(TypeError, "mask", ConvCritic(1, base=4, n_layers=1).pool_mask, np.ones((1, 1, 4, 4)))
    # a huge scale: divergence 0, no OverflowError
    assert float(gaussian_f_divergence(torch.zeros(2), torch.ones(2), 1e300)) == 0.0
    s, net = DDPMSchedule(n_steps=10), ConditionalDenoiser(n_steps=10)
    kw = {"target_concept": 0, "steps": 1, "batch_size": 2, "progress": False}
    _raises(ValueError, "anchor_concept", unlearn, net, s, torch.zeros(4, 2), anchor_concept=9,
            **kw)
    _raises(ValueError, "x0", unlearn, net, s, torch.full((4, 2), math.nan), anchor_concept=1,
            **kw)
    _raises(ValueError, "x0", unlearn, net, s, torch.zeros(1, 4, 2), anchor_concept=1, **kw)


# --- fairness ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def game_data():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    a = (rng.random(60) < 0.5).astype(int)
    y = (X[:, 0] + a > 0.5).astype(int)
    return LogisticRegression().fit(X, y), X, y, a


def test_metric_game_checks(game_data):
    from rml_fast.fairness.compatibility import metric_game

    model, X, y, a = game_data
    game = metric_game(model, X, y, a, ["accuracy"], n_background=8, random_state=0,
                       progress=False)
    full = game(np.array([[True, True, True]]))
    assert np.allclose(game(np.array([[1, 1, 1]])), full)  # 0/1 masks as before
    _raises(ValueError, "coalitions", game, np.array([True, True, True]))
    _raises(TypeError, "coalitions", game.scores, torch.ones(1, 3, dtype=torch.bool))
    _raises(ValueError, "coalitions", game.feature_masks, np.ones((1, 2), dtype=bool))
    cls = type(game)
    args = (model, X, game.y, game.groups, game.metrics, game.players, "interventional")
    bg = game.background
    _raises(ValueError, "X", cls, model, np.where(X[0, 0] == X, np.nan, X), *args[2:], bg, 1,
            None, 100, False)
    _raises(ValueError, "background", cls, *args, bg[:0], 1, None, 100, False)
    _raises(TypeError, "max_table", cls, *args, bg, 1, None, 100, False, "auto", None)


def test_metric_compatibility_fit_names(game_data):
    from rml_fast.fairness.compatibility import MetricCompatibility

    _, X, y, a = game_data
    mc = MetricCompatibility(metrics=["accuracy"], n_background=8)
    _raises(ValueError, "X", mc.fit, X[:, :, None], y, a)
    _raises(ValueError, "y", mc.fit, X, y[:0], a)
    _raises(ValueError, "y", mc.fit, X, y.astype(object), a)
    _raises(ValueError, "sensitive_features", mc.fit, X, y, a[:0])


def test_optfair_predict_names_X():
    from rml_fast.fairness.multiclass import OptFairPostProcessor, fairness_frontier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    y = (X[:, 0] > 0).astype(int)
    a = (rng.random(200) < 0.5).astype(int)
    est = OptFairPostProcessor(xi=0.1).fit(X, y, sensitive_features=a)
    for bad in (X[:0], X[:, :, None], X.astype(complex), X[:, 0]):
        _raises(ValueError, "X", est.predict, bad, a[: len(bad)])
    _raises(ValueError, "y", OptFairPostProcessor().fit, X, y.astype(object), sensitive_features=a)
    proba = np.column_stack([np.full(4, 0.5), np.full(4, 0.5)])
    proba[0, 0] = np.nan
    _raises(ValueError, "proba", fairness_frontier, proba, np.array([0, 1, 0, 1]),
            np.array([0, 0, 1, 1]), [0.1])


# --- steering ---------------------------------------------------------------------------------


def test_steering_checks():
    from rml_fast.steering import BOResult, SAEDecoderAdapter
    from rml_fast.steering.bayes_opt import GaussianProcess1D, log_expected_improvement
    from rml_fast.steering.srls_many import srls_many

    _raises(ValueError, "X", BOResult, 0.5, 1.0, np.array([0.5, np.nan]), np.array([1.0, 0.0]))
    _raises(ValueError, "Y", BOResult, 0.5, 1.0, np.array([0.5, 0.1]), np.array([1.0]))
    _raises(ValueError, "W_dec", SAEDecoderAdapter.from_arrays, np.zeros((0, 4)), np.zeros(8))
    _raises(TypeError, "best", log_expected_improvement, np.zeros(1), np.ones(1), None)
    _raises(ValueError, "mean", log_expected_improvement, np.zeros(()), np.ones(1), 0.0)
    _raises(ValueError, "std", log_expected_improvement, np.zeros(1), np.ones((1, 1)), 0.0)
    gp = GaussianProcess1D(n_restarts=1).fit(np.array([0.1, 0.5, 0.9]), np.array([0.0, 1.0, 0.0]))
    _raises(ValueError, "xq", gp.predict, np.array([0.2, np.nan]))
    _raises(ValueError, "xq", gp.predict, np.array(0.2))
    _raises(ValueError, "rng", srls_many, np.eye(4), [np.ones((2, 4))], rng=-1)
