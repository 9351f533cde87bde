"""DP-C4 / DP-SGD: reductions (STORM, Opacus DP-SGD), accounting, the bias-removal claim."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from rml_fast.kernels.random import normal_reference, seed_from_rng
from rml_fast.privacy.clipping import UnsupportedLayerError
from rml_fast.privacy.dp_c4 import (
    DPC4Optimizer,
    PoissonBatchSampler,
    calibrate_noise_multiplier,
    make_private_dpc4,
    privacy_spent,
    train_private,
)
from rml_fast.privacy.dp_c4_linear import DPC4Classifier, DPC4Regressor


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.LayerNorm(8), nn.Linear(8, 2)).double()


def _batches(steps: int, B: int = 10) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(3)
    return [(torch.randn(B, 4, generator=gen, dtype=torch.float64),
             torch.randint(0, 2, (B,), generator=gen)) for _ in range(steps)]


def _losses(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(x), y, reduction="none")


def _ce(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(output, target, reduction="none")


@pytest.mark.parametrize("memory_efficient", [True, False])
def test_noise_free_large_thresholds_is_recursive_momentum_sgd(memory_efficient: bool) -> None:
    """sigma = 0, C huge: v_t = (1-b_t)(v_{t-1} + g(x_t) - g(x_{t-1})) + b_t g(x_t) (STORM)."""
    model, ref = _mlp(), _mlp()
    batches = _batches(6)
    opt = DPC4Optimizer(model, lr=0.3, noise_multiplier=0.0, expected_batch_size=10,
                        anchor_clip=1e8, drift_clip_scale=1e8, beta0=0.7,
                        memory_efficient=memory_efficient, seed=0)
    for x, y in batches:
        opt.step(_ce, x, y)

    def mean_grad(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.autograd.grad(_losses(m, x, y).mean(), list(m.parameters())))

    prev = copy.deepcopy(ref)
    v: list[torch.Tensor] | None = None
    for t, (x, y) in enumerate(batches):
        beta = 1.0 if t == 0 else min(1.0, 0.7 / (t + 1) ** (2 / 3))
        g = mean_grad(ref, x, y)
        if v is None:
            v = g
        else:
            gp = mean_grad(prev, x, y)
            v = [(1 - beta) * (vi + gi - gpi) + beta * gi for vi, gi, gpi in zip(v, g, gp, strict=True)]
        prev = copy.deepcopy(ref)
        with torch.no_grad():
            for p, vi in zip(ref.parameters(), v, strict=True):
                p.sub_(0.3 * vi)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)
    assert opt.last_stats["beta"] < 1.0


@pytest.mark.filterwarnings("ignore:Full backward hook:UserWarning")
@pytest.mark.filterwarnings("ignore:Secure RNG turned off:UserWarning")
@pytest.mark.parametrize("algorithm", ["dpc4", "dpsgd"])
def test_beta_one_matches_opacus_dp_sgd(algorithm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """beta_t = 1 is DP-SGD: Opacus' DPOptimizer, fed the same Philox noise, gives the same
    parameters (clipping at C, noise sigma_g C, division by the expected batch size)."""
    pytest.importorskip("opacus")
    import opacus.optimizers.optimizer as opacus_opt
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    sigma, rho, C, B, lr, seed = 0.8, 0.4, 0.5, 10, 0.2, 1234
    model = _mlp()
    peer = GradSampleModule(copy.deepcopy(model), loss_reduction="mean")
    kwargs = {"beta0": 1.0, "beta_power": 0.0} if algorithm == "dpc4" else {}
    ours = DPC4Optimizer(model, lr=lr, noise_multiplier=sigma, expected_batch_size=B,
                         anchor_clip=C, anchor_budget_fraction=rho, algorithm=algorithm,
                         seed=seed, **kwargs)
    sigma_g = sigma / math.sqrt(rho) if algorithm == "dpc4" else sigma
    peer_opt = DPOptimizer(torch.optim.SGD(peer.parameters(), lr=lr), noise_multiplier=sigma_g,
                           max_grad_norm=C, expected_batch_size=B, loss_reduction="mean")
    numel = sum(p.numel() for p in model.parameters())
    key = seed_from_rng(seed)
    state = {"step": 0, "offset": 0}

    def philox_noise(std: float, reference: torch.Tensor, **_: object) -> torch.Tensor:
        n = reference.numel()
        z = normal_reference(n, key, state["step"] * numel + state["offset"])
        state["offset"] += n
        return std * torch.from_numpy(z).to(reference.dtype).reshape(reference.shape)

    monkeypatch.setattr(opacus_opt, "_generate_noise", philox_noise)
    for t, (x, y) in enumerate(_batches(4, B)):
        ours.step(nn.CrossEntropyLoss(), x, y)
        state["step"], state["offset"] = t, 0
        peer_opt.zero_grad()
        nn.functional.cross_entropy(peer(x), y).backward()
        peer_opt.step()
    # Opacus clips by C / (||g_i|| + 1e-6): agreement to ~1e-6 relative, not to float64 rounding
    for p, q in zip(model.parameters(), peer.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def _breast_cancer() -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    sklearn = pytest.importorskip("sklearn")
    from scipy.optimize import minimize
    from sklearn.datasets import load_breast_cancer

    assert sklearn.__version__
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    n, d = X.shape
    alpha = 0.1

    def objective(th: np.ndarray) -> tuple[float, np.ndarray]:
        z = X @ th[:-1] + th[-1]
        r = 0.5 * (1 + np.tanh(0.5 * z)) - y
        f = np.mean(np.logaddexp(0, z) - y * z) + alpha / 2 * th[:-1] @ th[:-1]
        return f, np.concatenate([X.T @ r / n + alpha * th[:-1], [r.mean()]])

    res = minimize(objective, np.zeros(d + 1), jac=True, method="L-BFGS-B",
                   options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10_000})
    return X, y, res.x, alpha


def test_dpc4_removes_clipping_bias_on_breast_cancer() -> None:
    """Distance to the non-private optimum keeps shrinking for DP-C4, plateaus for DP-SGD
    (same (8, 1e-5) budget, same clipping); if the coupling did nothing (beta_t = 1) the
    two runs would coincide and the margin assertions fail."""
    X, y, opt, alpha = _breast_cancer()
    curves: dict[str, np.ndarray] = {}
    for algorithm in ("dpsgd", "dpc4"):
        runs = []
        for seed in (0, 1):
            dist: list[float] = []
            DPC4Classifier(
                epsilon=8.0, delta=1e-5, epochs=200, batch_size=128, lr=0.2,
                lr_decay_steps=100.0, alpha=alpha, anchor_clip=0.3, anchor_clip_growth=0.4,
                drift_clip_scale=1.0, algorithm=algorithm, random_state=seed,
                callback=lambda t, c, b, dist=dist: dist.append(
                    float(np.linalg.norm(np.append(c, b) - opt))),
            ).fit(X, y)
            runs.append(dist)
        curves[algorithm] = np.mean(runs, axis=0)
    T = curves["dpc4"].shape[0]

    def at(algorithm: str, frac: float) -> float:
        end = int(frac * T)
        return float(curves[algorithm][end - T // 10:end].mean())

    assert at("dpc4", 1.0) < 0.6 * at("dpc4", 0.125)  # DP-C4 keeps improving
    assert at("dpsgd", 1.0) > 0.9 * at("dpsgd", 0.25)  # DP-SGD stalls at its biased point
    assert at("dpc4", 1.0) < 0.5 * at("dpsgd", 1.0)  # the margin


def test_calibration_meets_target_and_matches_opacus() -> None:
    sigma = calibrate_noise_multiplier(2.0, 1e-5, 0.05, 300)
    assert privacy_spent(sigma, 0.05, 300, 1e-5) <= 2.0
    assert privacy_spent(sigma * 0.995, 0.05, 300, 1e-5) > 2.0  # tight to rtol=1e-3
    opacus = pytest.importorskip("opacus")
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = [(sigma, 0.05, 300)]
    assert opacus.__version__
    assert acc.get_epsilon(1e-5) == pytest.approx(2.0, rel=0.02)


def test_make_private_and_privacy_spent() -> None:
    torch.manual_seed(0)
    X, y = torch.randn(200, 4, dtype=torch.float64), torch.randint(0, 2, (200,))
    data = torch.utils.data.TensorDataset(X, y)
    loader = torch.utils.data.DataLoader(data, batch_size=20)
    model = _mlp()
    model, opt, private_loader = make_private_dpc4(
        model, {"lr": 0.1, "seed": 0}, loader, target_epsilon=3.0, target_delta=1e-5, epochs=2,
        generator=torch.Generator().manual_seed(0))
    assert isinstance(private_loader.batch_sampler, PoissonBatchSampler)
    assert opt.sample_rate == pytest.approx(0.1)
    seen: list[int] = []
    per_epoch = train_private(
        model, opt, private_loader, lambda out, yb: nn.functional.cross_entropy(
            out, yb, reduction="none"), epochs=1, delta=1e-5, progress=False,
        callback=lambda t, o: seen.append(t))
    assert opt.steps == 10 and seen == list(range(1, 11))
    spent = opt.privacy_spent(1e-5)
    assert 0.0 < spent < 3.0
    assert spent <= per_epoch[0] < spent * 1.05  # coarser grid: pessimistic, close
    for _ in range(10):  # a second epoch reaches the target
        opt.step(_ce, X[:20], y[:20])
    assert opt.privacy_spent(1e-5) == pytest.approx(3.0, rel=0.01)
    with pytest.raises(ValueError, match="noise_multiplier"):
        make_private_dpc4(model, {"lr": 0.1, "noise_multiplier": 1.0}, loader, 1.0, 1e-5, 1)


def test_empty_poisson_batch_steps_with_noise_only() -> None:
    model = _mlp()
    opt = DPC4Optimizer(model, lr=0.1, noise_multiplier=1.0, expected_batch_size=5, seed=3)
    before = [p.detach().clone() for p in model.parameters()]
    x, y = torch.zeros(0, 4, dtype=torch.float64), torch.zeros(0, dtype=torch.long)
    opt.step(_ce, x, y)
    moved = sum(float((p.detach() - q).abs().sum()) for p, q in zip(model.parameters(), before, strict=True))
    assert moved > 0.0  # the noise is still released


def test_unsupported_layer_and_bad_hyperparameters_raise_before_training() -> None:
    bn = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    with pytest.raises(UnsupportedLayerError, match="BatchNorm1d"):
        DPC4Optimizer(bn, lr=0.1, noise_multiplier=1.0, expected_batch_size=4)
    model = _mlp()
    bad = [({"lr": -1.0}, "lr"), ({"noise_multiplier": -0.1}, "noise_multiplier"),
           ({"expected_batch_size": 0}, "expected_batch_size"),
           ({"anchor_budget_fraction": 1.0}, "anchor_budget_fraction"),
           ({"anchor_clip": 0.0}, "anchor_clip"), ({"threshold_shift": 0.0}, "threshold_shift"),
           ({"anchor_clip_growth": 1.0}, "anchor_clip_growth"), ({"sample_rate": 1.5}, "sample_rate"),
           ({"algorithm": "adam"}, "algorithm"), ({"memory_efficient": 1}, "memory_efficient"),
           ({"memory": "small"}, "memory")]
    for override, name in bad:
        kwargs = {"lr": 0.1, "noise_multiplier": 1.0, "expected_batch_size": 4, **override}
        with pytest.raises((ValueError, TypeError), match=name):
            DPC4Optimizer(model, **kwargs)
    opt = DPC4Optimizer(model, lr=0.1, noise_multiplier=1.0, expected_batch_size=4)
    with pytest.raises(ValueError, match="loss_fn"):
        opt.step()
    with pytest.raises(ValueError, match="sample_rate"):
        opt.privacy_spent(1e-5)
    X, y = np.random.default_rng(0).standard_normal((30, 2)), np.arange(30) % 3
    with pytest.raises(ValueError, match="at least 2 classes"):
        DPC4Classifier().fit(X, np.zeros(30))
    with pytest.raises(ValueError, match="epsilon"):
        DPC4Classifier(epsilon=0.0).fit(X, y % 2)
    with pytest.raises(ValueError, match="batch_size"):
        DPC4Regressor(batch_size=100).fit(X, y.astype(float))
    with pytest.raises(ValueError, match="batch_size"):
        DPC4Regressor(batch_size="big").fit(X, y.astype(float))


def test_linear_estimators_auto_batch_size_stays_private_on_small_data() -> None:
    """batch_size="auto" is min(64, n): on 30 rows full batches (q = 1) whose noise is
    calibrated to the target epsilon; on 200 rows the old default 64."""
    from sklearn.exceptions import NotFittedError

    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 2))
    y = (X[:, 0] > 0).astype(int)
    for est in (DPC4Classifier(epsilon=1.0, epochs=3, random_state=0),
                DPC4Regressor(epsilon=1.0, epochs=3, random_state=0)):
        with pytest.raises(NotFittedError):
            est.predict(X)
        est.fit(X, y)
        assert est.batch_size == "auto"  # the parameter is not overwritten
        assert est.sample_rate_ == 1.0 and est.n_iter_ == 3
        assert est.noise_multiplier_ > 0 and est.epsilon_ <= 1.0 + 1e-9
        assert est.n_features_in_ == 2
        with pytest.raises(ValueError, match="features"):
            est.predict(X[:, :1])
    big = rng.standard_normal((200, 2))
    reg = DPC4Regressor(epsilon=1.0, epochs=2, random_state=0).fit(big, big[:, 0])
    assert reg.sample_rate_ == pytest.approx(64 / 200)
    again = DPC4Regressor(epsilon=1.0, epochs=2, random_state=0).fit(big, big[:, 0])
    np.testing.assert_array_equal(reg.coef_, again.coef_)
    with pytest.raises(ValueError, match="sample"):
        DPC4Regressor().fit(X[:1], X[:1, 0])


@pytest.mark.parametrize(("dataset", "algorithm", "coef_rtol", "prob_atol"), [
    ("iris", "dpc4", 0.15, 0.03), ("iris", "dpsgd", 0.06, 0.02), ("wine", "dpc4", 0.2, 0.06),
])
def test_multiclass_matches_sklearn_optimum_at_large_epsilon(
    dataset: str, algorithm: str, coef_rtol: float, prob_atol: float
) -> None:
    """Softmax regression (3 classes): at a large epsilon (small noise, full batches, clip
    above most per-sample norms) the private fit lands on scikit-learn's non-private
    multinomial optimum of the same L2-regularised objective. A wrong residual, transpose
    or class order gives coefficients far off (relative error ~ 1) and fails."""
    from sklearn.datasets import load_iris, load_wine
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    X, y = (load_iris if dataset == "iris" else load_wine)(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    n, alpha = X.shape[0], 0.05
    ref = LogisticRegression(C=1 / (alpha * n), tol=1e-12, max_iter=10_000).fit(X, y)
    clf = DPC4Classifier(noise_multiplier=0.5, delta=1e-5, epochs=500, batch_size=n, lr=0.5,
                         lr_decay_steps=100.0, alpha=alpha, anchor_clip=4.0,
                         algorithm=algorithm, random_state=0).fit(X, y)
    assert clf.coef_.shape == (3, X.shape[1]) and clf.intercept_.shape == (3,)
    np.testing.assert_array_equal(clf.classes_, [0, 1, 2])
    assert 100.0 < clf.epsilon_ < math.inf  # private, at a large epsilon
    rel = np.linalg.norm(clf.coef_ - ref.coef_) / np.linalg.norm(ref.coef_)
    assert rel < coef_rtol
    P = clf.predict_proba(X)
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(P, ref.predict_proba(X), atol=prob_atol)
    assert np.mean(clf.predict(X) == ref.predict(X)) >= 0.97


def test_regressor_approaches_ridge_solution() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 3))
    coef = np.array([0.4, -0.2, 0.1])
    y = X @ coef + 0.05 * rng.standard_normal(2000)
    reg = DPC4Regressor(epsilon=8.0, delta=1e-6, epochs=30, batch_size=200, lr=0.3, alpha=0.0,
                        anchor_clip=2.0, random_state=0).fit(X, y)
    np.testing.assert_allclose(reg.coef_, coef, atol=0.05)
    assert reg.epsilon_ <= 8.0
    assert reg.score(X, y) > 0.9


def test_both_passes_see_the_same_dropout_masks() -> None:
    """With dropout, the coupled drift is computed under the same mask at x_t and x_{t-1}:
    noise-free with huge thresholds it still equals STORM with a shared mask."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.5), nn.Linear(16, 2)).double()
    ref = copy.deepcopy(model)
    batches = _batches(4)
    opt = DPC4Optimizer(model, lr=0.3, noise_multiplier=0.0, expected_batch_size=10,
                        anchor_clip=1e8, drift_clip_scale=1e8, beta0=0.7, seed=0)
    torch.manual_seed(42)
    for x, y in batches:
        opt.step(_ce, x, y)
    torch.manual_seed(42)
    prev, v = copy.deepcopy(ref), None
    for t, (x, y) in enumerate(batches):
        beta = 1.0 if t == 0 else min(1.0, 0.7 / (t + 1) ** (2 / 3))
        state = torch.get_rng_state()
        g = torch.autograd.grad(_losses(ref, x, y).mean(), list(ref.parameters()))
        if v is None:
            v = list(g)
        else:
            after = torch.get_rng_state()
            torch.set_rng_state(state)
            gp = torch.autograd.grad(_losses(prev, x, y).mean(), list(prev.parameters()))
            torch.set_rng_state(after)
            v = [(1 - beta) * (vi + gi - gpi) + beta * gi for vi, gi, gpi in zip(v, g, gp, strict=True)]
        prev = copy.deepcopy(ref)
        with torch.no_grad():
            for p, vi in zip(ref.parameters(), v, strict=True):
                p.sub_(0.3 * vi)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)


def test_budget_schedule_splits_the_noise() -> None:
    """rho_t callable: sigma_g = sigma/sqrt(rho_t), sigma_D = sigma/sqrt(1-rho_t), so that
    1/sigma_g^2 + 1/sigma_D^2 = 1/sigma^2 at every step; a bad schedule raises."""
    model = _mlp()
    opt = DPC4Optimizer(model, lr=0.1, noise_multiplier=2.0, expected_batch_size=4,
                        anchor_budget_fraction=lambda t: 0.9 / (1 + t))
    for t in (0, 1, 5):
        sg, sd = opt.noise_multipliers(t)
        rho = 0.9 / (1 + t)
        assert sg == pytest.approx(2.0 / math.sqrt(rho))
        assert 1 / sg**2 + 1 / sd**2 == pytest.approx(1 / 4.0)
    with pytest.raises(ValueError, match="anchor_budget_fraction"):
        DPC4Optimizer(model, lr=0.1, noise_multiplier=1.0, expected_batch_size=4,
                      anchor_budget_fraction=lambda t: 1.5)
    late = DPC4Optimizer(model, lr=0.1, noise_multiplier=1.0, expected_batch_size=4,
                         anchor_budget_fraction=lambda t: 0.5 if t == 0 else 0.0)
    with pytest.raises(ValueError, match="anchor_budget_fraction"):
        late.noise_multipliers(1)


class _DropoutConvNet(nn.Module):
    """Conv1d, GroupNorm, dropout, Embedding-free mix of layer types for the memory modes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3, padding=1)
        self.gn = nn.GroupNorm(2, 4)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(4 * 6, 5)
        self.ln = nn.LayerNorm(5)
        self.out = nn.Linear(5, 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(torch.relu(self.gn(self.conv(x)))).flatten(1)
        return self.out(self.ln(torch.tanh(self.fc(h))))


@pytest.mark.parametrize("memory_efficient", [True, False])
@pytest.mark.parametrize("algorithm", ["dpc4", "dpsgd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_memory_modes_give_the_same_update(dtype: torch.dtype, algorithm: str,
                                           memory_efficient: bool) -> None:
    """memory="low" (norms in backward hooks, sums by a second backward) and "recompute"
    (the second backward re-runs the closure, dropout replayed) equal the default
    book-keeping step to 1e-6 relative (float32) / 1e-12 (float64), coupled norms included."""
    torch.manual_seed(0)
    model = _DropoutConvNet().to(dtype)
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(7, 3, 6, generator=gen).to(dtype), torch.randint(0, 2, (7,), generator=gen))
               for _ in range(4)]
    results = {}
    for memory in ("fast", "low", "recompute"):
        m = copy.deepcopy(model)
        torch.manual_seed(5)
        opt = DPC4Optimizer(m, lr=0.1, noise_multiplier=0.7, expected_batch_size=7, anchor_clip=0.5,
                            algorithm=algorithm, memory=memory, memory_efficient=memory_efficient,
                            seed=1)
        thresholds = []
        for x, y in batches:
            opt.step(_ce, x, y)
            thresholds.append(opt.last_stats["drift_threshold"])
        results[memory] = (torch.cat([p.detach().reshape(-1) for p in m.parameters()]),
                           np.array(thresholds), torch.rand(1))
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    fast, fast_thr, fast_rng = results["fast"]
    assert (algorithm == "dpsgd") == bool(np.isnan(fast_thr).all())
    for memory in ("low", "recompute"):
        got, thr, rng = results[memory]
        assert float((got - fast).norm() / fast.norm()) < tol, memory
        np.testing.assert_allclose(thr, fast_thr, rtol=tol)
        assert torch.equal(rng, fast_rng)  # the torch RNG ends where the fast step leaves it


def test_train_private_with_recompute_memory_equals_default() -> None:
    """make_private_dpc4 + train_private with memory="recompute" (closure re-run for the
    second backward, Poisson batches including empty ones) reach the default mode's model."""
    torch.manual_seed(0)
    X, y = torch.randn(60, 4, dtype=torch.float64), torch.randint(0, 2, (60,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=6)
    finals = []
    for memory in ("fast", "recompute"):
        model, opt, private_loader = make_private_dpc4(
            _mlp(), {"lr": 0.1, "seed": 0, "memory": memory}, loader, target_epsilon=3.0,
            target_delta=1e-5, epochs=1, generator=torch.Generator().manual_seed(2))
        train_private(model, opt, private_loader, lambda out, yb: nn.functional.cross_entropy(
            out, yb, reduction="none"), epochs=1, delta=1e-5, progress=False)
        finals.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
        assert opt.steps == 10
    torch.testing.assert_close(finals[1], finals[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("algorithm", ["dpc4", "dpsgd"])
def test_memory_modes_with_an_empty_batch(algorithm: str) -> None:
    """An empty Poisson batch releases noise only, the same in every memory mode."""
    finals = []
    for memory in ("fast", "low", "recompute"):
        model = _mlp()
        opt = DPC4Optimizer(model, lr=0.1, noise_multiplier=1.0, expected_batch_size=4,
                            algorithm=algorithm, memory=memory, seed=0)
        for (x, y), keep in zip(_batches(3, B=4), (4, 0, 4), strict=True):
            opt.step(_ce, x[:keep], y[:keep])
        finals.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    for other in finals[1:]:
        torch.testing.assert_close(other, finals[0], rtol=1e-12, atol=1e-12)
