"""ARSPO: reward maps (monotone, phi(0)=0, phi(1)=1, gradcheck), dynamic weights (EMA, sum to K,
the literal clip that breaks it), unit weights + identity == plain GRPO, the scale-cancellation
caveat of std-normalised advantages, validation, and the demo's effect over seeds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rml_fast.alignment.arspo import DynamicTaskWeights, arspo_advantages, arspo_rewards, reward_map
from rml_fast.alignment.demos import arspo as arspo_demo
from rml_fast.alignment.grpo import grpo_advantages


@pytest.mark.parametrize(("kind", "kw"), [("power", {"gamma": 0.5}), ("power", {"gamma": 2.0}),
                                          ("exp", {"kappa": 2.0}), ("exp", {"kappa": 0.1}), ("identity", {})])
def test_reward_map_monotone_and_endpoints(kind, kw):
    s = torch.linspace(0, 1, 1001, dtype=torch.float64)
    phi = reward_map(s, kind, **kw)
    assert phi[0].item() == 0.0
    assert abs(phi[-1].item() - 1.0) < 1e-15
    assert torch.all(torch.diff(phi) > 0)


def test_reward_map_closed_forms_and_shape():
    s = torch.tensor([0.04, 0.25, 0.5], dtype=torch.float64)
    torch.testing.assert_close(reward_map(s), s.sqrt())
    want = (np.exp(3.0 * s.numpy()) - 1) / (np.exp(3.0) - 1)
    np.testing.assert_allclose(reward_map(s, "exp", kappa=3.0).numpy(), want, rtol=1e-14)
    # concave power map lifts small scores, convex exp map lowers them
    assert torch.all(reward_map(s) > s) and torch.all(reward_map(s, "exp") < s)
    assert reward_map(torch.rand(2, 3)).shape == (2, 3)
    assert reward_map(torch.tensor([0.5], dtype=torch.float32)).dtype == torch.float32


def test_reward_map_gradcheck():
    s = torch.tensor([0.1, 0.4, 0.9], dtype=torch.float64, requires_grad=True)
    for kind in ("power", "exp", "identity"):
        assert torch.autograd.gradcheck(lambda x, k=kind: reward_map(x, k), (s,))


def test_reward_map_validation():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        reward_map(torch.tensor([1.2]))
    with pytest.raises(ValueError, match="finite"):
        reward_map(torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match="gamma"):
        reward_map(torch.tensor([0.5]), gamma=0.0)
    with pytest.raises(ValueError, match="kappa"):
        reward_map(torch.tensor([0.5]), "exp", kappa=-1.0)
    with pytest.raises(ValueError, match="kind"):
        reward_map(torch.tensor([0.5]), "log")


def test_weights_ema_and_formula():
    tw = DynamicTaskWeights(["a", "b", "c"], ema=0.9, eta=2.0, w_min=0.0, w_max=10.0)
    assert tw.weights == {"a": 1.0, "b": 1.0, "c": 1.0}
    tw.update({"a": [0.5, 0.7], "b": [0.2], "c": [0.9, 0.9, 0.9]})  # float64 lists
    mu = {"a": 0.6, "b": 0.2, "c": 0.9}
    assert all(abs(tw.mu[k] - mu[k]) < 1e-12 for k in mu)  # the first update initialises
    tw.update({"a": torch.tensor([1.0]), "b": torch.tensor([0.0]), "c": torch.tensor([0.0])})  # exact in fp32
    mu = {"a": 0.9 * 0.6 + 0.1, "b": 0.9 * 0.2, "c": 0.9 * 0.9}
    assert all(abs(tw.mu[k] - mu[k]) < 1e-12 for k in mu)
    d = {k: (1 - mu[k]) ** 2 for k in mu}
    tot = sum(d.values())
    for k in mu:  # no clipping active: exactly the spec's formula
        assert abs(tw.weights[k] - 3 * d[k] / tot) < 1e-12
    assert tw.n_updates == 2


def test_weights_sum_to_k_and_literal_clip():
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = int(rng.integers(2, 6))
        rates = {str(i): float(x) for i, x in enumerate(rng.random(k) ** 0.3)}
        tw = DynamicTaskWeights(list(rates), init=rates)
        w = np.array(list(tw.weights.values()))
        assert abs(w.sum() - k) < 1e-9
        assert np.all(w >= 0.2 - 1e-12) and np.all(w <= 5.0 + 1e-12)
        # less success -> at least as much weight
        order = np.argsort([rates[t] for t in tw.tasks])
        assert np.all(np.diff(w[order]) <= 1e-12)
        # unclipped weights keep the formula's ratios
        d = np.array([(1 - rates[t]) for t in tw.tasks])
        free = (w > 0.2 + 1e-9) & (w < 5.0 - 1e-9)
        if free.sum() >= 2:
            r = w[free] / d[free]
            assert np.ptp(r) < 1e-8 * r.max()
    # the spec's literal clip breaks the sum: 0.95 / 0.05 success -> 0.2 + 1.9
    lit = DynamicTaskWeights(["cls", "loc"], sum_to_k=False, init={"cls": 0.95, "loc": 0.05})
    assert abs(lit.weights["cls"] - 0.2) < 1e-12 and abs(lit.weights["loc"] - 1.9) < 1e-12
    fixed = DynamicTaskWeights(["cls", "loc"], init={"cls": 0.95, "loc": 0.05})
    assert abs(fixed.weights["cls"] - 0.2) < 1e-12 and abs(fixed.weights["loc"] - 1.8) < 1e-9
    # every task solved: uniform weights
    assert DynamicTaskWeights(["a", "b"], init={"a": 1.0, "b": 1.0}).weights == {"a": 1.0, "b": 1.0}


def test_weights_state_roundtrip_and_validation():
    tw = DynamicTaskWeights(["x", "y"])
    tw.update({"x": torch.tensor([0.3]), "y": torch.tensor([0.8])})
    tw2 = DynamicTaskWeights(["x", "y"])
    tw2.load_state_dict(tw.state_dict())
    assert tw2.state_dict() == tw.state_dict()
    with pytest.raises(ValueError, match="missing"):
        tw.update({"x": torch.tensor([0.3])})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        tw.update({"x": torch.tensor([1.3]), "y": torch.tensor([0.1])})
    with pytest.raises(ValueError, match="finite"):
        tw.update({"x": torch.tensor([float("nan")]), "y": torch.tensor([0.1])})
    with pytest.raises(ValueError, match="ema"):
        DynamicTaskWeights(["x"], ema=1.0)
    with pytest.raises(ValueError, match="w_min <= 1 <= w_max"):
        DynamicTaskWeights(["x", "y"], w_min=1.5)
    with pytest.raises(ValueError, match="distinct"):
        DynamicTaskWeights(["x", "x"])
    with pytest.raises(ValueError, match="eta"):
        DynamicTaskWeights(["x"], eta=0.0)


def test_unit_weights_identity_is_plain_grpo():
    rng = np.random.default_rng(1)
    comps = {k: torch.tensor(rng.random(24)) for k in ("fmt", "cls", "loc")}
    g = torch.arange(3).repeat_interleave(8)
    total = arspo_rewards(comps, {"cls": 1.0, "loc": 1.0}, {"loc": "identity"})
    torch.testing.assert_close(total, comps["fmt"] + comps["cls"] + comps["loc"], rtol=0, atol=0)
    plain = grpo_advantages(comps["fmt"] + comps["cls"] + comps["loc"], g)
    torch.testing.assert_close(arspo_advantages(total, g), plain, rtol=0, atol=0)


def test_std_advantages_cancel_a_whole_reward_weight():
    """The spec's caveat: a weight on the whole (single-component) reward cancels under std
    normalisation; it survives without normalisation and when the reward has several components."""
    rng = np.random.default_rng(2)
    s = torch.tensor(rng.random(32))
    g = torch.arange(4).repeat_interleave(8)
    one = arspo_advantages(arspo_rewards({"loc": s}, {"loc": 1.0}), g, eps=0.0)
    five = arspo_advantages(arspo_rewards({"loc": s}, {"loc": 5.0}), g, eps=0.0)
    torch.testing.assert_close(one, five, rtol=1e-12, atol=1e-12)
    n1 = arspo_advantages(arspo_rewards({"loc": s}, {"loc": 1.0}), g, "none")
    n5 = arspo_advantages(arspo_rewards({"loc": s}, {"loc": 5.0}), g, "none")
    torch.testing.assert_close(n5, 5 * n1, rtol=1e-12, atol=1e-12)
    c = torch.tensor(rng.integers(0, 2, 32), dtype=torch.float64)
    a = arspo_advantages(arspo_rewards({"cls": c, "loc": s}), g)
    b = arspo_advantages(arspo_rewards({"cls": c, "loc": s}, {"loc": 5.0}), g)
    assert (a - b).abs().max() > 0.1


def test_arspo_rewards_validation():
    c = {"cls": torch.tensor([1.0, 0.0]), "loc": torch.tensor([0.5, 0.1])}
    with pytest.raises(ValueError, match="not in components"):
        arspo_rewards(c, {"box": 1.0})
    with pytest.raises(ValueError, match="shape"):
        arspo_rewards({"cls": torch.tensor([1.0, 0.0]), "loc": torch.tensor([0.5])})
    with pytest.raises(ValueError, match="finite"):
        arspo_rewards({"cls": torch.tensor([float("inf"), 0.0])})
    with pytest.raises(ValueError, match="weights"):
        arspo_rewards(c, {"cls": -1.0})
    with pytest.raises(ValueError, match="advantage_norm"):
        arspo_advantages(torch.zeros(2), torch.zeros(2, dtype=torch.long), "batch")
    # callables map too
    out = arspo_rewards(c, mapping={"loc": lambda x: 2 * x})
    torch.testing.assert_close(out, torch.tensor([2.0, 0.2]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_demo_arspo_raises_hard_task_faster_without_hurting_easy(seed):
    g = arspo_demo.run_bandit("grpo", seed=seed, steps=30)
    a = arspo_demo.run_bandit("arspo", seed=seed, steps=30)
    assert a["hard_score"][30] > g["hard_score"][30] + 0.1
    assert a["easy_acc"].min() >= a["easy_acc"][0] - 0.01
    assert a["easy_acc"][30] >= a["easy_acc"][0]
    assert a["w_hard"][-1] > 1.5 > 0.5 > a["w_easy"][-1]


def test_demo_run_table_and_figure(tmp_path):
    res = arspo_demo.run(quick=True, progress=False, out=tmp_path / "fig.png")
    assert (tmp_path / "fig.png").stat().st_size > 10_000
    s = res["summary"]
    assert s["arspo"]["hard_at_checkpoint"] > s["grpo"]["hard_at_checkpoint"] + 0.1
    assert "arspo" in arspo_demo.format_table(res)
