"""Private training never returns a silently broken result (issue 27, sections 2 and 4).

* non-finite data raise a ValueError naming the argument (``inputs``, ``target``, the
  loader's dataset, ``X``) before anything changes;
* non-finite per-sample losses or gradients found during training raise
  :class:`NonFiniteGradientError` naming the step, with the parameters and the optimizer
  state left as they were before that step;
* one loss convention, ``loss_fn(output, target)`` with the batch passed separately (torch
  loss modules accepted); the old ``loss_fn(model)`` / ``closure`` forms still work with a
  ``FutureWarning``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from rml_fast.privacy.clipping import (
    NonFiniteGradientError,
    clip_and_accumulate,
    coupled_norms,
    per_sample_grad_norms,
    per_sample_losses,
)
from rml_fast.privacy.dp_c4 import DPC4Optimizer, make_private_dpc4, train_private
from rml_fast.privacy.dp_c4_linear import DPC4Classifier, DPC4Regressor

B = 8
ALGORITHMS = ["dpsgd", "dpc4"]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()


def _batch(seed: int, n: int = B) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 4, generator=gen, dtype=torch.float64),
            torch.randint(0, 3, (n,), generator=gen))


def _ce(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(output, target, reduction="none")


def _opt(model: nn.Module, algorithm: str, **kw: object) -> DPC4Optimizer:
    return DPC4Optimizer(model, lr=0.2, noise_multiplier=1.0, expected_batch_size=B,
                         sample_rate=0.1, algorithm=algorithm, seed=5, **kw)


def _state(model: nn.Module, opt: DPC4Optimizer) -> list[torch.Tensor]:
    out = [p.detach().clone() for p in model.parameters()]
    for buf in (opt._v or []) + (opt._x_prev or []):
        out.append(buf.clone())
    return out


def _assert_unchanged(model: nn.Module, opt: DPC4Optimizer, before: list[torch.Tensor],
                      steps: int, *, grads_cleared: bool = False) -> None:
    after = _state(model, opt)
    assert opt.steps == steps
    assert len(after) == len(before)
    for a, b in zip(after, before, strict=True):
        assert torch.equal(a, b)
    if grads_cleared:  # a failed step's partial sums do not stay in .grad
        assert all(p.grad is None for p in model.parameters())


# --- non-finite data ----------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_nan_feature_row_raises_naming_inputs_and_changes_nothing(algorithm: str) -> None:
    model = _model()
    opt = _opt(model, algorithm)
    for s in range(2):  # DP-C4 holds v_t and x_{t-1} by now
        opt.step(_ce, *_batch(s))
    before = _state(model, opt)
    x, y = _batch(9)
    x[5, 1] = float("nan")
    with pytest.raises(ValueError, match=r"step 2 .*inputs has non-finite values .*samples \[5\]") as exc:
        opt.step(_ce, x, y)
    assert "noise_std" not in str(exc.value)
    assert "left as they were before this step" in str(exc.value)
    _assert_unchanged(model, opt, before, 2)


def test_nan_regression_target_raises_naming_target() -> None:
    model = nn.Sequential(nn.Linear(4, 1)).double()
    opt = _opt(model, "dpc4")
    x, _ = _batch(1)
    y = torch.randn(B, 1, dtype=torch.float64)
    y[2, 0] = float("inf")
    before = _state(model, opt)
    with pytest.raises(ValueError, match=r"target has non-finite values .*samples \[2\]"):
        opt.step(nn.MSELoss(), x, y)
    _assert_unchanged(model, opt, before, 0)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_train_private_rejects_a_nan_dataset_before_the_first_step(algorithm: str) -> None:
    x, y = _batch(0, 40)
    x[17, 0] = float("nan")
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=B)
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"data_loader\.dataset\.tensors\[0\] .*samples \[17\]"):
        make_private_dpc4(model, {"lr": 0.1, "algorithm": algorithm}, loader, 3.0, 1e-5, 1)
    opt = _opt(model, algorithm)
    with pytest.raises(ValueError, match=r"loader\.dataset\.tensors\[0\] .*samples \[17\]"):
        train_private(model, opt, loader, _ce, epochs=1, delta=1e-5, progress=False)
    assert opt.steps == 0
    for p, q in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, q)


class _ListDataset(torch.utils.data.Dataset):  # not a TensorDataset: checked batch by batch
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_train_private_stops_at_the_bad_batch_with_finite_parameters(algorithm: str) -> None:
    """The issue's case: one NaN row used to turn every parameter into NaN and training
    "finished"; now the step that meets it raises and the model keeps the step before."""
    x, y = _batch(0, 40)
    x[21, 3] = float("nan")  # in the third batch of 8
    loader = torch.utils.data.DataLoader(_ListDataset(x, y), batch_size=B)
    model = _model()
    opt = _opt(model, algorithm)
    with pytest.raises(ValueError, match=r"step 2 \(0-based\).*samples \[5\]"):
        train_private(model, opt, loader, _ce, epochs=1, delta=1e-5, progress=False)
    assert opt.steps == 2
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


# --- non-finite losses and per-sample gradients -------------------------------------------


def _log_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    p = output.softmax(1).gather(1, target[:, None]).squeeze(1)
    return -torch.log(torch.where(torch.arange(len(p)) == 3, torch.zeros_like(p), p))


@pytest.mark.parametrize("memory", ["fast", "recompute"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_non_finite_loss_names_loss_fn_and_the_step(algorithm: str, memory: str) -> None:
    model = _model()
    opt = _opt(model, algorithm, memory=memory)
    opt.step(_ce, *_batch(0))
    before = _state(model, opt)
    with pytest.raises(NonFiniteGradientError, match=r"step 1 .*loss_fn gave non-finite") as exc:
        opt.step(_log_loss, *_batch(1))
    assert exc.value.step == 1 and exc.value.samples == [3]
    _assert_unchanged(model, opt, before, 1, grads_cleared=True)


def _sqrt_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.sqrt((output - target).abs()).sum(1)


def _sqrt_loss_zero_at(k: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Finite losses; sample ``k``'s residual is forced to 0, where the gradient of
    ``sqrt(|u|)`` is not finite (``inf * 0``)."""

    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        keep = (torch.arange(output.shape[0]) != k).to(output.dtype)[:, None]
        return torch.sqrt(((output - target) * keep).abs()).sum(1)

    return loss


@pytest.mark.parametrize("memory", ["fast", "low"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_non_finite_per_sample_gradients_name_the_step_and_keep_the_parameters(
    algorithm: str, memory: str
) -> None:
    model = nn.Sequential(nn.Linear(4, 2)).double()
    twin = copy.deepcopy(model)
    opt, opt_twin = _opt(model, algorithm, memory=memory), _opt(twin, algorithm, memory=memory)
    good = [(_batch(s)[0], torch.randn(B, 2, dtype=torch.float64)) for s in range(3)]
    for x, y in good[:2]:
        opt.step(_sqrt_loss, x, y)
        opt_twin.step(_sqrt_loss, x, y)
    x, y = _batch(7)[0], torch.randn(B, 2, dtype=torch.float64)
    before = _state(model, opt)
    with pytest.raises(NonFiniteGradientError,
                       match=r"step 2 .*gradients of samples \[6\].*left as they were") as exc:
        opt.step(_sqrt_loss_zero_at(6), x, y)
    assert exc.value.step == 2 and exc.value.samples == [6]
    assert "noise_std" not in str(exc.value)
    _assert_unchanged(model, opt, before, 2, grads_cleared=True)
    # training goes on as if the bad batch had never been offered
    opt.step(_sqrt_loss, *good[2])
    opt_twin.step(_sqrt_loss, *good[2])
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14)


def test_functional_api_raises_on_non_finite_data_and_gradients() -> None:
    model = nn.Sequential(nn.Linear(4, 2)).double()
    x, _ = _batch(0)
    y = torch.randn(B, 2, dtype=torch.float64)
    bad = x.clone()
    bad[1, 1] = float("nan")
    with pytest.raises(ValueError, match=r"inputs has non-finite .*samples \[1\]"):
        per_sample_grad_norms(model, _sqrt_loss, bad, y)
    loss = _sqrt_loss_zero_at(4)
    with pytest.raises(NonFiniteGradientError, match=r"samples \[4\]"):
        per_sample_grad_norms(model, loss, x, y)
    with pytest.raises(NonFiniteGradientError, match=r"samples \[4\].*no \.grad was written"):
        clip_and_accumulate(model, loss, x, y, max_norm=1.0)
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(NonFiniteGradientError, match=r"samples \[4\]"):
        coupled_norms(model, copy.deepcopy(model), loss, x, y)


def test_linear_estimators_reject_overflowing_rows() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 3))
    y = X[:, 0].copy()
    huge = X.copy()
    huge[4, 1] = 1e200  # finite, but its norm overflows
    for est, target in ((DPC4Regressor(epochs=1, batch_size=20, random_state=0), y),
                        (DPC4Classifier(epochs=1, batch_size=20, random_state=0), y > 0)):
        with pytest.raises(ValueError, match=r"X rows \[4\]"):
            est.fit(huge, target)
    X[3] = 3.0
    y[3] = 1.5e308  # finite, but the per-sample gradient norm overflows
    with pytest.raises(NonFiniteGradientError, match=r"step \d+ \(0-based\) of \d+.*rows \[3\]") as exc:
        DPC4Regressor(epochs=2, batch_size=20, random_state=0).fit(X, y)
    assert exc.value.samples == [3]


# --- the loss convention ------------------------------------------------------------------


def test_torch_loss_modules_give_per_sample_losses_without_being_changed() -> None:
    out = torch.randn(B, 3, 5, dtype=torch.float64)
    target = torch.randint(0, 3, (B, 5))
    ce = nn.CrossEntropyLoss()
    losses = per_sample_losses(ce, out, target)
    assert ce.reduction == "mean"
    expected = nn.functional.cross_entropy(out, target, reduction="none").mean(1)
    torch.testing.assert_close(losses, expected, rtol=1e-14, atol=0)
    assert float(losses.mean()) == pytest.approx(float(ce(out, target)), rel=1e-12)
    mse_sum = nn.MSELoss(reduction="sum")
    y = torch.randn(B, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(per_sample_losses(mse_sum, out, y), ((out - y) ** 2).sum((1, 2)))
    assert mse_sum.reduction == "sum"
    with pytest.raises(ValueError, match="reduction='none'"):
        per_sample_losses(lambda o, t: nn.functional.mse_loss(o, t), out, y)  # a scalar
    with pytest.raises(ValueError, match=r"shape \(B,\)"):
        per_sample_losses(lambda o, t: (o - t) ** 2, out, y)  # not reduced over the rest


def test_step_with_a_loss_module_equals_the_per_sample_callable() -> None:
    a, b = _model(), _model()
    opt_a, opt_b = _opt(a, "dpc4"), _opt(b, "dpc4")
    for s in range(3):
        x, y = _batch(s)
        norms_a = opt_a.step(nn.CrossEntropyLoss(), x, y)
        norms_b = opt_b.step(_ce, x, y)
        torch.testing.assert_close(norms_a, norms_b, rtol=0, atol=0)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_tuple_inputs_are_unpacked_into_the_model() -> None:
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return self.fc(u + v)

    model = Two().double()
    x, y = _batch(0)
    split = per_sample_grad_norms(model, _ce, (x, torch.zeros_like(x)), y)
    keyword = per_sample_grad_norms(model, _ce, {"u": x, "v": torch.zeros_like(x)}, y)
    torch.testing.assert_close(split, keyword, rtol=0, atol=0)
    assert split.shape == (B,) and bool((split > 0).all())


def test_missing_inputs_and_mixed_forms_raise() -> None:
    model = _model()
    opt = _opt(model, "dpsgd")
    with pytest.raises(TypeError, match="inputs is required"):
        per_sample_grad_norms(model, nn.CrossEntropyLoss())
    with pytest.raises(TypeError, match="inputs is required"):
        opt.step(_ce)
    with pytest.raises(TypeError, match="not both"):
        opt.step(_ce, closure=lambda: _ce(model(_batch(0)[0]), _batch(0)[1]))
    with pytest.raises(TypeError, match="max_norm"):
        clip_and_accumulate(model, _ce, *_batch(0))
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        per_sample_grad_norms(model, "ce", *_batch(0))  # type: ignore[arg-type]
    assert opt.steps == 0


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_deprecated_closure_step_warns_and_gives_the_same_update(algorithm: str) -> None:
    a, b = _model(), _model()
    opt_a, opt_b = _opt(a, algorithm), _opt(b, algorithm)
    for s in range(3):
        x, y = _batch(s)
        opt_a.step(_ce, x, y)
        if s % 2:  # closure(model), positional
            with pytest.warns(FutureWarning, match=r"step\(loss_fn, inputs, target\)"):
                opt_b.step(lambda m, x=x, y=y: _ce(m(x), y))
        else:  # closure(), as torch's keyword
            with pytest.warns(FutureWarning, match=r"step\(loss_fn, inputs, target\)"):
                opt_b.step(closure=lambda x=x, y=y: _ce(b(x), y))
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_deprecated_model_loss_forms_warn_and_agree() -> None:
    model = _model()
    prev = copy.deepcopy(model)
    with torch.no_grad():
        for p in prev.parameters():
            p.add_(0.01)
    x, y = _batch(0)
    old = lambda m: _ce(m(x), y)  # noqa: E731
    new = per_sample_grad_norms(model, _ce, x, y)
    with pytest.warns(FutureWarning, match="per_sample_grad_norms"):
        torch.testing.assert_close(per_sample_grad_norms(model, old), new, rtol=0, atol=0)
    with pytest.warns(FutureWarning, match="coupled_norms"):
        old_pair = coupled_norms(model, prev, old)
    new_pair = coupled_norms(model, prev, _ce, x, y)
    for o, n in zip(old_pair, new_pair, strict=True):
        torch.testing.assert_close(o, n, rtol=0, atol=0)
    clip_and_accumulate(model, _ce, x, y, max_norm=0.5, noise_std=0.1, seed=2)
    grads = [p.grad.clone() for p in model.parameters()]
    with pytest.warns(FutureWarning, match="clip_and_accumulate"):
        clip_and_accumulate(model, old, 0.5, noise_std=0.1, seed=2)  # old positional max_norm
    for p, g in zip(model.parameters(), grads, strict=True):
        assert torch.equal(p.grad, g)
